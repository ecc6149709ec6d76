"""Issue 41 (items 3, 7, 8, 15): heed.compile's cache under libheed's loader
rule, Plan.close() during a call, heed.Plan's spec checks and 16-bit / lse
plans, kernels of lse specs, CC with flags, numpy scalars (make test-python)."""

import os
import shlex
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest
import warnings
from unittest import mock

import numpy as np

import heed
from test_heed import attention, close, rand

SPEC = {"name": "py_planted", "heads": 2, "lq": 8, "dk": 4, "fuse": "none"}


def compile_in(cache, spec=SPEC):
    """heed.compile(spec) with HEED_CACHE=cache; returns the kernel and the
    warnings it gave."""
    with mock.patch.dict(os.environ, {"HEED_CACHE": cache}), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        return heed.compile(spec), [str(x.message) for x in w]


class Cache(unittest.TestCase):
    """A planted object is never loaded, a planted name never followed."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="heed-pycache-")
        cls.marker = os.path.join(cls.tmp.name, "PLANTED-RAN")
        # an object whose constructor leaves a marker when it is loaded
        src = os.path.join(cls.tmp.name, "planted.c")
        with open(src, "w") as f:
            f.write('#include <stdio.h>\n__attribute__((constructor)) static void planted(void)\n'
                    '{ FILE *f = fopen("%s", "w"); if (f) fclose(f); }\n' % cls.marker)
        cls.planted = os.path.join(cls.tmp.name, "planted.so")
        subprocess.check_call(shlex.split(os.environ.get("CC") or "cc") + ["-shared", "-fPIC", src, "-o", cls.planted])
        # the name heed.compile gives SPEC's object (predictable: a hash of public sources)
        kern, _ = compile_in(os.path.join(cls.tmp.name, "first"))
        cls.so_name = os.path.basename(kern.path)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def cache(self, name, base_mode=0o700, py_mode=0o700, owner=None):
        """A cache directory with its python/ directory, modes and owner as given."""
        base = os.path.join(self.tmp.name, name)
        os.mkdir(base)
        os.mkdir(os.path.join(base, "python"))
        for d, mode in ((base, base_mode), (os.path.join(base, "python"), py_mode)):
            os.chmod(d, mode)
            if owner is not None:
                os.chown(d, owner, -1)
        return base

    def plant(self, cache, mode=0o644, owner=None, link=False):
        so = os.path.join(cache, "python", self.so_name)
        if link:
            os.symlink(self.planted, so)
        else:
            with open(self.planted, "rb") as src, open(so, "wb") as dst:
                dst.write(src.read())
            os.chmod(so, mode)
            if owner is not None:
                os.chown(so, owner, -1)
        return so

    def assertRefused(self, cache, why):
        """heed.compile in cache: the planted object's constructor never runs,
        a warning says why, and the kernel it returns is right."""
        if os.path.exists(self.marker):
            os.unlink(self.marker)
        try:
            kern, warned = compile_in(cache)
        finally:
            self.assertFalse(os.path.exists(self.marker), "the planted object was loaded (%s)" % why)
        self.assertTrue(any(why in w for w in warned), warned)
        q, k, v = (rand((1, 2, 8, 4), s) for s in (1, 2, 3))
        close(self, kern(q, k, v), attention(q, k, v, 0.5))
        return kern

    def test_unsafe_cache_directory_not_loaded(self):
        cases = [("world", dict(base_mode=0o777, py_mode=0o777), "writable by group or others"),
                 ("group", dict(py_mode=0o770), "writable by group or others")]
        if os.geteuid() == 0:
            cases.append(("other", dict(base_mode=0o755, py_mode=0o755, owner=self.nobody()), "owned by another user"))
        else:
            print("test_unsafe_cache_directory_not_loaded: the other-owner case needs root, skipped")
        for name, modes, why in cases:
            with self.subTest(cache=name):
                cache = self.cache(name, **modes)
                self.plant(cache, owner=modes.get("owner"))
                kern = self.assertRefused(cache, why)
                self.assertFalse(kern.path.startswith(cache + "/"), kern.path)

    def test_unsafe_object_rebuilt(self):
        """In a safe cache, an object that is writable by others, another
        user's or a symbolic link is replaced by a fresh one."""
        cases = [("mode", dict(mode=0o666), "writable by group or others"),
                 ("link", dict(link=True), "symbolic link")]
        if os.geteuid() == 0:
            cases.append(("owner", dict(owner=self.nobody()), "owned by another user"))
        for name, how, why in cases:
            with self.subTest(object=name):
                cache = self.cache("obj-" + name)
                so = self.plant(cache, **how)
                kern = self.assertRefused(cache, why)
                self.assertEqual(kern.path, so)
                st = os.lstat(so)
                self.assertTrue(stat.S_ISREG(st.st_mode))
                self.assertEqual(st.st_uid, os.geteuid())
                self.assertFalse(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))

    def test_planted_temporary_name_not_followed(self):
        """The old temporary name (SO.tmpPID) made a symbolic link there
        overwrite its target; temporaries are mkstemp's now."""
        cache = self.cache("tmpname")
        victim = os.path.join(self.tmp.name, "victim")
        with open(victim, "w") as f:
            f.write("the victim's own bytes\n")
        so = os.path.join(cache, "python", self.so_name)
        os.symlink(victim, so + ".tmp%d" % os.getpid())
        kern, _ = compile_in(cache)
        with open(victim, "rb") as f:
            self.assertEqual(f.read(), b"the victim's own bytes\n")
        self.assertTrue(stat.S_ISREG(os.lstat(so).st_mode))
        self.assertEqual(kern.path, so)
        self.assertEqual(sorted(os.listdir(os.path.join(cache, "python"))),
                         sorted([self.so_name, self.so_name + ".tmp%d" % os.getpid()]))

    @staticmethod
    def nobody():
        import pwd
        return pwd.getpwnam("nobody").pw_uid


