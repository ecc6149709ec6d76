"""heed.torch with weights in autograd (issue 40): the general, additive and
location scores' weights and the N-d neighborhood form's relative bias
tables as torch tensors that require grad. torch.autograd.grad through
heed.torch.attention(backward=True) equals Kernel.backward's bits, and
torch's float64 autograd of the math path (written here from the
definitions, docs/spec.md and docs/nd-forms.md) within the gradient
tolerance; a run-time tensor that requires grad is refused (make
test-python; skipped, saying why, without torch)."""

import math
import unittest

import heed

try:
    import torch
    SKIP = None
except ImportError as e:                    # scripts/deps.sh torch installs Debian's python3-torch
    torch = None
    SKIP = "torch cannot be imported (%s): the heed.torch weight tests are skipped" % e
    print("test_torch_weights: " + SKIP)
if torch is not None:
    import heed.torch as ht


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 2 - 1


def scores(score, q, k, w, scale):
    """S [b, h, i, j] of a weighted token score in float64 (docs/spec.md)."""
    if score == "general":                                  # q^T W k
        return torch.einsum("bhid,hde,bhje->bhij", q, w["w"], k) * scale
    if score == "additive":                                 # v^T tanh(W_q q + W_k k)
        a = torch.einsum("had,bhid->bhia", w["w_q"], q)[:, :, :, None, :] \
            + torch.einsum("had,bhjd->bhja", w["w_k"], k)[:, :, None, :, :]
        return torch.einsum("bhija,ha->bhij", torch.tanh(a), w["v_a"]) * scale
    return torch.einsum("hjd,bhid->bhij", w["w"], q) * scale    # location: S[i, :] = W q_i


def causal(s):
    lq, lk = s.shape[-2:]
    allowed = torch.arange(lk)[None, :] <= torch.arange(lq)[:, None] + (lk - lq)
    return s.masked_fill(~allowed, -math.inf)


