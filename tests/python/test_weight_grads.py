"""kernel.backward of kernels whose NAME_backward takes NAME_params and
NAME_grads (issue 40): the general, additive and location scores and the
N-d neighborhood form with a relative bias table. Every gradient -- dq,
dk, dv and the weights' -- against central finite differences of libheed's
double-precision reference (heed.reference, heed.nd_reference) on small
odd shapes with two batch items (the weights' gradients sum over the
batch); batch 0; the argument refusals (make test-python)."""

import unittest

import numpy as np

import heed


def rand(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def grad_close(test, got, ref, what):
    """DESIGN.md's gradient tolerance: |g - ref| <= 1e-5 + 1e-4 (|ref| + max |ref|)."""
    test.assertEqual(got.shape, ref.shape, what)
    test.assertEqual(got.dtype, np.float32, what)
    bad = np.abs(got.astype(np.float64) - ref) > 1e-5 + 1e-4 * (np.abs(ref) + np.abs(ref).max())
    test.assertFalse(bad.any(), "%s: max |err| %g (|ref| up to %g)" % (what, np.abs(got - ref).max(),
                                                                       np.abs(ref).max()))


def central_differences(loss, arr, h=2.0 ** -10):
    """d loss / d arr (float64) by central differences, each element of the
    float32 array arr moved to the float32 values nearest x +- h in place
    (and back); the step is the difference actually taken."""
    g = np.zeros(arr.shape)
    flat, gflat = arr.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        x = flat[i]
        hi, lo = np.float32(x + h), np.float32(x - h)
        flat[i] = hi
        up = loss()
        flat[i] = lo
        down = loss()
        flat[i] = x
        gflat[i] = (up - down) / (np.float64(hi) - np.float64(lo))
    return g


# (spec, the weights' shapes); sizes odd, lq != lk, two heads
TOKEN = [
    ({"name": "py_wg_general", "heads": 2, "lq": 5, "lk": 7, "dk": 4, "dv": 3, "score": "general", "scale": 0.5,
      "fuse": "none", "mask": "causal", "backward": True}, {"w": (2, 4, 4)}),
    ({"name": "py_wg_additive", "heads": 2, "lq": 5, "lk": 7, "dk": 4, "dv": 3, "da": 3, "score": "additive",
      "fuse": "none", "backward": True}, {"w_q": (2, 3, 4), "w_k": (2, 3, 4), "v_a": (2, 3)}),
    ({"name": "py_wg_location", "heads": 2, "lq": 5, "lk": 7, "dk": 4, "dv": 3, "score": "location",
      "fuse": "none", "backward": True}, {"w": (2, 7, 4)}),
]
ND = ({"name": "py_wg_nd", "form": "neighborhood", "map": [5, 6], "kernel": [3, 3], "heads": 2, "heads_kv": 1,
       "dk": 4, "dv": 3, "fuse": "none", "bias": {"kind": "relative", "clip": [2, 1]}, "backward": True},
      {"bias": [(2, 5), (2, 3)]})


class _Reference:
    """heed.reference / heed.nd_reference, with the Problem made once."""

    def __init__(self, run, problem):
        self.run, self.problem = run, problem

    def __call__(self, *args, **kw):
        return self.run(*args, **kw)


REF, ND_REF = _Reference(heed.reference, heed.problem), _Reference(heed.nd_reference, heed.nd_problem)


class WeightGradients(unittest.TestCase):
    def check(self, spec, shapes, inputs, reference):
        kern = heed.compile(spec)
        self.assertTrue(kern.has_backward, spec["name"])
        self.assertEqual(kern.grad_names, list(shapes), spec["name"])
        params = {f: [rand(s, 10 + 3 * i + j) * 2 for j, s in enumerate(shp)] if isinstance(shp, list)
                  else rand(shp, 10 + 3 * i) for i, (f, shp) in enumerate(shapes.items())}
        out = kern(*inputs, params=params)
        dout = rand(out.shape, 4)
        dq, dk, dv, grads = kern.backward(*inputs, out, dout, params=params)
        self.assertEqual(sorted(grads), sorted(shapes))

        problem = reference.problem({f: x for f, x in spec.items() if f != "backward"})

        def loss():
            return float(np.sum(reference(problem, *inputs, params=params) * dout))
        for name, got, arr in zip(("dq", "dk", "dv"), (dq, dk, dv), inputs):
            grad_close(self, got, central_differences(loss, arr), "%s %s" % (spec["name"], name))
        for f, g in grads.items():
            for j, (gj, arr) in enumerate(zip(g, params[f]) if isinstance(g, list) else [(g, params[f])]):
                grad_close(self, gj, central_differences(loss, arr), "%s d%s[%d]" % (spec["name"], f, j))
        # batch 0: no call would write them, the gradients are zeros
        empty = [np.zeros((0,) + a.shape[1:], np.float32) for a in inputs]
        zero = kern.backward(*empty, np.zeros((0,) + out.shape[1:], np.float32),
                             np.zeros((0,) + out.shape[1:], np.float32), params=params)[3]
        for f, g in zero.items():
            self.assertFalse(any(np.any(x) for x in (g if isinstance(g, list) else [g])), "batch 0 d" + f)
        return kern, params, out, dout

    def test_token_scores_against_finite_differences(self):
        for spec, shapes in TOKEN:
            with self.subTest(spec=spec["name"]):
                inputs = [rand((2, 2, 5, 4), 1), rand((2, 2, 7, 4), 2), rand((2, 2, 7, 3), 3)]
                kern, params, out, dout = self.check(spec, shapes, inputs, REF)
        # refusals name the argument (the location kernel above)
        q, k, v = inputs
        for call, msg in [
            (lambda: kern.backward(q, k, v, out, dout), "params['w']: missing"),
            (lambda: kern.backward(q, k, v, out, dout, params={"w": params["w"][:1]}), "params['w']: shape (1, 7, 4)"),
            (lambda: kern.backward(q, k, v, out, dout, params={"w": params["w"].astype(np.float64)}),
             "params['w']: dtype float64"),
            (lambda: kern.backward(q, k, v, out, dout, params=dict(params, w_q=params["w"])),
             "params: unknown weight(s) w_q (allowed: w)"),
            (lambda: kern.backward(q, k, v, out, dout, params=[params["w"]]), "params: a dict"),
            (lambda: kern.backward(q, k, v, out, dout[:, :1], params=params), "dout: shape"),
        ]:
            with self.assertRaises(ValueError) as cm:
                call()
            self.assertIn(msg, str(cm.exception))

    def test_neighborhood_bias_against_finite_differences(self):
        spec, shapes = ND
        inputs = [rand((2, 2, 30, 4), 1), rand((2, 1, 30, 4), 2), rand((2, 1, 30, 3), 3)]
        kern, params, out, dout = self.check(spec, shapes, inputs, ND_REF)
        q, k, v = inputs
        for bad, msg in [({"bias": params["bias"][:1]}, "params['bias']: a list of 2 arrays"),
                         ({"bias": [params["bias"][1], params["bias"][0]]}, "params['bias'][0]: shape (2, 3)"),
                         ({}, "params['bias']: missing")]:
            with self.assertRaises(ValueError) as cm:
                kern.backward(q, k, v, out, dout, params=bad)
            self.assertIn(msg, str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            kern.backward(q, k, v, out, dout, lse=np.zeros((2, 2, 30), np.float32), params=params)
        self.assertIn("lse", str(cm.exception))

    def test_kernels_without_weights_return_three(self):
        kern = heed.compile({"name": "py_wg_plain", "heads": 2, "lq": 5, "lk": 7, "dk": 4, "dv": 3,
                             "fuse": "none", "backward": True})
        self.assertEqual(kern.grad_names, [])
        q, k, v = rand((1, 2, 5, 4), 1), rand((1, 2, 7, 4), 2), rand((1, 2, 7, 3), 3)
        out = kern(q, k, v)
        self.assertEqual(len(kern.backward(q, k, v, out, out)), 3)
        with self.assertRaises(ValueError) as cm:
            kern.backward(q, k, v, out, out, params={"w": q})
        self.assertIn("params: py_wg_plain takes no weights", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
