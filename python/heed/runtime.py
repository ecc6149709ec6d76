"""heed.Plan and heed.reference over libheed (heed.h) with ctypes.

The structs and enums of heed.h are mirrored here, and only here
(tests/python/test_heed.py checks their sizes and offsets against a C
program that includes heed.h).
"""

import contextlib
import ctypes
import math
import numbers
import threading

import numpy as np

from . import _paths

# ---- the mirror of heed.h ----------------------------------------------------------

SCORES = ["dot", "scaled_dot", "general", "additive", "cosine", "location"]   # heed_score
NORMS = ["softmax", "sigmoid", "relu", "none"]                                 # heed_norm
FUSES = ["none", "mean", "sum", "max"]                                         # heed_fuse
MASKS = ["none", "causal", "local"]                                            # heed_mask
SOURCES = ["none", "tuned", "registry", "generic"]                             # heed_source
FORMS = ["tokens", "patches", "collection", "neighborhood", "halo"]            # heed_form
ND_FORMS = FORMS[1:]                                                           # the N-d forms
ND_MAXDIM = 3                                                                  # HEED_MAXDIM
DTYPES = ["f32", "bf16", "f16"]                                                # heed_dtype

ESTIMATE, MEASURE, WISDOM_ONLY, NO_WISDOM, NO_REGISTRY = 1, 2, 4, 8, 16        # plan flags
EEXPR = -20                                                                    # HEED_EEXPR


class Tensor(ctypes.Structure):
    """struct heed_tensor: a run-time tensor of mask_mod / score_mod"""
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int * 4), ("data", ctypes.c_void_p)]


TENSOR_DTYPES = {"i32": np.int32, "f32": np.float32}     # heed_tensor_dtype 0, 1


class Problem(ctypes.Structure):
    """struct heed_problem: a token problem (form 0) or an N-d one"""
    _A = ctypes.c_int * ND_MAXDIM
    _fields_ = [("heads", ctypes.c_int), ("lq", ctypes.c_int), ("lk", ctypes.c_int), ("dk", ctypes.c_int),
                ("dv", ctypes.c_int), ("da", ctypes.c_int), ("score", ctypes.c_int), ("norm", ctypes.c_int),
                ("fuse", ctypes.c_int), ("mask", ctypes.c_int), ("radius", ctypes.c_int),
                ("gaussian", ctypes.c_int), ("scale", ctypes.c_double),
                ("dtype", ctypes.c_int), ("out_dtype", ctypes.c_int),      # heed_dtype: 0 = f32
                ("heads_kv", ctypes.c_int),                                     # 0: heads
                ("lse", ctypes.c_int)] \
        + [("form", ctypes.c_int), ("ndim", ctypes.c_int), ("map", _A), ("channels", ctypes.c_int),  # N-d forms
           ("count", ctypes.c_int), ("window", _A), ("stride", _A), ("f_out", ctypes.c_int * 3),
           ("fold", ctypes.c_int), ("kernel", _A), ("dilation", _A), ("block", ctypes.c_int),
           ("halo", ctypes.c_int), ("pad_zero", ctypes.c_int), ("bias", ctypes.c_int), ("clip", _A),
           ("block_dims", _A), ("shift", _A),                                       # halo: per-dimension block, Swin's shift
           ("causal", _A)] \
        + [("backward", ctypes.c_int)] \
        + [("mask_mod", ctypes.c_char_p), ("score_mod", ctypes.c_char_p)] \
        + [("ntensors", ctypes.c_int), ("tensors", ctypes.POINTER(Tensor))]       # expressions (docs/masks.md), None: none


class Params(ctypes.Structure):
    """struct heed_params (f_q, f_k, f_v, bias: the N-d forms')"""
    _fields_ = [(f, ctypes.POINTER(ctypes.c_float)) for f in ("w", "w_q", "w_k", "v_a", "f_q", "f_k", "f_v")] \
        + [("bias", ctypes.POINTER(ctypes.c_float) * ND_MAXDIM)] \
        + [("ntensors", ctypes.c_int), ("tensors", ctypes.POINTER(Tensor))]


