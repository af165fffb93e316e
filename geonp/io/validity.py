"""Make an output say which of its pixels are valid: nodata, alpha band, internal mask.

After a fill, three kinds of pixel remain: observed (copied bit for bit), filled (a
prediction), and unfilled (beyond ``--max-distance``, outside the footprint, or without
context). GIS software must read the first two as valid and the last as missing, whatever way
the input marked its gaps:

- with a nodata value (the file's tag or ``--nodata``), unfilled pixels get it, and a
  prediction that would round to it is moved one step away (so it stays valid);
- with an alpha band, the alpha band is not filled as data: it is rewritten, opaque where a
  pixel is observed or filled, transparent where it is not. A band tagged alpha that does not
  look like a mask (many distinct values, as a near-infrared band mistagged by RGBA software:
  :mod:`geonp.io.alpha`) is data: it is filled like any band, and the plan carries a warning
  that its colour interpretation is wrong;
- otherwise (no nodata and no alpha, for example a gap from ``--mask`` or an internal mask),
  a per-dataset internal mask is written with the same meaning. Float outputs also get NaN
  on unfilled pixels.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rasterio.io import DatasetReader

from geonp.errors import InputRasterError
from geonp.io.alpha import tagged_alpha

logger = logging.getLogger(__name__)

__all__ = ["OutputValidity", "finish_block", "plan_output_validity", "refuse_complex"]


@dataclass(frozen=True)
class OutputValidity:
    """How an output marks its unfilled pixels.

    Attributes:
        bands: 1-based input bands that are data (filled); never an alpha band.
        alpha_band: 1-based input band holding alpha, or None. The output carries it as its
            last band.
        nodata: The output's nodata value, or None.
        dtype: Numpy name of the output's data type.
        write_mask: Write a per-dataset internal mask (no nodata and no alpha to say it).
        hints: Warnings for the user (a data band tagged alpha), already logged.
    """

    bands: tuple[int, ...]
    alpha_band: int | None
    nodata: float | None
    dtype: str
    write_mask: bool
    hints: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        """Bands of the output (data bands, plus the alpha band)."""
        return len(self.bands) + (self.alpha_band is not None)


def plan_output_validity(
    src: DatasetReader, bands: Sequence[int] | None, *, nodata: float | None
) -> OutputValidity:
    """Decide how the output of a fill marks unfilled pixels (see the module docstring).

    Args:
        src: The open input.
        bands: The user's 1-based bands, or None for all.
        nodata: The output's nodata value (the input's tag or ``--nodata``), or None.

    Returns:
        The plan: the data bands to fill (a band tagged alpha among them when it holds data),
        the alpha band to rewrite, whether to write an internal mask, and the warnings.
    """
    tagged = tagged_alpha(src)
    hints: tuple[str, ...] = ()
    if tagged is not None and not tagged.is_mask:
        hints = (tagged.warning(str(src.name)),)
        logger.warning("%s", hints[0])
    alpha_band = tagged.band if tagged is not None and tagged.is_mask else None
    chosen = list(range(1, src.count + 1)) if bands is None else [int(b) for b in bands]
    data = tuple(b for b in chosen if b != alpha_band)
    if bands is not None and alpha_band not in chosen:
        alpha_band = None  # the user chose bands without the alpha band: none in the output
    dtype = str(src.dtypes[0])
    return OutputValidity(
        bands=data,
        alpha_band=alpha_band,
        nodata=nodata,
        dtype=dtype,
        write_mask=alpha_band is None and nodata is None,
        hints=hints,
    )


def _away_from(
    value: float, dtype: np.dtype, prefer_up: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The representable neighbours of ``value`` in ``dtype`` (below, above)."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        lo = value - 1 if value > info.min else value + 1
        hi = value + 1 if value < info.max else value - 1
        return (
            np.full(prefer_up.shape, lo, dtype=np.float64),
            np.full(prefer_up.shape, hi, dtype=np.float64),
        )
    v = dtype.type(value)
    return (
        np.full(prefer_up.shape, np.nextafter(v, dtype.type(-np.inf)), dtype=np.float64),
        np.full(prefer_up.shape, np.nextafter(v, dtype.type(np.inf)), dtype=np.float64),
    )


def finish_block(
    out: np.ndarray,
    *,
    observed: np.ndarray,
    filled: np.ndarray,
    mean: np.ndarray | None,
    plan: OutputValidity,
) -> tuple[np.ndarray, np.ndarray]:
    """Mark one block's unfilled pixels and keep predictions off the nodata value.

    Args:
        out: ``[bands, h, w]`` output values in ``plan.dtype`` (observed values copied,
            predictions cast); changed in place and returned.
        observed: Bool ``[bands, h, w]``, True where the input is observed.
        filled: Bool ``[bands, h, w]``, True where a prediction was written.
        mean: The unrounded predictions ``[bands, h, w]`` (to choose the side a prediction
            equal to nodata moves to), or None.
        plan: From :func:`plan_output_validity`.

    Returns:
        ``(out, valid)``: the values and a bool ``[h, w]`` array, True where every band is
        observed or filled (for the alpha band or the internal mask).
    """
    dtype = np.dtype(plan.dtype)
    unfilled = ~observed & ~filled
    if plan.nodata is not None and not np.isnan(plan.nodata):
        nd = dtype.type(plan.nodata)
        clash = filled & (out == nd)
        if clash.any():
            up = np.ones(int(clash.sum()), dtype=bool) if mean is None else mean[clash] >= float(nd)
            lo, hi = _away_from(float(nd), dtype, up)
            out[clash] = np.where(up, hi, lo).astype(dtype)
        out[unfilled] = nd
    elif np.issubdtype(dtype, np.floating):
        clash = filled & np.isnan(out)
        out[clash] = 0  # a NaN prediction never happens; keep NaN meaning "missing" anyway
        out[unfilled] = np.nan
    valid = (observed | filled).all(axis=0)
    return out, valid


def alpha_values(valid: np.ndarray, observed_alpha: np.ndarray, dtype: str) -> np.ndarray:
    """The rewritten alpha band for one block.

    Args:
        valid: Bool ``[h, w]`` from :func:`finish_block`.
        observed_alpha: The input's alpha values ``[h, w]`` (kept where they were non-zero, so
            partial transparency survives).
        dtype: The alpha band's numpy type.

    Returns:
        ``[h, w]`` alpha: the input's value where it was non-zero and the pixel is valid, the
        type's maximum (opaque) where a pixel was filled, 0 where it is not valid.
    """
    kind = np.dtype(dtype)
    opaque = np.iinfo(kind).max if np.issubdtype(kind, np.integer) else 1.0
    keep = np.where(np.isfinite(observed_alpha) & (observed_alpha > 0), observed_alpha, opaque)
    return np.where(valid, keep, 0).astype(kind)


def refuse_complex(dtype: Any, what: str) -> None:
    """Refuse complex pixels (``complex64``, GDAL's ``complex_int16``...): a fill would drop their imaginary part.

    Args:
        dtype: The pixels' type (a numpy dtype or rasterio's name).
        what: What holds them, for the message (``"Input raster scene.tif"``, ``"values"``).

    Raises:
        InputRasterError: If the type is complex.
    """
    if "complex" in str(dtype):
        raise InputRasterError(
            f"{what} holds complex pixels ({dtype}), and geonp fills real values only; split the real and "
            "imaginary parts into two bands (gdal_translate / numpy) and fill those."
        )
