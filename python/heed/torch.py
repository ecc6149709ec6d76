"""heed's kernels on torch tensors, without copies (docs/python.md, PyTorch).

    import heed.torch
    out = heed.torch.attention(q, k, v, mask="causal")        # [B, H, L, D] -> [B, H, L, Dv]
    out = heed.torch.scaled_dot_product_attention(q, k, v, is_causal=True)   # F.scaled_dot_product_attention's
    attn = heed.torch.Attention(mask="causal")                 # an nn.Module holding the spec
    heed.torch.replace_multihead_attention(model)              # its nn.MultiheadAttention modules on heed
    heed.torch.replace_shifted_window_attention(model)         # torchvision Swin's window attention on heed

Kernels read and write the tensors' memory through data_ptr(): every tensor
must be a contiguous CPU tensor of the spec's type (float32, or bfloat16 /
float16 for dtype and out_dtype bf16 / f16); nothing is copied or converted.
Each operator is compiled once (heed.compile) and kept for the process.
Training: with backward=True among the fields (docs/backward.md), a call
that autograd records runs through a torch.autograd.Function whose backward
calls the generated NAME_backward; without it, such a call raises
RuntimeError. heed.torch.XAttention holds a patches / collection spec's
weights (f_q, f_k, f_v, bias) as Parameters.
"""

import os
import threading

import numpy as np
import torch

from . import _paths
from . import kernel as _kernel
from . import threads as _threads

_TYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_TORCH = {name: t for t, name in _TYPES.items()}

_lock = threading.Lock()
_by_spec = {}       # (the canonical spec: spec_to_lua of every field but name, wisdom key) -> Kernel
_by_call = {}       # (frozen fields, the tensors' shapes and types, wisdom key) -> (Kernel, input check, output check)
_wisdom = [True]    # set_wisdom's choice: True ($HEED_CACHE/wisdom), None (none) or a path
_default_wisdom = [None, None]      # ($HEED_CACHE, the default wisdom path it gives)


def set_wisdom(path=True):
    """The wisdom file whose tuned schedules heed.torch builds its kernels
    with (docs/wisdom.md): True (the default) $HEED_CACHE/wisdom, what heed
    tune writes; a path; None for the default schedules. A kernel takes the
    record for this machine, compiler and the OpenMP thread count of the
    call that compiles it (heed.get_num_threads()), read when it is first
    compiled in the process; a file libheed's loader would refuse (not the
    user's own regular file, writable by group or others, a symbolic link)
    is not read (RuntimeWarning). kernel(...).schedule_source says which
    schedule a kernel has."""
    if path is not None and path is not True:
        path = os.fspath(path)
    _wisdom[0] = path


def _wisdom_key():
    """(the wisdom file, the thread count) a kernel compiled now would use."""
    w = _wisdom[0]
    if w is None:
        return None
    if w is True:                           # (per call: the path kept while $HEED_CACHE is the same)
        env = os.environ.get("HEED_CACHE")
        if _default_wisdom[0] != env or _default_wisdom[1] is None:
            _default_wisdom[:] = [env, _paths.default_wisdom()]
        w = _default_wisdom[1]
    try:
        threads = _threads.get_num_threads()
    except RuntimeError:                    # no libgomp (a clang build): heed gen's default count
        threads = None
    return (w, threads)

NO_BACKWARD = ("heed.torch: %s requires grad, and this spec has no backward: pass backward=True (a spec field: "
               "the forms of docs/backward.md), or call it under torch.no_grad() or torch.inference_mode(), or "
               "pass tensors that do not require grad (.detach())")
OUT_WITH_GRAD = "heed.torch: %s requires grad: autograd takes new outputs, not out= (leave out=None)"
TENSOR_WITH_GRAD = ("heed.torch: params['%s'] requires grad: a run-time tensor of mask_mod / score_mod gets no "
                    "gradient (docs/backward.md); pass it detached")


