"""The blocks of a file fill, written to its two outputs as they come, with progress on each step.

The survey (:class:`~geonp.filling.survey.BlockCounts`) routes every block: one with gaps to fill
goes to the model (:func:`~geonp.filling.engine.run_blocks`: here, in worker processes or on
Dask), one with observed pixels only is copied (:meth:`~geonp.filling.engine.BlockRunner.copy`:
no halo, no model), and one with neither is never read where the outputs' empty blocks say the
same (GDAL writes them as nodata, and the std raster's as NaN, when the outputs are closed).
A sparse 12000² raster with one 512² block of data took 399 s before, 0.6 s per empty block.

A progress callback with a ``stage(label, unit)`` method (the command line's bar) hears each
step as it opens (:func:`stage`); a plain ``(done, total)`` callback hears the gap pixels filled.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from rasterio.windows import Window

from geonp.filling import engine
from geonp.filling.report import FillReport
from geonp.tasks.tiling import Region


def stage(progress: Any, label: str, unit: str) -> Callable[[int, int], None] | None:
    """``progress`` opened on a step of the fill where it shows steps (a ``stage`` method), else None."""
    opened = getattr(progress, "stage", None)
    if opened is None:
        return None
    opened(label, unit)
    return progress


def write_blocks(job: engine.BlockJob, outputs: tuple[Any, Any], report: FillReport,
                 routes: tuple[list[Region], list[Region]], progress: Callable[[int, int], None] | None, *,
                 scheduler: str | None, loaded: Any, write_mask: bool) -> dict[str, float]:
    """Fill the blocks to fill and copy the others into the outputs; the seconds of each stage.

    ``outputs``: the filled and std rasters, open for writing; ``routes``: the blocks to fill and
    those to copy (:meth:`~geonp.filling.survey.BlockCounts.route`). ``report`` gets the filled
    and beyond-``max_distance`` pixel counts; ``write_mask``: write each block's validity as the
    output's internal mask.
    """
    dst, dstd = outputs
    fill, copy = routes
    done, total = [0], max(report.gap_pixels, 1)
    timings: dict[str, float] = {"write": 0.0}

    def moved(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(min(done[0], total), total)

    def write(result: engine.BlockResult) -> None:
        t_write = time.perf_counter()
        r0, r1, c0, c1 = result.block
        wwin = Window(c0, r0, c1 - c0, r1 - r0)
        dst.write(result.out, window=wwin)
        if write_mask and result.valid is not None:
            dst.write_mask(np.where(result.valid, 255, 0).astype(np.uint8), window=wwin)
        dstd.write(result.std, window=wwin)
        report.filled_pixels += result.filled
        report.beyond_pixels += result.beyond
        for key, value in result.timings.items():
            timings[key] = timings.get(key, 0.0) + value
        timings["write"] += time.perf_counter() - t_write

    report.filled_pixels = report.beyond_pixels = 0
    stage(progress, "filling", "px")
    # closed at once on an interrupt or error, so the worker processes stop with the fill
    with contextlib.closing(engine.run_blocks(job, fill, scheduler=scheduler, workers=report.workers,
                                              progress=moved, loaded=loaded)) as results:
        for result in results:
            write(result)
    if progress is not None:
        progress(total, total)
    if copy:
        step = stage(progress, "copying blocks without gaps", "block")
        with contextlib.closing(engine.BlockRunner(job, loaded)) as runner:
            for i, block in enumerate(copy):
                write(runner.copy(block))
                if step is not None:
                    step(i + 1, len(copy))
    return timings
