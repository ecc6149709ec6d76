"""heed.Plan and heed.reference over libheed (heed.h) with ctypes.

The structs and enums of heed.h are mirrored here, and only here
(tests/python/test_heed.py checks their sizes and offsets against a C
program that includes heed.h).
"""

import ctypes
import math

import numpy as np

from . import _paths

# ---- the mirror of heed.h ----------------------------------------------------------

SCORES = ["dot", "scaled_dot", "general", "additive", "cosine", "location"]   # heed_score
NORMS = ["softmax", "sigmoid", "relu", "none"]                                 # heed_norm
FUSES = ["none", "mean", "sum", "max"]                                         # heed_fuse
MASKS = ["none", "causal", "local"]                                            # heed_mask
SOURCES = ["none", "tuned", "registry", "generic"]                             # heed_source

ESTIMATE, MEASURE, WISDOM_ONLY, NO_WISDOM, NO_REGISTRY = 1, 2, 4, 8, 16        # plan flags


class Problem(ctypes.Structure):
    """struct heed_problem"""
    _fields_ = [("heads", ctypes.c_int), ("lq", ctypes.c_int), ("lk", ctypes.c_int), ("dk", ctypes.c_int),
                ("dv", ctypes.c_int), ("da", ctypes.c_int), ("score", ctypes.c_int), ("norm", ctypes.c_int),
                ("fuse", ctypes.c_int), ("mask", ctypes.c_int), ("radius", ctypes.c_int),
                ("gaussian", ctypes.c_int), ("scale", ctypes.c_double),
                ("dtype", ctypes.c_int), ("out_dtype", ctypes.c_int),      # heed_dtype: 0 = f32
                ("heads_kv", ctypes.c_int)]                                     # 0: heads


class Params(ctypes.Structure):
    """struct heed_params"""
    _fields_ = [(f, ctypes.POINTER(ctypes.c_float)) for f in ("w", "w_q", "w_k", "v_a")]


class Status(ctypes.Structure):
    """struct heed_status"""
    _fields_ = [("code", ctypes.c_int), ("fallback", ctypes.c_int), ("source", ctypes.c_int),
                ("message", ctypes.c_char * 1024)]


_lib = None


def lib():
    """libheed, loaded once, with the prototypes of the functions used here."""
    global _lib
    if _lib is None:
        L = ctypes.CDLL(_paths.libheed_path())
        P, vp, i, sz = ctypes.POINTER, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        protos = {
            "heed_plan_create": (vp, [P(Problem), ctypes.c_uint, P(Status)]),
            "heed_execute_params": (i, [vp, i, vp, vp, vp, vp, P(Params)]),
            "heed_plan_destroy": (None, [vp]),
            "heed_plan_describe": (ctypes.c_char_p, [vp]),
            "heed_plan_source": (i, [vp]),
            "heed_strerror": (ctypes.c_char_p, [i]),
            "heed_default_scale": (ctypes.c_double, [i, i]),
            "heed_problem_check": (i, [P(Problem)]),
            "heed_out_elems": (sz, [P(Problem), i]),
            "heed_reference": (i, [P(Problem), i, vp, vp, vp, P(Params), vp]),
            "heed_problem_canonical": (i, [P(Problem), ctypes.c_char_p, sz]),
        }
        for name, (res, args) in protos.items():
            fn = getattr(L, name)
            fn.restype, fn.argtypes = res, args
        _lib = L
    return _lib


class HeedError(RuntimeError):
    """A libheed call failed: code is the negative HEED_* status."""

    def __init__(self, what, code, message=None):
        super().__init__("%s: %s (%d)" % (what, message or lib().heed_strerror(code).decode(), code))
        self.code = code


# ---- problems ---------------------------------------------------------------------

def _choice(spec, field, values, default):
    v = spec.get(field, default)
    if isinstance(v, dict):
        v = v.get("kind")
    if v not in values:
        raise ValueError("%s: %r is not one of %s" % (field, v, ", ".join(values)))
    return values.index(v)


def problem(spec):
    """A heed_problem from a token spec's fields (a dict as heed.compile takes;
    `name` is ignored), with the generator's defaults."""
    if "form" in spec:
        raise ValueError("form: libheed plans token problems only (compile N-d specs with heed.compile)")
    for f in ("lq", "dk"):
        if f not in spec:
            raise ValueError("%s: required" % f)
    p = Problem()
    p.heads, p.lq, p.dk = spec.get("heads", 1), spec["lq"], spec["dk"]
    p.lk, p.dv = spec.get("lk", p.lq), spec.get("dv", p.dk)
    p.heads_kv = spec.get("heads_kv", 0)
    p.score = _choice(spec, "score", SCORES, "scaled_dot")
    p.norm = _choice(spec, "norm", NORMS, "softmax")
    p.fuse = _choice(spec, "fuse", FUSES, "mean")
    p.mask = _choice(spec, "mask", MASKS, "none")
    p.da = spec.get("da", p.dk) if SCORES[p.score] == "additive" else 0
    m = spec.get("mask")
    if isinstance(m, dict):
        p.radius, p.gaussian = m.get("radius", 0), int(bool(m.get("gaussian", False)))
    scale = spec.get("scale")
    p.scale = lib().heed_default_scale(p.score, p.dk) if scale is None else float(scale)
    if not math.isfinite(p.scale) or lib().heed_problem_check(ctypes.byref(p)) != 0:
        raise ValueError("spec: not a valid problem (%s)" % canonical(p))
    return p


