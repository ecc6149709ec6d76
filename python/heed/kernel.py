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
import stat
import subprocess
import tempfile
import warnings

import numpy as np

from . import _paths

# the heed CLI's flags (gen/build.lua: -std=c11 -O3 -march=native -fopenmp), for a shared object
CFLAGS = ["-std=c11", "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared"]

# element types of the generated C
_CTYPES = {"float": (np.float32, ctypes.c_float), "uint16_t": (np.uint16, ctypes.c_uint16),
           "int32_t": (np.int32, ctypes.c_int32)}       # (run-time tensors of mask_mod / score_mod)

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
    m = re.search(r"canonical:[ \t]*([^\n]*\S)", text)     # (expressions hold spaces)
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


def parse_grads(text, name, params):
    """The fields of NAME_grads (what NAME_backward writes the weights'
    gradients into: a subset of NAME_params, the run-time tensors left
    out), as params' entries [(field, count, dims, dtype)]; None when the
    header has no NAME_grads."""
    s = re.search(r"typedef struct %s_grads \{(.*?)\} %s_grads;" % (re.escape(name), re.escape(name)), text, re.S)
    if not s:
        return None
    by_name = {f[0]: f for f in params or []}
    grads = []
    for f in re.finditer(r"float \*(\w+)(?:\[(\d+)\])?;", s.group(1)):
        if f.group(1) not in by_name:
            raise RuntimeError("heed: %s_grads has %s, which %s_params lacks" % (name, f.group(1), name))
        grads.append(by_name[f.group(1)])
    return grads


# ---- compile ----------------------------------------------------------------------

class WisdomMiss(Exception):
    """heed gen --wisdom --strict found no usable record (exit 3)."""


