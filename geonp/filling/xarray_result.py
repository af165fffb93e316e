"""The ``xarray.Dataset`` that ``geonp.fill`` returns, and the ``da.geonp.fill()`` accessor.

The Dataset holds two variables, named so that attribute access reaches them (``ds.std``
would be the ``Dataset.std`` method):

- ``filled``: the input with its gaps filled, **in the input's data type** (integers rounded
  and clipped to the type's range, never wrapped), its CRS and its attributes (scale, offset,
  band names) as in the input, and its nodata as the input's, set the rioxarray way
  (``rio.nodata``, written by ``rio.to_raster``) and kept on pixels left unfilled. A prediction
  that would equal the nodata value moves one step away from it, as ``geonp fill`` does
  (:func:`geonp.io.validity.finish_block`). An input without nodata gets none, as ``geonp fill``
  writes none for it: a float one marks unfilled pixels NaN; an integer one has no gap (integers
  hold no NaN), so nothing of it stays unfilled. Should unfilled pixels reach an integer result
  without nodata anyway (a caller of :func:`build_result`), they get a value that occurs
  nowhere in the data (the type's maximum when it is free), made the nodata, so that no valid
  pixel ever reads as missing; a lazy array, whose values are unknown until computed, keeps its
  input values there instead, which the ``uncertainty``'s NaN marks as unfilled;
- ``uncertainty``: float32 predictive std in the stored values' units, 0 on observed pixels,
  NaN (its nodata) where nothing was filled; its ``scale_factor`` and ``units`` are the input's
  (a std has no offset).

Both stay lazy when the input is Dask-backed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from geonp._version import __version__

__all__ = ["GeonpAccessor", "build_result", "unused_integer"]

#: Attributes of the input that describe encoding, set again by rioxarray where they apply.
_ENCODING_ATTRS = ("_FillValue", "missing_value", "nodata")


def unused_integer(values: np.ndarray, dtype: np.dtype) -> int | None:
    """A value of an integer type that occurs nowhere in ``values``: its maximum, minimum, else the highest free one.

    Args:
        values: The values that must keep their meaning (NaN ignored).
        dtype: The integer type.

    Returns:
        The value, or None when every value of the type occurs.
    """
    info = np.iinfo(dtype)
    flat = np.asarray(values, dtype=np.float64).ravel()
    present = np.unique(flat[np.isfinite(flat)])
    for candidate in (info.max, info.min):
        if not np.isin(candidate, present):
            return int(candidate)
    free = np.flatnonzero(np.diff(present) > 1)  # present holds min and max: free values lie in its gaps
    return int(present[free[-1] + 1]) - 1 if free.size else None


def _away_from_nodata(rounded: xr.DataArray, mean: xr.DataArray, predicted: xr.DataArray, nodata: float,
                      dtype: np.dtype) -> xr.DataArray:
    """``rounded`` with predictions equal to ``nodata`` moved one representable step toward ``mean``."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        below = nodata - 1 if nodata > info.min else nodata + 1
        above = nodata + 1 if nodata < info.max else nodata - 1
    else:
        nd = dtype.type(nodata)
        below = float(np.nextafter(nd, dtype.type(-np.inf)))
        above = float(np.nextafter(nd, dtype.type(np.inf)))
    return xr.where(predicted & (rounded == nodata), xr.where(mean >= nodata, above, below), rounded)


def _as_dtype(values: xr.DataArray, std: xr.DataArray, da: xr.DataArray, dtype: np.dtype,
              nodata: float | None) -> xr.DataArray:
    """Cast filled float values to the input's type; NaN (unfilled) becomes ``nodata`` (module docstring).

    Predictions are the pixels whose std is neither 0 (observed: copied as they are) nor NaN.
    """
    predicted = std.notnull() & (std != 0)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        rounded = values.round().clip(info.min, info.max)
        if nodata is None:  # unfilled pixels keep their input values (only a lazy array gets here with some)
            return rounded.fillna(da.astype(np.float64)).astype(dtype)
        return _away_from_nodata(rounded, values, predicted, float(nodata), dtype).fillna(nodata).astype(dtype)
    if nodata is None or np.isnan(nodata):
        return values.astype(dtype)
    cast = values.astype(dtype).astype(np.float64)  # the values as stored, to compare with nodata
    return _away_from_nodata(cast, values, predicted, float(dtype.type(nodata)), dtype).fillna(nodata).astype(dtype)


