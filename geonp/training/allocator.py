"""Keep freed memory in the process for the next training step (glibc's allocator).

A training step at the default recipe's shape allocates and frees dozens of tensors of tens of
megabytes (logits and probabilities ``[B·H, Nq, Nk]``). glibc serves blocks that large with
``mmap`` and hands them back to the kernel when freed, so the next step page-faults the same
memory in again: measured on the 2-core CPU, ~47,000 page faults and 15 % of a step's time in
the kernel. Raising the mmap and trim thresholds keeps the blocks on the heap for reuse (9,700
faults, 2 % system time, about 10 % faster steps).

The setting is process-wide and stays after training; it only makes the process hold on to
freed memory (up to ``_TRIM`` bytes) instead of returning it at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

logger = logging.getLogger(__name__)

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_TRIM = 1 << 30  # keep up to 1 GiB of freed heap memory
_MMAP = 32 << 20  # glibc's largest mmap threshold on 64-bit systems


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; True if done (False off glibc: nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        done = bool(libc.mallopt(_M_TRIM_THRESHOLD, _TRIM)) and bool(libc.mallopt(_M_MMAP_THRESHOLD, _MMAP))
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    logger.debug("glibc mallopt: trim threshold %d, mmap threshold %d: %s", _TRIM, _MMAP, done)
    return done