def _freeze(v):
    """A hashable image of a spec value (types kept: True is not 1)."""
    if isinstance(v, dict):
        return (dict,) + tuple(sorted(((repr(k), _freeze(x)) for k, x in v.items())))
    if isinstance(v, (list, tuple)):
        return (list,) + tuple(_freeze(x) for x in v)
    return (type(v), v)


def _check_tensor(t, what, dtype, dims, batch):
    """t.data_ptr(), after the numpy path's checks (Kernel._check) on a tensor."""
    if not isinstance(t, torch.Tensor):
        raise ValueError("%s: a torch tensor, not %s" % (what, type(t).__name__))
    if t.device.type != "cpu":
        raise ValueError("%s: on device %s, expected a CPU tensor" % (what, t.device))
    if t.layout != torch.strided:
        raise ValueError("%s: layout %s, expected torch.strided" % (what, t.layout))
    if t.dtype != dtype:
        raise ValueError("%s: dtype %s, expected %s" % (what, t.dtype, dtype))
    want = _kernel.Kernel.shape(dims, batch)
    if tuple(t.shape) != want:
        raise ValueError("%s: shape %s, expected %s" % (what, tuple(t.shape), want))
    if not t.is_contiguous():
        raise ValueError("%s: not contiguous (strides %s): heed.torch does not copy, call .contiguous()"
                         % (what, t.stride()))
    return t.data_ptr()


def _checker(storage):
    """A Kernel.arguments check for tensors: the header's float32 is
    torch.float32, its uint16 the 16-bit type storage (check.types)."""
    types = {np.float32: torch.float32, np.uint16: storage, np.int32: torch.int32}

    def check(t, what, dtype, dims, batch):
        return _check_tensor(t, what, types[dtype], dims, batch)
    check.types = types
    return check


def _spec(fields, inputs, out):
    """The spec of a call: fields, fuse "none" and name "torch_attention" unless
    given, and for a token spec (no form) the sizes of the [B, H, L, D]
    tensors q, k, v, dtype from q's type and out_dtype from out's (else
    dtype)."""
    spec = dict(fields)
    spec.setdefault("name", "torch_attention")
    spec.setdefault("fuse", "none")
    if "form" not in spec:
        if len(inputs) != 3:
            raise ValueError("heed.torch: a token spec takes q, k, v, got %d tensors" % len(inputs))
        for nm, t in zip("qkv", inputs):
            if not isinstance(t, torch.Tensor) or t.dim() != 4:
                raise ValueError("%s: a 4-d tensor [batch, heads, L, D], not %s"
                                 % (nm, tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__))
        q, k, v = inputs
        sizes = {"heads": q.shape[1], "lq": q.shape[2], "dk": q.shape[3], "lk": k.shape[2], "dv": v.shape[3]}
        if k.shape[1] != q.shape[1]:
            sizes["heads_kv"] = k.shape[1]
        for f, n in sizes.items():
            spec.setdefault(f, n)
    first = next((t for t in inputs if t is not None), None)
    if "dtype" not in spec and isinstance(first, torch.Tensor):
        if first.dtype not in _TYPES:
            raise ValueError("%s: dtype %s, expected torch.float32, torch.bfloat16 or torch.float16"
                             % ("q" if "form" not in spec else "input", first.dtype))
        spec["dtype"] = _TYPES[first.dtype]
    spec.setdefault("dtype", "f32")
    o = out[0] if isinstance(out, (tuple, list)) and out else out
    if "out_dtype" not in spec:
        spec["out_dtype"] = _TYPES.get(o.dtype, "f32") if isinstance(o, torch.Tensor) else spec["dtype"]
    return spec


