"""heed.torch with tuned kernels (issue 40): a short `heed tune` (targets
limited to avx2, so its winner differs from the default schedule where the
machine runs avx512) writes a wisdom file; heed.torch builds its kernel
with that record's schedule and says so (kernel(...).schedule_source),
trains through it (gradients as Kernel.backward's), takes the default for a
spec without a record, and reads no wisdom file libheed's loader would
refuse (group or world writable, a symbolic link); heed.compile's wisdom=
the same (make test-python; skipped without torch)."""

import os
import re
import subprocess
import tempfile
import unittest
import warnings

import heed
from heed import kernel as hk

try:
    import torch
    SKIP = None
except ImportError as e:                    # scripts/deps.sh torch installs Debian's python3-torch
    torch = None
    SKIP = "torch cannot be imported (%s): the heed.torch wisdom test is skipped" % e
    print("test_torch_wisdom: " + SKIP)
if torch is not None:
    import heed.torch as ht


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 2 - 1


@unittest.skipIf(SKIP, SKIP)
class TunedKernels(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="heed-wisdom-")
        self.threads = heed.get_num_threads()
        heed.set_num_threads(1)
        self.addCleanup(heed.set_num_threads, self.threads)
        self.addCleanup(self.tmp.cleanup)
        self.addCleanup(ht.set_wisdom, True)

    def tune(self, spec):
        """heed tune of spec (1 thread, avx2 only, a 1 s budget) into
        tmp/wisdom; returns the wisdom path and the record's schedule."""
        path = os.path.join(self.tmp.name, "spec.lua")
        with open(path, "w") as f:
            f.write(heed.spec_to_lua(spec))
        wisdom, cache = os.path.join(self.tmp.name, "wisdom"), os.path.join(self.tmp.name, "cache")
        os.mkdir(cache, 0o700)
        # (the test hook judges every timing stable: a busy machine's are
        # not recorded otherwise, docs/tune.md)
        env = dict(os.environ, HEED_CACHE=cache, OMP_NUM_THREADS="1", HEED_TEST_TIMING="stable")
        r = subprocess.run([os.path.join(ROOT, "tests", "faults", "heed-hooked"), "tune", path, "--budget", "1", "--threads", "1", "--target", "avx2",
                            "--wisdom", wisdom, "-o", os.path.join(self.tmp.name, "out")],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        self.assertEqual(r.returncode, 0, r.stdout)
        with open(wisdom) as f:
            forward = [ln for ln in f if ln.startswith("spec=") and "\tpass=backward" not in ln]
        self.assertEqual(len(forward), 1, forward)
        return wisdom, re.search(r"\tschedule=([^\t]*)", forward[0]).group(1)

    def test_tuned_schedule_used_and_reported(self):
        q = rand(2, 2, 16, 8, seed=1).requires_grad_()
        k, v = rand(2, 2, 16, 8, seed=2).requires_grad_(), rand(2, 2, 16, 8, seed=3).requires_grad_()
        fields = {"backward": True, "mask": "causal"}
        wisdom, schedule = self.tune(ht._spec(fields, (q, k, v), None))
        self.assertTrue(schedule.startswith("target=avx2,"), schedule)
        ht.set_wisdom(wisdom)
        kern = ht.kernel(q, k, v, **fields)
        self.assertEqual(kern.schedule_source, "wisdom %s, its record for 1 thread" % wisdom)
        self.assertEqual(kern.schedule, schedule)
        out = ht.attention(q, k, v, **fields)
        dout = rand(2, 2, 16, 8, seed=4)
        got = torch.autograd.grad(out, (q, k, v), dout)
        want = kern.backward(*(t.detach().numpy() for t in (q, k, v, out)), dout.numpy())
        for g, w in zip(got, want):
            self.assertTrue(torch.equal(g, torch.from_numpy(w)))
        # the same record through heed.compile(wisdom=, threads=)
        plain = hk.compile(ht._spec(fields, (q, k, v), None), wisdom=wisdom, threads=1)
        self.assertEqual((plain.schedule, plain.schedule_source[:6]), (schedule, "wisdom"))
        # no record for this spec (another scale), or for 2 threads: the
        # default schedule, saying why (every default below is this one
        # kernel: compiled once)
        other = ht.kernel(q, k, v, scale=0.3, **fields)
        self.assertIn("default schedule (", other.schedule_source)
        self.assertIn("no record for spec", other.schedule_source)
        self.assertIn(wisdom, other.schedule_source)
        heed.set_num_threads(2)
        self.assertIn("2 threads", ht.kernel(q, k, v, scale=0.3, **fields).schedule_source)
        heed.set_num_threads(1)
        # files libheed's loader refuses are not read: a RuntimeWarning, the default schedule
        link = os.path.join(self.tmp.name, "link")
        os.symlink(wisdom, link)
        for path, mode, why in ((wisdom, 0o664, "writable by group or others"), (link, 0o600, "is a symbolic link")):
            os.chmod(wisdom, mode)
            ht.set_wisdom(path)
            ht._by_spec.clear()                 # (the file is read when a kernel is first compiled)
            ht._by_call.clear()
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                kern = ht.kernel(q, k, v, **fields)
            self.assertTrue(kern.schedule_source.startswith("default schedule ("), kern.schedule_source)
            self.assertIn(why, kern.schedule_source)
            self.assertTrue(any(why in str(x.message) for x in w), [str(x.message) for x in w])
            with self.assertRaises(ValueError) as cm:       # heed.compile with that file: refused
                hk.compile(ht._spec(fields, (q, k, v), None), wisdom=path, threads=1)
            self.assertIn(why, str(cm.exception))
        os.chmod(wisdom, 0o600)
        ht.set_wisdom(os.path.join(self.tmp.name, "missing"))
        self.assertIn("no wisdom file", ht.kernel(q, k, v, scale=0.3, **fields).schedule_source)
        ht.set_wisdom(None)
        self.assertEqual(ht.kernel(q, k, v, scale=0.3, **fields).schedule_source, "default schedule")


if __name__ == "__main__":
    unittest.main()