# Deprecated names (one release): an N-d problem is a Problem with its form.
NdProblem, NdParams = Problem, Params


def _is_nd(p):
    return isinstance(p, Problem) and p.form != 0


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
            "heed_execute_typed": (i, [vp, i, vp, vp, vp, vp, P(Params)]),
            "heed_execute_lse": (i, [vp, i, vp, vp, vp, vp, vp, P(Params)]),
            "heed_plan_destroy": (None, [vp]),
            "heed_plan_describe": (ctypes.c_char_p, [vp]),
            "heed_plan_source": (i, [vp]),
            "heed_strerror": (ctypes.c_char_p, [i]),
            "heed_default_scale": (ctypes.c_double, [i, i]),
            "heed_problem_check": (i, [P(Problem)]),
            "heed_out_elems": (sz, [P(Problem), i]),
            "heed_reference": (i, [P(Problem), i, vp, vp, vp, P(Params), vp]),
            "heed_problem_canonical": (i, [P(Problem), ctypes.c_char_p, sz]),
            "heed_tokens": (i, [P(Problem)]),
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


# ---- spec fields, checked as the generator checks them (gen/spec.lua, gen/nd.lua) ---

MAX_DIM = 1048576                     # any one size
TOKEN_FIELDS = ("name", "heads", "heads_kv", "lq", "lk", "dk", "dv", "da", "score", "scale", "norm", "fuse", "mask",
                "lse", "dtype", "out_dtype", "backward", "mask_mod", "score_mod", "tensors")
_ND_COMMON = ("score", "da", "scale", "norm", "fuse")
ND_FIELDS = {
    "patches": ("name", "form", "heads", "channels", "map", "window", "stride", "f_q", "f_k", "f_v", "g_v")
    + _ND_COMMON + ("mask", "bias", "dtype", "out_dtype"),
    "collection": ("name", "form", "heads", "channels", "map", "count", "f_q", "f_k", "f_v", "g_v")
    + _ND_COMMON + ("mask", "bias", "dtype", "out_dtype"),
    "neighborhood": ("name", "form", "heads", "map", "kernel", "dilation", "stride", "causal", "dk", "dv")
    + _ND_COMMON + ("bias", "dtype", "out_dtype", "heads_kv"),
    "halo": ("name", "form", "heads", "map", "block", "halo", "padding", "shift", "dk", "dv")
    + _ND_COMMON + ("bias", "dtype", "out_dtype", "heads_kv"),
}
# the fields of a choice given as a table { kind = ..., ... }, by kind
CHOICE_FIELDS = {"mask": {"local": ("radius", "gaussian")}, "bias": {"relative": ("clip",), "relative_joint": ("clip",)},
                 "f_q": {"linear": ("out",)}, "f_k": {"linear": ("out",)}, "f_v": {"linear": ("out",)}}


def _fields(d, allowed, where, prefix=""):
    """d is a dict whose keys are strings in allowed, else ValueError naming
    the first unknown key and the allowed ones."""
    if not isinstance(d, dict):
        raise ValueError("%s: a dict of fields, not %s" % (where, type(d).__name__))
    for k in d:
        if not isinstance(k, str):
            raise ValueError("%s: key %r is not a string (allowed: %s)" % (where, k, ", ".join(allowed)))
    unknown = sorted(k for k in d if k not in allowed)
    if unknown:
        raise ValueError("%s: unknown field %r (allowed: %s)" % (where, prefix + unknown[0], ", ".join(allowed)))


def _int(v, field, lo=1, hi=MAX_DIM):
    """An integer lo..hi (int, numpy integer, or a float with an integer
    value), checked before it reaches a C int."""
    if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)):
        n = int(v)
    elif isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and math.isfinite(v) \
            and float(v).is_integer():
        n = int(v)
    else:
        raise ValueError("%s: %r is not an integer (allowed: integer %d..%d)" % (field, v, lo, hi))
    if not lo <= n <= hi:
        raise ValueError("%s: %r is out of range (allowed: integer %d..%d)" % (field, v, lo, hi))
    return n