def _run_heed(argv, path, shown):
    """Runs heed with argv; its messages name the spec file path as shown
    (a dict's temporary file is "spec dict")."""
    r = subprocess.run([_paths.heed_command()] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode == 3 and "--strict" in argv:
        raise WisdomMiss(r.stderr.strip().replace(path, shown))
    if r.returncode != 0:
        msg = (r.stderr.strip() or "heed %s: exit %d" % (" ".join(argv), r.returncode)).replace(path, shown)
        raise (ValueError if r.returncode == 2 else RuntimeError)(msg)
    return r.stdout


def cc_command():
    """$CC (default cc) split into words as the heed CLI's shell splits it:
    CC="gcc -O0" is gcc with -O0."""
    try:
        cc = shlex.split(os.environ.get("CC") or "cc")
    except ValueError as e:
        raise ValueError("CC: %r cannot be split into words (%s)" % (os.environ.get("CC"), e))
    return cc or ["cc"]


def build_command(cc, source, output, include):
    """The compiler command that makes the shared object output of the
    generated source: cc + CFLAGS (-O3, as the heed CLI)."""
    return cc + CFLAGS + ["-I" + include, source, "-o", output, "-lm"]


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
        return False
    try:
        os.utime(so, follow_symlinks=False)    # last used: cache_clean removes the oldest first
    except OSError:
        pass
    return True


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


def _wisdom_argv(wisdom, threads, tmp, required):
    """heed gen's options for the schedule wisdom records (--wisdom of a
    private copy of the file, read under libheed's loader rule, --strict,
    --threads), and what the kernel's schedule_source says when they are
    not used. A missing or refused file is an error when required (the
    caller named it), else the default schedule (a refused one with a
    RuntimeWarning)."""
    path = os.fspath(wisdom)
    try:
        text = _paths.read_wisdom(path)
    except FileNotFoundError:
        if required:
            raise ValueError("wisdom: no such file: %s" % path)
        return [], "default schedule (no wisdom file %s)" % path
    except (_paths.UnsafeCache, OSError) as e:         # (OSError: unreadable, a directory, ...)
        if required:
            raise ValueError("wisdom: %s" % e)
        warnings.warn("%s; the default schedule" % e, RuntimeWarning, stacklevel=4)
        return [], "default schedule (%s)" % e
    copy = os.path.join(tmp, "wisdom")
    with open(copy, "wb") as f:
        f.write(text)
    argv = ["--wisdom", copy, "--strict"]
    if threads is not None:
        argv += ["--threads", str(int(threads))]
    return argv, None


def compile(spec, schedule=None, wisdom=None, target=None, threads=None, wisdom_required=True):
    """Generates the kernel of spec (a spec file's path, or a dict of its
    fields), compiles it into a shared object in the cache (reused while its
    source and the compiler command are the same) and returns a Kernel.
    A cache that libheed's loader would refuse (another owner, group or
    world writable) is not used: the kernel is compiled in a private
    temporary directory, with a RuntimeWarning.
    wisdom: a wisdom file whose record for this machine, compiler and
    threads (default $OMP_NUM_THREADS, else the processors) gives the
    schedule; read only when libheed's loader would read it (the user's
    own regular file, writable by no one else, not a link); without a
    record the default schedule. kernel.schedule_source says which.
    wisdom_required=False (heed.torch's default wisdom): a missing or
    refused file is the default schedule, not ValueError."""
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
        shown = "spec dict" if isinstance(spec, dict) else path
        argv = ["gen", path, "-o", tmp]
        if schedule is not None:
            argv += ["--schedule", schedule]
        if target is not None:
            argv += ["--target", target]
        source = "schedule given" if schedule is not None else "default schedule"
        wargv = []
        if wisdom is not None:
            wargv, why = _wisdom_argv(wisdom, threads, tmp, wisdom_required)
            if why:
                source = why
        name = _run_heed(["gen", path, "--print-name"], path, shown).strip()
        try:
            _run_heed(argv + wargv, path, shown)
            if wargv:
                source = "wisdom %s" % os.fspath(wisdom) + ("" if threads is None else
                                                            ", its record for %d thread%s" % (threads, "s"[threads == 1:]))
        except WisdomMiss as e:
            _run_heed(argv, path, shown)
            source = "default schedule (%s)" % str(e).replace(wargv[1], os.fspath(wisdom))
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
            return Kernel(name, so, hsrc.decode("utf-8"), source)
        part = os.path.join(tmp, "k.so")
        try:
            r = subprocess.run(build_command(cc, os.path.join(tmp, name + ".c"), part, tmp), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True)
        except OSError as e:
            raise RuntimeError("heed: cannot run the C compiler %s (CC): %s" % (shlex.join(cc), e))
        if r.returncode != 0:
            raise RuntimeError("heed: %s failed on %s.c:\n%s" % (shlex.join(cc), name, r.stdout))
        if so is None:
            return Kernel(name, part, hsrc.decode("utf-8"), source)       # loaded before tmp goes
        _install(part, so)
        return Kernel(name, so, hsrc.decode("utf-8"), source)


# the objects heed.compile writes in the cache: NAME-KEY.so
_OBJECT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*-[0-9a-f]{16}\.so\Z")


def cache_clean(max_bytes=None):
    """Removes heed.compile's objects from the cache ($HEED_CACHE/python),
    least recently used first, until those left take at most max_bytes
    (None: all of them). Only files heed makes are touched: regular files
    named NAME-KEY.so owned by the effective user (seen with lstat: a
    symbolic link is neither followed nor removed). Returns the paths
    removed. A cache libheed's loader rule refuses raises RuntimeError."""
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, numbers.Integral)
                                  or max_bytes < 0):
        raise ValueError("max_bytes: a number of bytes >= 0, or None (all), not %r" % (max_bytes,))
    d = _paths.cache_dir()
    objects = []
    with os.scandir(d) as entries:
        for e in entries:
            if _OBJECT.match(e.name):
                st = e.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                    objects.append((st.st_mtime_ns, e.name, st.st_size))
    total = sum(size for _, _, size in objects)
    removed = []
    for _, name, size in sorted(objects):
        if max_bytes is not None and total <= max_bytes:
            break
        path = os.path.join(d, name)
        try:
            os.unlink(path)
        except FileNotFoundError:                  # another process cleaned it
            pass
        total -= size
        removed.append(path)
    return removed


