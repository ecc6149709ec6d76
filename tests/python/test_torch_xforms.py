"""heed.torch on the X forms (issue 40): a patches or collection spec with
backward=True takes x (and its linear maps f_q, f_k, f_v and relative bias
tables as tensors that require grad), and autograd's dx and the weights'
gradients come from the generated NAME_backward (docs/backward.md
"Python"). Checked against torch's float64 autograd of the same math
written here from docs/nd-forms.md (the maps as 1 x 1 convolutions, the
tokens cut from them channel-major, attention, the output folded), against
torch.autograd.gradcheck's finite differences of heed's own float32
forward, and through three SGD steps of a small model (heed.torch.XAttention)
whose gradients match the float64 model's at every step (make test-python;
skipped, saying why, without torch)."""

import copy
import math
import unittest
import warnings

import heed

try:
    import torch
    SKIP = None
except ImportError as e:                    # scripts/deps.sh torch installs Debian's python3-torch
    torch = None
    SKIP = "torch cannot be imported (%s): the heed.torch X-form tests are skipped" % e
    print("test_torch_xforms: " + SKIP)
if torch is not None:
    import heed.torch as ht
    from test_torch_weights import rand     # uniform in [-1, 1) from a seed


def project(x, w, collection):
    """f(X): the 1 x 1 convolution of the channels by w [C'][C] (None: identity)."""
    if w is None:
        return x
    return torch.einsum("oc,bnc...->bno...", w, x) if collection else torch.einsum("oc,bc...->bo...", w, x)