def _size(spec, field, default=None, lo=1):
    """spec[field] (default when absent): an integer lo..MAX_DIM."""
    if field not in spec and default is None:
        raise ValueError("%s: required" % field)
    return _int(spec.get(field, default), field, lo)


def _bool(v, field):
    if not isinstance(v, (bool, np.bool_)):
        raise ValueError("%s: %r is not allowed (allowed: true, false)" % (field, v))
    return bool(v)


def _choice(spec, field, values, default, table=True):
    """The index in values of a choice: a string, or (table) a dict {"kind":
    ..., the kind's fields (CHOICE_FIELDS)}."""
    v = spec.get(field, default)
    kind = v.get("kind") if table and isinstance(v, dict) else v
    if not isinstance(kind, str) or kind not in values:
        raise ValueError("%s: %r is not one of %s" % (field, kind, ", ".join(values)))
    if isinstance(v, dict):
        _fields(v, ("kind",) + CHOICE_FIELDS.get(field, {}).get(kind, ()), "%s = %r" % (field, kind), field + ".")
    return values.index(kind)


def _scale(spec, score, dk):
    v = spec.get("scale")
    if v is None:
        return lib().heed_default_scale(score, dk)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or not math.isfinite(v):
        raise ValueError("scale: %r is not allowed (allowed: a finite number with 1e-30 <= |scale| <= 1e+30)" % (v,))
    return float(v)


def _local_mask(p, spec):
    if MASKS[p.mask] != "local":
        return
    m = spec["mask"] if isinstance(spec["mask"], dict) else {}
    if "radius" not in m:
        raise ValueError("mask.radius: required for mask = local (allowed: integer 0..%d)" % MAX_DIM)
    p.radius = _int(m["radius"], "mask.radius", 0)
    p.gaussian = int(_bool(m.get("gaussian", False), "mask.gaussian"))


def _da(p, spec):
    if SCORES[p.score] == "additive":
        p.da = _size(spec, "da", p.dk)
    elif "da" in spec:
        raise ValueError("da: only applies to score = additive (score is %s)" % SCORES[p.score])


# ---- problems ---------------------------------------------------------------------


def problem(spec):
    """A heed_problem from a token spec's fields (a dict as heed.compile takes;
    `name` is ignored), with the generator's defaults."""
    if isinstance(spec, dict) and "form" in spec:
        raise ValueError("form: an N-d spec (heed.runtime.nd_problem, or heed.Plan, take it)")
    _fields(spec, TOKEN_FIELDS, "spec")
    p = Problem()
    p.heads, p.lq, p.dk = _size(spec, "heads", 1), _size(spec, "lq"), _size(spec, "dk")
    p.lk, p.dv = _size(spec, "lk", p.lq), _size(spec, "dv", p.dk)
    p.heads_kv = _size(spec, "heads_kv") if "heads_kv" in spec else 0
    p.score = _choice(spec, "score", SCORES, "scaled_dot")
    p.norm = _choice(spec, "norm", NORMS, "softmax")
    p.fuse = _choice(spec, "fuse", FUSES, "mean")
    p.mask = _choice(spec, "mask", MASKS, "none")
    _da(p, spec)
    _local_mask(p, spec)
    p.dtype = _choice(spec, "dtype", DTYPES, "f32", table=False)
    p.out_dtype = _choice(spec, "out_dtype", DTYPES, "f32", table=False)
    p.lse = int(_bool(spec.get("lse", False), "lse"))
    p.backward = int(_bool(spec.get("backward", False), "backward"))
    p.scale = _scale(spec, p.score, p.dk)
    _tensors(p, spec)
    for f in ("mask_mod", "score_mod"):
        _mod(p, spec, f)
    rc = lib().heed_problem_check(ctypes.byref(p))
    if rc == EEXPR:
        # heed_plan_create's message says where and what (it refuses before planning)
        st = Status()
        lib().heed_plan_create(ctypes.byref(p), NO_WISDOM | NO_REGISTRY, ctypes.byref(st))
        raise ValueError("spec: %s" % st.message.decode(errors="replace").replace("heed_plan_create: ", ""))
    if rc != 0:
        raise ValueError("spec: not a valid problem (%s)" % canonical(p))
    return p


