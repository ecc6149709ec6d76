"""Timing helpers of the torch benchmarks in one process (bench/python/models.py,
bench/python/vit_train.py): rows timed interleaved, medians, and Debian's
OpenBLAS (torch's GEMMs, pthreads, whose thread count is not torch's) at 1
and at the benchmark's thread count, each row taking its faster."""

import ctypes
import statistics
import time

try:                                    # Debian's libblas.so.3 is OpenBLAS when libopenblas0 is the alternative
    _blas = ctypes.CDLL("libblas.so.3")
    _blas.openblas_set_num_threads.argtypes = [ctypes.c_int]
except (OSError, AttributeError):
    _blas = None


def blas_counts(threads):
    """The OpenBLAS thread counts a row that multiplies is timed at."""
    return sorted({1, threads}) if _blas else [None]


def with_blas(count, f):
    if count is None:
        return f

    def call():
        _blas.openblas_set_num_threads(count)
        return f()
    return call


def medians_ms(rows, reps, blas):
    """rows: (name, fn, uses_blas). Each fn is timed at every OpenBLAS count
    of blas (once if it does not multiply through BLAS), reps calls each
    after one warm-up call, interleaved; returns (name, best median ms, its
    OpenBLAS count) per row."""
    calls = [(i, b, with_blas(b, f)) for i, (_, f, uses) in enumerate(rows) for b in (blas if uses else [None])]
    for _, _, f in calls:
        f()
    times = [[] for _ in calls]
    for _ in range(reps):
        for (_, _, f), ts in zip(calls, times):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
    best = {}
    for (i, b, _), ts in zip(calls, times):
        ms = statistics.median(ts) * 1e3
        if i not in best or ms < best[i][0]:
            best[i] = (ms, b)
    return [(rows[i][0],) + best[i] for i in range(len(rows))]


def show(title, res):
    print(title)
    for name, ms, b in res:
        print("  %-58s %10.3f ms%s" % (name, ms, "" if b is None else "  (OpenBLAS %d)" % b))
