"""heed.torch (issue 42, item 1): attention on torch tensors against a
float64 torch reference (f32, bf16, f16, causal, GQA), no copies (out=
written in place, non-contiguous inputs refused), kernels compiled once,
modules that pickle / deep-copy / torch.save, the autograd refusal
(specs without backward) and training through NAME_backward (issue 40:
a two-layer model against torch's float64 autograd), the
SDPA convenience's refusals, threads shared with torch; (issue 42, item 4)
heed.torch.MultiheadAttention against torch's nn.MultiheadAttention at the
same weights and torchvision's ViT-B/16 with heed's attention in every
encoder block against torch's logits (make test-python; skipped, with the
reason printed, where torch or torchvision cannot be imported)."""

import copy
import io
import math
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

import heed

try:
    import torch
    SKIP = None
except ImportError as e:                    # scripts/deps.sh torch installs Debian's python3-torch
    torch = None
    SKIP = "torch cannot be imported (%s): the heed.torch tests are skipped" % e
    print("test_torch: " + SKIP)
if torch is not None:
    import heed.torch as ht                 # with torch, heed.torch must import
try:
    import torchvision
    SKIP_VISION = SKIP
except ImportError as e:                    # scripts/deps.sh torch installs Debian's python3-torchvision
    torchvision = None
    SKIP_VISION = SKIP or "torchvision cannot be imported (%s): the ViT-B/16 test is skipped" % e
    print("test_torch: " + SKIP_VISION)


