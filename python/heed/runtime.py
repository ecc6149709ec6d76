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
FORMS = ["patches", "collection", "neighborhood", "halo"]                      # heed_nd_form
ND_MAXDIM = 3                                                                  # HEED_ND_MAXDIM

ESTIMATE, MEASURE, WISDOM_ONLY, NO_WISDOM, NO_REGISTRY = 1, 2, 4, 8, 16        # plan flags


class Problem(ctypes.Structure):
    """struct heed_problem"""
    _fields_ = [("heads", ctypes.c_int), ("lq", ctypes.c_int), ("lk", ctypes.c_int), ("dk", ctypes.c_int),
                ("dv", ctypes.c_int), ("da", ctypes.c_int), ("score", ctypes.c_int), ("norm", ctypes.c_int),
                ("fuse", ctypes.c_int), ("mask", ctypes.c_int), ("radius", ctypes.c_int),
                ("gaussian", ctypes.c_int), ("scale", ctypes.c_double),
                ("dtype", ctypes.c_int), ("out_dtype", ctypes.c_int),      # heed_dtype: 0 = f32
                ("heads_kv", ctypes.c_int),                                     # 0: heads
                ("lse", ctypes.c_int)]                                          # 1: heed_execute_lse


class Params(ctypes.Structure):
    """struct heed_params"""
    _fields_ = [(f, ctypes.POINTER(ctypes.c_float)) for f in ("w", "w_q", "w_k", "v_a")]


class NdProblem(ctypes.Structure):
    """struct heed_nd_problem"""
    _A = ctypes.c_int * ND_MAXDIM
    _fields_ = [("form", ctypes.c_int), ("ndim", ctypes.c_int), ("map", _A), ("heads", ctypes.c_int),
                ("channels", ctypes.c_int), ("count", ctypes.c_int), ("window", _A), ("stride", _A),
                ("f_out", ctypes.c_int * 3), ("fold", ctypes.c_int), ("kernel", _A), ("dilation", _A),
                ("block", ctypes.c_int), ("halo", ctypes.c_int), ("pad_zero", ctypes.c_int),
                ("dk", ctypes.c_int), ("dv", ctypes.c_int), ("da", ctypes.c_int), ("score", ctypes.c_int),
                ("norm", ctypes.c_int), ("fuse", ctypes.c_int), ("mask", ctypes.c_int), ("radius", ctypes.c_int),
                ("gaussian", ctypes.c_int), ("bias", ctypes.c_int), ("clip", _A), ("scale", ctypes.c_double),
                ("dtype", ctypes.c_int), ("out_dtype", ctypes.c_int),      # heed_dtype: 0 = f32
                ("heads_kv", ctypes.c_int)]                                     # neighborhood, halo; 0: heads


class NdParams(ctypes.Structure):
    """struct heed_nd_params"""
    _fields_ = [(f, ctypes.POINTER(ctypes.c_float)) for f in ("w", "w_q", "w_k", "v_a", "f_q", "f_k", "f_v")] \
        + [("bias", ctypes.POINTER(ctypes.c_float) * ND_MAXDIM)]


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
            "heed_nd_plan_create": (vp, [P(NdProblem), ctypes.c_uint, P(Status)]),
            "heed_nd_execute": (i, [vp, i, vp, vp, vp, vp, vp, P(NdParams)]),
            "heed_nd_problem_check": (i, [P(NdProblem)]),
            "heed_nd_problem_canonical": (i, [P(NdProblem), ctypes.c_char_p, sz]),
            "heed_nd_tokens": (i, [P(NdProblem)]),
            "heed_nd_reference": (i, [P(NdProblem), i, vp, vp, vp, vp, P(NdParams), vp]),
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
        raise ValueError("form: an N-d spec (heed.runtime.nd_problem, or heed.Plan, take it)")
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


# ---- N-d problems ---------------------------------------------------------------

def _per_dim(spec, field, n, default):
    v = spec.get(field, default)
    if isinstance(v, int):
        return [v] * n
    if isinstance(v, (list, tuple)) and len(v) == n and all(isinstance(x, int) for x in v):
        return list(v)
    raise ValueError("%s: %r is not an integer or a list of %d" % (field, v, n))


