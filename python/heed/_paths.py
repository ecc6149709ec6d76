"""Where the heed CLI, libheed and the cache are (checkout or install)."""

import errno
import os
import shutil
import stat
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def heed_command():
    """The heed CLI: $HEED_ROOT/heed, the checkout's ./heed beside python/,
    PREFIX/bin/heed beside PREFIX/lib/python3.X/dist-packages, or heed on PATH."""
    root = os.environ.get("HEED_ROOT")
    candidates = [Path(root) / "heed"] if root else []
    candidates.append(_HERE.parents[1] / "heed")           # checkout: python/heed -> ./heed
    if len(_HERE.parents) > 3:
        candidates.append(_HERE.parents[3] / "bin" / "heed")  # PREFIX/lib/python3.X/dist-packages/heed
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
        candidates.append(_HERE.parents[2] / "libheed.so.0")  # PREFIX/lib/python3.X/dist-packages/heed
    candidates.append(_HERE.parents[1] / "build" / "libheed.so.0")
    for c in candidates:
        if c.is_file():
            return str(c)
    return "libheed.so.0"


class UnsafeCache(RuntimeError):
    """A cache directory or object that libheed's loader rule refuses."""


def unsafe(st, kind="directory"):
    """Why libheed's loader (runtime/loader.c) would refuse a file or
    directory of this lstat/stat result, or None: it must be owned by the
    effective user, not writable by group or others, and (checked with
    lstat) not a symbolic link."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if kind == "directory" and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return "is owned by another user (uid %d)" % st.st_uid
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by group or others (mode %04o)" % stat.S_IMODE(st.st_mode)
    return None


def cache_dir():
    """$HEED_CACHE/python (default ~/.cache/heed/python): compiled kernels.
    Made with mode 0700 when missing; the cache and its python/ directory must
    pass libheed's loader rule (unsafe()), else UnsafeCache."""
    base = os.environ.get("HEED_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "heed")
    d = os.path.join(base, "python")
    for path, look in ((base, os.stat), (d, os.lstat)):
        try:
            os.makedirs(path, mode=0o700)
        except FileExistsError:
            pass
        # $HEED_CACHE may be a symbolic link to a directory (libheed's loader
        # stats it too); python/ is a directory heed made, never a link
        why = unsafe(look(path))
        if why:
            raise UnsafeCache("heed: the cache directory %s %s (libheed's loader refuses such a cache)"
                              % (path, why))
    return d


# libheed refuses a larger wisdom file before reading it (docs/wisdom.md)
WISDOM_MAX = 256 << 20


def default_wisdom():
    """$HEED_CACHE/wisdom (default ~/.cache/heed/wisdom): what heed tune
    writes and libheed's plans read."""
    base = os.environ.get("HEED_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "heed")
    return os.path.join(base, "wisdom")


def read_wisdom(path):
    """The bytes of the wisdom file path, read only when it passes
    libheed's loader rule (unsafe()): a regular file, not a symbolic link,
    owned by the effective user and writable by no one else, in a directory
    that is so too (its directory may be a link, as $HEED_CACHE may). The
    checks are made on the open descriptor (O_NOFOLLOW, O_NONBLOCK: never
    waits on a FIFO), so what is read is what was checked. Raises
    FileNotFoundError when there is no file, UnsafeCache saying why when
    the rule refuses it."""
    d = os.path.dirname(os.path.abspath(path))
    why = unsafe(os.stat(d))
    if why:
        raise UnsafeCache("heed: the wisdom file's directory %s %s: %s not read" % (d, why, path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:                          # O_NOFOLLOW on a symbolic link
            raise UnsafeCache("heed: the wisdom file %s is a symbolic link: not read" % path)
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        why = unsafe(st, "file")
        if why:
            raise UnsafeCache("heed: the wisdom file %s %s: not read" % (path, why))
        if st.st_size > WISDOM_MAX:
            raise UnsafeCache("heed: the wisdom file %s is larger than 256 MiB: not read" % path)
        return f.read(WISDOM_MAX + 1)