def _tensors(p, spec):
    """tensors: the run-time tensors' declarations (docs/masks.md), a dict
    NAME -> {dtype, shape[, fill]} (taken sorted by name, as the generator
    does) or a list of {name, dtype, shape[, fill]}; a dim is an int or one of
    lq lk heads heads_kv dk dv. libheed checks the names."""
    v = spec.get("tensors")
    if v is None:
        return
    if isinstance(v, dict):
        decls = []
        for nm in sorted(v):
            if not isinstance(v[nm], dict) or "name" in v[nm]:
                raise ValueError("tensors.%s: a dict {dtype, shape} (in a dict the key is the name)" % nm)
            decls.append(dict(v[nm], name=nm))
    elif isinstance(v, (list, tuple)) and all(isinstance(d, dict) for d in v):
        decls = list(v)
    else:
        raise ValueError("tensors: %r is not allowed (allowed: {NAME: {dtype, shape}, ...} or a list of "
                         "{name, dtype, shape})" % (v,))
    if not 1 <= len(decls) <= 16:
        raise ValueError("tensors: %d declared (allowed: 1 to 16)" % len(decls))
    consts = {"lq": p.lq, "lk": p.lk, "heads": p.heads, "heads_kv": p.heads_kv or p.heads, "dk": p.dk, "dv": p.dv}
    arr = (Tensor * len(decls))()
    for t, d in zip(arr, decls):
        nm = d.get("name")
        unknown = set(d) - {"name", "dtype", "shape", "fill"}
        if unknown:
            raise ValueError("tensors.%s: unknown field(s) %s (allowed: dtype, shape, fill)" % (nm, ", ".join(sorted(unknown))))
        if not isinstance(nm, str):
            raise ValueError("tensors: %r is not a tensor name" % (nm,))
        if d.get("dtype") not in TENSOR_DTYPES:
            raise ValueError("tensors.%s: dtype = %r is not allowed (allowed: \"i32\", \"f32\")" % (nm, d.get("dtype")))
        shape = d.get("shape")
        if not isinstance(shape, (list, tuple)) or not 1 <= len(shape) <= 4:
            raise ValueError("tensors.%s: shape must be a list of 1 to 4 sizes (integers or the constants "
                             "lq, lk, heads, heads_kv, dk, dv)" % nm)
        t.name, t.dtype, t.ndim = nm.encode(), list(TENSOR_DTYPES).index(d["dtype"]), len(shape)
        for j, x in enumerate(shape):
            t.shape[j] = consts[x] if x in consts else _int(x, "tensors.%s.shape[%d]" % (nm, j + 1))
    p.ntensors, p.tensors, p._tensors = len(decls), arr, arr     # (p keeps the array)


def tensor_shapes(p):
    """name -> (numpy dtype, shape) of p's run-time tensors, in declaration order."""
    return {p.tensors[i].name.decode(): (TENSOR_DTYPES[("i32", "f32")[p.tensors[i].dtype]],
                                         tuple(p.tensors[i].shape[:p.tensors[i].ndim])) for i in range(p.ntensors)}


def _tensor_args(p, params, tensors):
    """heed_params of the weights params and the arrays tensors (name -> numpy
    array; or in params under their names, as heed.compile's kernels take
    them), checked against p's declarations (dtype, shape: ValueError naming
    the tensor)."""
    decl = tensor_shapes(p)
    params, tensors = dict(params or {}), dict(tensors or {})
    for nm in decl:
        if nm in params:
            tensors[nm] = params.pop(nm)
    w = _weights(p, params)
    unknown = set(tensors) - set(decl)
    if unknown:
        raise ValueError("tensors: unknown tensor(s) %s (declared: %s)"
                         % (", ".join(sorted(unknown)), ", ".join(decl) or "none"))
    if not decl:
        return w
    arr = (Tensor * len(decl))()
    for i, (nm, (dt, shape)) in enumerate(decl.items()):
        if nm not in tensors:
            raise ValueError("tensors['%s']: missing" % nm)
        a = _array(tensors[nm], "tensors['%s']" % nm, shape, dt)
        arr[i].name, arr[i].dtype, arr[i].ndim = nm.encode(), p.tensors[i].dtype, len(shape)
        for j, x in enumerate(shape):
            arr[i].shape[j] = x
        arr[i].data = a.ctypes.data
    w.ntensors, w.tensors, w._keep = len(decl), arr, (arr, tensors)      # (the arrays outlive the call)
    return w


