"""Name the temporary files of atomic writes, and remove those that killed runs left.

A partial file is ``.<name>.geonp-partial-<host>-<pid>-<random><suffix>`` beside its output:
hidden, and naming the machine and process that write it, so a later run can tell a leftover of
a dead process from a file another run is writing right now.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import socket
import time
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = [
    "STALE_PARTIAL_SECONDS",
    "host_tag",
    "partial_path",
    "remove_stale_partials",
    "unlink_quietly",
]


_PARTIAL_TAG = ".geonp-partial-"


def host_tag() -> str:
    """Six hex digits naming this machine (partial files on shared disks name their writer)."""
    return hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:6]


def partial_path(final: Path, suffix: str) -> Path:
    """``.<name>.geonp-partial-<host>-<pid>-<random><suffix>`` beside ``final``."""
    owner = f"{host_tag()}-{os.getpid()}"
    return final.with_name(f".{final.name}{_PARTIAL_TAG}{owner}-{secrets.token_hex(6)}{suffix}")


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