def nd_problem(spec):
    """A heed_nd_problem from an N-d spec's fields (a dict with a `form`, as
    heed.compile takes; `name` is ignored), with the generator's defaults."""
    form = spec.get("form")
    if form not in FORMS:
        raise ValueError("form: %r is not one of %s" % (form, ", ".join(FORMS)))
    p = NdProblem()
    p.form = FORMS.index(form)
    m = spec.get("map")
    if not isinstance(m, (list, tuple)) or not 1 <= len(m) <= ND_MAXDIM or not all(isinstance(x, int) for x in m):
        raise ValueError("map: a list of 1 to 3 integers, not %r" % (m,))
    n = p.ndim = len(m)
    p.map[:n] = list(m)
    p.heads = spec.get("heads", 1)
    p.score = _choice(spec, "score", SCORES, "scaled_dot")
    p.norm = _choice(spec, "norm", NORMS, "softmax")
    p.fuse = _choice(spec, "fuse", FUSES, "mean")
    xform = form in ("patches", "collection")
    if xform:
        p.channels = spec.get("channels", 0)
        if form == "patches":
            p.window[:n] = _per_dim(spec, "window", n, None)
            p.stride[:n] = _per_dim(spec, "stride", n, list(p.window[:n]))
        else:
            p.count = spec.get("count", 0)
            p.window[:n] = p.stride[:n] = list(m)
        for i, f in enumerate(("f_q", "f_k", "f_v")):
            v = spec.get(f, "identity")
            kind, out = (v.get("kind"), v.get("out")) if isinstance(v, dict) else (v, None)
            if kind not in ("identity", "linear"):
                raise ValueError("%s: %r is not identity or linear" % (f, v))
            p.f_out[i] = 0 if kind == "identity" else (out or p.channels)
        g = spec.get("g_v", "fold")
        if g not in ("fold", "flat"):
            raise ValueError("g_v: %r is not fold or flat" % (g,))
        p.fold = int(g == "fold")
        p.mask = _choice(spec, "mask", MASKS, "none")
        mk = spec.get("mask")
        if isinstance(mk, dict):
            p.radius, p.gaussian = mk.get("radius", 0), int(bool(mk.get("gaussian", False)))
        win = 1
        for d in range(n):
            win *= p.window[d]
        heads = max(p.heads, 1)
        p.dk = (p.f_out[0] or p.channels) // heads * win
        p.dv = (p.f_out[2] or p.channels) // heads * win
    else:
        if form == "neighborhood":
            p.kernel[:n] = _per_dim(spec, "kernel", n, None)
            p.dilation[:n] = _per_dim(spec, "dilation", n, 1)
        else:
            p.block, p.halo = spec.get("block", 0), spec.get("halo", 0)
            pad = spec.get("padding", "zero")
            if pad not in ("zero", "clamp"):
                raise ValueError("padding: %r is not zero or clamp" % (pad,))
            p.pad_zero = int(pad == "zero")
        if "dk" not in spec:
            raise ValueError("dk: required")
        p.dk = spec["dk"]
        p.dv = spec.get("dv", p.dk)
        p.heads_kv = spec.get("heads_kv", 0)
    p.da = spec.get("da", p.dk) if SCORES[p.score] == "additive" else 0
    b = spec.get("bias")
    if isinstance(b, dict) and b.get("kind") == "relative":
        p.bias = 1
        nb = 1 if form == "collection" else n
        p.clip[:nb] = _per_dim(b, "clip", nb, None)
    elif b not in (None, "none") and not (isinstance(b, dict) and b.get("kind") == "none"):
        raise ValueError("bias: %r is not none or { kind = relative, clip = k }" % (b,))
    scale = spec.get("scale")
    p.scale = lib().heed_default_scale(p.score, p.dk) if scale is None else float(scale)
    if not math.isfinite(p.scale) or lib().heed_nd_problem_check(ctypes.byref(p)) != 0:
        raise ValueError("spec: not a valid N-d problem")
    return p


def nd_canonical(p):
    buf = ctypes.create_string_buffer(1024)
    lib().heed_nd_problem_canonical(ctypes.byref(p), buf, len(buf))
    return buf.value.decode()


def _nd_xform(p):
    return FORMS[p.form] in ("patches", "collection")


def _nd_shapes(p, batch):
    """The inputs' shapes and out's, as heed.compile's kernels take them."""
    n, L = p.ndim, lib().heed_nd_tokens(ctypes.byref(p))
    m = tuple(p.map[:n])
    if _nd_xform(p):
        x = (batch, p.channels) + m if FORMS[p.form] == "patches" else (batch, p.count, p.channels) + m
        ins = {"x": x}
        cv, win = p.f_out[2] or p.channels, tuple(p.window[:n])
        if p.fold:
            out = (batch, L, cv) + win if FUSES[p.fuse] == "none" else (batch, cv) + win
        else:
            out = (batch, p.heads, L, p.dv) if FUSES[p.fuse] == "none" else (batch, p.heads, p.dv)
    else:
        pw = L
        hkv = p.heads_kv or p.heads
        ins = {"q": (batch, p.heads, pw, p.dk), "k": (batch, hkv, pw, p.dk), "v": (batch, hkv, pw, p.dv)}
        out = (batch, p.heads, pw, p.dv) if FUSES[p.fuse] == "none" else (batch, p.heads, p.dv)
    return ins, out


