"""The Python package (python/heed) from the checkout: kernels of token and
N-d specs against double-precision references (libheed's and numpy loops
written here from the definition), argument checks, plans, and the ctypes
mirror of heed.h's structs (make test-python)."""

import ctypes
import os
import shlex
import subprocess
import tempfile
import unittest

import numpy as np

import heed
from heed import runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rand(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def close(test, got, ref):
    """The project's tolerance: |got - ref| <= 1e-5 + 1e-4 |ref| everywhere."""
    test.assertEqual(got.shape, ref.shape)
    bad = np.abs(got.astype(np.float64) - ref) > 1e-5 + 1e-4 * np.abs(ref)
    test.assertFalse(bad.any(), "max |err| %g" % np.abs(got - ref).max())


def attention(q, k, v, scale, causal=False, fuse="none"):
    """softmax(scale q k^T) V per batch and head, in float64, written from the
    definition (causal: key j allowed iff j <= i + lk - lq); fused: the mean
    over queries of P, then alpha V."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    lq, lk = s.shape[-2:]
    if causal:
        allowed = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)
        s = np.where(allowed, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if fuse == "mean":
        return np.einsum("bhj,bhjd->bhd", p.mean(-2), v)
    return np.einsum("bhij,bhjd->bhid", p, v)


class TokenKernels(unittest.TestCase):
    def test_numpy_reference(self):
        spec = {"name": "py_causal", "heads": 2, "lq": 24, "lk": 30, "dk": 16, "dv": 8, "fuse": "none",
                "mask": "causal"}
        kern = heed.compile(spec)
        q, k, v = rand((3, 2, 24, 16), 1), rand((3, 2, 30, 16), 2), rand((3, 2, 30, 8), 3)
        out = kern(q, k, v)
        self.assertEqual(out.dtype, np.float32)
        close(self, out, attention(q, k, v, 16 ** -0.5, causal=True))
        # fused, from a spec file
        kern = heed.compile(os.path.join(ROOT, "examples", "embed", "pool.lua"))
        q, k, v = (rand((2, 4, 64, 32), s) for s in (4, 5, 6))
        out = kern(q, k, v)
        self.assertEqual(out.shape, (2, 4, 32))
        close(self, out, attention(q, k, v, 32 ** -0.5, fuse="mean"))

    def test_libheed_reference_with_weights(self):
        for spec, params in [
            ({"name": "py_add", "heads": 2, "lq": 9, "dk": 8, "da": 6, "score": "additive", "norm": "sigmoid",
              "fuse": "max", "mask": {"kind": "local", "radius": 2, "gaussian": True}},
             {"w_q": rand((2, 6, 8), 7), "w_k": rand((2, 6, 8), 8), "v_a": rand((2, 6), 9)}),
            ({"name": "py_gen", "heads": 3, "lq": 5, "lk": 11, "dk": 4, "score": "general", "fuse": "none",
              "scale": 0.5}, {"w": rand((3, 4, 4), 10)}),
        ]:
            with self.subTest(spec=spec["name"]):
                kern = heed.compile(spec)
                p = heed.problem(spec)
                q, k, v = rand((2, p.heads, p.lq, p.dk), 1), rand((2, p.heads, p.lk, p.dk), 2), \
                    rand((2, p.heads, p.lk, p.dv), 3)
                close(self, kern(q, k, v, params=params), heed.reference(spec, q, k, v, params))

    def test_batch_zero_and_schedule(self):
        kern = heed.compile({"name": "py_sched", "lq": 32, "dk": 16, "fuse": "none"}, schedule="bq=16", target="scalar")
        self.assertEqual(kern(*(np.zeros((0, 1, 32, 16), np.float32) for _ in range(3))).shape, (0, 1, 32, 16))
        q, k, v = (rand((1, 1, 32, 16), s) for s in (1, 2, 3))
        close(self, kern(q, k, v), attention(q, k, v, 0.25))


def attention_backward(q, k, v, dout, scale, causal=False, fuse="none", allowed=None):
    """The gradients (dq, dk, dv) of sum(dout * attention(q, k, v)) in
    float64, from the definition: grouped K/V heads repeated (their
    gradients summed back over the group); P the softmax, dP = dO V^T (fused
    mean: d alpha = dy V^T spread over the rows, / lq), dS = P (dP - rowsum(P
    dP)), dq = scale dS k, dk = scale dS^T q, dv = P^T dO (alpha^T dy)."""
    q, k, v, dout = (a.astype(np.float64) for a in (q, k, v, dout))
    g = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, g, 1), np.repeat(v, g, 1)
    s = np.einsum("bhid,bhjd->bhij", q, kr) * scale
    lq, lk = s.shape[-2:]
    if allowed is None:
        allowed = np.ones((lq, lk), bool)
    if causal:
        allowed = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)
    s = np.where(allowed, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.where(allowed, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    tot = e.sum(-1, keepdims=True)
    p = np.divide(e, tot, out=np.zeros_like(e), where=tot > 0)
    if fuse == "mean":
        alpha = p.mean(-2)
        dvr = np.einsum("bhj,bhd->bhjd", alpha, dout)
        dp = np.broadcast_to(np.einsum("bhd,bhjd->bhj", dout, vr)[:, :, None, :] / lq, p.shape)
    else:
        dvr = np.einsum("bhij,bhid->bhjd", p, dout)
        dp = np.einsum("bhid,bhjd->bhij", dout, vr)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, kr)
    dkr = scale * np.einsum("bhij,bhid->bhjd", ds, q)
    b, hkv = k.shape[:2]
    return dq, dkr.reshape(b, hkv, g, lk, -1).sum(2), dvr.reshape(b, hkv, g, lk, -1).sum(2)


def neighborhood_allowed(shape, kernel):
    """[pixel][pixel]: whether the second is in the first's window (NATTEN's
    rule, dilation 1: start_d = clamp(x_d - k_d // 2, 0, n_d - k_d))."""
    pix = list(np.ndindex(*shape))
    allowed = np.zeros((len(pix), len(pix)), bool)
    for i, x in enumerate(pix):
        for j, y in enumerate(pix):
            allowed[i, j] = all(0 <= y[d] - min(max(x[d] - kernel[d] // 2, 0), shape[d] - kernel[d]) < kernel[d]
                                for d in range(len(shape)))
    return allowed


def grad_close(test, got, ref, what):
    """DESIGN.md's gradient tolerance: |g - ref| <= 1e-5 + 1e-4 (|ref| + max |ref|)."""
    test.assertEqual(got.shape, ref.shape, what)
    test.assertEqual(got.dtype, np.float32, what)
    bad = np.abs(got.astype(np.float64) - ref) > 1e-5 + 1e-4 * (np.abs(ref) + np.abs(ref).max())
    test.assertFalse(bad.any(), "%s: max |err| %g" % (what, np.abs(got - ref).max()))


class MaskScoreMods(unittest.TestCase):
    """mask_mod / score_mod (docs/masks.md): heed.compile passes them (and
    the pattern names) to the generator; heed.reference and heed.Plan carry
    the expression text to libheed, whose reference evaluates it."""

    def test_compile_plan_and_reference(self):
        spec = {"name": "swa_cap", "heads": 2, "lq": 19, "dk": 8, "fuse": "none",
                "mask_mod": "q >= k && q - k < 4", "score_mod": {"kind": "softcap", "c": 5}}
        q, k, v = rand((2, 2, 19, 8), 1), rand((2, 2, 19, 8), 2), rand((2, 2, 19, 8), 3)
        # numpy from the definition: score, scale, score_mod, mask, softmax
        s = 5 * np.tanh(np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(8) / 5)
        i, j = np.arange(19)[:, None], np.arange(19)[None, :]
        s = np.where((i >= j) & (i - j < 4), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        want = np.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdims=True), v.astype(np.float64))
        close(self, heed.compile(spec)(q, k, v), want)
        rt = dict(spec, score_mod="5*tanh(s/5)")
        del rt["name"]
        close(self, heed.reference(rt, q, k, v).astype(np.float32), want)
        with heed.Plan(rt) as plan:
            self.assertIn("double reference", plan.describe())
            close(self, plan(q, k, v), want)
            self.assertEqual(plan.problem.mask_mod, b"q >= k && q - k < 4")
        self.assertIn(";mask_mod=q >= k && q - k < 4;score_mod=5 * tanh(s / 5)",
                      runtime.canonical(runtime.problem(rt)))
        # a pattern name, compiled, against the reference of its expression
        pat = {"name": "sw", "heads": 2, "lq": 19, "dk": 8, "fuse": "none",
               "mask": {"kind": "sliding_window", "left": 3, "right": 0}}
        close(self, heed.compile(pat)(q, k, v),
              heed.reference({"heads": 2, "lq": 19, "dk": 8, "fuse": "none", "mask_mod": "k <= q && q - k <= 3"},
                             q, k, v))

    def test_gaussian_and_signed_max(self):
        """mask_mod with a Gaussian local window (rows masked whole), and with
        fuse = max of norm none (P shifted below 0, blocks of 64 leaving
        whole tiles empty): the compiled kernels against libheed's reference"""
        q, k, v = rand((2, 2, 150, 8), 4), rand((2, 2, 150, 8), 5), rand((2, 2, 150, 8), 6)
        specs = {"gauss_mod": {"heads": 2, "lq": 150, "dk": 8, "fuse": "none",
                               "mask": {"kind": "local", "radius": 4, "gaussian": True},
                               "mask_mod": "q % 5 != 2 && k != 7"},
                 "max_none_mod": {"heads": 2, "lq": 150, "dk": 8, "fuse": "max", "norm": "none",
                                  "mask_mod": "q // 64 == k // 64 || k >= 128", "score_mod": "s - 2"}}
        for name, spec in specs.items():
            close(self, heed.compile(dict(spec, name=name))(q, k, v), heed.reference(spec, q, k, v))

    def test_bad_expressions(self):
        with self.assertRaises(ValueError) as cm:
            heed.reference({"lq": 4, "dk": 4, "mask_mod": "q >= k &&"}, *(rand((1, 1, 4, 4), 1),) * 3)
        self.assertIn("field 'mask_mod': at position 10: expected an expression after '&&'", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            heed.Plan({"lq": 4, "dk": 4, "mask_mod": "d[q] == d[k]"})
        self.assertIn("'d' is not a tensor declared under 'tensors' (none are declared)", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            runtime.problem({"lq": 4, "dk": 4, "score_mod": {"kind": "softcap", "c": 5}})
        self.assertIn("heed.compile takes them", str(cm.exception))


class RunTimeTensors(unittest.TestCase):
    """Run-time tensors (docs/masks.md): heed.compile's kernel, heed.Plan and
    heed.reference take the arrays (tensors= or in params), checked; a
    document mask and a per-head bias against numpy from the definition."""

    SPEC = {"heads": 2, "lq": 13, "dk": 8, "fuse": "none",
            "tensors": {"doc": {"dtype": "i32", "shape": ["lk"]}, "bias": {"dtype": "f32", "shape": ["heads", "lq", "lk"]}},
            "mask_mod": "doc[q] == doc[k]", "score_mod": "s + bias[(h * lq + q) * lk + k]"}

    def test_document_and_bias(self):
        q, k, v = rand((2, 2, 13, 8), 4), rand((2, 2, 13, 8), 5), rand((2, 2, 13, 8), 6)
        doc = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3], dtype=np.int32)
        bias = rand((2, 13, 13), 7)
        s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(8) + bias[None]
        s = np.where(doc[:, None] == doc[None, :], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        want = np.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdims=True), v.astype(np.float64))
        t = {"doc": doc, "bias": bias}
        close(self, heed.reference(self.SPEC, q, k, v, tensors=t).astype(np.float32), want)
        with heed.Plan(self.SPEC) as plan:
            self.assertIn("double reference", plan.describe())
            close(self, plan(q, k, v, tensors=t), want)
            close(self, plan(q, k, v, params=t), want)
        self.assertIn(";tensors=bias:f32[2,13,13],doc:i32[13]", runtime.canonical(runtime.problem(self.SPEC)))
        kern = heed.compile(dict(self.SPEC, name="docbias"))
        close(self, kern(q, k, v, tensors=t), want)
        self.assertEqual(kern.canonical, runtime.canonical(runtime.problem(self.SPEC)))

    def test_checked(self):
        q = rand((1, 2, 13, 8), 1)
        doc, bias = np.zeros(13, dtype=np.int32), np.zeros((2, 13, 13), dtype=np.float32)
        with heed.Plan(self.SPEC) as plan:
            for t, words in (({"doc": doc}, "tensors['bias']: missing"),
                             ({"doc": doc.astype(np.int64), "bias": bias}, "tensors['doc']: dtype int64, expected int32"),
                             ({"doc": doc[:12], "bias": bias}, "tensors['doc']: shape (12,), expected (13,)"),
                             ({"doc": doc, "bias": bias, "x": doc}, "unknown tensor(s) x"),
                             ({"doc": list(doc), "bias": bias}, "tensors['doc']: a numpy array")):
                with self.assertRaises(ValueError) as cm:
                    plan(q, q, q, tensors=t)
                self.assertIn(words, str(cm.exception))
            with self.assertRaises(ValueError) as cm:
                plan(q, q, q)
            self.assertIn("missing", str(cm.exception))
        for spec, words in ((dict(self.SPEC, tensors={"doc": {"dtype": "i64", "shape": [13]}}), "dtype = 'i64'"),
                            (dict(self.SPEC, tensors={"Doc": {"dtype": "i32", "shape": [13]}}), "not a valid problem"),
                            (dict(self.SPEC, tensors={"doc": {"dtype": "i32", "shape": [13]}}),
                             "'bias' is not a tensor declared under 'tensors' (declared: doc)")):
            with self.assertRaises(ValueError) as cm:
                runtime.problem(spec)
            self.assertIn(words, str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            heed.compile(dict(self.SPEC, name="docbias"))(q, q, q, tensors={"doc": doc, "bias": bias[0]})
        self.assertIn("shape", str(cm.exception))


class Backward(unittest.TestCase):
    def test_kernel_backward_matches_numpy(self):
        """kernel.backward (backward = true) against the float64 gradients
        above: grouped heads with a causal mask and rows with no key, lse
        from the forward and None; a fused mean (no lse)."""
        cases = [({"name": "py_bwd", "heads": 4, "heads_kv": 2, "lq": 13, "lk": 9, "dk": 6, "dv": 5,
                   "fuse": "none", "mask": "causal", "lse": True, "backward": True}, True, "none"),
                 ({"name": "py_bwd_mean", "heads": 2, "lq": 11, "lk": 7, "dk": 5, "dv": 3, "fuse": "mean",
                   "backward": True}, False, "mean")]
        for spec, causal, fuse in cases:
            with self.subTest(spec=spec["name"]):
                kern = heed.compile(spec)
                self.assertTrue(kern.has_backward)
                h, hkv = spec["heads"], spec.get("heads_kv", spec["heads"])
                q, k, v = (rand((2, h, spec["lq"], spec["dk"]), 1), rand((2, hkv, spec["lk"], spec["dk"]), 2),
                           rand((2, hkv, spec["lk"], spec["dv"]), 3))
                res = kern(q, k, v)
                out, lse = res if spec.get("lse") else (res, None)
                dout = rand(out.shape, 4)
                ref = attention_backward(q, k, v, dout, spec["dk"] ** -0.5, causal, fuse)
                for given in ([lse, None] if lse is not None else [None]):
                    got = kern.backward(q, k, v, out, dout, lse=given)
                    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
                        grad_close(self, g, r, "%s %s (lse %s)" % (spec["name"], name, "given" if given is not None
                                                                    else "None"))
                with self.assertRaises(ValueError) as cm:
                    kern.backward(q, k, v, out, dout[:1])
                self.assertIn("dout: shape", str(cm.exception))
        # run-time tensors (padding lengths, an additive bias) passed to the
        # backward as to the call: full lengths and a zero bias give the
        # causal gradients above; a batch entry of length 0 gets none
        spec = {"name": "py_bwd_tens", "heads": 4, "heads_kv": 2, "lq": 13, "lk": 9, "dk": 6, "dv": 5, "fuse": "none",
                "mask": "causal", "lse": True, "backward": True,
                "tensors": [{"name": "len", "dtype": "i32", "shape": [2]}, {"name": "bias", "dtype": "f32",
                                                                             "shape": ["lq", "lk"]}],
                "mask_mod": {"kind": "padding", "lengths": "len"}, "score_mod": {"kind": "bias", "tensor": "bias"}}
        kern = heed.compile(spec)
        self.assertTrue(kern.has_backward)
        q, k, v = rand((2, 4, 13, 6), 1), rand((2, 2, 9, 6), 2), rand((2, 2, 9, 5), 3)
        bias = np.zeros((13, 9), dtype=np.float32)
        for lens in ([9, 9], [9, 0]):
            t = {"len": np.array(lens, dtype=np.int32), "bias": bias}
            out, lse = kern(q, k, v, tensors=t)
            dout = rand(out.shape, 4)
            ref = attention_backward(q, k, v, dout, 6 ** -0.5, True, "none")
            got = kern.backward(q, k, v, out, dout, lse=lse, tensors=t)
            for name, g, r in zip(("dq", "dk", "dv"), got, ref):
                grad_close(self, g[:1], r[:1], "py_bwd_tens %s" % name)
                if lens[1]:
                    grad_close(self, g[1:], r[1:], "py_bwd_tens %s" % name)
                else:
                    self.assertFalse(np.any(g[1:]), "py_bwd_tens %s of a batch entry of length 0" % name)
        with self.assertRaises(ValueError) as cm:
            kern.backward(q, k, v, out, dout, tensors={"len": t["len"]})
        self.assertIn("params['bias']: missing", str(cm.exception))
        # (test_numpy_reference's kernel: compiled once)
        plain = heed.compile({"name": "py_causal", "heads": 2, "lq": 24, "lk": 30, "dk": 16, "dv": 8, "fuse": "none",
                              "mask": "causal"})
        self.assertFalse(plain.has_backward)
        q = rand((1, 2, 24, 16), 5)
        with self.assertRaises(ValueError) as cm:
            plain.backward(q, q, q, q, q)
        self.assertIn("backward = true", str(cm.exception))


    def test_kernel_backward_16bit(self):
        """kernel.backward of a bf16 kernel: dq, dk, dv in q, k, v's storage
        (uint16 bit patterns), each within the gradient tolerance plus one
        rounding of the float64 gradients of the inputs as stored."""
        spec = {"name": "py_bwd16", "heads": 2, "lq": 9, "lk": 7, "dk": 6, "dv": 5, "fuse": "none", "dtype": "bf16",
                "backward": True}
        kern = heed.compile(spec)

        def bf16(a):
            return (a.view(np.uint32) >> 16).astype(np.uint16)

        def wide(b):
            return (b.astype(np.uint32) << 16).view(np.float32)

        q, k, v = bf16(rand((2, 2, 9, 6), 1)), bf16(rand((2, 2, 7, 6), 2)), bf16(rand((2, 2, 7, 5), 3))
        out = kern(q, k, v)
        dout = rand(out.shape, 4) if out.dtype == np.float32 else bf16(rand(out.shape, 4))
        dw = dout if dout.dtype == np.float32 else wide(dout)
        ref = attention_backward(wide(q), wide(k), wide(v), dw, 6 ** -0.5)
        for name, g, r in zip(("dq", "dk", "dv"), kern.backward(q, k, v, out, dout), ref):
            self.assertEqual(g.dtype, np.uint16, name)
            err = np.abs(wide(g).astype(np.float64) - r)
            bad = err > 1e-5 + 1e-4 * (np.abs(r) + np.abs(r).max()) + 2.0 ** -8 * np.abs(r)
            self.assertFalse(bad.any(), "%s: max |err| %g" % (name, err.max()))


class NdBackward(unittest.TestCase):
    def test_neighborhood_backward_matches_numpy(self):
        """kernel.backward of the N-d neighborhood form (2-D 5 x 6 map, 3 x 3
        windows shifted inside it, two query heads on one K/V head, channels
        past a vector) against the float64 gradients of attention under the
        window mask; the N-d backward reads no lse."""
        spec = {"name": "py_nbwd", "form": "neighborhood", "map": [5, 6], "kernel": [3, 3], "heads": 2,
                "heads_kv": 1, "dk": 20, "dv": 18, "fuse": "none", "backward": True}
        kern = heed.compile(spec)
        self.assertTrue(kern.has_backward)
        q, k, v = rand((2, 2, 30, 20), 1), rand((2, 1, 30, 20), 2), rand((2, 1, 30, 18), 3)
        out = kern(q, k, v)
        dout = rand(out.shape, 4)
        ref = attention_backward(q, k, v, dout, 20 ** -0.5, allowed=neighborhood_allowed((5, 6), (3, 3)))
        got = kern.backward(q, k, v, out, dout)
        for name, g, r in zip(("dq", "dk", "dv"), got, ref):
            grad_close(self, g, r, "py_nbwd " + name)
        with self.assertRaises(ValueError) as cm:
            kern.backward(q, k, v, out, dout, lse=np.zeros((2, 2, 30), np.float32))
        self.assertIn("lse", str(cm.exception))


def _cut(y):
    """The tokens of a [batch][C][8][8] map cut into 4 x 4 patches, channel-major: [batch][1][4][C*16]."""
    b, c = y.shape[:2]
    return y.reshape(b, c, 2, 4, 2, 4).transpose(0, 2, 4, 1, 3, 5).reshape(b, 1, 4, c * 16)


def _uncut(t, c):
    """_cut's inverse (the patches do not overlap): [batch][1][4][C*16] -> [batch][C][8][8]."""
    b = t.shape[0]
    return t.reshape(b, 2, 2, c, 4, 4).transpose(0, 3, 1, 4, 2, 5).reshape(b, c, 8, 8)


class XBackward(unittest.TestCase):
    def test_patches_backward_matches_numpy(self):
        """kernel.backward(x, out, dout) of the patches form (NAME_backward(batch,
        x, out, dout, lse, dx), docs/backward.md "Patches and collection"):
        identity maps, then linear f_q and f_k (their gradients in grads),
        against the float64 gradients of attention over the tokens scattered
        back onto the map (dx = f_q^T dY_q + f_k^T dY_k + dY_v, df = dY x^T)."""
        x = rand((3, 2, 8, 8), 21)
        spec = {"name": "py_xbwd", "form": "patches", "channels": 2, "map": [8, 8], "window": [4, 4],
                "fuse": "none", "backward": True}
        kern = heed.compile(spec)
        self.assertTrue(kern.has_backward)
        out = kern(x)
        dout = rand(out.shape, 22)
        t = _cut(x)
        dq, dk, dv = attention_backward(t, t, t, dout.reshape(3, 1, 4, 32), 32 ** -0.5)
        got = kern.backward(x, out, dout)
        self.assertEqual(len(got), 1)
        grad_close(self, got[0], _uncut(dq + dk + dv, 2), "py_xbwd dx")
        with self.assertRaises(ValueError) as cm:
            kern.backward(x, x, x, out, dout)
        self.assertIn("x, out, dout", str(cm.exception))
        spec = dict(spec, name="py_xbwdf", f_q={"kind": "linear", "out": 3}, f_k={"kind": "linear", "out": 3})
        kern = heed.compile(spec)
        self.assertEqual(kern.grad_names, ["f_q", "f_k"])
        w = {"f_q": rand((3, 2), 23), "f_k": rand((3, 2), 24)}
        out = kern(x, params=w)
        dout = rand(out.shape, 25)
        yq, yk = (np.einsum("oc,bcij->boij", w[f].astype(np.float64), x) for f in ("f_q", "f_k"))
        dq, dk, dv = attention_backward(_cut(yq), _cut(yk), t, dout.reshape(3, 1, 4, 32), 48 ** -0.5)
        dyq, dyk = _uncut(dq, 3), _uncut(dk, 3)
        dx = np.einsum("oc,boij->bcij", w["f_q"], dyq) + np.einsum("oc,boij->bcij", w["f_k"], dyk) + _uncut(dv, 2)
        gx, grads = kern.backward(x, out, dout, params=w)
        grad_close(self, gx, dx, "py_xbwdf dx")
        grad_close(self, grads["f_q"], np.einsum("boij,bcij->oc", dyq, x), "py_xbwdf df_q")
        grad_close(self, grads["f_k"], np.einsum("boij,bcij->oc", dyk, x), "py_xbwdf df_k")


class NdKernels(unittest.TestCase):
    def test_patches_take_x(self):
        # a 2 x 8 x 8 map cut into 4 x 4 patches: 4 tokens of 2*16 values each
        spec = {"name": "py_patches", "form": "patches", "channels": 2, "map": [8, 8], "window": [4, 4],
                "fuse": "none"}
        kern = heed.compile(spec)
        self.assertEqual(kern.input_names, ["x"])
        x = rand((3, 2, 8, 8), 11)
        out = kern(x)
        self.assertEqual(out.shape, (3, 4, 2, 4, 4))      # g_v = fold: [batch][L][C][window]
        # tokens channel-major: patch (a, b) -> x[:, c, 4a + i, 4b + j] in (c, i, j) order
        t = x.reshape(3, 2, 2, 4, 2, 4).transpose(0, 2, 4, 1, 3, 5).reshape(3, 1, 4, 32)
        want = attention(t, t, t, 32 ** -0.5).reshape(3, 4, 2, 4, 4)
        close(self, out, want)

    def test_neighborhood_takes_qkv(self):
        # each of 12 positions attends to the 5 around it, shifted inside the map (NATTEN)
        spec = {"name": "py_nbhd", "form": "neighborhood", "map": [12], "kernel": [5], "dk": 8, "fuse": "none"}
        kern = heed.compile(spec)
        self.assertEqual(kern.input_names, ["q", "k", "v"])
        q, k, v = (rand((2, 1, 12, 8), s) for s in (1, 2, 3))
        out = kern(q, k, v)
        want = np.empty(out.shape)
        for i in range(12):
            lo = min(max(i - 2, 0), 12 - 5)
            want[:, :, i:i + 1] = attention(q[:, :, i:i + 1], k[:, :, lo:lo + 5], v[:, :, lo:lo + 5], 8 ** -0.5)
        close(self, out, want)


class Errors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.kern = heed.compile({"name": "py_err", "heads": 2, "lq": 8, "dk": 4, "fuse": "none"})

    def good(self):
        return [rand((1, 2, 8, 4), s) for s in (1, 2, 3)]

    def assertNames(self, what, fn):
        with self.assertRaises(ValueError) as cm:
            fn()
        self.assertIn(what, str(cm.exception))

    def test_shapes_dtypes_layout(self):
        q, k, v = self.good()
        self.assertNames("k: shape (1, 2, 7, 4), expected (1, 2, 8, 4)", lambda: self.kern(q, k[:, :, :7].copy(), v))
        self.assertNames("v: shape", lambda: self.kern(q, k, rand((2, 2, 8, 4), 4)))
        self.assertNames("q: dtype float64, expected float32", lambda: self.kern(q.astype(np.float64), k, v))
        self.assertNames("v: dtype int32", lambda: self.kern(q, k, v.astype(np.int32)))
        self.assertNames("k: not C-contiguous", lambda: self.kern(q, np.asfortranarray(k), v))
        self.assertNames("k: a numpy array, not list", lambda: self.kern(q, k.tolist(), v))
        self.assertNames("takes 3 arrays (q, k, v), got 2", lambda: self.kern(q, k))
        self.assertNames("params: py_err takes no weights", lambda: self.kern(q, k, v, params={"w": q}))

    def test_weights(self):
        kern = heed.compile({"name": "py_errw", "lq": 4, "dk": 4, "score": "general"})
        q, k, v = (rand((1, 1, 4, 4), s) for s in (1, 2, 3))
        self.assertNames("params['w']: missing", lambda: kern(q, k, v, params={}))
        self.assertNames("params['w']: shape (4, 4), expected (1, 4, 4)", lambda: kern(q, k, v, params={"w": q[0, 0]}))
        self.assertNames("unknown weight(s) u", lambda: kern(q, k, v, params={"w": q[0], "u": q}))
        self.assertNames("params['w']: missing", lambda: heed.Plan({"lq": 4, "dk": 4, "score": "general"})(q, k, v))

    def test_bad_specs(self):
        self.assertNames("heads", lambda: heed.compile({"name": "py_bad", "heads": 0, "lq": 4, "dk": 4}))
        self.assertNames("no such file", lambda: heed.compile("/nonexistent/spec.lua"))
        self.assertNames("not a finite number", lambda: heed.compile({"name": "x", "lq": 4, "dk": 4,
                                                                      "scale": float("inf")}))
        # strings are data: quotes, newlines and Lua syntax stay inside the string
        evil = 'a"; os.exit(1) --\n]]'
        lua = heed.spec_to_lua({"name": evil, "lq": 4, "dk": 4})
        self.assertNotIn("\n]]", lua.rstrip("\n"))
        self.assertNames("name", lambda: heed.compile({"name": evil, "lq": 4, "dk": 4}))


class Plans(unittest.TestCase):
    def test_plan_matches_reference(self):
        spec = {"heads": 2, "lq": 16, "lk": 20, "dk": 8, "fuse": "sum", "norm": "relu"}
        q, k, v = rand((2, 2, 16, 8), 1), rand((2, 2, 20, 8), 2), rand((2, 2, 20, 8), 3)
        with heed.Plan(spec) as plan:
            self.assertIn(plan.source, ("registry", "generic", "tuned"))
            self.assertIn(plan.source, plan.describe())
            close(self, plan(q, k, v), heed.reference(spec, q, k, v))
            with self.assertRaises(ValueError) as cm:
                plan(q, k[:, :1].copy(), v)
            self.assertIn("k: shape", str(cm.exception))
        with self.assertRaises(heed.HeedError) as cm:
            heed.Plan(spec, flags=heed.WISDOM_ONLY)
        self.assertEqual(cm.exception.code, -7)        # HEED_ENOWISDOM
        with self.assertRaises(ValueError):
            heed.Plan({"lq": 4, "dk": 4, "norm": "softmin"})

    def test_nd_plans_match_reference(self):
        """N-d plans (generic here) against libheed's N-d reference, and the
        compiled kernel of the same spec: every form once."""
        cases = [
            ({"form": "patches", "channels": 2, "map": [7, 5], "window": [2, 3], "stride": [2, 1], "fuse": "none",
              "f_v": {"kind": "linear", "out": 4}, "heads": 2, "score": "general",
              "bias": {"kind": "relative", "clip": 1}}, "x"),
            ({"form": "collection", "channels": 3, "map": [5], "count": 7, "fuse": "max", "score": "dot",
              "mask": {"kind": "local", "radius": 2, "gaussian": True}}, "x"),
            ({"form": "neighborhood", "map": [7, 11], "kernel": [3, 5], "dilation": [2, 1], "dk": 4, "dv": 3,
              "heads": 2, "fuse": "none", "bias": {"kind": "relative", "clip": [1, 2]}}, "qkv"),
            ({"form": "neighborhood", "map": [9, 7], "kernel": [3, 4], "stride": [2, 3], "causal": [True, False],
              "dk": 4, "dv": 3, "fuse": "none"}, "qkv"),                   # NATTEN's stride and is_causal
            ({"form": "halo", "map": [13], "block": 4, "halo": 2, "padding": "clamp", "dk": 3, "score": "additive",
              "da": 2, "norm": "sigmoid", "fuse": "sum"}, "qkv"),
        ]
        rng = np.random.default_rng(5)
        for spec, kind in cases:
            p = runtime.nd_problem(spec)
            ins, _ = runtime._nd_shapes(p, 2)
            arrays = [rand(ins[nm], i) for i, nm in enumerate(["x"] if kind == "x" else ["q", "k", "v"])]
            params = {}
            if spec.get("score") == "general":
                params["w"] = rng.uniform(-0.3, 0.3, (p.heads, p.dk, p.dk)).astype(np.float32)
            if spec.get("score") == "additive":
                params["w_q"], params["w_k"] = (rand((p.heads, p.da, p.dk), s) for s in (7, 8))
                params["v_a"] = rand((p.heads, p.da), 9)
            if "f_v" in spec:
                params["f_v"] = rand((p.f_out[2], p.channels), 10)
            if "bias" in spec:
                nb = 1 if spec["form"] == "collection" else p.ndim
                params["bias"] = [rand((p.heads, 2 * p.clip[d] + 1), 20 + d) for d in range(nb)]
            with heed.Plan(spec, flags=heed.NO_WISDOM) as plan:
                self.assertEqual(plan.source, "generic")
                self.assertIn("N-d spec", plan.describe())
                got = plan(*arrays, params=params)
                close(self, got, heed.nd_reference(spec, *arrays, params=params))
                kern = heed.compile(dict(spec, name="py_nd_plan"))
                close(self, kern(*arrays, params=params or None).reshape(got.shape), got.astype(np.float64))
                with self.assertRaises(ValueError):
                    plan(*[a[..., :-1].copy() for a in arrays], params=params)
                if params:
                    with self.assertRaises(ValueError):
                        plan(*arrays)
        with self.assertRaises(ValueError):
            heed.Plan({"form": "neighborhood", "map": [5], "kernel": 7, "dk": 4})   # kernel > map
        with self.assertRaises(heed.HeedError) as cm:
            heed.Plan(cases[2][0], flags=heed.WISDOM_ONLY)
        self.assertEqual(cm.exception.code, -7)        # HEED_ENOWISDOM

    def test_struct_mirror_matches_heed_h(self):
        """sizeof and offsetof of every field, from C, equal the ctypes mirror's."""
        lines = []
        for cname, py in (("heed_problem", runtime.Problem), ("heed_params", runtime.Params),
                          ("heed_status", runtime.Status)):
            lines.append('printf("%s %%zu\\n", sizeof(%s));' % (cname, cname))
            for f, _ in py._fields_:
                lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (cname, f, cname, f))
        src = "#include <stddef.h>\n#include <stdio.h>\n#include \"heed.h\"\nint main(void) {\n%s\nreturn 0;\n}\n" \
            % "\n".join(lines)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "m.c"), "w") as f:
                f.write(src)
            cc = shlex.split(os.environ.get("CC") or "cc")
            subprocess.check_call(cc + ["-std=c11", "-I" + os.path.join(ROOT, "runtime"), os.path.join(d, "m.c"),
                                        "-o", os.path.join(d, "m")])
            got = dict(l.split() for l in subprocess.check_output([os.path.join(d, "m")]).decode().splitlines())
        for cname, py in (("heed_problem", runtime.Problem), ("heed_params", runtime.Params),
                          ("heed_status", runtime.Status)):
            self.assertEqual(int(got[cname]), ctypes.sizeof(py), cname)
            for f, _ in py._fields_:
                self.assertEqual(int(got[cname + "." + f]), getattr(py, f).offset, cname + "." + f)


if __name__ == "__main__":
    unittest.main()