def _kernel_of(fields, inputs, out):
    """The kernel of a call, compiled once per operator, and the checks of
    its input and output tensors."""
    o = out[0] if isinstance(out, (tuple, list)) and out else out
    wkey = _wisdom_key()
    try:
        key = (_freeze(fields), tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else None
                                      for t in inputs), o.dtype if isinstance(o, torch.Tensor) else None, wkey)
        hit = _by_call.get(key)
    except TypeError:                           # an unhashable field value: spec_to_lua says which
        key, hit = None, None
    if hit:
        return hit
    spec = _spec(fields, inputs, out)
    canonical = (_kernel.spec_to_lua({f: x for f, x in spec.items() if f != "name"}), wkey)
    with _lock:
        kern = _by_spec.get(canonical)
        if kern is None:
            kern = _by_spec[canonical] = (_kernel.compile(spec, wisdom=wkey[0], threads=wkey[1], wisdom_required=False)
                                          if wkey else _kernel.compile(spec))
    hit = (kern, _checker(_TORCH[spec["dtype"]]), _checker(_TORCH[spec["out_dtype"]]))
    if key is not None:
        _by_call[key] = hit
    return hit


def kernel(*inputs, out=None, **fields):
    """The Kernel heed.torch.attention(*inputs, out=out, **fields) runs
    (compiled once, as the call does): its schedule, and schedule_source,
    which says whether a wisdom record gave it (set_wisdom)."""
    return _kernel_of(fields, inputs, out)[0]


def _requires_grad(tensors):
    """The name of the first tensor autograd would record, or None."""
    if torch.is_grad_enabled():
        for what, t in tensors:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return what
    return None


class _Attention(torch.autograd.Function):
    """heed's forward, and as backward the generated NAME_backward (a spec
    with backward = true): the n inputs (q, k, v, or the X forms' x), out
    and lse saved, their gradients returned (of the inputs' types: dout
    taken in out's); after them the weights of NAME_params flattened
    (_flatten), whose gradients NAME_grads receives (None for a run-time
    tensor of mask_mod / score_mod, which gets none)."""

    @staticmethod
    def forward(ctx, kern, check_in, check_out, n, *tensors):
        inputs, flat = tensors[:n], tensors[n:]
        params = _unflatten(kern, flat)
        outs = _forward(kern, check_in, check_out, inputs, None, params)
        out, lse = (outs[0], outs[1]) if isinstance(outs, tuple) else (outs, None)
        ctx.kern, ctx.n, ctx.check_in, ctx.check_out = kern, n, check_in, check_out
        ctx.save_for_backward(*inputs, out, lse, *flat)
        if lse is None:
            return out
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout, *_):
        saved, n, kern, check_in, check_out = ctx.saved_tensors, ctx.n, ctx.kern, ctx.check_in, ctx.check_out
        inputs, out, lse, flat = saved[:n], saved[n], saved[n + 1], saved[n + 2:]
        dout = dout.to(out.dtype).contiguous()

        def check(t, what, dtype, dims, batch):         # out and dout of out_dtype, the rest of dtype (lse: float)
            return (check_out if what in ("out", "dout") else check_in)(t, what, dtype, dims, batch)
        batch, addresses = kern.backward_arguments(*inputs, out, dout, lse, check)
        grads = [torch.empty(kern.shape(dims, batch), dtype=check_in.types[dtype])
                 for _, dtype, _, dims, _, _ in kern.inputs]
        wgrads = None
        if kern._grads is not None:
            wgrads = {f: [torch.empty(kern.shape(d, None), dtype=torch.float32) for d in dims] if count
                      else torch.empty(kern.shape(dims[0], None), dtype=torch.float32)
                      for f, count, dims, _ in kern._grads}
        kern.run_backward(batch, addresses + [g.data_ptr() for g in grads], _unflatten(kern, flat), wgrads,
                          check_in)
        flat_grads = []
        for f, count, _, _ in kern._params or []:
            g = (wgrads or {}).get(f)
            flat_grads += (g if count else [g]) if g is not None else [None] * (count or 1)
        return (None, None, None, None) + tuple(grads) + tuple(flat_grads)


def _flatten(kern, params):
    """The tensors of params (NAME_params' fields, checked by the call) in
    the order of its fields, a list's items in turn."""
    flat = []
    for f, count, _, _ in kern._params or []:
        flat += list(params[f]) if count else [params[f]]
    return flat