def neighborhood(shape, kernel, clip):
    """[pixel][pixel] window mask (NATTEN's, dilation 1) and, per dimension,
    the index into its bias table of each pair, clip(j_d - i_d, c_d) + c_d."""
    pix = [(y, x) for y in range(shape[0]) for x in range(shape[1])]
    start = [tuple(min(max(p[d] - kernel[d] // 2, 0), shape[d] - kernel[d]) for d in range(2)) for p in pix]
    allowed = torch.tensor([[all(0 <= b[d] - s[d] < kernel[d] for d in range(2)) for b in pix] for s in start])
    index = [torch.tensor([[max(-clip[d], min(clip[d], b[d] - a[d])) + clip[d] for b in pix] for a in pix])
             for d in range(2)]
    return allowed, index


@unittest.skipIf(SKIP, SKIP)
class WeightsInAutograd(unittest.TestCase):
    def compare(self, fields, inputs, params, reference):
        """autograd through heed.torch against Kernel.backward (bits) and
        reference (float64 autograd) on inputs and every weight."""
        flat = [t for v in params.values() for t in (v if isinstance(v, list) else [v])]
        leaves = [t.requires_grad_() for t in list(inputs) + flat]
        out = ht.attention(*inputs, params=params, **fields)
        self.assertTrue(out.requires_grad)
        dout = rand(*out.shape, seed=9)
        got = torch.autograd.grad(out, leaves, dout)
        kern = ht._kernel_of(fields, inputs, None)[0]
        np_params = {f: [t.detach().numpy() for t in v] if isinstance(v, list) else v.detach().numpy()
                     for f, v in params.items()}
        want = kern.backward(*(t.detach().numpy() for t in list(inputs) + [out]), dout.numpy(), params=np_params)
        want_flat = list(want[:3]) + [a for f in params for a in (want[3][f] if isinstance(want[3][f], list)
                                                                     else [want[3][f]])]
        for g, w in zip(got, want_flat):
            self.assertTrue(torch.equal(g, torch.from_numpy(w)))
        dleaves = [t.detach().double().requires_grad_() for t in leaves]
        ref = torch.autograd.grad(reference(dleaves), dleaves, dout.double(), allow_unused=True)
        ref = [torch.zeros_like(t) if r is None else r for r, t in zip(ref, dleaves)]   # (location reads no k)
        names = ["dq", "dk", "dv"] + ["d%s[%d]" % (f, j) for f, v in params.items()
                                      for j in range(len(v) if isinstance(v, list) else 1)]
        for name, g, r in zip(names, got, ref):
            tol = 1e-5 + 1e-4 * (r.abs() + r.abs().max())
            self.assertTrue(bool(((g.double() - r).abs() <= tol).all()), "%s %s: max |err| %g"
                            % (fields.get("score", "bias"), name, (g.double() - r).abs().max()))

    def test_token_scores(self):
        for score, shapes in (("general", {"w": (2, 4, 4)}),
                              ("additive", {"w_q": (2, 3, 4), "w_k": (2, 3, 4), "v_a": (2, 3)}),
                              ("location", {"w": (2, 7, 4)})):
            with self.subTest(score=score):
                fields = {"score": score, "scale": 0.5, "mask": "causal", "backward": True}
                if score == "additive":
                    fields["da"] = 3
                q, k, v = rand(2, 2, 5, 4, seed=1), rand(2, 2, 7, 4, seed=2), rand(2, 2, 7, 3, seed=3)
                params = {f: rand(*s, seed=10 + i) for i, (f, s) in enumerate(shapes.items())}
                names = list(shapes)

                def reference(t):
                    w = dict(zip(names, t[3:]))
                    p = torch.softmax(causal(scores(score, t[0], t[1], w, 0.5)), -1)
                    return p @ t[2]
                self.compare(fields, (q, k, v), params, reference)

    def test_neighborhood_bias(self):
        fields = {"form": "neighborhood", "map": [5, 6], "kernel": [3, 3], "heads": 2, "heads_kv": 1, "dk": 4,
                  "dv": 3, "fuse": "none", "bias": {"kind": "relative", "clip": [2, 1]}, "backward": True}
        q, k, v = rand(2, 2, 30, 4, seed=1), rand(2, 1, 30, 4, seed=2), rand(2, 1, 30, 3, seed=3)
        params = {"bias": [rand(2, 5, seed=4) * 2, rand(2, 3, seed=5) * 2]}
        allowed, index = neighborhood((5, 6), (3, 3), (2, 1))

        def reference(t):
            s = torch.einsum("bhid,bhjd->bhij", t[0], t[1].expand(-1, 2, -1, -1)) * 4 ** -0.5
            s = s + t[3][:, index[0]] + t[4][:, index[1]]       # [h][i][j] per dimension
            p = torch.softmax(s.masked_fill(~allowed, -math.inf), -1)
            return p @ t[2].expand(-1, 2, -1, -1)
        self.compare(fields, (q, k, v), params, reference)
        # only the tables require grad: the inputs get none, the tables theirs
        w = [t.detach().clone().requires_grad_() for t in params["bias"]]
        out = ht.attention(q, k, v, params={"bias": w}, **fields)
        out.sum().backward()
        self.assertTrue(all(t.grad is not None and t.grad.shape == t.shape for t in w))
        with self.assertRaises(RuntimeError) as cm:
            ht.attention(q, k, v, params={"bias": w}, out=torch.empty(2, 2, 30, 3), **fields)
        self.assertIn("autograd takes new outputs", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            ht.attention(q, k, v, params={"bias": w[:1]}, **fields)
        self.assertIn("params['bias']: a list of 2 arrays", str(cm.exception))

    def test_run_time_tensor_gets_no_gradient(self):
        fields = {"heads": 1, "lq": 4, "dk": 4, "backward": True,
                  "tensors": [{"name": "bias", "dtype": "f32", "shape": ["lq", "lk"]}],
                  "score_mod": {"kind": "bias", "tensor": "bias"}}
        q = rand(1, 1, 4, 4, seed=1).requires_grad_()
        bias = torch.zeros(4, 4)
        out = ht.attention(q, q.detach(), q.detach(), params={"bias": bias}, **fields)
        self.assertIsNotNone(torch.autograd.grad(out.sum(), q)[0])
        with self.assertRaises(RuntimeError) as cm:
            ht.attention(q, q.detach(), q.detach(), params={"bias": bias.requires_grad_()}, **fields)
        self.assertIn("params['bias'] requires grad: a run-time tensor", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
