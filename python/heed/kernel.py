"""heed.compile: a spec -> a generated kernel, compiled and loaded with ctypes.

The kernel's arguments (their order, element types and shapes) and its
run-time weights are read from the generated NAME.h: its signature, the
"Arguments" block of its comment and the NAME_params struct.
"""

import ctypes
import hashlib
import math
import numbers
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import warnings

import numpy as np

from . import _paths

CFLAGS = ["-std=c11", "-O2", "-march=native", "-fopenmp", "-fPIC", "-shared"]

# element types of the generated C
_CTYPES = {"float": (np.float32, ctypes.c_float), "uint16_t": (np.uint16, ctypes.c_uint16)}

_ERRORS = {-1: "a required pointer is NULL", -2: "batch < 0", -3: "scratch memory could not be allocated",
           -5: "a weight is missing", -17: "out overlaps an input"}


class KernelError(RuntimeError):
    """A kernel returned a negative HEED_KERNEL_* code."""

    def __init__(self, name, code):
        super().__init__("%s returned %d (%s)" % (name, code, _ERRORS.get(code, "unknown code")))
        self.code = code


# ---- spec dict -> Lua -------------------------------------------------------------

def _lua_string(s):
    out = ['"']
    for b in s.encode("utf-8"):
        c = chr(b)
        out.append(c if 32 <= b < 127 and c not in '"\\' else "\\%03d" % b)
    out.append('"')
    return "".join(out)


def _lua_value(v, where):
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, numbers.Integral):            # int, numpy integers
        return str(int(v))
    if isinstance(v, numbers.Real):                # float, numpy floats
        v = float(v)
        if not math.isfinite(v):
            raise ValueError("spec field %s: %r is not a finite number" % (where, v))
        return repr(v)
    if isinstance(v, str):
        return _lua_string(v)
    if isinstance(v, (list, tuple)):
        return "{ " + ", ".join(_lua_value(x, "%s[%d]" % (where, i + 1)) for i, x in enumerate(v)) + " }"
    if isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise ValueError("%s: key %r is not a string" % ("spec field " + where if where else "spec", k))
        items = []
        for k in sorted(v):
            items.append("[%s] = %s" % (_lua_string(k), _lua_value(v[k], "%s.%s" % (where, k) if where else k)))
        return "{ " + ", ".join(items) + " }"
    raise ValueError("spec field %s: %r (%s) is not a number, string, boolean, list or dict"
                     % (where, v, type(v).__name__))


def spec_to_lua(spec):
    """The text of a Lua spec file for a dict (every string quoted, any byte
    escaped): `return { ["name"] = "x", ... }`."""
    if not isinstance(spec, dict):
        raise ValueError("spec: a dict or a path, not %s" % type(spec).__name__)
    return "return " + _lua_value(spec, "") + "\n"


# ---- NAME.h -----------------------------------------------------------------------

def _dims(text, known, where):
    dims = []
    for tok in re.findall(r"\[(\w+)\]", text):
        if tok.isdigit():
            dims.append(int(tok))
        elif tok == "batch":
            dims.append(None)
        elif tok in known:
            dims.append(int(known[tok]))
        else:
            raise RuntimeError("heed: cannot read the shape %s of %s in the generated header" % (text, where))
    return dims


def parse_header(text, name):
    """The kernel's interface from its header: args [(name, dtype, ctype,
    dims, is_out, may_be_null)], params [(field, count, dims, dtype)] or
    None, the canonical text."""
    m = re.search(r"canonical:\s*(\S+)", text)
    canonical = m.group(1) if m else ""
    known = dict(kv.split("=", 1) for kv in canonical.split(";")[1:] if "=" in kv)
    m = re.search(r"\bint %s\(([^)]*)\);" % re.escape(name), text)
    if not m:
        raise RuntimeError("heed: no declaration of %s in its header" % name)
    shapes, nullable = {}, set()
    block = text[text.index("Arguments,"):]
    for line in block.splitlines()[1:]:
        a = re.match(r"\s*\*\s+(\w+)\s+((?:\[\w+\])+)(.*)", line)
        if not a:
            if re.match(r"\s*\*\s+Returns", line):
                break
            continue
        shapes[a.group(1)] = a.group(2)
        if "NULL" in a.group(3):
            nullable.add(a.group(1))
    args, params = [], None
    for decl in m.group(1).split(","):
        d = re.match(r"\s*(const\s+)?(\w+)\s*\*\s*(\w+)\s*$", decl)
        if not d:
            continue                                   # int batch
        ctype, arg = d.group(2), d.group(3)
        if ctype == "%s_params" % name:
            params = []
            continue
        if ctype not in _CTYPES:
            raise RuntimeError("heed: argument %s of %s has type %s, unknown here" % (arg, name, ctype))
        args.append((arg, _CTYPES[ctype][0], _CTYPES[ctype][1], _dims(shapes[arg], known, arg),
                     d.group(1) is None, arg in nullable))
    if params is not None:
        s = re.search(r"typedef struct %s_params \{(.*?)\} %s_params;" % (re.escape(name), re.escape(name)),
                      text, re.S)
        for f in re.finditer(r"const (\w+) \*(\w+)(?:\[(\d+)\])?; /\* (.*?): ", s.group(1)):
            count = int(f.group(3)) if f.group(3) else None
            shp = [_dims(x, known, f.group(2)) for x in f.group(4).split(", ")]
            params.append((f.group(2), count, shp, _CTYPES[f.group(1)]))
    return args, params, canonical