def _nd_weights(p, params):
    L = lib().heed_nd_tokens(ctypes.byref(p))
    need = dict({"general": {"w": (p.heads, p.dk, p.dk)},
                 "additive": {"w_q": (p.heads, p.da, p.dk), "w_k": (p.heads, p.da, p.dk), "v_a": (p.heads, p.da)},
                 "location": {"w": (p.heads, L, p.dk)}}.get(SCORES[p.score], {}))
    if _nd_xform(p):
        for i, f in enumerate(("f_q", "f_k", "f_v")):
            if p.f_out[i]:
                need[f] = (p.f_out[i], p.channels)
    nb = (1 if FORMS[p.form] == "collection" else p.ndim) if p.bias else 0
    params = params or {}
    unknown = set(params) - set(need) - ({"bias"} if nb else set())
    if unknown:
        raise ValueError("params: unknown weight(s) %s (this problem takes: %s)"
                         % (", ".join(sorted(unknown)), ", ".join(list(need) + (["bias"] if nb else [])) or "none"))
    w = NdParams()
    keep = []
    for f, shape in need.items():
        if f not in params:
            raise ValueError("params['%s']: missing" % f)
        a = _array(params[f], "params['%s']" % f, shape)
        keep.append(a)
        setattr(w, f, a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    if nb:
        tables = params.get("bias")
        if not isinstance(tables, (list, tuple)) or len(tables) != nb:
            raise ValueError("params['bias']: a list of %d arrays [heads][2*clip+1]" % nb)
        for d in range(nb):
            a = _array(tables[d], "params['bias'][%d]" % d, (p.heads, 2 * p.clip[d] + 1))
            keep.append(a)
            w.bias[d] = a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    return w


def _nd_inputs(p, arrays):
    names = ["x"] if _nd_xform(p) else ["q", "k", "v"]
    if len(arrays) != len(names):
        raise ValueError("inputs: this form takes %s" % ", ".join(names))
    first = arrays[0]
    if not isinstance(first, np.ndarray) or first.ndim < 1:
        raise ValueError("%s: a numpy array with batch first" % names[0])
    batch = first.shape[0]
    shapes, out = _nd_shapes(p, batch)
    ptrs = {nm: _array(a, nm, shapes[nm]).ctypes.data for nm, a in zip(names, arrays)}
    return batch, [ptrs.get(nm) for nm in ("x", "q", "k", "v")], out


def nd_reference(spec, *arrays, params=None):
    """libheed's double-precision reference of an N-d spec (dict) or
    NdProblem: nd_reference(spec, x) for the X forms, (spec, q, k, v) for
    neighborhood and halo; a new float64 array of out's layout."""
    p = spec if isinstance(spec, NdProblem) else nd_problem(spec)
    batch, ptrs, out_shape = _nd_inputs(p, arrays)
    w = _nd_weights(p, params)
    out = np.empty(out_shape, dtype=np.float64)
    rc = lib().heed_nd_reference(ctypes.byref(p), batch, *ptrs, ctypes.byref(w), out.ctypes.data)
    if rc != 0:
        raise HeedError("heed_nd_reference", rc)
    return out



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
    """A libheed plan: Plan(spec_dict, flags=ESTIMATE), for a token spec or
    an N-d one (a dict with a `form`).

    plan(q, k, v, params=None) runs a token plan, plan(x, params=None) an
    N-d plan of the X forms (patches, collection) and plan(q, k, v,
    params=None) one of neighborhood or halo (the layouts of heed.compile's
    kernels; N-d params: w, w_q, w_k, v_a, f_q, f_k, f_v and bias, a list of
    one table per grid dimension); each returns a new float32 array.
    describe() says which kernel was chosen and why. Plans are reentrant
    (numpy arrays of several threads may run through one plan at once)."""

    def __init__(self, spec, flags=ESTIMATE):
        st = Status()
        self.nd = isinstance(spec, NdProblem) or (isinstance(spec, dict) and "form" in spec)
        if self.nd:
            self.problem = spec if isinstance(spec, NdProblem) else nd_problem(spec)
            self._plan = lib().heed_nd_plan_create(ctypes.byref(self.problem), flags, ctypes.byref(st))
        else:
            self.problem = spec if isinstance(spec, Problem) else problem(spec)
            self._plan = lib().heed_plan_create(ctypes.byref(self.problem), flags, ctypes.byref(st))
        if not self._plan:
            raise HeedError("heed_plan_create", st.code, st.message.decode(errors="replace"))
        self.fallback = st.fallback
        self.message = st.message.decode(errors="replace")

    def __call__(self, *arrays, params=None):
        if not self._plan:
            raise ValueError("plan: destroyed")
        if self.nd:
            batch, ptrs, out_shape = _nd_inputs(self.problem, arrays)
            w = _nd_weights(self.problem, params)
            out = np.empty(out_shape, dtype=np.float32)
            if out.size == 0:
                return out
            rc = lib().heed_nd_execute(self._plan, batch, *ptrs, out.ctypes.data, ctypes.byref(w))
            if rc != 0:
                raise HeedError("heed_nd_execute", rc)
            return out
        if len(arrays) == 4 and params is None:     # plan(q, k, v, params)
            arrays, params = arrays[:3], arrays[3]
        if len(arrays) != 3:
            raise ValueError("inputs: a token plan takes q, k, v")
        q, k, v = arrays
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
