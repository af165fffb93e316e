"""Decide which pixels are observed and which are gaps.

A pixel is missing when a ``--mask`` file says so (non-zero), else when it equals the nodata
value, is NaN or Inf, or is masked out by a GDAL internal mask or alpha band. Arrays returned
here use True = valid (observed), except :func:`read_mask_file`, whose ``is_gap`` is True =
missing, as in the file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np
from rasterio.windows import Window

from geonp.errors import InputRasterError
from geonp.io.qa import decode_gaps
from geonp.io.raster import RasterInfo, check_nodata_in_range, open_raster
from geonp.io.windows import read_window

logger = logging.getLogger(__name__)

__all__ = ["check_plain_mask", "read_mask_file", "resolve_nodata", "valid_mask"]

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
            :func:`geonp.io.windows.read_band_masks`); ANDed in.
        source_dtype: The type the pixels had in the file when ``arr`` was widened (as
            :func:`geonp.io.windows.read_window` does); defaults to ``arr.dtype``.

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
    path: str | os.PathLike[str],
    *,
    like: RasterInfo,
    window: Window,
    qa_kind: str | None = None,
    qa_classes: Sequence[str] | None = None,
    mask_values: Sequence[int] | None = None,
    mask_bits: Sequence[int] | None = None,
) -> np.ndarray:
    """Read a user's gap mask (``--mask FILE`` or ``--qa FILE``) for one window of the input.

    How values are read:

    - plain (no option): non-zero means missing; values must be 0, 1 or 255 (note that this is
      the opposite of GDAL ``.msk`` files, where 255 means valid);
    - ``mask_values``: these values mean missing; ``mask_bits``: any of these bits set means
      missing; ``qa_kind``: a quality band decoded by class (:mod:`geonp.io.qa`).

    The mask's own nodata always means observed. A GeoJSON file (``.geojson``/``.json``) is a
    vector mask: pixels whose centre lies in a polygon are missing. A mask on another grid,
    resolution or CRS is decoded on its own grid and then resampled onto the input's grid so
    that a pixel is missing wherever any mask pixel covering it says missing
    (:mod:`geonp.io.reproject`).

    Args:
        path: Path of the mask raster (band 1) or GeoJSON file.
        like: The input raster the mask belongs to.
        window: Window of the input grid to read; may extend beyond the raster.
        qa_kind: Quality band kind (``landsat-c2``, ``sentinel2-scl``, ``fmask``).
        qa_classes: Classes counted as gaps (default: the kind's defaults).
        mask_values: Values that mean missing.
        mask_bits: Bits that mean missing when set.

    Returns:
        Boolean array ``[window.height, window.width]``, True = missing (gap). Outside the
        raster it is True, like the NaN padding of :func:`geonp.io.windows.read_window`.

    Raises:
        InputRasterError: If the mask cannot be read or resampled, or a plain mask holds values
            other than 0, 1 and 255 (with a hint at ``--mask-values``, ``--mask-bits`` and
            ``--qa-kind``).
    """
    name = os.fspath(path)
    role = "QA band" if qa_kind else "Mask"
    row_off, col_off = round(window.row_off), round(window.col_off)
    height, width = round(window.height), round(window.width)
    rows = np.arange(row_off, row_off + height)
    cols = np.arange(col_off, col_off + width)
    inside = ((rows >= 0) & (rows < like.height))[:, None] & ((cols >= 0) & (cols < like.width))
    if name.lower().endswith((".geojson", ".json")):
        from geonp.io.vector import rasterize_geojson

        return ~inside | rasterize_geojson(name, like=like, window=window, role=role)
    plain = qa_kind is None and mask_values is None and mask_bits is None

    def decode(values: np.ndarray, not_nodata: np.ndarray) -> np.ndarray:
        if plain:
            check_plain_mask(values[not_nodata], name)
            return not_nodata & (values != 0)
        return not_nodata & decode_gaps(values, kind=qa_kind, classes=qa_classes,
                                        mask_values=mask_values, mask_bits=mask_bits)

    from geonp.io.reproject import read_gaps_on_grid

    warped = read_gaps_on_grid(name, like=like, window=window, role=role,
                               decode=lambda v, ok: decode(v, ok & np.isfinite(v)))
    if warped is not None:
        return ~inside | warped
    with open_raster(name, role=role) as src:
        values = read_window(src, window, [1])[0]
        mask_nodata = src.nodata
        mask_dtype = str(src.dtypes[0])
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
    return ~inside | decode(values, inside & ~is_nodata)


def check_plain_mask(checked: np.ndarray, name: str) -> None:
    """Refuse a plain 0/1 mask with other values, with a hint at the options that read them.

    Args:
        checked: The mask's values to check (its nodata pixels left out).
        name: The mask's path, for the message.

    Raises:
        InputRasterError: If a value is not 0, 1 or 255.
    """
    bad = checked[~np.isin(checked, _MASK_VALUES)]
    if bad.size:
        shown = np.unique(bad)[:5]
        listed = ", ".join(f"{v:g}" for v in shown)
        raise InputRasterError(
            f"Mask {name} holds values other than 0 and 1 (or 0 and 255): {listed}; if it is a "
            "quality band, pass it with --qa FILE --qa-kind landsat-c2|sentinel2-scl|fmask, or "
            "say which values or bits mean a gap with --mask-values 8,9 or --mask-bits 3,4; "
            "otherwise write 0 for observed and 1 for missing pixels."
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
