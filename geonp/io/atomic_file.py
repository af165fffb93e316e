"""Write any file atomically: a hidden temporary file beside it, flushed, then moved onto its name.

JSON reports, PNGs and model files are written through :func:`atomic_write_file` (and its
``bytes``/``text`` forms); rasters, which are also read back before they are moved, through
:mod:`geonp.io.atomic`. A failed or killed write leaves at most a hidden partial file, which the
next run writing to the same directory removes (:mod:`geonp.io.partials`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from geonp.errors import OutputError
from geonp.io.partials import note_partials_left, partial_path, unlink_quietly
from geonp.io.write_errors import disk_full_message, is_disk_full

__all__ = ["atomic_write_bytes", "atomic_write_file", "atomic_write_text", "fsync_dir", "fsync_path"]


def fsync_path(path: Path) -> None:
    """Flush a file (or a directory) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename durable; best effort (not every platform can open directories)."""
    try:
        fsync_path(path)
    except OSError:
        pass


def _umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_file(path: str | os.PathLike[str], write: Callable[[Path], object]) -> None:
    """Write a file atomically through a writer function (temporary file, then replace).

    ``write(temp)`` creates and fills ``temp``, a hidden file beside ``path`` (as
    ``safetensors.torch.save_file`` or ``Path.write_text`` do); the file then gets the
    permissions the user's umask gives new files (some writers create 0600 files, and a model or a
    report is meant to be shared like any file the user writes), is flushed to disk and moved onto
    ``path``. On any exception, KeyboardInterrupt included, the temporary file is
    deleted and the exception propagates (a full disk as :class:`~geonp.errors.OutputError`).

    Args:
        path: Final path; an existing file is replaced.
        write: Function that writes the whole content to the path it is given.

    Raises:
        OutputError: If the disk is full (no file is left behind).
    """
    final = Path(os.fspath(path)).expanduser().absolute()
    tmp = partial_path(final, ".tmp")
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        fsync_path(tmp)
        os.replace(tmp, final)
    except BaseException as err:
        unlink_quietly(tmp)
        if isinstance(err, KeyboardInterrupt):
            note_partials_left(err)  # the message then says what is really left on disk
        if is_disk_full(err):
            raise OutputError(disk_full_message(final)) from err
        raise
    fsync_dir(final.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write bytes to a file atomically (see :func:`atomic_write_file`).

    Args:
        path: Final path; an existing file is replaced.
        data: The content.

    Raises:
        OutputError: If the disk is full (no file is left behind).
    """

    def write(tmp: Path) -> None:
        with open(tmp, "xb") as fh:
            fh.write(data)

    atomic_write_file(path, write)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8 (same replacement, same errors)."""
    atomic_write_bytes(path, text.encode("utf-8"))
