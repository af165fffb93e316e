"""Hints for the user when a raster looks like it has gaps that nothing marks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rasterio.enums import Resampling
from rasterio.io import DatasetReader

__all__ = ["untagged_nodata_hint"]

#: Share of the pixels a suspicious value must take before geonp mentions it.
_MIN_SHARE = 0.01


def untagged_nodata_hint(
    src: DatasetReader, bands: Sequence[int], *, max_side: int = 1024
) -> str | None:
    """Say so when a raster without a nodata tag has many pixels at a typical fill value.

    A scene exported without its nodata tag reads as gap-free: its collar of zeros (or of the
    type's minimum or maximum, or -9999) counts as data. When such a value covers at least 1 %
    of the pixels (on a decimated read), geonp suggests ``--nodata``.

    Args:
        src: The open raster.
        bands: 1-based bands that were checked for gaps.
        max_side: Longest side of the decimated read.

    Returns:
        One sentence for the user, or None when nothing looks suspicious.
    """
    if src.nodata is not None:
        return None
    scale = max(1, int(np.ceil(max(src.width, src.height) / max_side)))
    shape = (len(bands), max(1, src.height // scale), max(1, src.width // scale))
    arr = src.read(list(bands), out_shape=shape, resampling=Resampling.nearest)
    dtype = np.dtype(src.dtypes[0])
    candidates: list[float] = [0.0, -9999.0]
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        candidates += [float(info.min), float(info.max)]
    best, share = None, 0.0
    for value in dict.fromkeys(candidates):
        frac = float(np.mean((arr == value).all(axis=0)))
        if frac > share:
            best, share = value, frac
    if best is None or share < _MIN_SHARE:
        return None
    return (
        f"{100 * share:.0f} % of the pixels are {best:g} in every band and the file has no nodata "
        f"tag; if {best:g} means no data, run again with --nodata {best:g}"
    )
