"""heed.torch on ViT-B/16's attention shapes (B=8, L=197, H=12, D=64, fuse
"none") against torch's attention, in one process (docs/python.md, PyTorch):
medians of N calls of the bare kernel (its C function on the tensors'
addresses), heed.torch.attention (out= and a new tensor), heed.torch's SDPA
and torch's F.scaled_dot_product_attention where the torch has it (2.0+),
else its math path softmax(q k^T scale) v. Reports; asserts nothing.
OPENBLAS_NUM_THREADS is 1 unless set: Debian's torch 1.13 multiplies
through OpenBLAS, whose own thread pool under torch's OpenMP threads
oversubscribes the cores (3-4x slower on a 2-core machine).

    PYTHONPATH=python python3 bench/python/torch_vit.py [THREADS] [N]
"""

import math
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

import heed  # noqa: E402
import heed.torch as ht  # noqa: E402

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
torch.set_num_threads(threads)
heed.set_num_threads(threads)
B, H, L, D = 8, 12, 197, 64
g = torch.Generator().manual_seed(0)
q, k, v = (torch.rand(B, H, L, D, generator=g) * 2 - 1 for _ in range(3))
out = torch.empty(B, H, L, D)


def medians_ms(fns):
    """Medians of n timed calls of each fn, interleaved (one call of each
    per round), so a machine whose load drifts affects all alike."""
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(n):
        for f, ts in zip(fns, times):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
    return [statistics.median(ts) * 1e3 for ts in times]


kern = ht._kernel_of({}, (q, k, v), None)[0]
addresses = [B, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()]
sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
peer = (lambda: sdpa(q, k, v)) if sdpa else \
    (lambda: torch.softmax(q @ k.transpose(-1, -2) * (1 / math.sqrt(D)), -1) @ v)
rows = [("heed kernel (bare C call)", lambda: kern._fn(*addresses)),
        ("heed.torch.attention(out=)", lambda: ht.attention(q, k, v, out=out)),
        ("heed.torch.attention", lambda: ht.attention(q, k, v)),
        ("heed.torch.scaled_dot_product_attention", lambda: ht.scaled_dot_product_attention(q, k, v)),
        ("torch %s %s" % (torch.__version__, "F.scaled_dot_product_attention" if sdpa else "math path"), peer)]
with torch.no_grad():
    res = list(zip([name for name, _ in rows], medians_ms([f for _, f in rows])))
print("ViT-B/16 attention B=%d L=%d H=%d D=%d, %d threads (OPENBLAS_NUM_THREADS=%s), median of %d calls"
      % (B, L, H, D, threads, os.environ["OPENBLAS_NUM_THREADS"], n))
for name, ms in res:
    print("  %-42s %9.3f ms" % (name, ms))
print("  heed.torch(out=) / bare kernel: %.3f; torch / heed.torch(out=): %.2fx" % (res[1][1] / res[0][1],
                                                                             res[4][1] / res[1][1]))
# the cost of the Python call itself, on a problem whose kernel takes microseconds
t = torch.rand(1, 1, 8, 8)
small = torch.empty(1, 1, 8, 8)
sk = ht._kernel_of({}, (t, t, t), None)[0]
n = max(n, 2000)
bare, call, new_out = medians_ms([lambda: sk._fn(1, t.data_ptr(), t.data_ptr(), t.data_ptr(), small.data_ptr()),
                                  lambda: ht.attention(t, t, t, out=small), lambda: ht.attention(t, t, t)])
print("  per call, [1, 1, 8, 8]: bare kernel %.1f us, heed.torch.attention(out=) %.1f us, new out %.1f us"
      % (bare * 1e3, call * 1e3, new_out * 1e3))