def canonical(p):
    buf = ctypes.create_string_buffer(512)
    lib().heed_problem_canonical(ctypes.byref(p), buf, len(buf))
    return buf.value.decode()


def _shapes(p, batch):
    out = (batch, p.heads, p.lq, p.dv) if FUSES[p.fuse] == "none" else (batch, p.heads, p.dv)
    hkv = p.heads_kv or p.heads
    return {"q": (batch, p.heads, p.lq, p.dk), "k": (batch, hkv, p.lk, p.dk),
            "v": (batch, hkv, p.lk, p.dv)}, out


def _weights(p, params):
    need = {"general": {"w": (p.heads, p.dk, p.dk)},
            "additive": {"w_q": (p.heads, p.da, p.dk), "w_k": (p.heads, p.da, p.dk), "v_a": (p.heads, p.da)},
            "location": {"w": (p.heads, p.lk, p.dk)}}.get(SCORES[p.score], {})
    params = params or {}
    unknown = set(params) - set(need)
    if unknown:
        raise ValueError("params: unknown weight(s) %s (this score takes: %s)"
                         % (", ".join(sorted(unknown)), ", ".join(need) or "none"))
    w = Params()
    for f, shape in need.items():
        if f not in params:
            raise ValueError("params['%s']: missing" % f)
        a = _array(params[f], "params['%s']" % f, shape)
        setattr(w, f, a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    return w


def _array(a, what, shape):
    if not isinstance(a, np.ndarray):
        raise ValueError("%s: a numpy array, not %s" % (what, type(a).__name__))
    if a.dtype != np.float32:
        raise ValueError("%s: dtype %s, expected float32" % (what, a.dtype))
    if a.shape != shape:
        raise ValueError("%s: shape %s, expected %s" % (what, a.shape, shape))
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError("%s: not C-contiguous (use numpy.ascontiguousarray)" % what)
    return a


def _inputs(p, q, k, v, location_k_optional=True):
    if not isinstance(q, np.ndarray) or q.ndim != 4:
        raise ValueError("q: a 4-d numpy array [batch][H][Lq][Dk]")
    batch = q.shape[0]
    shapes, out = _shapes(p, batch)
    ptrs = []
    for nm, a in (("q", q), ("k", k), ("v", v)):
        if a is None and nm == "k" and SCORES[p.score] == "location" and location_k_optional:
            ptrs.append(None)
            continue
        ptrs.append(_array(a, nm, shapes[nm]).ctypes.data)
    return batch, ptrs, out


def reference(spec, q, k, v, params=None):
    """libheed's double-precision reference of a token spec (dict) or Problem:
    a new float64 array of out's layout."""
    p = spec if isinstance(spec, Problem) else problem(spec)
    batch, ptrs, out_shape = _inputs(p, q, k, v)
    w = _weights(p, params)
    out = np.empty(out_shape, dtype=np.float64)
    rc = lib().heed_reference(ctypes.byref(p), batch, *ptrs, ctypes.byref(w), out.ctypes.data)
    if rc != 0:
        raise HeedError("heed_reference", rc)
    return out


class Plan:
    """A libheed plan for a token problem: Plan(spec_dict, flags=ESTIMATE).

    plan(q, k, v, params=None) runs it (the layouts of heed.compile's
    kernels) and returns a new float32 array; describe() says which kernel
    was chosen and why. Plans are reentrant (numpy arrays of several threads
    may run through one plan at once)."""

    def __init__(self, spec, flags=ESTIMATE):
        self.problem = spec if isinstance(spec, Problem) else problem(spec)
        st = Status()
        self._plan = lib().heed_plan_create(ctypes.byref(self.problem), flags, ctypes.byref(st))
        if not self._plan:
            raise HeedError("heed_plan_create", st.code, st.message.decode(errors="replace"))
        self.fallback = st.fallback
        self.message = st.message.decode(errors="replace")

    def __call__(self, q, k, v, params=None):
        if not self._plan:
            raise ValueError("plan: destroyed")
        batch, ptrs, out_shape = _inputs(self.problem, q, k, v)
        w = _weights(self.problem, params)
        out = np.empty(out_shape, dtype=np.float32)
        if out.size == 0:
            return out
        rc = lib().heed_execute_params(self._plan, batch, *ptrs, out.ctypes.data, ctypes.byref(w))
        if rc != 0:
            raise HeedError("heed_execute", rc)
        return out

    def describe(self):
        return lib().heed_plan_describe(self._plan).decode()

    @property
    def source(self):
        return SOURCES[lib().heed_plan_source(self._plan)]

    def close(self):
        if self._plan:
            lib().heed_plan_destroy(self._plan)
            self._plan = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