def _mod(p, spec, field):
    """mask_mod / score_mod: an expression (docs/masks.md), kept by p as
    bytes; a pattern table is the generator's (heed.compile takes it)."""
    v = spec.get(field)
    if v is None:
        return
    if not isinstance(v, str):
        raise ValueError("%s: %r is not allowed (allowed: an expression string; patterns {kind = NAME, ...} "
                         "are expanded by the generator: heed.compile takes them)" % (field, v))
    setattr(p, field, v.encode())


def canonical(p):
    n = lib().heed_problem_canonical(ctypes.byref(p), None, 0)
    buf = ctypes.create_string_buffer(max(n, 0) + 1)
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


def _storage(dtype):
    """The numpy element type of a heed_dtype: float32, or uint16 bit
    patterns for bf16 and f16 (as heed.compile's kernels take them)."""
    return np.float32 if DTYPES[dtype] == "f32" else np.uint16


def _array(a, what, shape, dtype=np.float32):
    if not isinstance(a, np.ndarray):
        raise ValueError("%s: a numpy array, not %s" % (what, type(a).__name__))
    if a.dtype != dtype:
        raise ValueError("%s: dtype %s, expected %s" % (what, a.dtype, np.dtype(dtype)))
    if a.shape != shape:
        raise ValueError("%s: shape %s, expected %s" % (what, a.shape, shape))
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError("%s: not C-contiguous (use numpy.ascontiguousarray)" % what)
    return a


def _inputs(p, q, k, v, dtype=np.float32, location_k_optional=True):
    if not isinstance(q, np.ndarray) or q.ndim != 4:
        raise ValueError("q: a 4-d numpy array [batch][H][Lq][Dk]")
    batch = q.shape[0]
    shapes, out = _shapes(p, batch)
    ptrs = []
    for nm, a in (("q", q), ("k", k), ("v", v)):
        if a is None and nm == "k" and SCORES[p.score] == "location" and location_k_optional:
            ptrs.append(None)
            continue
        ptrs.append(_array(a, nm, shapes[nm], dtype).ctypes.data)
    return batch, ptrs, out


# ---- N-d problems ---------------------------------------------------------------

def _per_dim(spec, field, n, default, lo=1):
    v = spec.get(field, default)
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise ValueError("%s: %r is not an integer or a list of %d" % (field, v, n))
        return [_int(x, "%s[%d]" % (field, i), lo) for i, x in enumerate(v)]
    if v is None:
        raise ValueError("%s: required (an integer or a list of %d)" % (field, n))
    return [_int(v, field, lo)] * n


