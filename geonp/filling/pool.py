"""How a fill's blocks are planned and shared among worker processes, and how those processes start.

:func:`plan_pool` gives the blocks and the number of processes (:func:`pool_size`); the engine
(:func:`geonp.filling.engine.run_blocks`) starts them as :func:`worker_start_method` says.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Any

from geonp.tasks.tiling import Region, make_tiles

# Below this many gap pixels a process pool costs more to start (torch import, model load) than
# it saves.
_POOL_MIN_GAP_PIXELS = 150_000
#: Smallest block (px) :func:`plan_pool` cuts a small raster into for its worker processes.
MIN_SPLIT_BLOCK = 128


def plan_blocks(height: int, width: int, block_size: int) -> list[Region]:
    """Blocks covering the raster, row-major."""
    return [Region(t.row, t.row + t.height, t.col, t.col + t.width)
            for t in make_tiles(height, width, tile_size=block_size)]


def plan_pool(height: int, width: int, block_size: int, workers: int | None, device: Any,
              gap_pixels: int) -> tuple[list[Region], int]:
    """A fill's blocks and worker processes (:func:`pool_size`).

    Blocks of ``block_size`` px; where a pool of processes would have fewer than two blocks each
    (a raster of one or a few blocks), they are halved, down to :data:`MIN_SPLIT_BLOCK` px, so
    that every process gets its share instead of one process filling with two threads: a 512²
    raster of 90 % dropped pixels (one block) took 7.6-7.8 s as four 256² blocks over two
    processes, 8.4-10.2 s as one (docs/benchmarks.md). Tiles lie on the raster's grid, so the
    blocks change the predictions by float rounding at most.
    """
    blocks = plan_blocks(height, width, block_size)
    wanted = pool_size(workers, device, gap_pixels, n_blocks=sys.maxsize)  # processes wanted, blocks aside
    size = block_size
    while wanted > 1 and len(blocks) < 2 * wanted and size // 2 >= MIN_SPLIT_BLOCK:
        size //= 2
        blocks = plan_blocks(height, width, size)
    return blocks, pool_size(workers, device, gap_pixels, len(blocks))


def pool_size(workers: int | None, device: Any, gap_pixels: int, n_blocks: int) -> int:
    """Processes to use: as asked, else one per CPU on the CPU for large jobs, one on CUDA."""
    if workers is not None:
        return workers
    if getattr(device, "type", str(device)) != "cpu" or gap_pixels < _POOL_MIN_GAP_PIXELS:
        return 1
    return max(1, min(cpu_count(), n_blocks))


def worker_start_method(device: Any = "cpu") -> str:
    """How a fill's pool workers start: ``fork`` where that is safe, else ``spawn``.

    A forked worker starts with this process's imports (torch: 1-2 s) and model; a spawned one
    imports and loads them again, while the fill waits: a 1024² stripe fill on 2 cores took
    0.92x the time forked (``benchmarks/fill.py``, docs/benchmarks.md). Forking is safe on Linux
    (``fork`` exists and GDAL and torch survive it), for a fill on the CPU with CUDA never started
    (a forked CUDA context is unusable), from a process that runs no other Python thread: a thread
    holding a lock (GDAL's, logging's, a Dask worker's) at the fork would leave it held in the
    worker forever. Elsewhere (a notebook, a Dask client, a GPU fill) the workers are spawned.
    """
    import threading

    import torch

    if (sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods()
            or getattr(device, "type", str(device)) != "cpu" or torch.cuda.is_initialized()
            or threading.active_count() > 1):
        return "spawn"
    return "fork"


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
