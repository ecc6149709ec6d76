"""Threads of heed's kernels: OpenMP's (libgomp's) count.

A generated kernel runs on omp_get_max_threads() threads (templates/kernel.c,
thread_count()): OMP_NUM_THREADS at start, then whatever omp_set_num_threads
set. heed.compile builds with -fopenmp, so with gcc a kernel uses the
process's libgomp.so.1 -- the one Debian's torch uses too, which is why
torch.set_num_threads reaches heed's kernels there. A torch that bundles its
own OpenMP runtime (pip wheels) has its own count: set heed's here."""

import ctypes
import numbers

_gomp = None


def _libgomp():
    global _gomp
    if _gomp is None:
        try:
            _gomp = ctypes.CDLL("libgomp.so.1")
        except OSError as e:
            raise RuntimeError("heed: libgomp.so.1 (GCC's OpenMP runtime) cannot be loaded: %s" % e)
        _gomp.omp_set_num_threads.argtypes, _gomp.omp_set_num_threads.restype = [ctypes.c_int], None
        _gomp.omp_get_max_threads.argtypes, _gomp.omp_get_max_threads.restype = [], ctypes.c_int
    return _gomp


def set_num_threads(n):
    """The number of threads heed's kernels (and anything else on libgomp,
    Debian's torch included) use for calls from this Python thread:
    libgomp's omp_set_num_threads(n). OpenMP keeps the count per thread: a
    new Python thread starts from OMP_NUM_THREADS (or the number of cores)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= 1 << 16:
        raise ValueError("set_num_threads: n is a number of threads 1..65536, not %r" % (n,))
    _libgomp().omp_set_num_threads(int(n))


def get_num_threads():
    """The number of threads a kernel called from this Python thread runs on
    (libgomp's omp_get_max_threads())."""
    return _libgomp().omp_get_max_threads()
