"""heed.compile's build and cache (issue 42, item 2): -O3 as the heed CLI,
heed.cache_clean, messages of dict specs that name no temporary file, and
heed.set_num_threads (make test-python)."""

import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

import heed
from test_heed import attention, close, rand

SPEC = {"heads": 2, "lq": 8, "dk": 4, "fuse": "none"}


class Build(unittest.TestCase):
    def test_cli_flags(self):
        """The compiler sees -O3 (a CC that logs its arguments), as the heed
        CLI's default flags (gen/build.lua) have it."""
        with tempfile.TemporaryDirectory() as d:
            log, cc = os.path.join(d, "argv"), os.path.join(d, "cc-log")
            with open(cc, "w") as f:
                f.write('#!/bin/sh\nprintf "%%s\\n" "$@" > %s\nexec cc "$@"\n' % log)
            os.chmod(cc, 0o700)
            with mock.patch.dict(os.environ, {"CC": cc, "HEED_CACHE": os.path.join(d, "cache")}):
                kern = heed.compile(dict(SPEC, name="py_o3"))
            with open(log) as f:
                argv = f.read().split("\n")
        self.assertIn("-O3", argv)
        self.assertNotIn("-O2", argv)
        with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                               "gen", "build.lua")) as f:
            self.assertIn('"-std=c11 -O3 -march=native -fopenmp', f.read())
        q, k, v = (rand((1, 2, 8, 4), s) for s in (1, 2, 3))
        close(self, kern(q, k, v), attention(q, k, v, 0.5))

    def test_dict_spec_messages(self):
        with self.assertRaises(ValueError) as cm:
            heed.compile({"name": "py_msg", "heads": 0, "lq": 4, "dk": 4})
        msg = str(cm.exception)
        self.assertIn("spec dict: ", msg)
        self.assertIn("heads", msg)
        self.assertNotIn("spec.lua", msg)
        self.assertNotIn(tempfile.gettempdir(), msg)
        with tempfile.TemporaryDirectory() as d:           # a file's messages name the file
            path = os.path.join(d, "mine.lua")
            with open(path, "w") as f:
                f.write('return { name = "py_msg", heads = 0, lq = 4, dk = 4 }\n')
            with self.assertRaises(ValueError) as cm:
                heed.compile(path)
            self.assertIn(path + ": ", str(cm.exception))


class CacheClean(unittest.TestCase):
    def test_clean(self):
        """Oldest (least recently used) first down to max_bytes, then all;
        only NAME-KEY.so regular files of the user: a link, another name,
        another user's object stay."""
        with tempfile.TemporaryDirectory() as d, mock.patch.dict(os.environ, {"HEED_CACHE": d}):
            a = heed.compile(dict(SPEC, name="py_clean_a")).path
            b = heed.compile(dict(SPEC, name="py_clean_b")).path
            cache = os.path.dirname(a)
            os.utime(a, (1000, 1000))
            os.utime(b, (2000, 2000))
            self.assertEqual(heed.compile(dict(SPEC, name="py_clean_a")).path, a)   # used again: now the newest
            victim = os.path.join(d, "victim.so")
            with open(victim, "wb") as f:
                f.write(b"x" * 100000)
            link = os.path.join(cache, "py_link-0123456789abcdef.so")
            os.symlink(victim, link)
            other = os.path.join(cache, "notes.so")
            with open(other, "w") as f:
                f.write("not heed's")
            theirs = os.path.join(cache, "py_theirs-0123456789abcdef.so")
            with open(theirs, "wb") as f:
                f.write(b"y" * 100000)
            if os.geteuid() == 0:
                import pwd
                os.chown(theirs, pwd.getpwnam("nobody").pw_uid, -1)
            else:
                print("test_clean: another user's object needs root: skipped")
                os.unlink(theirs)
            for bad in (-1, 1.5, True, "1"):
                with self.assertRaises(ValueError):
                    heed.cache_clean(bad)
            self.assertEqual(heed.cache_clean(os.path.getsize(a)), [b])
            self.assertTrue(os.path.exists(a))
            self.assertEqual(heed.cache_clean(max_bytes=os.path.getsize(a)), [])
            self.assertEqual(heed.cache_clean(), [a])
            self.assertTrue(os.path.islink(link))
            self.assertEqual(os.path.getsize(victim), 100000)
            self.assertTrue(os.path.exists(other))
            self.assertEqual(os.path.exists(theirs), os.geteuid() == 0)
            self.assertEqual(heed.cache_clean(), [])
            self.assertTrue(stat.S_ISREG(os.lstat(heed.compile(dict(SPEC, name="py_clean_a")).path).st_mode))


class Threads(unittest.TestCase):
    def test_set_num_threads(self):
        """heed.set_num_threads(n) is libgomp's count (the one heed's kernels
        read: omp_get_max_threads) for calls from this thread; child process."""
        r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
            import ctypes, threading
            import numpy as np
            import heed
            gomp = ctypes.CDLL("libgomp.so.1")
            print(gomp.omp_get_max_threads(), heed.get_num_threads())
            heed.set_num_threads(3)
            print(gomp.omp_get_max_threads(), heed.get_num_threads())
            kern = heed.compile({"name": "py_threads", "lq": 8, "dk": 4})
            q = np.ones((2, 1, 8, 4), np.float32)
            kern(q, q, q)
            print(getattr(ctypes.CDLL(kern.path), "omp_get_max_threads")())
            t = threading.Thread(target=lambda: print(heed.get_num_threads()))
            t.start(); t.join()
            for bad in (0, -1, 1.5, True):
                try:
                    heed.set_num_threads(bad)
                except ValueError:
                    print("refused", bad)
        """)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
            env=dict(os.environ, OMP_NUM_THREADS="5"))
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(r.stdout.splitlines(), ["5 5", "3 3", "3", "5", "refused 0", "refused -1", "refused 1.5",
                                                 "refused True"])


if __name__ == "__main__":
    unittest.main()