def nd_problem(spec):
    """A Problem of an N-d form from an N-d spec's fields (a dict with a `form`, as
    heed.compile takes; `name` is ignored), with the generator's defaults."""
    if not isinstance(spec, dict):
        raise ValueError("spec: a dict of fields, not %s" % type(spec).__name__)
    form = spec.get("form")
    if not isinstance(form, str) or form not in ND_FORMS:
        raise ValueError("form: %r is not one of %s" % (form, ", ".join(ND_FORMS)))
    _fields(spec, ND_FIELDS[form], "spec (form = %s)" % form)
    p = Problem()
    p.form = FORMS.index(form)
    m = spec.get("map")
    if not isinstance(m, (list, tuple)) or not 1 <= len(m) <= ND_MAXDIM:
        raise ValueError("map: a list of 1 to 3 integers, not %r" % (m,))
    n = p.ndim = len(m)
    p.map[:n] = [_int(x, "map[%d]" % i) for i, x in enumerate(m)]
    p.heads = _size(spec, "heads", 1)
    p.score = _choice(spec, "score", SCORES, "scaled_dot")
    p.norm = _choice(spec, "norm", NORMS, "softmax")
    p.fuse = _choice(spec, "fuse", FUSES, "mean")
    xform = form in ("patches", "collection")
    if xform:
        p.channels = _size(spec, "channels")
        if form == "patches":
            p.window[:n] = _per_dim(spec, "window", n, None)
            p.stride[:n] = _per_dim(spec, "stride", n, list(p.window[:n]))
        else:
            p.count = _size(spec, "count")
            p.window[:n] = p.stride[:n] = list(m)
        for i, f in enumerate(("f_q", "f_k", "f_v")):
            linear = _choice(spec, f, ["identity", "linear"], "identity")
            v = spec.get(f)
            out = v.get("out") if isinstance(v, dict) else None
            p.f_out[i] = 0 if not linear else (p.channels if out is None else _int(out, f + ".out"))
        p.fold = int(_choice(spec, "g_v", ["flat", "fold"], "fold", table=False))
        p.mask = _choice(spec, "mask", MASKS, "none")
        _local_mask(p, spec)
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
            p.stride[:n] = _per_dim(spec, "stride", n, 1)    # NATTEN's stride and is_causal (gen/nd.lua)
            c = spec.get("causal", False)
            if isinstance(c, (list, tuple)):
                if len(c) != n:
                    raise ValueError("causal: %r is not true, false or a list of %d booleans" % (c, n))
                p.causal[:n] = [int(_bool(x, "causal[%d]" % i)) for i, x in enumerate(c)]
            else:
                p.causal[:n] = [int(_bool(c, "causal"))] * n
        else:
            blocks = _per_dim(spec, "block", n, None)
            p.block, p.halo = blocks[0], _size(spec, "halo", 0, 0)
            if len(set(blocks)) > 1:
                p.block_dims[:n] = blocks
            p.shift[:n] = _per_dim(spec, "shift", n, 0, 0)
            p.pad_zero = int(_choice(spec, "padding", ["clamp", "zero"], "zero", table=False))
        p.dk = _size(spec, "dk")
        p.dv = _size(spec, "dv", p.dk)
        p.heads_kv = _size(spec, "heads_kv") if "heads_kv" in spec else 0
    _da(p, spec)
    p.bias = _choice(spec, "bias", ["none", "relative"] + (["relative_joint"] if form == "halo" else []), "none")
    if p.bias:
        b = spec["bias"] if isinstance(spec["bias"], dict) else {}
        nb = 1 if form == "collection" else n
        p.clip[:nb] = _per_dim(b, "clip", nb, None, 0)
    p.dtype = _choice(spec, "dtype", DTYPES, "f32", table=False)
    p.out_dtype = _choice(spec, "out_dtype", DTYPES, "f32", table=False)
    p.scale = _scale(spec, p.score, p.dk)
    if lib().heed_problem_check(ctypes.byref(p)) != 0:
        raise ValueError("spec: not a valid N-d problem")
    return p


def nd_canonical(p):
    buf = ctypes.create_string_buffer(1024)
    lib().heed_problem_canonical(ctypes.byref(p), buf, len(buf))
    return buf.value.decode()


def _nd_xform(p):
    return FORMS[p.form] in ("patches", "collection")