class Kernel:
    """A compiled kernel: kernel(*inputs, params=None) -> a new numpy array
    (a tuple (out, lse) for a spec with lse = true); for a spec with
    backward = true, kernel.backward(q, k, v, out, dout, lse=None) -> (dq,
    dk, dv); the X forms (patches, collection): kernel.backward(x, out,
    dout) -> (dx,).

    Inputs are C-contiguous numpy arrays in the order of the C signature (q,
    k, v for token specs and the q/k/v N-d forms, x for the X forms), of the
    element type the spec names, with the shapes of NAME.h (batch first).
    params maps each weight of NAME_params to an array (a list of arrays for
    a field that is an array of pointers)."""

    def __init__(self, name, so_path, header, schedule_source="default schedule"):
        self.name, self.path, self.header = name, so_path, header
        args, self._params, self.canonical = parse_header(header, name)
        # the schedule it was generated with (NAME.h's provenance), and where it came from
        m = re.search(r"\bschedule:[ \t]*(\S*)", header)
        t = re.search(r"\btarget:[ \t]*(\w+)", header)
        self.schedule = ",".join(x for x in ("target=" + t.group(1) if t else "", m.group(1) if m else "") if x)
        self.schedule_source = schedule_source
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
        # NAME_backward (a spec with backward = true, docs/backward.md): q, k, v, out, dout, lse -> dq, dk, dv
        # (with run-time tensors it takes NAME_params too; with weights -- a
        # general, additive or location score, an N-d bias table -- also
        # NAME_grads, the weights' gradients)
        self._bwd, self._grads, self._gstruct = None, None, None
        proto = re.search(r"\bint %s_backward\(([^;]*)\);" % re.escape(name), header)
        self._bwd_p = bool(proto) and "_params *p" in proto.group(1)
        # (the X forms' NAME_backward takes x, out, dout, lse and writes dx)
        if proto and re.search(r"\*(q|x)\b", proto.group(1)):
            self._bwd = getattr(self._lib, name + "_backward")
            argtypes = [ctypes.c_int] + [ctypes.c_void_p] * (2 * len(self.inputs) + 3)
            if self._bwd_p:
                argtypes.append(ctypes.POINTER(self._struct))
            if "_grads *g" in proto.group(1):
                self._grads = parse_grads(header, name, self._params)
                fields = []
                for field, count, _, (_, ct) in self._grads:
                    p = ctypes.POINTER(ct)
                    fields.append((field, p * count if count else p))
                self._gstruct = type(name + "_grads", (ctypes.Structure,), {"_fields_": fields})
                argtypes.append(ctypes.POINTER(self._gstruct))
            self._bwd.argtypes, self._bwd.restype = argtypes, ctypes.c_int
        self.has_backward = self._bwd is not None
        self.input_names = [a[0] for a in self.inputs]
        self.param_names = [p[0] for p in self._params or []]
        # the weights whose gradients NAME_backward returns (kernel.backward's fourth result)
        self.grad_names = [g[0] for g in self._grads or []]
        self.output_names = [a[0] for a in self._outs]

    def __repr__(self):
        return "<heed kernel %s(%s) %s>" % (self.name, ", ".join(self.input_names), self.canonical)

    def out_shape(self, batch):
        return self.shape(self._out[3], batch)

    @staticmethod
    def shape(dims, batch):
        """An argument's shape for batch items (dims from the header, None for batch)."""
        return tuple(batch if d is None else d for d in dims)

    @staticmethod
    def _check(arr, what, dtype, dims, batch):
        """arr's address, after checking it is a C-contiguous numpy array of
        dtype and shape (ValueError naming what otherwise)."""
        if not isinstance(arr, np.ndarray):
            raise ValueError("%s: a numpy array, not %s" % (what, type(arr).__name__))
        if arr.dtype != dtype:
            raise ValueError("%s: dtype %s, expected %s" % (what, arr.dtype, np.dtype(dtype)))
        want = Kernel.shape(dims, batch)
        if arr.shape != want:
            raise ValueError("%s: shape %s, expected %s" % (what, arr.shape, want))
        if not arr.flags["C_CONTIGUOUS"]:
            raise ValueError("%s: not C-contiguous (use numpy.ascontiguousarray)" % what)
        return arr.ctypes.data

    def _count(self, inputs):
        if len(inputs) != len(self.inputs):
            raise ValueError("%s takes %d arrays (%s), got %d" % (self.name, len(self.inputs),
                                                                  ", ".join(self.input_names), len(inputs)))

    def arguments(self, inputs, batch, check):
        """The addresses of the inputs, each checked by check(arr, name,
        dtype, dims, batch) -> address (None for a NULL one the kernel allows)."""
        self._count(inputs)
        return [None if arr is None and nullable else check(arr, nm, dtype, dims, batch)
                for arr, (nm, dtype, _, dims, _, nullable) in zip(inputs, self.inputs)]

    def run(self, batch, addresses, params, check):
        """Calls the kernel on batch items with the addresses of its inputs
        and outputs (in the order of the C signature; None is NULL, an empty
        out's None: nothing to compute, no call) and the weights params, each
        checked by check as in arguments(). A negative return code raises
        KernelError."""
        call = [batch] + addresses
        if self._struct is not None:
            call.append(ctypes.byref(self._weights(params, check)))
        elif params:
            raise ValueError("params: %s takes no weights" % self.name)
        if addresses[len(self.inputs)] is None:
            return
        rc = self._fn(*call)
        if rc != 0:
            raise KernelError(self.name, rc)

    def __call__(self, *inputs, params=None, tensors=None):
        if tensors:     # run-time tensors of mask_mod / score_mod: fields of NAME_params too
            params = dict(params or {}, **tensors)
        self._count(inputs)
        first = next((a for a in inputs if a is not None), None)
        if not isinstance(first, np.ndarray) or first.ndim < 1:
            raise ValueError("%s: a numpy array, not %s" % (self.input_names[0], type(first).__name__))
        batch = first.shape[0]
        addresses = self.arguments(inputs, batch, self._check)
        outs = [np.empty(self.shape(a[3], batch), dtype=a[1]) for a in self._outs]
        self.run(batch, addresses + [o.ctypes.data if o.size else None for o in outs], params, self._check)
        return outs[0] if len(outs) == 1 else tuple(outs)     # (out, lse) for lse specs

    def backward_arguments(self, *args):
        """backward_arguments(q, k, v, out, dout, lse, check) (the X forms:
        (x, out, dout, lse, check)): the batch and the addresses of
        NAME_backward's inputs, out, dout (out's shape) and lse
        ([batch][heads][lq] float32, or None: NULL), each checked by check as
        in arguments(). ValueError for a kernel without a backward."""
        if self._bwd is None:
            raise ValueError("%s has no backward: compile a spec with backward = true (docs/backward.md)"
                             % self.name)
        n = len(self.inputs)
        if len(args) != n + 4:
            raise ValueError("%s.backward takes %s, out, dout" % (self.name, ", ".join(self.input_names)))
        inputs, (out, dout, lse, check) = args[:n], args[n:]
        first = inputs[0]
        if not hasattr(first, "shape") or len(first.shape) < 1:
            raise ValueError("%s: an array with the batch first, not %s" % (self.input_names[0], type(first).__name__))
        batch = first.shape[0]
        addresses = self.arguments(inputs, batch, check)
        _, dtype, _, dims, _, _ = self._out
        addresses += [check(out, "out", dtype, dims, batch), check(dout, "dout", dtype, dims, batch)]
        if lse is not None and self.canonical.startswith("heed-nd"):
            raise ValueError("lse: the N-d forms' backward takes none (their forward writes none; pass None)")
        if lse is None:
            addresses.append(None)
        else:
            known = dict(kv.split("=", 1) for kv in self.canonical.split(";")[1:] if "=" in kv)
            addresses.append(check(lse, "lse", np.float32, [None, int(known["heads"]), int(known["lq"])], batch))
        return batch, addresses

    def run_backward(self, batch, addresses, params=None, grads=None, check=None):
        """Calls NAME_backward with the addresses of q, k, v, out, dout,
        lse (None: NULL), dq, dk, dv; params the weights and run-time
        tensors of NAME_params (a dict as for a call), each checked by check
        (default: numpy arrays, as for a call); grads the gradients of the
        weights (grad_names), a dict of arrays shaped as the weights (lists
        for per-dimension bias tables), also checked by check. A negative
        code raises KernelError."""
        check = check or self._check
        extra = []
        if self._bwd_p:
            extra.append(ctypes.byref(self._weights(params or {}, check)))
        elif params:
            raise ValueError("params: %s takes no weights or run-time tensors" % self.name)
        if self._gstruct is not None:
            extra.append(ctypes.byref(self._fill(self._gstruct, self._grads, grads, check, "grads")))
        rc = self._bwd(batch, *addresses, *extra)
        if rc != 0:
            raise KernelError(self.name + "_backward", rc)

    def backward(self, *arrays, lse=None, params=None, tensors=None):
        """backward(q, k, v, out, dout, lse=None, params=None, tensors=None);
        the X forms (patches, collection): backward(x, out, dout,
        params=None) -> (dx,) (dx of x's shape; with linear maps or a bias
        table (dx, grads), grads holding f_q, f_k, f_v's and the tables'
        gradients).
        The gradients (dq, dk, dv), new arrays of q, k, v's shapes and
        types (float32, or uint16 bit patterns for bf16 and f16, each the
        rounding of the float gradient), of a loss whose gradient with respect to out is dout, for a
        kernel whose spec has backward = true (docs/backward.md): out is this
        kernel's output for q, k, v, lse its lse output (a spec with lse =
        true) or None (recomputed; the fused forms ignore it); params the
        weights and tensors the run-time tensors of mask_mod / score_mod, as
        for a call (tensors get no gradient). A kernel with weights
        (grad_names: general, additive, location scores, N-d bias tables)
        returns (dq, dk, dv, grads), grads a dict of the weights' gradients
        (summed over the batch), new float32 arrays shaped as the weights (a
        list of arrays for the per-dimension bias tables)."""
        if tensors:
            params = dict(params or {}, **tensors)
        n = len(self.inputs)
        if len(arrays) == n + 3 and lse is None:    # (lse given by position)
            arrays, lse = arrays[:n + 2], arrays[n + 2]
        if self._bwd is not None and len(arrays) != n + 2:
            raise ValueError("%s.backward takes %d arrays (%s, out, dout), got %d"
                             % (self.name, n + 2, ", ".join(self.input_names), len(arrays)))
        batch, addresses = self.backward_arguments(*arrays, lse, self._check)
        grads = tuple(np.empty(self.shape(a[3], batch), dtype=a[1]) for a in self.inputs)
        wgrads = None
        if self._grads is not None:
            wgrads = {f: [np.empty(self.shape(d, None), dtype=np.float32) for d in dims] if count
                      else np.empty(self.shape(dims[0], None), dtype=np.float32)
                      for f, count, dims, _ in self._grads}
        self.run_backward(batch, addresses + [g.ctypes.data for g in grads], params, wgrads)
        return grads if wgrads is None else grads + (wgrads,)

    def _weights(self, params, check):
        if not isinstance(params, dict):
            raise ValueError("params: a dict of the weights %s" % ", ".join(self.param_names))
        return self._fill(self._struct, self._params, params, check, "params")

    @staticmethod
    def _fill(struct, fields, arrays, check, what):
        """A ctypes struct (NAME_params, NAME_grads) of the addresses of
        arrays, a dict of the struct's fields, each checked by check."""
        names = [f[0] for f in fields]
        if not isinstance(arrays, dict):
            raise ValueError("%s: a dict of %s" % (what, ", ".join(names)))
        unknown = set(arrays) - set(names)
        if unknown:
            raise ValueError("%s: unknown weight(s) %s (allowed: %s)"
                             % (what, ", ".join(sorted(unknown)), ", ".join(names)))
        s = struct()
        for field, count, shapes, (dtype, ct) in fields:
            if field not in arrays:
                raise ValueError("%s['%s']: missing" % (what, field))
            val = arrays[field]
            if count:
                if not isinstance(val, (list, tuple)) or len(val) != count:
                    raise ValueError("%s['%s']: a list of %d arrays" % (what, field, count))
                arr = getattr(s, field)
                for i in range(count):
                    arr[i] = ctypes.cast(check(val[i], "%s['%s'][%d]" % (what, field, i), dtype, shapes[i], None),
                                         ctypes.POINTER(ct))
            else:
                setattr(s, field, ctypes.cast(check(val, "%s['%s']" % (what, field), dtype, shapes[0], None),
                                              ctypes.POINTER(ct)))
        s._keep = arrays          # the arrays outlive the call
        return s
