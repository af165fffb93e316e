"""Read windows of an open raster: band values and the validity of internal masks.

geonp reads rasters window by window so that memory does not grow with the raster's size. Every
read here returns arrays shaped ``[bands, rows, cols]``; windows may hang over the raster's edge
(tiles near the border carry a halo), and the part outside the raster comes back as NaN (values)
or False (validity), which the rest of geonp treats as missing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import rasterio
import rasterio.errors
from rasterio.io import DatasetReader
from rasterio.windows import Window

from geonp.errors import InputRasterError, one_line
from geonp.io.raster import alpha_band_is_mask, has_internal_mask
from geonp.io.remote import remote_failure

__all__ = ["read_band_masks", "read_window"]


def _window_ints(window: Window) -> tuple[int, int, int, int]:
    """Return (row_off, col_off, height, width) of a window with integer offsets and size."""
    vals = (window.row_off, window.col_off, window.height, window.width)
    ints = tuple(round(float(v)) for v in vals)
    if any(abs(v - i) > 1e-6 for v, i in zip(vals, ints, strict=True)) or ints[2] < 0 or ints[3] < 0:
        raise ValueError(f"window must have non-negative integer size and offsets, got {window}")
    return ints  # type: ignore[return-value]


_Clipped = tuple[tuple[int, int, int, int], "Window | None", tuple[slice, slice]]


def _clip(src: DatasetReader, window: Window) -> _Clipped:
    """Clip ``window`` to the raster.

    Returns:
        The integer window (row_off, col_off, height, width), the clipped window (None when
        the window lies entirely outside the raster), and the slices of the clipped part
        inside an array covering the full window.
    """
    row_off, col_off, height, width = _window_ints(window)
    r0, c0 = max(row_off, 0), max(col_off, 0)
    r1, c1 = min(row_off + height, src.height), min(col_off + width, src.width)
    inner = (slice(r0 - row_off, r1 - row_off), slice(c0 - col_off, c1 - col_off))
    if r1 <= r0 or c1 <= c0:
        return (row_off, col_off, height, width), None, inner
    return (row_off, col_off, height, width), Window(c0, r0, c1 - c0, r1 - r0), inner


def read_window(src: DatasetReader, window: Window, bands: Sequence[int]) -> np.ndarray:
    """Read a window of some bands as float64, padding what lies outside the raster with NaN.

    Tiles near the raster's border carry a halo that hangs over the edge. Rather than GDAL's
    boundless reads (which fill with nodata or zeros that could pass for data), the window is
    clipped to the raster and the rest is NaN, so padding always counts as missing. Integer
    pixels convert to float64 exactly.

    Args:
        src: An open dataset.
        window: Window in pixel units with integer offsets and size; may extend beyond the
            raster on any side.
        bands: 1-based band indexes.

    Returns:
        Array of shape ``[len(bands), window.height, window.width]``, dtype float64, in the
        band's units; NaN outside the raster.
    """
    (_, _, height, width), clipped, inner = _clip(src, window)
    out = np.full((len(bands), height, width), np.nan, dtype=np.float64)
    if clipped is not None and len(bands):
        try:
            data = src.read([int(b) for b in bands], window=clipped)
        except (rasterio.errors.RasterioError, OSError) as err:
            raise _read_failed(src, clipped, err) from err
        out[:, inner[0], inner[1]] = data
    return out


def _read_failed(src: DatasetReader, window: Window, err: BaseException) -> InputRasterError:
    """The error for pixels that cannot be read (a damaged block inside the file)."""
    remote = remote_failure(str(src.name), one_line(err, causes=True), role="Raster")
    if remote is not None:
        return remote
    return InputRasterError(
        f"Raster {src.name} is truncated or corrupt: reading rows {int(window.row_off)}.."
        f"{int(window.row_off + window.height) - 1}, columns {int(window.col_off)}.."
        f"{int(window.col_off + window.width) - 1} failed ({one_line(err, causes=True)}); re-download or "
        "re-create it."
    )


def read_band_masks(src: DatasetReader, window: Window, bands: Sequence[int]) -> np.ndarray:
    """Read the validity given by a GDAL internal mask band or alpha band.

    Only a per-dataset mask (``.msk`` or internal TIFF mask) or an alpha band that is a mask
    (not a data band tagged alpha: :mod:`geonp.io.alpha`) is consulted; bands without one are
    all valid here, because their nodata value is handled by
    :func:`geonp.io.masks.valid_mask` (which also sees NaN and Inf).

    Args:
        src: An open dataset.
        window: Window in pixel units; may extend beyond the raster.
        bands: 1-based band indexes.

    Returns:
        Boolean array ``[len(bands), window.height, window.width]``, True = valid; False
        where the mask is zero and outside the raster.
    """
    (_, _, height, width), clipped, inner = _clip(src, window)
    out = np.zeros((len(bands), height, width), dtype=bool)
    if clipped is None:
        return out
    flags = src.mask_flag_enums
    alpha_is_mask = alpha_band_is_mask(src)
    for i, band in enumerate(bands):
        if has_internal_mask(flags[int(band) - 1], alpha_is_mask=alpha_is_mask):
            try:
                masks = src.read_masks(int(band), window=clipped)
            except (rasterio.errors.RasterioError, OSError) as err:
                raise _read_failed(src, clipped, err) from err
            out[i, inner[0], inner[1]] = masks != 0
        else:
            out[i, inner[0], inner[1]] = True
    return out
