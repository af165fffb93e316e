"""What a failed write means: a full disk, or GDAL failing on the file, as one-line errors.

GDAL often reports a full disk only indirectly (a truncated file that closes "successfully", "IO
error writing tag data"), so the rules that tell a full disk from another failure live here, used
by the COG conversion (:mod:`geonp.io.profiles`) and the atomic writers (:mod:`geonp.io.atomic`).
:func:`quiet_libtiff` keeps libtiff's own lines about the same failures off the terminal.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from geonp.errors import OutputError

__all__ = [
    "disk_full_message",
    "free_bytes",
    "is_disk_full",
    "is_gdal_error",
    "quiet_libtiff",
    "verify_failed",
    "write_failed",
]


def is_disk_full(err: BaseException | None) -> bool:
    """Tell whether an error (or one it was raised from) means the disk is full."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(err).lower()
        if "no space left" in text or "free disk space" in text or "disk full" in text:
            return True
        err = err.__cause__ or err.__context__
    return False


def disk_full_message(path: str | os.PathLike[str]) -> str:
    """The one-line message for a full disk while writing ``path``."""
    return (
        f"No space left on device while writing {os.fspath(path)}; free space or write "
        "elsewhere. No file was written."
    )


def free_bytes(directory: Path) -> int | None:
    """Bytes free to this user in ``directory``'s file system, or None where it cannot be told."""
    try:
        st = os.statvfs(directory)
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


#: Free bytes below which a failed write is taken for a full disk.
NEARLY_FULL = 4 * 2**20


def is_gdal_error(err: BaseException) -> bool:
    """Tell whether an exception is rasterio's or GDAL's own (``RasterioIOError``, ``CPLE_*``)."""
    return type(err).__module__.startswith("rasterio")


def write_failed(path: str | os.PathLike[str], err: BaseException, *, what: str = "") -> OutputError:
    """One-line error for a failed write; a full disk (or nearly full) is named as such.

    GDAL often reports a full disk only indirectly ("IO error writing tag data", or a file
    that will not open afterwards), so little free space left counts as a full disk too.
    """
    free = free_bytes(Path(os.fspath(path)).parent)
    if is_disk_full(err) or (free is not None and free < NEARLY_FULL):
        return OutputError(disk_full_message(path))
    text = " ".join(str(err).split()) or type(err).__name__
    cause = err.__cause__ or err.__context__
    if "See previous exception" in text and cause is not None:
        text = " ".join(str(cause).split()) or text
    return OutputError(
        f"Writing {os.fspath(path)} failed: {what + ' ' if what else ''}({text}); check the disk "
        "and the path, and run again. No file was written."
    )


def verify_failed(path: str | os.PathLike[str], err: BaseException) -> OutputError:
    """The error for a written file that does not read back (most often a full disk)."""
    return write_failed(path, err, what="the file could not be read back")


_QUIET_LOCK = threading.Lock()
_quiet_depth = 0
_saved_handlers: list[int | None] = []


@functools.cache
def _libtiffs() -> tuple[ctypes.CDLL, ...]:
    """The libtiff libraries loaded in this process (found in ``/proc/self/maps``: Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            names = {line.split()[-1] for line in maps if line.rsplit("/", 1)[-1].startswith("libtiff")}
    except OSError:
        return ()
    libs = []
    for name in sorted(names):
        try:
            lib = ctypes.CDLL(name)
            lib.TIFFSetErrorHandler.restype = ctypes.c_void_p
            lib.TIFFSetErrorHandler.argtypes = [ctypes.c_void_p]
        except (OSError, AttributeError):
            continue
        libs.append(lib)
    return tuple(libs)


@contextlib.contextmanager
def quiet_libtiff() -> Iterator[None]:
    """Keep libtiff from printing its own error lines to stderr while the block runs.

    On a full disk GDAL's GeoTIFF I/O reports through libtiff's global error handler, which
    prints ``_tiffWriteProc: No space left on device.`` straight to stderr (no GDAL or Python
    setting reaches it), before geonp's one-line message says the same. The handler is unset
    while any such block runs (blocks may nest or run in threads) and restored after the last.
    """
    global _quiet_depth
    libs = _libtiffs()
    with _QUIET_LOCK:
        if _quiet_depth == 0:
            _saved_handlers[:] = [lib.TIFFSetErrorHandler(None) for lib in libs]
        _quiet_depth += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                for lib, handler in zip(libs, _saved_handlers, strict=True):
                    lib.TIFFSetErrorHandler(handler)