def tokens(y, heads, window, stride, collection):
    """[B, heads, L, C'/heads * prod(window)]: each token channel-major, a
    head's channels in turn; patches in row-major order of the patch grid
    (2-D maps here), a collection's tensors in order."""
    if collection:
        b, n = y.shape[:2]
        return y.reshape(b, n, heads, -1).transpose(1, 2)
    for d in range(2):
        y = y.unfold(2 + d, window[d], stride[d])             # [B, C', n1, n2, w1, w2]
    b, c, n1, n2 = y.shape[:4]
    y = y.reshape(b, heads, c // heads, n1, n2, window[0], window[1]).permute(0, 1, 3, 4, 2, 5, 6)
    return y.reshape(b, heads, n1 * n2, -1)


def reference(x, w, f, heads, window=None, stride=None, collection=False, causal=False, bias=None, grid=None,
              clip=None, fuse="none", fold=True):
    """The X form's output in torch (float64 in, float64 out): the maps,
    the tokens, softmax(S / sqrt(dk) + bias) (causal: key j <= query i),
    and out folded ([B, L, C'v, window..], heads concatenated; fused mean:
    [B, C'v, window..]) or flat ([B, H, L, dv]; fused [B, H, dv])."""
    q, k, v = (tokens(project(x, w.get(n), collection), heads, window, stride, collection) for n in f)
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    if bias is not None:                                      # sum over the grid's dimensions of w_d[h][clip(dj - di)]
        for d, table in enumerate(bias):
            pos = torch.tensor([p[d] for p in grid])
            s = s + table[:, (pos[None, :] - pos[:, None]).clamp(-clip[d], clip[d]) + clip[d]][None]
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    o = torch.softmax(s, -1) @ v
    if fuse == "mean":
        o = o.mean(2)                                         # [B, H, dv]
    if not fold:
        return o
    b, length = x.shape[0], q.shape[2]
    if fuse == "mean":
        return o.reshape(b, -1, *(window or x.shape[3:]))
    return o.transpose(1, 2).reshape(b, length, -1, *(window or x.shape[3:]))


def close(test, got, ref, what, rounding=0.0):
    """The gradient tolerance of docs/backward.md: 1e-5 + 1e-4 (|ref| + max |ref|),
    widened by a 16-bit gradient's rounding (rounding |ref|)."""
    test.assertEqual(tuple(got.shape), tuple(ref.shape), what)
    err = (got.double() - ref).abs()
    tol = 1e-5 + 1e-4 * (ref.abs() + ref.abs().max()) + rounding * ref.abs()
    test.assertTrue(bool((err <= tol).all()), "%s: max |err| %g, max |ref| %g" % (what, err.max(), ref.abs().max()))


@unittest.skipIf(SKIP, SKIP)
class XForms(unittest.TestCase):
    def compare(self, fields, x, params, ref):
        """autograd through heed.torch against Kernel.backward (bits) and
        ref (the float64 math) on x and every weight."""
        names = list(params)
        flat = [t for n in names for t in (params[n] if isinstance(params[n], list) else [params[n]])]
        leaves = [x.requires_grad_()] + [t.requires_grad_() for t in flat]
        out = ht.attention(x, params=params, **fields)
        self.assertTrue(out.requires_grad)
        dleaves = [t.detach().double().requires_grad_() for t in leaves]
        want_out = ref(dleaves)
        close(self, out.detach(), want_out.detach(), "out")
        dout = rand(*out.shape, seed=9)
        got = torch.autograd.grad(out, leaves, dout)
        kern = ht.kernel(x, **fields)
        np_params = {n: [t.detach().numpy() for t in v] if isinstance(v, list) else v.detach().numpy()
                     for n, v in params.items()}
        dx, grads = kern.backward(x.detach().numpy(), out.detach().numpy(), dout.numpy(), params=np_params)
        want = [dx] + [a for n in names for a in (grads[n] if isinstance(grads[n], list) else [grads[n]])]
        labels = ["dx"] + ["d%s[%d]" % (n, j) for n in names
                           for j in range(len(params[n]) if isinstance(params[n], list) else 1)]
        for label, g, w in zip(labels, got, want):
            self.assertTrue(torch.equal(g, torch.from_numpy(w)), "%s: not Kernel.backward's bits" % label)
        exact = torch.autograd.grad(want_out, dleaves, dout.double())
        for label, g, r in zip(labels, got, exact):
            close(self, g, r, label)

    def test_patches_maps_bias_causal(self):
        """Overlapping 4 x 4 patches at stride 2 of a 2 x 8 x 8 map (a 3 x 3
        patch grid), two heads, every map linear, a relative bias on the
        grid, causal, folded output."""
        fields = {"form": "patches", "channels": 2, "map": [8, 8], "window": [4, 4], "stride": [2, 2], "heads": 2,
                  "f_q": {"kind": "linear", "out": 4}, "f_k": {"kind": "linear", "out": 4},
                  "f_v": {"kind": "linear", "out": 2}, "mask": "causal",
                  "bias": {"kind": "relative", "clip": 1}, "backward": True}
        x = rand(2, 2, 8, 8, seed=1)
        params = {"f_q": rand(4, 2, seed=2), "f_k": rand(4, 2, seed=3), "f_v": rand(2, 2, seed=4),
                  "bias": [rand(2, 3, seed=5), rand(2, 3, seed=6)]}
        grid = [(a, b) for a in range(3) for b in range(3)]
        self.compare(fields, x, params, lambda t: reference(
            t[0], dict(zip(("f_q", "f_k", "f_v"), t[1:4])), ("f_q", "f_k", "f_v"), 2, (4, 4), (2, 2), causal=True,
            bias=t[4:6], grid=grid, clip=(1, 1)))

    def test_collection_fused_mean(self):
        """A collection of 5 tensors of 3 x 4 x 2, linear f_q and f_k to 2
        channels, identity f_v, fuse mean, flat output ([B, H, dv])."""
        fields = {"form": "collection", "channels": 3, "map": [4, 2], "count": 5, "fuse": "mean", "g_v": "flat",
                  "f_q": {"kind": "linear", "out": 2}, "f_k": {"kind": "linear", "out": 2}, "backward": True}
        x = rand(3, 5, 3, 4, 2, seed=11)
        params = {"f_q": rand(2, 3, seed=12), "f_k": rand(2, 3, seed=13)}
        self.compare(fields, x, params, lambda t: reference(
            t[0], {"f_q": t[1], "f_k": t[2]}, ("f_q", "f_k", "f_v"), 1, collection=True, fuse="mean", fold=False))
        # x alone requiring grad (the maps fixed): dx only; the maps alone: their gradients only
        w = {f: t.detach() for f, t in params.items()}
        out = ht.attention(x.detach().requires_grad_(), params=w, **fields)
        self.assertTrue(out.requires_grad)
        wq = params["f_q"].detach().clone().requires_grad_()
        out = ht.attention(x.detach(), params={"f_q": wq, "f_k": w["f_k"]}, **fields)
        out.sum().backward()
        self.assertEqual(wq.grad.shape, (2, 3))
        with self.assertRaises(RuntimeError) as cm:
            ht.attention(x.detach(), params={"f_q": wq, "f_k": w["f_k"]}, out=torch.empty(out.shape), **fields)
        self.assertIn("autograd takes new outputs", str(cm.exception))

    def test_gradcheck_against_heeds_forward(self):
        """torch.autograd.gradcheck: the Jacobian of heed's backward (dx,
        df_q, df_k, df_v) against central differences of heed's own float32
        forward (eps 1e-3; tolerances for float32's rounding)."""
        fields = {"form": "patches", "channels": 2, "map": [4, 6], "window": [2, 3], "heads": 1,
                  "f_q": {"kind": "linear", "out": 2}, "f_k": {"kind": "linear", "out": 2},
                  "f_v": {"kind": "linear", "out": 1}, "fuse": "mean", "backward": True}
        x = rand(1, 2, 4, 6, seed=21).requires_grad_()
        w = [rand(2, 2, seed=22).requires_grad_(), rand(2, 2, seed=23).requires_grad_(),
             rand(1, 2, seed=24).requires_grad_()]

        def fn(x, wq, wk, wv):
            return ht.attention(x, params={"f_q": wq, "f_k": wk, "f_v": wv}, **fields)
        with warnings.catch_warnings():                 # (its warning that float32 inputs may fail it)
            warnings.simplefilter("ignore", UserWarning)
            self.assertTrue(torch.autograd.gradcheck(fn, (x, *w), eps=1e-3, atol=2e-3, rtol=2e-2))


    def test_16bit(self):
        """bf16 and f16 x (and out): dx of x's type, the same bits as
        Kernel.backward's, the rounding of a value within the tolerance of
        the float64 gradient on the same 16-bit values; df_q float32."""
        fields = {"form": "patches", "channels": 2, "map": [6, 6], "window": [3, 3], "heads": 1,
                  "f_q": {"kind": "linear", "out": 2}, "fuse": "none", "backward": True}
        bits = lambda t: t.detach().view(torch.int16).numpy().view("uint16")
        for dtype, rounding in ((torch.bfloat16, 2 ** -8), (torch.float16, 2 ** -11)):
            with self.subTest(dtype=dtype):
                x = rand(2, 2, 6, 6, seed=41).to(dtype).requires_grad_()
                w = rand(2, 2, seed=42).requires_grad_()
                out = ht.attention(x, params={"f_q": w}, **fields)
                self.assertEqual(out.dtype, dtype)
                dout = rand(*out.shape, seed=43).to(dtype)
                gx, gw = torch.autograd.grad(out, (x, w), dout)
                self.assertEqual((gx.dtype, gw.dtype), (dtype, torch.float32))
                dx, grads = ht.kernel(x, **fields).backward(bits(x), bits(out), bits(dout),
                                                            params={"f_q": w.detach().numpy()})
                self.assertTrue((bits(gx) == dx).all() and torch.equal(gw, torch.from_numpy(grads["f_q"])),
                                "not Kernel.backward's bits")
                xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
                ref = reference(xd, {"f_q": wd}, ("f_q", "f_k", "f_v"), 1, (3, 3), (3, 3))
                rx, rw = torch.autograd.grad(ref, (xd, wd), dout.double())
                close(self, gx, rx, "dx", rounding)
                close(self, gw, rw, "df_q")
        # the token forms take the same path: bf16 q, k, v get bf16 dq, dk, dv, Kernel.backward's bits
        q, k, v = (rand(2, 2, 7, 4, seed=s).bfloat16().requires_grad_() for s in (44, 45, 46))
        out = ht.attention(q, k, v, backward=True, mask="causal")
        dout = rand(*out.shape, seed=47).bfloat16()
        got = torch.autograd.grad(out, (q, k, v), dout)
        want = ht.kernel(q, k, v, backward=True, mask="causal").backward(*(bits(t) for t in (q, k, v, out, dout)))
        for name, g, w in zip(("dq", "dk", "dv"), got, want):
            self.assertTrue(g.dtype == torch.bfloat16 and (bits(g) == w).all(), name)


@unittest.skipIf(SKIP, SKIP)
class XTraining(unittest.TestCase):
    def test_model_trains_like_torch_float64(self):
        """x -> a 1 x 1 convolution (so dx reaches a parameter) -> the seed's
        pooling (heed.torch.XAttention: patches, linear f_q, f_k, fuse mean,
        with a relative bias) -> a linear head; 3 SGD steps: at each step
        every parameter's gradient matches the float64 model's (the math of
        reference()) within the gradient tolerance, and the loss falls."""
        torch.manual_seed(0)
        fields = {"form": "patches", "channels": 3, "map": [6, 6], "window": [3, 3], "heads": 1,
                  "f_q": {"kind": "linear", "out": 4}, "f_k": {"kind": "linear", "out": 4}, "fuse": "mean",
                  "bias": {"kind": "relative", "clip": 1}, "backward": True}
        grid = [(a, b) for a in range(2) for b in range(2)]

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(2, 3, 1)
                self.pool = ht.XAttention(**fields)
                self.head = torch.nn.Linear(27, 5)

            def forward(self, img, exact=False):
                x = self.conv(img)
                if exact:
                    y = reference(x, {"f_q": self.pool.f_q, "f_k": self.pool.f_k}, ("f_q", "f_k", "f_v"), 1,
                                  (3, 3), (3, 3), bias=list(self.pool.bias), grid=grid, clip=(1, 1), fuse="mean")
                else:
                    y = self.pool(x)
                return self.head(y.reshape(y.shape[0], -1))

        model = Model()
        self.assertEqual([n for n, _ in model.pool.named_parameters()], ["f_q", "f_k", "bias.0", "bias.1"])
        with torch.no_grad():
            for t in model.pool.bias:
                t.copy_(rand(*t.shape, seed=t.shape[-1]))
        img, target = rand(4, 2, 6, 6, seed=31), rand(4, 5, seed=32)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses = []
        for step in range(3):
            exact = copy.deepcopy(model).double()
            ((exact(img.double(), exact=True) - target.double()) ** 2).sum().backward()
            opt.zero_grad()
            loss = ((model(img) - target) ** 2).sum()
            loss.backward()
            losses.append(float(loss))
            for (name, p), (_, pe) in zip(model.named_parameters(), exact.named_parameters()):
                self.assertIsNotNone(p.grad, name)
                close(self, p.grad, pe.grad, "step %d, %s" % (step, name))
            opt.step()
        self.assertLess(losses[-1], losses[0])

    def test_identity_maps_and_refusals(self):
        """A spec without weights: XAttention holds none, and autograd's dx
        is Kernel.backward's (its one result); a spec without backward, or
        not an X form, is refused."""
        fields = {"form": "patches", "channels": 2, "map": [4, 4], "window": [2, 2]}
        x = rand(2, 2, 4, 4, seed=1).requires_grad_()
        pool = ht.XAttention(backward=True, **fields)
        self.assertEqual(list(pool.parameters()), [])
        out = pool(x)
        dout = rand(*out.shape, seed=2)
        (dx,) = ht.kernel(x, backward=True, **fields).backward(x.detach().numpy(), out.detach().numpy(),
                                                                 dout.numpy())
        self.assertTrue(torch.equal(torch.autograd.grad(out, x, dout)[0], torch.from_numpy(dx)))
        with self.assertRaises(ValueError) as cm:
            ht.XAttention(form="neighborhood", map=[5], kernel=[3], dk=4)
        self.assertIn("a patches or collection spec", str(cm.exception))
        with self.assertRaises(RuntimeError) as cm:
            ht.attention(x, **fields)
        self.assertIn("this spec has no backward", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
