"""Read a window's values together with which pixels are observed (one rule for all commands)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rasterio.enums import Resampling
from rasterio.io import DatasetReader
from rasterio.windows import Window

from geonp.io.masks import valid_mask
from geonp.io.raster import (
    RasterInfo,
    has_internal_mask,
    raster_info,
)
from geonp.io.windows import read_band_masks, read_window


def read_observed(
    src: DatasetReader,
    window: Window,
    bands: Sequence[int],
    *,
    info: RasterInfo,
    nodata: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Read ``[bands, h, w]`` float64 values and a bool validity array of the same shape.

    A pixel is missing when it is NaN/Inf, equals ``nodata``, is masked by the GDAL internal mask
    or alpha band, or lies outside the raster (the window may hang over the edge).
    """
    arr = read_window(src, window, bands)
    internal = read_band_masks(src, window, bands) if info.has_internal_mask else None
    valid = valid_mask(arr, nodata=nodata, internal_valid=internal, source_dtype=info.dtype)
    return arr, valid


def read_observed_overview(
    src: DatasetReader,
    bands: Sequence[int],
    *,
    max_side: int,
    nodata: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Read whole bands decimated for display, with which pixels are observed (the same rule).

    The raster is read at an integer step (nearest neighbour) so that no side exceeds
    ``max_side``; validity follows :func:`read_observed`: NaN/Inf, ``nodata``, and the GDAL
    internal mask or alpha band, read at the same step.

    Args:
        src: An open dataset.
        bands: 1-based band indexes.
        max_side: Largest side of the result, in pixels.
        nodata: The nodata value, or None.

    Returns:
        ``[bands, h, w]`` float64 values and a bool validity array of the same shape.
    """
    step = max(1, int(np.ceil(max(src.width, src.height) / max_side)))
    shape = (len(bands), max(1, src.height // step), max(1, src.width // step))
    arr = src.read(list(bands), out_shape=shape, resampling=Resampling.nearest)
    internal = None
    if raster_info(src).has_internal_mask:  # as read_band_masks: only mask and alpha bands count
        internal = np.ones(shape, dtype=bool)
        for i, band in enumerate(bands):
            if has_internal_mask(src.mask_flag_enums[int(band) - 1]):
                internal[i] = src.read_masks(int(band), out_shape=shape[1:],
                                             resampling=Resampling.nearest) != 0
    valid = valid_mask(arr.astype(np.float64), nodata=nodata, internal_valid=internal,
                       source_dtype=str(arr.dtype))
    return arr.astype(np.float64), valid
