"""make bench-vit-train (issue 40): one training step of the attention of
torchvision's ViT-B/16 (B=8, L=197, H=12, D=64): forward and backward
through autograd, heed.torch.attention(..., backward=True, lse=True) (the
generated forward and NAME_backward, lse handed from one to the other)
against torch's own CPU path in the same process: F.scaled_dot_product_attention
from torch 2.0, else (Debian's torch 1.13) the math its nn.MultiheadAttention
computes, softmax((q * scale) k^T) v: two bmm and a softmax, and autograd's
backward of them. At THREADS threads (torch.set_num_threads; heed's kernels
follow), medians of N steps, the rows interleaved; torch's rows at OpenBLAS
1 and THREADS threads, the faster (bench/python/bench_common.py). The
gradients of the two sides are compared first. Target (issue 40): torch /
heed >= 2 for the step. Reports; asserts nothing.

    PYTHONPATH=python python3 bench/python/vit_train.py [THREADS] [N]
"""

import math
import os
import sys

import torch

import heed
import heed.torch as ht

import bench_common as common

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
torch.set_num_threads(threads)
heed.set_num_threads(threads)
BLAS = common.blas_counts(threads)
g = torch.Generator().manual_seed(0)

B, H, L, D = 8, 12, 197, 64
data = [torch.rand((B, H, L, D), generator=g) * 2 - 1 for _ in range(4)]
dout = data[3]
mine = [t.clone().requires_grad_() for t in data[:3]]
theirs = [t.clone().requires_grad_() for t in data[:3]]
sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)


def torch_attention(q, k, v):
    if sdpa:
        return sdpa(q, k, v)
    s = torch.bmm((q * (1 / math.sqrt(D))).view(B * H, L, D), k.reshape(B * H, L, D).transpose(1, 2))
    return torch.softmax(s, -1).bmm(v.reshape(B * H, L, D)).view(B, H, L, D)


def heed_attention(q, k, v):
    return ht.attention(q, k, v, backward=True, lse=True)[0]


def step(attn, x):
    def run():
        for t in x:
            t.grad = None
        attn(*x).backward(dout)
    return run


def forward(attn, x):
    def run():
        with torch.no_grad():
            attn(*x)
    return run


print("ViT-B/16 attention training step, heed.torch vs torch %s (%s), %d threads, median of %d steps; "
      "load average %.1f at start" % (torch.__version__, "F.scaled_dot_product_attention" if sdpa
                                      else "softmax(q s k^T) v, MHA's math", threads, n, os.getloadavg()[0]))
step(heed_attention, mine)()
step(torch_attention, theirs)()
worst = max(float((a.grad - b.grad).abs().max()) for a, b in zip(mine, theirs))
big = max(float(b.grad.abs().max()) for b in theirs)
print("gradients: max |heed - torch| %.3g (max |torch| %.3g)" % (worst, big))
res = common.medians_ms([("heed.torch.attention(backward=True, lse=True): forward + backward", step(heed_attention, mine),
                          False),
                         ("torch: forward + autograd backward", step(torch_attention, theirs), True),
                         ("heed forward alone (no_grad)", forward(heed_attention, mine), False),
                         ("torch forward alone (no_grad)", forward(torch_attention, theirs), True)], n, BLAS)
common.show("B=%d L=%d H=%d D=%d" % (B, L, H, D), res)
ratio = res[1][1] / res[0][1]
print("training step: torch / heed %.2f (target >= 2: %s); backward alone (step less forward): torch %.3f ms, "
      "heed %.3f ms" % (ratio, "met" if ratio >= 2 else "MISSED", res[1][1] - res[3][1], res[0][1] - res[2][1]))
print("load average %.1f at the end" % os.getloadavg()[0])