def _unflatten(kern, flat):
    """params of _flatten's list: None for a kernel without NAME_params."""
    if kern._params is None:
        return None
    params, i = {}, 0
    for f, count, _, _ in kern._params:
        params[f] = list(flat[i:i + count]) if count else flat[i]
        i += count or 1
    return params


def _forward(kern, check_in, check_out, inputs, out, params):
    """Runs kern on the tensors inputs into out (None: new tensors)."""
    kern._count(inputs)
    first = next((t for t in inputs if t is not None), None)
    if not isinstance(first, torch.Tensor) or first.dim() < 1:
        raise ValueError("%s: a torch tensor, not %s" % (kern.input_names[0], type(first).__name__))
    batch = first.shape[0]
    addresses = kern.arguments(inputs, batch, check_in)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if out is None:
        outs = [torch.empty(kern.shape(dims, batch), dtype=check_out.types[dtype])
                for _, dtype, _, dims, _, _ in kern._outs]
    elif len(outs) != len(kern._outs):
        raise ValueError("out: %s writes %s: pass %s" % (kern.name, ", ".join(kern.output_names),
                                                         "a tuple of tensors" if len(kern._outs) > 1 else "a tensor"))
    for o, (nm, dtype, _, dims, _, _) in zip(outs, kern._outs):
        addresses.append(check_out(o, nm, dtype, dims, batch) if o.numel() else None)
    kern.run(batch, addresses, params, check_in)
    return outs[0] if len(outs) == 1 else tuple(outs)


