"""heed from Python (docs/python.md).

    import heed, numpy as np
    k = heed.compile({"name": "pool", "heads": 8, "lq": 196, "dk": 64})
    out = k(q, k_, v)                 # float32 numpy arrays [batch][H][L][D]

    plan = heed.Plan({"heads": 8, "lq": 196, "dk": 64, "fuse": "none"})
    out = plan(q, k_, v)              # libheed: tuned, built-in or generic kernel
    print(plan.describe())

    nd = heed.Plan({"form": "neighborhood", "map": [56, 56], "kernel": 7, "dk": 64, "fuse": "none"})
    out = nd(q, k_, v)                # N-d plans too (X forms: nd(x))

    import heed.torch                 # with torch: kernels on tensors, no copies
    out = heed.torch.scaled_dot_product_attention(q, k_, v, is_causal=True)

heed.compile runs the heed CLI and the C compiler (cc, or $CC); heed.Plan
loads libheed (beside an install, the checkout's build/, or $HEED_LIB).
"""

from .kernel import Kernel, KernelError, cache_clean, compile, spec_to_lua
from .runtime import (ESTIMATE, MEASURE, NO_REGISTRY, NO_WISDOM, WISDOM_ONLY, HeedError, NdProblem, Plan, Problem,
                      nd_problem, nd_reference, problem, reference)
from .threads import get_num_threads, set_num_threads

__all__ = ["compile", "Kernel", "KernelError", "spec_to_lua", "cache_clean", "set_num_threads", "get_num_threads",
           "Plan", "Problem", "problem", "reference", "NdProblem", "nd_problem", "nd_reference", "HeedError",
           "ESTIMATE", "MEASURE", "WISDOM_ONLY", "NO_WISDOM", "NO_REGISTRY"]


def __getattr__(name):
    """heed.torch on first use (torch stays optional: import heed never imports it)."""
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'heed' has no attribute %r" % name)
