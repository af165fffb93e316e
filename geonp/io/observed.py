"""Read a window's values together with which pixels are observed (one rule for all commands)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rasterio.io import DatasetReader
from rasterio.windows import Window

from geonp.io.masks import valid_mask
from geonp.io.raster import RasterInfo, read_band_masks, read_window


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