def attention(*inputs, out=None, params=None, **fields):
    """heed's attention on the contiguous CPU tensors inputs (q, k, v
    [B, H, L, D] for token specs; the N-d forms' arrays of heed.compile,
    with their sizes in fields). fields are the spec's (docs/spec.md): for
    a token spec the sizes default to the tensors', fuse to "none", dtype
    to q's type (float32 f32, bfloat16 bf16, float16 f16) and out_dtype to
    out's, else dtype. Returns a new tensor (a tuple (out, lse) for lse =
    true), or writes out= (a tensor, or a tuple for lse) and returns it.
    params maps weight names to float32 tensors, as Kernel's params.
    With backward=True (docs/backward.md), a call autograd records (grad
    mode on, q, k, v or a weight requiring grad) returns outputs whose
    backward is the generated NAME_backward: the gradients of q, k, v (x
    for the X forms, patches and collection) and of the weights (general,
    additive, location scores; N-d bias tables; the X forms' linear maps
    f_q, f_k, f_v; lse, for lse=True, is not differentiable), each of its
    tensor's type (16-bit inputs get 16-bit gradients); out= is then
    refused, and so is a run-time tensor that requires grad. Without
    backward=True such a call raises RuntimeError."""
    kern, check_in, check_out = _kernel_of(fields, inputs, out)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    weights = params.items() if isinstance(params, dict) else ()
    what = _requires_grad(list(zip(kern.input_names, inputs)) + list(zip(kern.output_names, outs))
                          + [("params['%s']" % f, w) for f, w in weights])
    if what is not None:
        if not kern.has_backward:
            raise RuntimeError(NO_BACKWARD % what)
        if out is not None:
            raise RuntimeError(OUT_WITH_GRAD % what)
        kern._count(inputs)
        flat = []
        if kern._params is not None:
            kern._weights(params or {}, check_in)          # named errors before autograd sees them
            for f, _, _, _ in kern._params:
                ts = params[f] if isinstance(params[f], (list, tuple)) else [params[f]]
                if f not in kern.grad_names and _requires_grad([(f, t) for t in ts]):
                    raise RuntimeError(TENSOR_WITH_GRAD % f)
            flat = _flatten(kern, params)
        elif params:
            raise ValueError("params: %s takes no weights" % kern.name)
        return _Attention.apply(kern, check_in, check_out, len(inputs), *inputs, *flat)
    return _forward(kern, check_in, check_out, inputs, out, params)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's signature on heed:
    [B, H, L, D] tensors, softmax(scale q k^T) v with scale 1/sqrt(D) unless
    given; is_causal masks key j > query i (L = S only); enable_gqa lets
    key and value have fewer heads (a divisor of H). attn_mask and
    dropout_p are not supported (ValueError)."""
    if attn_mask is not None:
        raise ValueError("attn_mask: heed.torch takes no mask tensor; use is_causal=True, or heed.torch.attention "
                         "with a heed mask (mask={'kind': 'local', 'radius': r})")
    if dropout_p:
        raise ValueError("dropout_p: heed.torch has no dropout (0.0 only), got %r" % (dropout_p,))
    for nm, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError("%s: a 4-d tensor [batch, heads, L, D], not %s"
                             % (nm, tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__))
    if not enable_gqa and (key.shape[1] != query.shape[1] or value.shape[1] != query.shape[1]):
        raise ValueError("key, value: %d and %d heads for query's %d (enable_gqa=True for grouped-query attention)"
                         % (key.shape[1], value.shape[1], query.shape[1]))
    fields = {}
    if is_causal:
        if query.shape[2] != key.shape[2]:
            raise ValueError("is_causal: query has %d rows and key %d; torch aligns the causal mask top-left, heed "
                             "bottom-right (heed.torch.attention(..., mask='causal')): only L = S is the same"
                             % (query.shape[2], key.shape[2]))
        fields["mask"] = "causal"
    if scale is not None:
        fields["scale"] = float(scale)
    return attention(query, key, value, **fields)


class Attention(torch.nn.Module):
    """heed.torch.attention with the spec fields given here, as a module:
    forward(*inputs, out=None, params=None). It holds only the spec (no
    compiled code), so it pickles, deep-copies and torch.save()s; the kernel
    is compiled (or found in the process's cache) at the first call."""

    def __init__(self, **fields):
        super().__init__()
        _kernel.spec_to_lua(fields)                # a value that cannot be a spec's fails here
        self.spec = fields

    def forward(self, *inputs, out=None, params=None):
        return attention(*inputs, out=out, params=params, **self.spec)

    def extra_repr(self):
        return ", ".join("%s=%r" % kv for kv in sorted(self.spec.items()))


class XAttention(torch.nn.Module):
    """A patches or collection spec (docs/nd-forms.md, the X forms) as a
    module holding its run-time weights as Parameters: each field of
    NAME_params (linear maps f_q, f_k, f_v [C'][C], uniform in +-1/sqrt(C)
    as nn.Linear's weight; the relative bias tables, zeros, in the
    ParameterList bias). forward(x) is heed.torch.attention(x,
    params=those weights, **fields); with backward=True among the fields,
    autograd's dx and the weights' gradients come from NAME_backward
    (docs/backward.md "Python"). The kernel is compiled at construction
    (its header gives the weights' shapes)."""

    def __init__(self, **fields):
        super().__init__()
        if fields.get("form") not in ("patches", "collection"):
            raise ValueError("heed.torch.XAttention: a patches or collection spec (form=...), not form=%r"
                             % (fields.get("form"),))
        _kernel.spec_to_lua(fields)
        self.spec = fields
        kern = _kernel_of(fields, (), None)[0]
        self.weights = []
        for f, count, shapes, _ in kern._params or []:
            ps = [torch.nn.Parameter(torch.zeros(kern.shape(d, None))) for d in shapes[:count or 1]]
            if f.startswith("f_"):
                with torch.no_grad():
                    for w in ps:
                        w.uniform_(-w.shape[-1] ** -0.5, w.shape[-1] ** -0.5)
            setattr(self, f, torch.nn.ParameterList(ps) if count else ps[0])
            self.weights.append((f, bool(count)))

    def forward(self, x):
        params = {f: list(getattr(self, f)) if many else getattr(self, f) for f, many in self.weights}
        return attention(x, params=params or None, **self.spec)

    def extra_repr(self):
        return ", ".join("%s=%r" % kv for kv in sorted(self.spec.items()))


class MultiheadAttention(torch.nn.Module):
    """torch.nn.MultiheadAttention's forward with heed's attention between
    the same projections: MultiheadAttention(mha) holds mha's in_proj_weight,
    in_proj_bias and out_proj (the same Parameters, not copies) and
    computes out_proj(attention(q, k, v)) of q, k, v = the input projection,
    split into heads ([B, H, L, D], scale 1/sqrt(D)). forward takes
    nn.MultiheadAttention's arguments and returns (output, None); it
    refuses what heed does not compute (ValueError): need_weights=True (the
    attention weights), key_padding_mask, attn_mask, dropout while
    training. Only modules with one packed input projection (kdim = vdim =
    embed_dim), no bias_k / bias_v and no add_zero_attn are taken."""

    def __init__(self, mha):
        super().__init__()
        if not isinstance(mha, torch.nn.MultiheadAttention):
            raise ValueError("heed.torch.MultiheadAttention: takes a torch.nn.MultiheadAttention, not %s"
                             % type(mha).__name__)
        if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("heed.torch.MultiheadAttention: %r has kdim/vdim other than embed_dim, bias_k/bias_v "
                             "or add_zero_attn, which heed does not compute" % (mha,))
        self.embed_dim, self.num_heads, self.batch_first = mha.embed_dim, mha.num_heads, mha.batch_first
        self.dropout = mha.dropout
        self.in_proj_weight, self.in_proj_bias, self.out_proj = mha.in_proj_weight, mha.in_proj_bias, mha.out_proj
        self.attention = Attention()

    # torch's fused encoder-layer paths (nn.TransformerEncoderLayer and
    # nn.TransformerEncoder in eval mode) read this and would take the
    # weights past forward(): False sends them through forward(), to heed
    _qkv_same_embed_dim = False

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True):
        for what, refused in (("need_weights=True: heed computes no attention weights; pass need_weights=False",
                               need_weights),
                              ("key_padding_mask: heed.torch takes no mask tensor", key_padding_mask is not None),
                              ("attn_mask: heed.torch takes no mask tensor", attn_mask is not None),
                              ("dropout %g while training: heed has no dropout (model.eval())" % self.dropout,
                               self.training and self.dropout > 0)):
            if refused:
                raise ValueError("heed.torch.MultiheadAttention: " + what)
        same = query is key and key is value
        if not self.batch_first:                        # [L, B, E] -> [B, L, E] views
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        b, lq, e = query.shape
        h = self.num_heads
        if same:                                        # self-attention: one projection, split in one copy
            qkv = torch.nn.functional.linear(query, self.in_proj_weight, self.in_proj_bias)
            q, k, v = qkv.view(b, lq, 3, h, e // h).permute(2, 0, 3, 1, 4).contiguous()
        else:
            biases = self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None,) * 3
            q, k, v = (torch.nn.functional.linear(t, w, bias).view(b, t.shape[1], h, e // h).transpose(1, 2)
                       .contiguous() for t, w, bias in zip((query, key, value), self.in_proj_weight.chunk(3), biases))
        out = self.out_proj(self.attention(q, k, v).transpose(1, 2).reshape(b, lq, e))
        return (out if self.batch_first else out.transpose(0, 1)), None

    def extra_repr(self):
        return "embed_dim=%d, num_heads=%d, batch_first=%s" % (self.embed_dim, self.num_heads, self.batch_first)


def replace_multihead_attention(model):
    """Replaces every torch.nn.MultiheadAttention inside model (in place) by
    heed.torch.MultiheadAttention on its weights; returns how many."""
    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.MultiheadAttention):
                setattr(parent, name, MultiheadAttention(child))
                n += 1
    return n