def _nd_shapes(p, batch):
    """The inputs' shapes and out's, as heed.compile's kernels take them."""
    n, L = p.ndim, lib().heed_tokens(ctypes.byref(p))
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
    L = lib().heed_tokens(ctypes.byref(p))
    need = dict({"general": {"w": (p.heads, p.dk, p.dk)},
                 "additive": {"w_q": (p.heads, p.da, p.dk), "w_k": (p.heads, p.da, p.dk), "v_a": (p.heads, p.da)},
                 "location": {"w": (p.heads, L, p.dk)}}.get(SCORES[p.score], {}))
    if _nd_xform(p):
        for i, f in enumerate(("f_q", "f_k", "f_v")):
            if p.f_out[i]:
                need[f] = (p.f_out[i], p.channels)
    nb = (1 if FORMS[p.form] == "collection" or p.bias == 2 else p.ndim) if p.bias else 0
    params = params or {}
    unknown = set(params) - set(need) - ({"bias"} if nb else set())
    if unknown:
        raise ValueError("params: unknown weight(s) %s (this problem takes: %s)"
                         % (", ".join(sorted(unknown)), ", ".join(list(need) + (["bias"] if nb else [])) or "none"))
    w = Params()
    keep = []
    for f, shape in need.items():
        if f not in params:
            raise ValueError("params['%s']: missing" % f)
        a = _array(params[f], "params['%s']" % f, shape)
        keep.append(a)
        setattr(w, f, a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    if nb:
        tables = params.get("bias")
        joint = 1
        for d in range(p.ndim):
            joint *= 2 * p.clip[d] + 1
        if p.bias == 2 and isinstance(tables, np.ndarray):
            tables = [tables]
        if not isinstance(tables, (list, tuple)) or len(tables) != nb:
            raise ValueError("params['bias']: %s" % ("the relative_joint table [heads][%d] (or a list of it)" % joint
                             if p.bias == 2 else "a list of %d arrays [heads][2*clip+1]" % nb))
        for d in range(nb):
            a = _array(tables[d], "params['bias'][%d]" % d, (p.heads, joint if p.bias == 2 else 2 * p.clip[d] + 1))
            keep.append(a)
            w.bias[d] = a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    return w


def _nd_inputs(p, arrays, dtype=np.float32):
    names = ["x"] if _nd_xform(p) else ["q", "k", "v"]
    if len(arrays) != len(names):
        raise ValueError("inputs: this form takes %s" % ", ".join(names))
    first = arrays[0]
    if not isinstance(first, np.ndarray) or first.ndim < 1:
        raise ValueError("%s: a numpy array with batch first" % names[0])
    batch = first.shape[0]
    shapes, out = _nd_shapes(p, batch)
    ptrs = {nm: _array(a, nm, shapes[nm], dtype).ctypes.data for nm, a in zip(names, arrays)}
    # the X forms' one input goes where q goes (k, v NULL)
    return batch, [ptrs["x"], None, None] if "x" in ptrs else [ptrs[nm] for nm in ("q", "k", "v")], out


def nd_reference(spec, *arrays, params=None):
    """libheed's double-precision reference of an N-d spec (dict) or
    Problem of an N-d form: nd_reference(spec, x) for the X forms, (spec,
    q, k, v) for neighborhood and halo; a new float64 array of out's layout."""
    p = spec if _is_nd(spec) else nd_problem(spec)
    batch, ptrs, out_shape = _nd_inputs(p, arrays)
    w = _nd_weights(p, params)
    out = np.empty(out_shape, dtype=np.float64)
    rc = lib().heed_reference(ctypes.byref(p), batch, *ptrs, ctypes.byref(w), out.ctypes.data)
    if rc != 0:
        raise HeedError("heed_reference", rc)
    return out



def reference(spec, q, k, v, params=None, tensors=None):
    """libheed's double-precision reference of a token spec (dict) or Problem:
    a new float64 array of out's layout. tensors: name -> numpy array of the
    spec's run-time tensors (int32 or float32, the declared shape)."""
    p = spec if isinstance(spec, Problem) else problem(spec)
    batch, ptrs, out_shape = _inputs(p, q, k, v)
    w = _tensor_args(p, params, tensors)
    out = np.empty(out_shape, dtype=np.float64)
    rc = lib().heed_reference(ctypes.byref(p), batch, *ptrs, ctypes.byref(w), out.ctypes.data)
    if rc != 0:
        raise HeedError("heed_reference", rc)
    return out


class Plan:
    """A libheed plan: Plan(spec_dict, flags=ESTIMATE), for a token spec or
    an N-d one (a dict with a `form`).

    plan(q, k, v, params=None, tensors=None) runs a token plan (tensors:
    name -> numpy array of the spec's run-time tensors, int32 or float32 of
    the declared shape), plan(x, params=None) an
    N-d plan of the X forms (patches, collection) and plan(q, k, v,
    params=None) one of neighborhood or halo (the layouts of heed.compile's
    kernels; N-d params: w, w_q, w_k, v_a, f_q, f_k, f_v and bias, a list of
    one table per grid dimension); each returns a new array of out_dtype
    (float32, or uint16 bit patterns for bf16 and f16), and for a spec with
    lse = true a tuple (out, lse). Inputs are float32, or uint16 bit patterns
    when the spec's dtype is bf16 or f16. describe() says which kernel was
    chosen and why. Plans are reentrant (numpy arrays of several threads may
    run through one plan at once); close() waits for the calls in flight,
    and a call after it raises ValueError."""

    def __init__(self, spec, flags=ESTIMATE):
        self._plan, self._calls, self._cv = None, 0, threading.Condition()
        st = Status()
        self.nd = _is_nd(spec) or (isinstance(spec, dict) and "form" in spec)
        if isinstance(spec, Problem):
            self.problem = spec
        else:
            self.problem = nd_problem(spec) if self.nd else problem(spec)
        plan = lib().heed_plan_create(ctypes.byref(self.problem), flags, ctypes.byref(st))
        if not plan:
            raise HeedError("heed_plan_create", st.code, st.message.decode(errors="replace"))
        self._plan = plan
        self.fallback = st.fallback
        self.message = st.message.decode(errors="replace")

    @contextlib.contextmanager
    def _use(self):
        """The plan handle, counted as in use until the block ends: close()
        waits for it."""
        with self._cv:
            if not self._plan:
                raise ValueError("plan: closed (Plan.close() was called)")
            self._calls += 1
        try:
            yield self._plan
        finally:
            with self._cv:
                self._calls -= 1
                if not self._calls:
                    self._cv.notify_all()

    def __call__(self, *arrays, params=None, tensors=None):
        p = self.problem
        typed = p.dtype or p.out_dtype
        if self.nd:
            batch, ptrs, out_shape = _nd_inputs(p, arrays, _storage(p.dtype))
            w = _nd_weights(p, params)
            out = np.empty(out_shape, dtype=_storage(p.out_dtype))
            run = lib().heed_execute_typed if typed else lib().heed_execute_params
            with self._use() as plan:
                rc = run(plan, batch, *ptrs, out.ctypes.data, ctypes.byref(w)) if out.size else 0
            if rc != 0:
                raise HeedError("heed_execute", rc)
            return out
        if len(arrays) == 4 and params is None:     # plan(q, k, v, params)
            arrays, params = arrays[:3], arrays[3]
        if len(arrays) != 3:
            raise ValueError("inputs: a token plan takes q, k, v")
        q, k, v = arrays
        batch, ptrs, out_shape = _inputs(p, q, k, v, _storage(p.dtype))
        w = _tensor_args(p, params, tensors)
        out = np.empty(out_shape, dtype=_storage(p.out_dtype))
        lse = np.empty((batch, p.heads, p.lq), dtype=np.float32) if p.lse else None
        with self._use() as plan:
            if not out.size:
                rc = 0
            elif p.lse:
                rc = lib().heed_execute_lse(plan, batch, *ptrs, out.ctypes.data, lse.ctypes.data, ctypes.byref(w))
            elif typed:
                rc = lib().heed_execute_typed(plan, batch, *ptrs, out.ctypes.data, ctypes.byref(w))
            else:
                rc = lib().heed_execute_params(plan, batch, *ptrs, out.ctypes.data, ctypes.byref(w))
        if rc != 0:
            raise HeedError("heed_execute", rc)
        return (out, lse) if p.lse else out

    def describe(self):
        with self._use() as plan:
            return lib().heed_plan_describe(plan).decode()

    @property
    def source(self):
        with self._use() as plan:
            return SOURCES[lib().heed_plan_source(plan)]

    def close(self):
        """Destroys the plan once the calls in flight have returned; later
        calls raise ValueError. Closing twice is harmless."""
        with self._cv:
            plan, self._plan = self._plan, None
            while self._calls:
                self._cv.wait()
        if plan:
            lib().heed_plan_destroy(plan)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
