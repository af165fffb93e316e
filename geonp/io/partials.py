"""Name the temporary files of atomic writes, and remove those that killed runs left.

A partial file is ``.<name>.geonp-partial-<host>-<pid>-<random><suffix>`` beside its output:
hidden, and naming the machine and process that write it, so a later run can tell a leftover of
a dead process from a file another run is writing right now.

A process remembers the partial files it named, so that after Ctrl-C or SIGTERM it can say
truthfully whether any is left (:func:`own_partials`, :func:`note_partials_left`): the CLI reads
an interrupt's :data:`PARTIALS_LEFT` attribute before it says that no partial output remains.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = [
    "PARTIALS_LEFT",
    "STALE_PARTIAL_SECONDS",
    "host_tag",
    "note_partials_left",
    "own_partials",
    "partial_path",
    "partials_in",
    "remove_stale_partials",
    "unlink_quietly",
    "with_sidecars",
]


_PARTIAL_TAG = ".geonp-partial-"


def host_tag() -> str:
    """Six hex digits naming this machine (partial files on shared disks name their writer)."""
    return hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:6]


def partial_path(final: Path, suffix: str) -> Path:
    """``.<name>.geonp-partial-<host>-<pid>-<random><suffix>`` beside ``final`` (remembered: :func:`own_partials`)."""
    owner = f"{host_tag()}-{os.getpid()}"
    path = final.with_name(f".{final.name}{_PARTIAL_TAG}{owner}-{secrets.token_hex(6)}{suffix}")
    with _OWN_LOCK:
        if len(_OWN) >= _OWN_PRUNE_AT:  # a long-lived process (a Dask worker) names many
            _OWN.intersection_update([p for p in _OWN if p.exists()])
        _OWN.add(path.absolute())
    return path


#: The partial files this process named (most are committed or removed long since).
_OWN: set[Path] = set()
_OWN_LOCK = threading.Lock()
_OWN_PRUNE_AT = 256

#: The attribute of an interrupt (KeyboardInterrupt) that lists the partial files still on disk
#: once geonp has cleaned up after it; absent where no geonp writer saw the interrupt.
PARTIALS_LEFT = "partials_left"


def own_partials() -> list[Path]:
    """The partial files this process named that exist now (with their sidecars), sorted."""
    with _OWN_LOCK:
        named = list(_OWN)
    return sorted(f for p in named for f in with_sidecars(p))


def with_sidecars(partial: Path) -> list[Path]:
    """A partial file and the files GDAL wrote beside it under its name, sorted.

    ``.o.bil.geonp-partial-...bil`` comes with ``...hdr``, ``...prj`` and ``...bil.aux.xml``:
    every existing file named like ``partial`` up to its extension (the random part of a partial
    name makes them this writer's). An empty list when none exists.
    """
    return sorted(p for p in partial.parent.glob(glob.escape(partial.stem) + ".*") if p.is_file())


def note_partials_left(interrupt: BaseException, others: Iterable[Path] = ()) -> list[Path]:
    """Record on ``interrupt`` which partial files remain: this process's and ``others``.

    Called after the cleanup an interrupt triggers, so the message that follows it names what
    is really on disk (the latest call wins: it comes after more of the cleanup).

    Args:
        interrupt: the KeyboardInterrupt (Ctrl-C, or a signal turned into one).
        others: partial files other processes of the run (Dask workers) left.

    Returns:
        The files recorded, sorted.
    """
    left = sorted(set(own_partials()) | {p for p in others if p.exists()})
    setattr(interrupt, PARTIALS_LEFT, tuple(left))
    return left


def partials_in(directory: str | os.PathLike[str]) -> list[Path]:
    """Every partial file in ``directory`` (of any writer, alive or dead), sorted."""
    folder = Path(os.fspath(directory)).expanduser().absolute()
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob(f".*{_PARTIAL_TAG}*") if p.is_file())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    except OSError:
        return True
    return True


#: A partial file this old is a leftover whatever machine wrote it (no fill writes for a day
#: without touching its file's directory entry... but a foreign host's process cannot be asked).
STALE_PARTIAL_SECONDS = 24 * 3600


def remove_stale_partials(final: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files that killed runs left in ``final``'s directory.

    Any output's partial files are considered, not only ``final``'s: a run to another name in
    the same directory cleans up too. A file is removed when this machine wrote it and its
    process no longer runs, or when it is older than :data:`STALE_PARTIAL_SECONDS` (then
    another machine sharing the disk wrote it and is long gone). A run writing right now keeps
    its file.

    Args:
        final: The output path whose directory to clean.

    Returns:
        The paths removed.
    """
    path = Path(os.fspath(final)).expanduser().absolute()
    if not path.parent.is_dir():
        return []
    removed = []
    host = host_tag()
    now = time.time()
    for tmp in path.parent.glob(f".*{_PARTIAL_TAG}*"):
        rest = tmp.name.split(_PARTIAL_TAG, 1)[1]
        parts = rest.split("-")
        if len(parts) < 3 or not parts[1].isdigit():
            continue
        try:
            old = now - tmp.stat().st_mtime > STALE_PARTIAL_SECONDS
        except OSError:
            continue
        mine_and_dead = parts[0] == host and not _pid_alive(int(parts[1]))
        if not (mine_and_dead or old):
            continue
        unlink_quietly(tmp)
        if not tmp.exists():
            logger.info("removed %s, left by an interrupted run", tmp)
            removed.append(tmp)
    return removed


def unlink_quietly(path: Path) -> None:
    """Delete a file if it exists; a failure is a warning (a leftover, never an error)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as err:
        logger.warning("could not remove temporary file %s: %s", path, err)
