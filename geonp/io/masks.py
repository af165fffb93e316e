"""Decide which pixels are observed and which are gaps.

A pixel is missing when a ``--mask`` file says so (non-zero), else when it equals the nodata
value, is NaN or Inf, or is masked out by a GDAL internal mask or alpha band. Arrays returned
here use True = valid (observed), except :func:`read_mask_file`, whose ``is_gap`` is True =
missing, as in the file.
"""

from __future__ import annotations

import logging
import os

import numpy as np
from affine import Affine
from rasterio.crs import CRS
from rasterio.io import DatasetReader
from rasterio.windows import Window

from geonp.errors import InputRasterError
from geonp.io.raster import RasterInfo, check_nodata_in_range, open_raster, read_window

logger = logging.getLogger(__name__)

__all__ = ["read_mask_file", "resolve_nodata", "valid_mask"]

#: Values a mask file may hold: 0 = observed; 1 or 255 (the GDAL mask value) = missing.
_MASK_VALUES = (0.0, 1.0, 255.0)


def _nodata_in_dtype(nodata: float, dtype: np.dtype) -> np.generic | None:
    """Return ``nodata`` as a scalar of ``dtype``, or None if that type cannot hold it."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        if not np.isfinite(nodata) or nodata != np.floor(nodata):
            return None
        if not info.min <= int(nodata) <= info.max:
            return None
        return dtype.type(int(nodata))
    if np.issubdtype(dtype, np.floating):
        if np.isfinite(nodata) and abs(nodata) > float(np.finfo(dtype).max):
            return None
        return dtype.type(nodata)
    return dtype.type(nodata)


def valid_mask(
    arr: np.ndarray,
    *,
    nodata: float | None,
    internal_valid: np.ndarray | None = None,
    source_dtype: str | None = None,
) -> np.ndarray:
    """Mark the observed pixels of an array.

    NaN and ±Inf are always missing. Pixels equal to ``nodata`` are missing; the comparison is
    made in the data type the pixels were stored in, so a float32 nodata such as -9999.9 still
    matches after the pixels were widened to float64. A nodata value the type cannot hold
    matches nothing.

    Args:
        arr: Pixel values, any shape.
        nodata: The nodata value, NaN, or None for none.
        internal_valid: Optional boolean array broadcastable to ``arr``, True = valid (from
            :func:`geonp.io.raster.read_band_masks`); ANDed in.
        source_dtype: The type the pixels had in the file when ``arr`` was widened (as
            :func:`geonp.io.raster.read_window` does); defaults to ``arr.dtype``.

    Returns:
        Boolean array shaped like ``arr``, True = valid.
    """
    values = np.asarray(arr)
    if np.issubdtype(values.dtype, np.inexact):
        valid = np.isfinite(values)
    else:
        valid = np.ones(values.shape, dtype=bool)
    if nodata is not None:
        if np.isnan(nodata):
            pass  # NaN pixels are already invalid.
        else:
            stored = np.dtype(source_dtype) if source_dtype is not None else values.dtype
            in_stored = _nodata_in_dtype(float(nodata), stored)
            if in_stored is not None:
                # Widen the stored nodata exactly as the pixels were widened.
                target = np.asarray(in_stored).astype(values.dtype)
                valid &= values != target
    if internal_valid is not None:
        valid &= np.asarray(internal_valid, dtype=bool)
    return valid


def read_mask_file(
    path: str | os.PathLike[str], *, like: RasterInfo, window: Window
) -> np.ndarray:
    """Read a user's gap mask (``--mask FILE``) for one window of the input.

    The mask must be on the input's grid: geonp does not resample masks, since any resampling
    would move the edge of a gap. Non-zero means missing; 0 and the mask's own nodata mean
    observed. Values must be 0, 1 or 255. Note that this is the opposite of GDAL ``.msk``
    files, where 255 means valid.

    Args:
        path: Path of the mask raster; band 1 is used.
        like: The input raster the mask belongs to.
        window: Window of the input grid to read; may extend beyond the raster.

    Returns:
        Boolean array ``[window.height, window.width]``, True = missing (gap). Outside the
        raster it is True, like the NaN padding of :func:`geonp.io.raster.read_window`.

    Raises:
        InputRasterError: If the mask cannot be read, is on another grid, or holds values
            other than 0, 1 and 255.
    """
    name = os.fspath(path)
    with open_raster(name, role="Mask") as src:
        _check_same_grid(src, like, name)
        values = read_window(src, window, [1])[0]
        mask_nodata = src.nodata
        mask_dtype = str(src.dtypes[0])
    row_off, col_off = int(round(window.row_off)), int(round(window.col_off))
    rows = np.arange(row_off, row_off + values.shape[0])
    cols = np.arange(col_off, col_off + values.shape[1])
    inside = ((rows >= 0) & (rows < like.height))[:, None] & ((cols >= 0) & (cols < like.width))
    if mask_nodata is None:
        is_nodata = np.zeros(values.shape, dtype=bool)
    elif np.isnan(mask_nodata):
        is_nodata = inside & np.isnan(values)
    else:
        # valid_mask compares in the mask's stored type; NaN/Inf are handled below.
        finite = np.isfinite(values)
        is_nodata = inside & finite & ~valid_mask(
            values, nodata=mask_nodata, source_dtype=mask_dtype
        )
    checked = values[inside & ~is_nodata]
    bad = checked[~np.isin(checked, _MASK_VALUES)]
    if bad.size:
        shown = np.unique(bad)[:5]
        listed = ", ".join(f"{v:g}" for v in shown)
        raise InputRasterError(
            f"Mask {name} holds values other than 0 and 1 (or 0 and 255): {listed}; "
            "write 0 for observed and 1 for missing pixels."
        )
    return ~inside | (~is_nodata & (values != 0))


def _grid_text(width: int, height: int, transform: Affine, crs: str | None) -> str:
    """Describe a grid in one short phrase for error messages."""
    crs_text = "no CRS"
    if crs:
        parsed = CRS.from_wkt(crs)
        crs_text = parsed.to_string() if parsed.to_epsg() else (parsed.name or "custom CRS")
    t = transform
    return (
        f"{width}x{height} px, origin ({t.c:.10g}, {t.f:.10g}), "
        f"pixel ({t.a:.10g}, {t.e:.10g}), {crs_text}"
    )


def _check_same_grid(src: DatasetReader, like: RasterInfo, name: str) -> None:
    """Raise if the mask ``src`` is not on the grid of ``like``."""
    mask_crs = src.crs.to_wkt() if src.crs else None
    same = (
        src.width == like.width
        and src.height == like.height
        and src.transform.almost_equals(like.transform)
    )
    if same and mask_crs and like.crs:
        same = CRS.from_wkt(mask_crs) == CRS.from_wkt(like.crs)
    if not same:
        mask_grid = _grid_text(src.width, src.height, src.transform, mask_crs)
        input_grid = _grid_text(like.width, like.height, like.transform, like.crs)
        raise InputRasterError(
            f"Mask {name} is on another grid than input {like.path} (mask: {mask_grid}; "
            f"input: {input_grid}); resample the mask to the input's grid (e.g. with "
            "gdalwarp -te/-tr) first."
        )


def resolve_nodata(info: RasterInfo, override: float | None) -> float | None:
    """Choose the nodata value: the user's ``--nodata`` if given, else the file's tag.

    Args:
        info: The input raster.
        override: The user's nodata value, or None.

    Returns:
        The nodata value to use, or None when there is none.

    Raises:
        ConfigError: If ``override`` cannot be stored in the raster's data type.
    """
    if override is None:
        return info.nodata
    check_nodata_in_range(override, info.dtype)
    return float(override)