CLOSE_DURING_CALL = textwrap.dedent("""
    import threading, time
    import numpy as np
    import heed
    spec = {"heads": 4, "lq": 1024, "dk": 64, "fuse": "none"}
    rng = np.random.default_rng(1)
    q, k, v = (rng.uniform(-1, 1, (2, 4, 1024, 64)).astype(np.float32) for _ in range(3))
    want = heed.Plan(spec, flags=heed.NO_WISDOM)(q, k, v)
    for rnd in range(3):
        plan = heed.Plan(spec, flags=heed.NO_WISDOM)
        started, results, refused = threading.Event(), [], []
        def worker():
            while True:
                started.set()
                try:
                    out = plan(q, k, v)
                except ValueError as e:
                    refused.append(str(e))
                    return
                results.append(np.array_equal(out, want))
        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        started.wait()
        time.sleep(0.05)            # (not a margin: a call is likelier to be inside the kernel)
        plan.close()                # waits for the calls in flight
        for _ in range(20):         # reuses the memory a freed plan would have left
            heed.Plan({"heads": 2, "lq": 16, "dk": 8}).close()
        for t in threads:
            t.join()
        assert all(results) and len(refused) == 2, (results, refused)
        assert all("closed" in r for r in refused), refused
    print("close-during-call: ok")
""")


