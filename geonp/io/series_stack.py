"""A co-registered time series of rasters read into memory: values, observed pixels, dates.

The series is what ``geonp train --series`` cuts its tasks from and what ``geonp evaluate
--series`` scores on; each date's missing pixels follow the rule of every fill (NaN/Inf, nodata,
internal mask or alpha), and its QA band's cloud classes where one is given.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

import numpy as np
from rasterio.windows import Window

from geonp.errors import ConfigError, InputRasterError
from geonp.io.masks import read_mask_file, resolve_nodata
from geonp.io.observed import read_observed
from geonp.io.raster import open_raster, raster_info, select_bands

__all__ = ["Dated", "SeriesStack", "load_series"]


class Dated(Protocol):
    """A raster of a series: ``path``, ``date`` and optional ``qa`` (see ``geonp.io.timeseries``)."""

    path: str
    date: dt.date
    qa: str | None


@dataclass
class SeriesStack:
    """A co-registered time series in memory.

    Attributes:
        values: ``[T, bands, h, w]`` float32, NaN where a date has no usable value.
        observed: ``[T, h, w]`` True where every band of a date is usable.
        days: ``[T]`` days since 1970-01-01.
        names: file names, for the card.
        clear: ``[T]`` fraction of observed pixels of each date.
    """

    values: np.ndarray
    observed: np.ndarray
    days: np.ndarray
    names: list[str]
    clear: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        """Compute the clear fractions."""
        self.clear = self.observed.mean((1, 2))


def load_series(items: Sequence[Dated], *, bands: Sequence[int] | None = None, nodata: float | None = None,
                qa_kind: str | None = "fmask", qa_classes: Sequence[str] | None = None) -> SeriesStack:
    """Read a series of same-grid rasters (and their QA bands) into memory.

    Raises:
        InputRasterError: a raster on another grid than the first, or unreadable.
    """
    if not items:
        raise ConfigError("the time series is empty; give a folder of dated rasters")
    stack, observed, days, names = [], [], [], []
    ordered = sorted(items, key=lambda d: (d.date, str(d.path)))
    first = None
    for item in ordered:
        with open_raster(item.path) as src:
            info = raster_info(src)
            if first is None:
                first = info
            elif (info.width, info.height) != (first.width, first.height) or \
                    not info.transform.almost_equals(first.transform):
                raise InputRasterError(f"{item.path} is not on the grid of {ordered[0].path}; training on a "
                                       "time series needs co-registered rasters (gdalwarp them first)")
            window = Window(0, 0, info.width, info.height)
            # the missing-pixel rule of every fill: NaN/Inf, nodata, internal mask or alpha
            raw, ok = read_observed(src, window, select_bands(info, bands), info=info,
                                    nodata=resolve_nodata(info, nodata))
        ok = cast(np.ndarray, ok.all(0))  # along an axis: an array (the stub also allows a scalar)
        if item.qa is not None and qa_kind is not None:
            ok &= ~read_mask_file(item.qa, like=info, window=window, qa_kind=qa_kind, qa_classes=qa_classes)
        stack.append(np.where(ok, raw, np.nan).astype(np.float32))
        observed.append(ok)
        days.append((item.date - dt.date(1970, 1, 1)).days)
        names.append(Path(item.path).name)
    return SeriesStack(np.stack(stack), np.stack(observed), np.asarray(days, np.int64), names)