class ShiftedWindowAttention(torch.nn.Module):
    """torchvision's ShiftedWindowAttention (Swin V1) with its attention as
    one heed kernel: ShiftedWindowAttention(swa) holds swa's qkv, proj and
    relative_position_bias_table (the same Parameters, not copies) and
    computes, on x [B, H, W, C], proj(attention) of q, k, v = qkv(x) split
    into heads ([B, heads, H*W, C/heads]), where attention is the halo form
    with block = window_size, halo = 0, shift = shift_size (zero where the
    window covers the map, as torchvision does), scale (C/heads)^-0.5 and
    the joint relative bias (clip = window - 1) of the table transposed:
    no torch.roll, no window partition or reverse, no mask tensor (heed's
    kernel reads and writes the unshifted positions and adds Swin's -100).
    A map that is not a multiple of the window is zero-padded first and
    cropped after, as torchvision does. Refuses (ValueError) dropout while
    training and modules other than ShiftedWindowAttention (V2's cosine
    attention is not heed's)."""

    def __init__(self, swa):
        super().__init__()
        needed = ("qkv", "proj", "relative_position_bias_table", "window_size", "shift_size", "num_heads")
        if type(swa).__name__ != "ShiftedWindowAttention" or not all(hasattr(swa, a) for a in needed):
            raise ValueError("heed.torch.ShiftedWindowAttention: takes torchvision's ShiftedWindowAttention, not %s"
                             % type(swa).__name__)
        self.window_size, self.shift_size = [int(w) for w in swa.window_size], [int(s) for s in swa.shift_size]
        self.num_heads = int(swa.num_heads)
        self.attention_dropout, self.dropout = swa.attention_dropout, swa.dropout
        self.qkv, self.proj, self.relative_position_bias_table = swa.qkv, swa.proj, swa.relative_position_bias_table

    def spec(self, size, dim):
        """The heed spec of the attention on a map of size (H, W), already
        a multiple of the window, with dim channels."""
        shift = [0 if w >= s else sh for w, s, sh in zip(self.window_size, size, self.shift_size)]
        spec = {"name": "torch_swin", "form": "halo", "map": list(size), "block": list(self.window_size),
                "halo": 0, "heads": self.num_heads, "dk": dim // self.num_heads, "score": "scaled_dot",
                "fuse": "none", "bias": {"kind": "relative_joint", "clip": [w - 1 for w in self.window_size]}}
        if any(shift):
            spec["shift"] = shift
        return spec

    def forward(self, x):
        if self.training and (self.attention_dropout > 0 or self.dropout > 0):
            raise ValueError("heed.torch.ShiftedWindowAttention: dropout while training: heed has no dropout "
                             "(model.eval())")
        b, h, w, c = x.shape
        wh, ww = self.window_size
        pad_b, pad_r = (wh - h % wh) % wh, (ww - w % ww) % ww
        if pad_b or pad_r:
            x = torch.nn.functional.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        ph, pw = h + pad_b, w + pad_r
        nh = self.num_heads
        qkv = torch.nn.functional.linear(x, self.qkv.weight, self.qkv.bias)
        q, k, v = qkv.view(b, ph * pw, 3, nh, c // nh).permute(2, 0, 3, 1, 4).contiguous()
        table = self.relative_position_bias_table.t().contiguous()          # heed's [heads][(2wh-1)(2ww-1)]
        out = attention(q, k, v, params={"bias": [table]}, **self.spec((ph, pw), c))
        out = self.proj(out.transpose(1, 2).reshape(b, ph, pw, c))
        return out[:, :h, :w].contiguous() if pad_b or pad_r else out

    def extra_repr(self):
        return "window_size=%s, shift_size=%s, num_heads=%d" % (self.window_size, self.shift_size, self.num_heads)


def replace_shifted_window_attention(model):
    """Replaces every torchvision ShiftedWindowAttention inside model (in
    place; Swin V1: swin_t, swin_s, swin_b) by heed.torch.ShiftedWindowAttention
    on its weights; returns how many."""
    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ == "ShiftedWindowAttention" and hasattr(child, "relative_position_bias_table"):
                setattr(parent, name, ShiftedWindowAttention(child))
                n += 1
    return n