class PlanClose(unittest.TestCase):
    def test_close_during_call(self):
        """close() from one thread while two others run the plan: the calls in
        flight finish with the right result, later ones raise ValueError. In
        a child process, so a crash is this test's failure."""
        r = subprocess.run([sys.executable, "-c", CLOSE_DURING_CALL], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
        self.assertEqual(r.returncode, 0, "child exited %d:\n%s" % (r.returncode, r.stdout))
        self.assertIn("close-during-call: ok", r.stdout)

    def test_closed_plan_refuses(self):
        plan = heed.Plan({"lq": 4, "dk": 4})
        plan.close()
        plan.close()
        q = rand((1, 1, 4, 4), 1)
        for call in (lambda: plan(q, q, q), plan.describe, lambda: plan.source):
            with self.assertRaises(ValueError) as cm:
                call()
            self.assertIn("closed", str(cm.exception))


class PlanSpecs(unittest.TestCase):
    def assertRefused(self, spec, *words):
        with self.assertRaises(ValueError) as cm:
            heed.Plan(spec)
        for w in words:
            self.assertIn(w, str(cm.exception))

    def test_unknown_keys(self):
        self.assertRefused({"haeds": 2, "lq": 4, "dk": 4}, "unknown field 'haeds'", "allowed: name, heads")
        self.assertRefused({"lq": 4, "dk": 4, "mask": {"kind": "local", "radius": 1, "gausian": True}},
                           "'mask.gausian'", "allowed: kind, radius, gaussian")
        self.assertRefused({"lq": 4, "dk": 4, "mask": {"kind": "causal", "radius": 1}}, "'mask.radius'")
        self.assertRefused({"form": "neighborhood", "map": [5], "kernel": 3, "dk": 4, "lse": True},
                           "unknown field 'lse'", "heads_kv")
        self.assertRefused({"form": "patches", "channels": 2, "map": [4], "window": 2, "heads_kv": 1},
                           "unknown field 'heads_kv'")
        self.assertRefused({"form": "patches", "channels": 2, "map": [4], "window": 2,
                            "f_v": {"kind": "identity", "out": 3}}, "'f_v.out'")
        self.assertRefused({"lq": 4, "dk": 4, 1: 2}, "key 1 is not a string")
        self.assertRefused({"lq": 4, "dk": 4, "da": 3}, "da: only applies")

    def test_ranges_before_ctypes(self):
        self.assertRefused({"lq": 4, "dk": 4, "heads": 2 ** 32 + 2}, "heads", "out of range")
        self.assertRefused({"lq": 2 ** 31, "dk": 4}, "lq", "out of range")
        self.assertRefused({"lq": 0, "dk": 4}, "lq", "out of range")
        self.assertRefused({"lq": 4, "dk": 4, "heads": True}, "heads", "not an integer")
        self.assertRefused({"lq": 4.5, "dk": 4}, "lq", "not an integer")
        self.assertRefused({"lq": 4, "dk": 4, "scale": "0.5"}, "scale")
        self.assertRefused({"lq": 4, "dk": 4, "mask": {"kind": "local", "radius": -1}}, "mask.radius")
        self.assertRefused({"form": "neighborhood", "map": [5, 2 ** 32 + 5], "kernel": 3, "dk": 4}, "map[1]")
        self.assertRefused({"form": "halo", "map": [8], "block": 4, "halo": 2 ** 32, "dk": 4}, "halo")
        self.assertRefused({"lq": 4, "dk": 4, "dtype": "f64"}, "dtype", "f32, bf16, f16")
        self.assertRefused({"lq": 4, "dk": 4, "lse": 1}, "lse")

    def test_16bit_plans(self):
        """dtype and out_dtype bf16 / f16: uint16 bit patterns in and out
        (heed_execute_typed), against libheed's reference of the widened
        inputs."""
        spec = {"heads": 2, "lq": 8, "lk": 12, "dk": 4, "fuse": "none"}
        q, k, v = rand((2, 2, 8, 4), 1), rand((2, 2, 12, 4), 2), rand((2, 2, 12, 4), 3)
        bf = [(a.view(np.uint32) >> 16).astype(np.uint16) for a in (q, k, v)]      # exact bf16 values
        wide = [(b.astype(np.uint32) << 16).view(np.float32) for b in bf]
        ref = heed.reference(spec, *wide)
        with heed.Plan(dict(spec, dtype="bf16")) as plan:
            close(self, plan(*bf), ref)
            with self.assertRaises(ValueError) as cm:
                plan(*wide)
            self.assertIn("expected uint16", str(cm.exception))
        with heed.Plan(dict(spec, dtype="bf16", out_dtype="bf16")) as plan:
            out = plan(*bf)
            self.assertEqual(out.dtype, np.uint16)
            got = (out.astype(np.uint32) << 16).view(np.float32)
            self.assertTrue(np.all(np.abs(got - ref) <= (2 ** -8 + 1e-4) * np.abs(ref) + 1e-5))
        f16 = [a.astype(np.float16) for a in (q, k, v)]
        ref = heed.reference(spec, *[a.astype(np.float32) for a in f16])
        with heed.Plan(dict(spec, dtype="f16", out_dtype="f16")) as plan:
            got = plan(*[a.view(np.uint16) for a in f16]).view(np.float16).astype(np.float64)
            self.assertTrue(np.all(np.abs(got - ref) <= (2 ** -11 + 1e-4) * np.abs(ref) + 1e-5))
        nd = {"form": "neighborhood", "map": [12], "kernel": [5], "dk": 8, "fuse": "none"}
        qn, kn, vn = (rand((2, 1, 12, 8), s) for s in (4, 5, 6))
        ref = heed.nd_reference(nd, qn, kn, vn)
        with heed.Plan(dict(nd, out_dtype="f16")) as plan:
            got = plan(qn, kn, vn).view(np.float16).astype(np.float64)
            self.assertTrue(np.all(np.abs(got - ref) <= (2 ** -11 + 1e-4) * np.abs(ref) + 1e-5))


def lse_of(q, k, scale):
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) * scale
    m = s.max(-1, keepdims=True)
    return (m + np.log(np.exp(s - m).sum(-1, keepdims=True)))[..., 0]