# ---- compile ----------------------------------------------------------------------

def _run_heed(argv):
    r = subprocess.run([_paths.heed_command()] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode == 2:
        raise ValueError(r.stderr.strip() or "heed %s: exit 2" % " ".join(argv))
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or "heed %s: exit %d" % (" ".join(argv), r.returncode))
    return r.stdout


def cc_command():
    """$CC (default cc) split into words as the heed CLI's shell splits it:
    CC="gcc -O0" is gcc with -O0."""
    try:
        cc = shlex.split(os.environ.get("CC") or "cc")
    except ValueError as e:
        raise ValueError("CC: %r cannot be split into words (%s)" % (os.environ.get("CC"), e))
    return cc or ["cc"]


def _cached(so):
    """True when the cached object so exists and passes libheed's loader
    rule (a file of the cache that does not is rebuilt and replaced)."""
    try:
        st = os.lstat(so)
    except FileNotFoundError:
        return False
    why = _paths.unsafe(st, "file")
    if why:
        warnings.warn("heed: %s %s: not loaded, rebuilt" % (so, why), RuntimeWarning, stacklevel=3)
    return why is None


def _install(part, so):
    """Copies the object part to so through a fresh temporary file in so's
    directory (mkstemp: O_EXCL, mode 0600, never a planted name), replaced
    into place."""
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(so) + ".", suffix=".tmp", dir=os.path.dirname(so))
    try:
        with os.fdopen(fd, "wb") as dst, open(part, "rb") as src:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, so)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def compile(spec, schedule=None, wisdom=None, target=None):
    """Generates the kernel of spec (a spec file's path, or a dict of its
    fields), compiles it into a shared object in the cache (reused while its
    source and the compiler command are the same) and returns a Kernel.
    A cache that libheed's loader would refuse (another owner, group or
    world writable) is not used: the kernel is compiled in a private
    temporary directory, with a RuntimeWarning."""
    cc = cc_command()
    with tempfile.TemporaryDirectory(prefix="heed-") as tmp:
        if isinstance(spec, dict):
            path = os.path.join(tmp, "spec.lua")
            with open(path, "w") as f:
                f.write(spec_to_lua(spec))
        elif isinstance(spec, (str, os.PathLike)):
            path = os.fspath(spec)
            if not os.path.isfile(path):
                raise ValueError("spec: no such file: %s" % path)
        else:
            raise ValueError("spec: a dict or a path, not %s" % type(spec).__name__)
        argv = ["gen", path, "-o", tmp]
        if schedule is not None:
            argv += ["--schedule", schedule]
        if wisdom is not None:
            argv += ["--wisdom", os.fspath(wisdom)]
        if target is not None:
            argv += ["--target", target]
        name = _run_heed(["gen", path, "--print-name"]).strip()
        _run_heed(argv)
        with open(os.path.join(tmp, name + ".c"), "rb") as f:
            csrc = f.read()
        with open(os.path.join(tmp, name + ".h"), "rb") as f:
            hsrc = f.read()
        key = hashlib.sha256(csrc + b"\0" + hsrc + b"\0" + shlex.join(cc + CFLAGS).encode()).hexdigest()[:16]
        try:
            so = os.path.join(_paths.cache_dir(), "%s-%s.so" % (name, key))
        except _paths.UnsafeCache as e:
            warnings.warn("%s: compiling %s in a private temporary directory" % (e, name), RuntimeWarning,
                          stacklevel=2)
            so = None
        if so is not None and _cached(so):
            return Kernel(name, so, hsrc.decode("utf-8"))
        part = os.path.join(tmp, "k.so")
        try:
            r = subprocess.run(cc + CFLAGS + ["-I" + tmp, os.path.join(tmp, name + ".c"), "-o", part, "-lm"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        except OSError as e:
            raise RuntimeError("heed: cannot run the C compiler %s (CC): %s" % (shlex.join(cc), e))
        if r.returncode != 0:
            raise RuntimeError("heed: %s failed on %s.c:\n%s" % (shlex.join(cc), name, r.stdout))
        if so is None:
            return Kernel(name, part, hsrc.decode("utf-8"))       # loaded before tmp goes
        _install(part, so)
        return Kernel(name, so, hsrc.decode("utf-8"))


class Kernel:
    """A compiled kernel: kernel(*inputs, params=None) -> a new numpy array
    (a tuple (out, lse) for a spec with lse = true).

    Inputs are C-contiguous numpy arrays in the order of the C signature (q,
    k, v for token specs and the q/k/v N-d forms, x for the X forms), of the
    element type the spec names, with the shapes of NAME.h (batch first).
    params maps each weight of NAME_params to an array (a list of arrays for
    a field that is an array of pointers)."""

    def __init__(self, name, so_path, header):
        self.name, self.path, self.header = name, so_path, header
        args, self._params, self.canonical = parse_header(header, name)
        self.inputs = [a for a in args if not a[4]]
        self._outs = [a for a in args if a[4]]              # out, and lse for lse specs
        self._out = self._outs[0]
        self._lib = ctypes.CDLL(so_path)
        fn = getattr(self._lib, name)
        argtypes = [ctypes.c_int] + [ctypes.c_void_p] * len(args)
        self._struct = None
        if self._params is not None:
            fields = []
            for field, count, _, (_, ct) in self._params:
                p = ctypes.POINTER(ct)
                fields.append((field, p * count if count else p))
            self._struct = type(name + "_params", (ctypes.Structure,), {"_fields_": fields})
            argtypes.append(ctypes.POINTER(self._struct))
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        self._fn = fn
        self.input_names = [a[0] for a in self.inputs]
        self.param_names = [p[0] for p in self._params or []]
        self.output_names = [a[0] for a in self._outs]

    def __repr__(self):
        return "<heed kernel %s(%s) %s>" % (self.name, ", ".join(self.input_names), self.canonical)

    def out_shape(self, batch):
        return tuple(batch if d is None else d for d in self._out[3])

    @staticmethod
    def _check(arr, what, dtype, dims, batch):
        if not isinstance(arr, np.ndarray):
            raise ValueError("%s: a numpy array, not %s" % (what, type(arr).__name__))
        if arr.dtype != dtype:
            raise ValueError("%s: dtype %s, expected %s" % (what, arr.dtype, np.dtype(dtype)))
        want = tuple(batch if d is None else d for d in dims)
        if arr.shape != want:
            raise ValueError("%s: shape %s, expected %s" % (what, arr.shape, want))
        if not arr.flags["C_CONTIGUOUS"]:
            raise ValueError("%s: not C-contiguous (use numpy.ascontiguousarray)" % what)
        return arr.ctypes.data

    def __call__(self, *inputs, params=None):
        if len(inputs) != len(self.inputs):
            raise ValueError("%s takes %d arrays (%s), got %d" % (self.name, len(self.inputs),
                                                                  ", ".join(self.input_names), len(inputs)))
        first = next((a for a in inputs if a is not None), None)
        if not isinstance(first, np.ndarray) or first.ndim < 1:
            raise ValueError("%s: a numpy array, not %s" % (self.input_names[0], type(first).__name__))
        batch = first.shape[0]
        ptrs = []
        for arr, (nm, dtype, _, dims, _, nullable) in zip(inputs, self.inputs):
            if arr is None and nullable:
                ptrs.append(None)
            else:
                ptrs.append(self._check(arr, nm, dtype, dims, batch))
        outs = [np.empty(tuple(batch if d is None else d for d in a[3]), dtype=a[1]) for a in self._outs]
        ptrs += [o.ctypes.data if o.size else None for o in outs]
        call = [batch] + ptrs
        if self._struct is not None:
            call.append(ctypes.byref(self._weights(params)))
        elif params:
            raise ValueError("params: %s takes no weights" % self.name)
        result = outs[0] if len(outs) == 1 else tuple(outs)     # (out, lse) for lse specs
        if outs[0].size == 0:
            return result
        rc = self._fn(*call)
        if rc != 0:
            raise KernelError(self.name, rc)
        return result

    def _weights(self, params):
        if not isinstance(params, dict):
            raise ValueError("params: a dict of the weights %s" % ", ".join(self.param_names))
        unknown = set(params) - set(self.param_names)
        if unknown:
            raise ValueError("params: unknown weight(s) %s (allowed: %s)"
                             % (", ".join(sorted(unknown)), ", ".join(self.param_names)))
        s = self._struct()
        for field, count, shapes, (dtype, ct) in self._params:
            if field not in params:
                raise ValueError("params['%s']: missing" % field)
            val = params[field]
            if count:
                if not isinstance(val, (list, tuple)) or len(val) != count:
                    raise ValueError("params['%s']: a list of %d arrays" % (field, count))
                arr = getattr(s, field)
                for i in range(count):
                    self._check(val[i], "params['%s'][%d]" % (field, i), dtype, shapes[i], None)
                    arr[i] = val[i].ctypes.data_as(ctypes.POINTER(ct))
            else:
                self._check(val, "params['%s']" % field, dtype, shapes[0], None)
                setattr(s, field, val.ctypes.data_as(ctypes.POINTER(ct)))
        s._keep = params          # the arrays outlive the call
        return s
