"""The heed package as `make install` puts it (make test-python): run with
HEED_TEST_PREFIX=PREFIX and no PYTHONPATH; imports heed from
PREFIX/lib/python3.X/dist-packages, which finds PREFIX/bin/heed and
PREFIX/lib/libheed.so.0 by itself, and runs a kernel and a plan."""

import glob
import os
import sys

prefix = os.environ["HEED_TEST_PREFIX"]
for v in ("HEED_ROOT", "HEED_LIB", "PYTHONPATH"):
    os.environ.pop(v, None)
found = glob.glob(os.path.join(prefix, "lib", "python3*", "*-packages", "heed"))
if len(found) != 1:
    sys.exit("test-python (installed): FAIL: expected one PREFIX/lib/python3*/*-packages/heed, found %r" % found)
sys.path.insert(0, os.path.dirname(found[0]))

import numpy as np  # noqa: E402

import heed  # noqa: E402
from heed import _paths  # noqa: E402


def check(cond, what):
    if not cond:
        sys.exit("test-python (installed): FAIL: " + what)


check(heed.__file__.startswith(prefix + "/"), "heed imported from %s, not from %s" % (heed.__file__, prefix))
check(_paths.heed_command() == os.path.join(prefix, "bin", "heed"), "heed CLI: " + _paths.heed_command())
check(_paths.libheed_path() == os.path.join(prefix, "lib", "libheed.so.0"), "libheed: " + _paths.libheed_path())
spec = {"name": "py_installed", "heads": 2, "lq": 12, "dk": 8}
rng = np.random.default_rng(3)
q, k, v = (rng.uniform(-1, 1, (2, 2, 12, 8)).astype(np.float32) for _ in range(3))
ref = heed.reference(spec, q, k, v)
out = heed.compile(spec)(q, k, v)
check(np.all(np.abs(out - ref) <= 1e-5 + 1e-4 * np.abs(ref)), "kernel vs reference")
plan = heed.Plan(spec)
check(np.all(np.abs(plan(q, k, v) - ref) <= 1e-5 + 1e-4 * np.abs(ref)), "plan vs reference")
print("test-python (installed): heed from %s: kernel and plan (%s) match the reference" % (prefix, plan.describe()))
try:
    import torch
except ImportError as e:
    print("test-python (installed): torch cannot be imported (%s): heed.torch not checked" % e)
else:
    import heed.torch  # noqa: E402
    check(heed.torch.__file__.startswith(prefix + "/"), "heed.torch imported from " + heed.torch.__file__)
    out = heed.torch.attention(*(torch.from_numpy(a) for a in (q, k, v)), fuse="mean")
    check(np.all(np.abs(out.numpy() - ref) <= 1e-5 + 1e-4 * np.abs(ref)), "heed.torch vs reference")
    print("test-python (installed): heed.torch matches the reference")