class Item15(unittest.TestCase):
    def test_lse_kernels_and_plans(self):
        """Kernels and plans of lse specs return (out, lse)."""
        spec = {"name": "py_lse", "heads": 2, "lq": 8, "lk": 10, "dk": 4, "fuse": "none", "lse": True}
        q, k, v = rand((3, 2, 8, 4), 1), rand((3, 2, 10, 4), 2), rand((3, 2, 10, 4), 3)
        kern = heed.compile(spec)
        for run in (kern, heed.Plan(spec)):
            out, lse = run(q, k, v)
            close(self, out, attention(q, k, v, 0.5))
            self.assertEqual(lse.shape, (3, 2, 8))
            close(self, lse, lse_of(q, k, 0.5))
        self.assertEqual(kern.output_names, ["out", "lse"])

    def test_cc_with_flags(self):
        with mock.patch.dict(os.environ, {"CC": "cc -O0"}):
            kern = heed.compile({"name": "py_cc_flags", "lq": 8, "dk": 4, "fuse": "none"})
        q, k, v = (rand((1, 1, 8, 4), s) for s in (1, 2, 3))
        close(self, kern(q, k, v), attention(q, k, v, 0.5))
        with mock.patch.dict(os.environ, {"CC": "/nonexistent/cc -O0"}):
            with self.assertRaises(RuntimeError) as cm:
                heed.compile({"name": "py_cc_none", "lq": 8, "dk": 4, "fuse": "none"})
            self.assertIn("/nonexistent/cc", str(cm.exception))

    def test_numpy_scalars(self):
        spec = {"name": "py_np", "heads": np.int64(2), "lq": np.int32(8), "dk": np.uint8(4), "fuse": "none",
                "scale": np.float32(0.25), "mask": {"kind": "local", "radius": np.int16(2), "gaussian": np.bool_(False)}}
        self.assertIn('["heads"] = 2', heed.spec_to_lua(spec))
        q, k, v = (rand((1, 2, 8, 4), s) for s in (1, 2, 3))
        ref = heed.reference(spec, q, k, v)
        close(self, heed.compile(spec)(q, k, v), ref)
        close(self, heed.Plan(spec)(q, k, v), ref)

    def test_mixed_key_types(self):
        with self.assertRaises(ValueError) as cm:
            heed.compile({"name": "py_mixed", "lq": 4, "dk": 4, 7: "x"})
        self.assertIn("key 7 is not a string", str(cm.exception))
        with self.assertRaises(ValueError):
            heed.spec_to_lua({"name": "py_mixed", "mask": {"kind": "local", 1: 2}})


if __name__ == "__main__":
    unittest.main()