def reference(q, k, v, scale=None, causal=False):
    """softmax(scale q k^T) v in float64 (torch's math path), key/value
    heads repeated for grouped-query attention; causal: key j <= query i."""
    q, k, v = (t.double() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def reference_attention(q, k, v, scale, causal):
    """reference() on tensors autograd follows (float64 in, float64 out)."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def rand(*shape, seed=0, dtype=None):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(shape, generator=g) * 2 - 1
    return t if dtype is None else t.to(dtype)


class Close(unittest.TestCase):
    def assertClose(self, got, ref, rel=1e-4):
        """The project's tolerance (1e-5 + 1e-4 |ref|), widened by a 16-bit
        out's rounding (rel)."""
        self.assertEqual(tuple(got.shape), tuple(ref.shape))
        err = (got.double() - ref).abs()
        self.assertTrue(bool((err <= 1e-5 + rel * ref.abs()).all()), "max |err| %g" % err.max())


@unittest.skipIf(SKIP, SKIP)
class Attention(Close):

    def test_f32_causal_gqa_scale(self):
        q, k, v = rand(2, 4, 24, 16, seed=1), rand(2, 4, 30, 16, seed=2), rand(2, 4, 30, 8, seed=3)
        out = ht.attention(q, k, v)                        # a dict spec without fuse: [B, H, L, Dv]
        self.assertEqual(out.dtype, torch.float32)
        self.assertClose(out, reference(q, k, v))
        self.assertClose(ht.attention(q, k, v, scale=0.3), reference(q, k, v, scale=0.3))
        q, k, v = rand(3, 4, 20, 16, seed=4), rand(3, 4, 20, 16, seed=5), rand(3, 4, 20, 16, seed=6)
        self.assertClose(ht.scaled_dot_product_attention(q, k, v, is_causal=True), reference(q, k, v, causal=True))
        self.assertClose(ht.scaled_dot_product_attention(q, k, v, scale=0.5), reference(q, k, v, scale=0.5))
        kv, vv = rand(3, 2, 20, 16, seed=7), rand(3, 2, 20, 16, seed=8)    # 4 query heads on 2 key/value heads
        self.assertClose(ht.scaled_dot_product_attention(q, kv, vv, is_causal=True, enable_gqa=True),
                         reference(q, kv, vv, causal=True))
        self.assertClose(ht.attention(q, kv, vv, mask="causal"), reference(q, kv, vv, causal=True))

    def test_16bit(self):
        for dtype, rel in ((torch.bfloat16, 2 ** -8 + 1e-4), (torch.float16, 2 ** -11 + 1e-4)):
            with self.subTest(dtype=dtype):
                q, k, v = (rand(2, 3, 17, 8, seed=s, dtype=dtype) for s in (1, 2, 3))
                out = ht.scaled_dot_product_attention(q, k, v, is_causal=True)
                self.assertEqual(out.dtype, dtype)
                self.assertClose(out, reference(q, k, v, causal=True), rel)    # of the 16-bit values
                wide = torch.empty(2, 3, 17, 8)                               # out_dtype f32 from out
                ht.attention(q, k, v, out=wide)
                self.assertClose(wide, reference(q, k, v))

    def test_no_copy(self):
        q, k, v = (rand(2, 3, 12, 8, seed=s) for s in (1, 2, 3))
        out = torch.full((2, 3, 12, 8), float("nan"))
        ptr = out.data_ptr()
        got = ht.attention(q, k, v, out=out)
        self.assertIs(got, out)
        self.assertEqual(out.data_ptr(), ptr)
        self.assertClose(out, reference(q, k, v))
        # a contiguous view inside a larger tensor: its own address (storage offset) is read
        big = rand(3, 2, 3, 12, 8, seed=9)
        self.assertClose(ht.attention(big[1], k, v), reference(big[1], k, v))
        # refused, never copied
        strided = rand(2, 12, 3, 8, seed=4).transpose(1, 2)       # [2, 3, 12, 8], not contiguous
        for call, words in [
            (lambda: ht.attention(strided, k, v), "q: not contiguous"),
            (lambda: ht.attention(q, k, v, out=out.transpose(2, 3).contiguous().transpose(2, 3)), "out: not contig"),
            (lambda: ht.attention(q, k.double(), v), "k: dtype torch.float64, expected torch.float32"),
            (lambda: ht.attention(q.double(), k, v), "q: dtype torch.float64"),
            (lambda: ht.attention(q, k, v[:, :, :11].contiguous()), "v: shape (2, 3, 11, 8), expected (2, 3, 12, 8)"),
            (lambda: ht.attention(q, k, v, out=torch.empty(2, 3, 12, 7)), "out: shape"),
            (lambda: ht.attention(q, k, v, out=torch.empty(2, 3, 12, 8, dtype=torch.float64)), "out: dtype"),
            (lambda: ht.attention(q, k, v.numpy()), "v: a 4-d tensor"),
            (lambda: ht.attention(q, k, v.to("meta")), "v: on device meta"),
        ]:
            with self.subTest(words=words):
                with self.assertRaises(ValueError) as cm:
                    call()
                self.assertIn(words, str(cm.exception))

    def test_compiled_once(self):
        q, k, v = (rand(1, 2, 10, 8, seed=s) for s in (1, 2, 3))
        first = ht.attention(q, k, v, mask="causal")
        refuse = mock.patch("heed.kernel.compile", side_effect=AssertionError("compiled again"))
        with refuse:
            for _ in range(3):
                self.assertTrue(torch.equal(ht.attention(q, k, v, mask="causal"), first))
            # another batch size, a module, explicit sizes: the same operator
            ht.attention(torch.cat([q, q]), torch.cat([k, k]), torch.cat([v, v]), mask="causal")
            self.assertTrue(torch.equal(ht.Attention(mask="causal")(q, k, v), first))
            self.assertTrue(torch.equal(ht.attention(q, k, v, mask="causal", heads=2, lq=10, dk=8, name="other"),
                                        first))

    def test_module_pickle_deepcopy_save(self):
        m = ht.Attention(mask="causal", scale=0.25)
        q, k, v = (rand(2, 2, 9, 8, seed=s) for s in (1, 2, 3))
        want = m(q, k, v)
        self.assertClose(want, reference(q, k, v, scale=0.25, causal=True))
        buf = io.BytesIO()
        torch.save(torch.nn.Sequential(m), buf)
        for other in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m),
                      torch.load(io.BytesIO(buf.getvalue()))[0]):
            self.assertIsNot(other, m)
            self.assertEqual(other.spec, m.spec)
            self.assertTrue(torch.equal(other(q, k, v), want))
        # loaded in a fresh process, which compiles (or finds) the kernel itself
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.pt")
            torch.save(m, path)
            torch.save((q, k, v, want), os.path.join(d, "data.pt"))
            r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
                import sys, torch
                m = torch.load(sys.argv[1])
                q, k, v, want = torch.load(sys.argv[2])
                assert torch.equal(m(q, k, v), want), "differs"
                print("loaded:", m)
            """), path, os.path.join(d, "data.pt")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                universal_newlines=True)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertIn("loaded: Attention(mask='causal', scale=0.25)", r.stdout)

    def test_two_layer_model_trains_like_torch_float64(self):
        """A two-layer attention model (projections, heed attention with
        backward=True, an output projection and a residual per layer; layer 1
        causal with grouped K/V heads, layer 2 with lse=True) trained 3 SGD
        steps: at each step its parameters' gradients (heed's NAME_backward
        inside autograd) match torch's float64 autograd of the same model at
        the same parameters within DESIGN.md's gradient tolerance."""
        torch.manual_seed(0)
        e, h, hkv, d, length, batch = 16, 4, 2, 4, 11, 2

        class Layer(torch.nn.Module):
            def __init__(self, causal, lse):
                super().__init__()
                self.q = torch.nn.Linear(e, h * d)
                self.kv = torch.nn.Linear(e, 2 * hkv * d)
                self.o = torch.nn.Linear(h * d, e)
                self.causal, self.lse = causal, lse

            def forward(self, x, exact=False):
                b, n, _ = x.shape
                q = self.q(x).view(b, n, h, d).transpose(1, 2).contiguous()
                k, v = self.kv(x).view(b, n, 2, hkv, d).permute(2, 0, 3, 1, 4).contiguous()
                if exact:                                   # torch's float64 math path
                    a = reference_attention(q, k, v, d ** -0.5, self.causal)
                else:
                    a = ht.attention(q, k, v, backward=True, mask="causal" if self.causal else "none", lse=self.lse)
                    if self.lse:
                        a, lse = a
                        self.lse_grad = lse.requires_grad         # (lse is not differentiable)
                return x + self.o(a.transpose(1, 2).reshape(b, n, h * d))

        model = torch.nn.Sequential(Layer(True, False), Layer(False, True))
        x, target = rand(batch, length, e, seed=1), rand(batch, length, e, seed=2)
        opt = torch.optim.SGD(model.parameters(), lr=0.002)
        losses = []
        for step in range(3):
            exact = copy.deepcopy(model)
            exact.zero_grad(set_to_none=True)
            exact.double()
            xe = x.double()
            for layer in exact:
                xe = layer(xe, exact=True)
            ((xe - target.double()) ** 2).sum().backward()
            opt.zero_grad()
            y = model(x)
            loss = ((y - target) ** 2).sum()      # (a sum: gradients of order 1, far above the 1e-5 floor)
            loss.backward()
            losses.append(float(loss))
            for (name, p), (_, pe) in zip(model.named_parameters(), exact.named_parameters()):
                ref = pe.grad
                err = (p.grad.double() - ref).abs()
                tol = 1e-5 + 1e-4 * (ref.abs() + ref.abs().max())
                self.assertTrue(bool((err <= tol).all()), "step %d, %s: max |err| %g, max |ref| %g"
                                % (step, name, err.max(), ref.abs().max()))
            opt.step()
        self.assertLess(losses[-1], losses[0])
        self.assertFalse(model[1].lse_grad)

    def test_backward_through_autograd_matches_the_kernel(self):
        """torch.autograd.grad through heed.torch.attention(backward=True)
        equals Kernel.backward of the same kernel, bit for bit, with GQA."""
        q = rand(2, 4, 9, 8, seed=1).requires_grad_()
        k, v = rand(2, 2, 9, 8, seed=2).requires_grad_(), rand(2, 2, 9, 8, seed=3).requires_grad_()
        out = ht.attention(q, k, v, backward=True, mask="causal")
        self.assertTrue(out.requires_grad)
        self.assertClose(out.detach(), reference(q.detach(), k.detach(), v.detach(), causal=True))
        dout = rand(2, 4, 9, 8, seed=4)
        got = torch.autograd.grad(out, (q, k, v), dout)
        kern = ht._kernel_of({"backward": True, "mask": "causal"}, (q, k, v), None)[0]
        want = kern.backward(*(t.detach().numpy() for t in (q, k, v, out)), dout.numpy())
        for g, w in zip(got, want):
            self.assertTrue(torch.equal(g, torch.from_numpy(w)))
        with self.assertRaises(RuntimeError) as cm:
            ht.attention(q, k, v, backward=True, out=torch.empty(2, 4, 9, 8))
        self.assertIn("autograd takes new outputs", str(cm.exception))

    def test_neighborhood_backward_through_autograd(self):
        """heed.torch.attention on the N-d neighborhood form (2-D 5 x 6 map,
        3 x 3 windows, two query heads on one K/V head) with backward=True:
        torch.autograd.grad equals Kernel.backward bit for bit and torch's
        float64 autograd of attention under the window mask within the
        gradient tolerance."""
        fields = {"form": "neighborhood", "map": [5, 6], "kernel": [3, 3], "heads": 2, "heads_kv": 1, "dk": 8,
                  "dv": 8, "fuse": "none", "backward": True}
        q = rand(2, 2, 30, 8, seed=1).requires_grad_()
        k, v = rand(2, 1, 30, 8, seed=2).requires_grad_(), rand(2, 1, 30, 8, seed=3).requires_grad_()
        out = ht.attention(q, k, v, **fields)
        self.assertTrue(out.requires_grad)
        dout = rand(2, 2, 30, 8, seed=4)
        got = torch.autograd.grad(out, (q, k, v), dout)
        kern = ht._kernel_of(fields, (q, k, v), None)[0]
        want = kern.backward(*(t.detach().numpy() for t in (q, k, v, out)), dout.numpy())
        for g, w in zip(got, want):
            self.assertTrue(torch.equal(g, torch.from_numpy(w)))
        # float64 autograd: NATTEN's windows, start_d = clamp(x_d - 1, 0, n_d - 3)
        pix = [(y, x) for y in range(5) for x in range(6)]
        start = [(min(max(y - 1, 0), 2), min(max(x - 1, 0), 3)) for y, x in pix]
        allowed = torch.tensor([[0 <= b[0] - s[0] < 3 and 0 <= b[1] - s[1] < 3 for b in pix] for s in start])
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        s = torch.einsum("bhid,bhjd->bhij", qd, kd.expand(-1, 2, -1, -1)) * 8 ** -0.5
        o = torch.einsum("bhij,bhjd->bhid", torch.softmax(s.masked_fill(~allowed, -math.inf), -1),
                         vd.expand(-1, 2, -1, -1))
        ref = torch.autograd.grad(o, (qd, kd, vd), dout.double())
        for name, g, r in zip(("dq", "dk", "dv"), got, ref):
            tol = 1e-5 + 1e-4 * (r.abs() + r.abs().max())
            self.assertTrue(bool(((g.double() - r).abs() <= tol).all()), "%s: max |err| %g"
                            % (name, (g.double() - r).abs().max()))

    def test_requires_grad_refused(self):
        q, k, v = (rand(1, 2, 6, 4, seed=s) for s in (1, 2, 3))
        leaf = q.clone().requires_grad_()
        for call in (lambda: ht.attention(leaf, k, v), lambda: ht.scaled_dot_product_attention(q, k, leaf * 2),
                     lambda: ht.Attention()(q, k, v, out=torch.empty(1, 2, 6, 4, requires_grad=True))):
            with self.assertRaises(RuntimeError) as cm:
                call()
            self.assertIn("this spec has no backward: pass backward=True", str(cm.exception))
        with torch.no_grad():
            self.assertClose(ht.attention(leaf, k, v), reference(q, k, v))
        with torch.inference_mode():
            self.assertClose(ht.attention(leaf, k, v), reference(q, k, v))

    def test_sdpa_refusals(self):
        q, k, v = (rand(1, 2, 6, 4, seed=s) for s in (1, 2, 3))
        for call, words in [
            (lambda: ht.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(6, 6)), "attn_mask"),
            (lambda: ht.scaled_dot_product_attention(q, k, v, dropout_p=0.1), "dropout_p"),
            (lambda: ht.scaled_dot_product_attention(q, rand(1, 2, 7, 4), rand(1, 2, 7, 4), is_causal=True),
             "top-left"),
            (lambda: ht.scaled_dot_product_attention(q, k[:, :1], v[:, :1]), "enable_gqa=True"),
            (lambda: ht.scaled_dot_product_attention(q[0], k[0], v[0]), "query: a 4-d tensor"),
        ]:
            with self.subTest(words=words):
                with self.assertRaises(ValueError) as cm:
                    call()
                self.assertIn(words, str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            ht.Attention(mask=object())
        self.assertIn("mask", str(cm.exception))

    def test_threads_shared_with_torch(self):
        """Debian's torch and heed's kernels share libgomp: torch.set_num_threads
        is heed's count, and heed.set_num_threads torch's (child process)."""
        r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
            import torch, heed
            torch.set_num_threads(3)
            print("heed", heed.get_num_threads())
            heed.set_num_threads(2)
            print("torch", torch.get_num_threads())
        """)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(r.stdout.split(), ["heed", "3", "torch", "2"])


@unittest.skipIf(SKIP, SKIP)
class Models(Close):
    def test_multihead_attention(self):
        """heed.torch.MultiheadAttention on an nn.MultiheadAttention's own
        Parameters: self-attention (batch first or not) and cross-attention
        against the same module in float64, and what it refuses."""
        torch.manual_seed(0)
        for batch_first in (True, False):
            mha = torch.nn.MultiheadAttention(64, 4, batch_first=batch_first).eval()
            torch.nn.init.normal_(mha.in_proj_bias, std=0.1)
            torch.nn.init.normal_(mha.out_proj.bias, std=0.1)
            mha64 = copy.deepcopy(mha).double()
            mine = ht.MultiheadAttention(mha)
            self.assertIs(mine.in_proj_weight, mha.in_proj_weight)          # shared, not copied
            self.assertIs(mine.out_proj, mha.out_proj)
            x, kv = rand(3, 10, 64, seed=1), rand(3, 7, 64, seed=2)
            if not batch_first:
                x, kv = x.transpose(0, 1), kv.transpose(0, 1)
            with torch.no_grad():
                for q, k in ((x, x), (x, kv)):
                    with self.subTest(batch_first=batch_first, cross=q is not k):
                        got, weights = mine(q, k, k, need_weights=False)
                        self.assertIsNone(weights)
                        self.assertClose(got, mha64(q.double(), k.double(), k.double(), need_weights=False)[0])
        with torch.no_grad():
            for call, words in [(lambda: mine(x, x, x), "need_weights=True"),
                                (lambda: mine(x, x, x, need_weights=False, attn_mask=torch.zeros(10, 10)), "attn_mask"),
                                (lambda: ht.MultiheadAttention(torch.nn.Linear(4, 4)), "takes a torch.nn.Multihead"),
                                (lambda: ht.MultiheadAttention(torch.nn.MultiheadAttention(8, 2, kdim=4)), "kdim")]:
                with self.subTest(words=words):
                    with self.assertRaises(ValueError) as cm:
                        call()
                    self.assertIn(words, str(cm.exception))

    def test_transformer_encoder(self):
        """nn.TransformerEncoder (whose eval-mode fast path reads the
        attention's weights itself) with heed's attention in its layers."""
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
        enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
        x = rand(2, 9, 32, seed=1)
        with torch.inference_mode():
            want = copy.deepcopy(enc).double()(x.double())
            self.assertEqual(ht.replace_multihead_attention(enc), 2)
            self.assertClose(enc(x), want)

    @unittest.skipIf(SKIP_VISION, SKIP_VISION)
    def test_vit_b_16(self):
        """torchvision's ViT-B/16 (random weights, seeded; the head, which
        torchvision initialises to zeros, re-initialised) with heed's
        attention in every encoder block, by replace_multihead_attention:
        its logits within 1e-5 of torch's own. Both runs are float32 and
        differ only by the attention's rounding, carried through 12 blocks:
        against a float64 run of the same model (B=2, too slow for this
        test: 20 s) torch's logits (|logits| up to 1.8) were 1.6e-6 off and
        heed's 1.4e-6, so 1e-5 is 6x float32's own error here, while an
        attention that is wrong (a scale 1% off) moves them by 9e-3.
        One image: a few seconds."""
        torch.manual_seed(0)
        model = torchvision.models.vit_b_16().eval()
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
        torch.nn.init.normal_(model.heads.head.bias, std=0.02)
        x = rand(1, 3, 224, 224, seed=1)
        with torch.inference_mode():
            want = model(x)
            self.assertEqual(ht.replace_multihead_attention(model), 12)
            self.assertFalse(any(isinstance(m, torch.nn.MultiheadAttention) for m in model.modules()))
            got = model(x)
        self.assertGreater(float(want.abs().max()), 0.5)                      # a head that is not zeros
        err = float((got - want).abs().max())
        self.assertLessEqual(err, 1e-5, "ViT-B/16 logits: heed's attention %g from torch's" % err)


class Optional(unittest.TestCase):
    def test_import_heed_without_torch(self):
        """import heed never imports torch; heed.torch without torch is an ImportError."""
        r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
            import sys
            sys.modules["torch"] = None             # torch cannot be imported
            import heed
            heed.compile, heed.cache_clean, heed.set_num_threads
            try:
                heed.torch
            except ImportError as e:
                print("no torch:", e)
        """)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("no torch:", r.stdout)


if __name__ == "__main__":
    unittest.main()