def _integer_nodata(filled: Any, dtype: np.dtype) -> float | None:
    """The nodata an integer result without one needs: None unless an in-memory result has unfilled pixels."""
    if hasattr(filled, "dask"):
        return None
    values = np.asarray(filled, dtype=np.float64)
    if not np.isnan(values).any():
        return None
    value = unused_integer(values, dtype)
    return None if value is None else float(value)


def build_result(filled: Any, std: Any, da: xr.DataArray, *, nodata: float | None) -> xr.Dataset:
    """Build the Dataset ``geonp.fill`` returns from the filled and std arrays.

    Args:
        filled: Float array shaped like ``da`` (numpy or dask): observed values unchanged,
            predictions on gaps, NaN where nothing was filled.
        std: Float array of the same shape: 0 on observed pixels, NaN where nothing was filled.
        da: The input DataArray (``[band,] y, x``), for dims, coordinates, type, attributes and
            CRS.
        nodata: The nodata value in force for the input (``rio.nodata`` or the user's), or None.

    Returns:
        A Dataset with ``filled`` and ``uncertainty`` (see the module docstring).
    """
    dtype = np.dtype(da.dtype)
    coords = dict(da.coords)
    raw = xr.DataArray(filled, dims=da.dims, coords=coords)
    out_nodata = nodata
    if out_nodata is None and np.issubdtype(dtype, np.integer):
        out_nodata = _integer_nodata(filled, dtype)
    if out_nodata is None and np.issubdtype(dtype, np.floating):
        out_nodata = float("nan")
    std_da = xr.DataArray(std, dims=da.dims, coords=coords).astype(np.float32)
    filled_da = _as_dtype(raw, std_da, da, dtype, out_nodata)
    filled_da.attrs = {k: v for k, v in da.attrs.items() if k not in _ENCODING_ATTRS}
    std_attrs: dict[str, Any] = {
        "long_name": "predictive standard deviation",
        "description": "0 on observed pixels; NaN where nothing was filled",
    }
    if "scale_factor" in da.attrs:
        std_attrs["scale_factor"] = da.attrs["scale_factor"]
    if "units" in da.attrs:
        std_attrs["units"] = da.attrs["units"]
    std_da.attrs = std_attrs
    ds = xr.Dataset(
        {"filled": filled_da, "uncertainty": std_da}, attrs={"geonp_version": __version__}
    )
    try:
        import rioxarray  # noqa: F401 - registers the .rio accessor

        ds["filled"] = ds["filled"].rio.write_nodata(out_nodata, encoded=False)
        ds["uncertainty"] = ds["uncertainty"].rio.write_nodata(np.float32(np.nan), encoded=False)
        crs = da.rio.crs
        if crs is not None:
            ds = ds.rio.write_crs(crs)
    except ImportError:  # pragma: no cover - rioxarray is a core dependency
        if out_nodata is not None:
            ds["filled"].attrs["_FillValue"] = out_nodata
    return ds


@xr.register_dataarray_accessor("geonp")
class GeonpAccessor:
    """``da.geonp.fill(...)``: the same as ``geonp.fill(da, ...)``.

    Registered when this module is imported (``import geonp.filling.xarray_result``, which
    ``geonp.fill`` does).
    """

    def __init__(self, da: xr.DataArray) -> None:
        """Keep the DataArray the accessor belongs to."""
        self._da = da

    def fill(self, **kwargs: Any) -> xr.Dataset:
        """Fill the DataArray's gaps; see :func:`geonp.fill` for the options."""
        import geonp

        return geonp.fill(self._da, **kwargs)
