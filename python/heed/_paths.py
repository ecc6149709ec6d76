"""Where the heed CLI, libheed and the cache are (checkout or install)."""

import os
import shutil
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def heed_command():
    """The heed CLI: $HEED_ROOT/heed, the checkout's ./heed beside python/,
    PREFIX/bin/heed beside PREFIX/lib/python3/dist-packages, or heed on PATH."""
    root = os.environ.get("HEED_ROOT")
    candidates = [Path(root) / "heed"] if root else []
    candidates.append(_HERE.parents[1] / "heed")           # checkout: python/heed -> ./heed
    if len(_HERE.parents) > 3:
        candidates.append(_HERE.parents[3] / "bin" / "heed")  # PREFIX/lib/python3/dist-packages/heed
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("heed")
    if found:
        return found
    raise RuntimeError("heed: the heed command was not found (set HEED_ROOT to a checkout or an install's "
                       "share/heed, or put heed on PATH)")


def libheed_path():
    """libheed.so.0: $HEED_LIB, PREFIX/lib beside the installed package, the
    checkout's build/, else the dynamic loader's search path."""
    lib = os.environ.get("HEED_LIB")
    if lib:
        return lib
    candidates = []
    if len(_HERE.parents) > 3:
        candidates.append(_HERE.parents[2] / "libheed.so.0")  # PREFIX/lib/python3/dist-packages/heed
    candidates.append(_HERE.parents[1] / "build" / "libheed.so.0")
    for c in candidates:
        if c.is_file():
            return str(c)
    return "libheed.so.0"


def cache_dir():
    """$HEED_CACHE/python (default ~/.cache/heed/python): compiled kernels."""
    base = os.environ.get("HEED_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "heed")
    d = os.path.join(base, "python")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d
