"""The ``xarray.Dataset`` that ``geonp.fill`` returns, and the ``da.geonp.fill()`` accessor.

The Dataset holds two variables, named so that attribute access reaches them (``ds.std``
would be the ``Dataset.std`` method):

- ``filled``: the input with its gaps filled, **in the input's data type** (integers rounded
  and clipped to the type's range, never wrapped), its nodata set the rioxarray way
  (``rio.nodata``, written by ``rio.to_raster``) and kept on pixels left unfilled, its CRS and
  its attributes (scale, offset, band names) as in the input;
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

__all__ = ["GeonpAccessor", "build_result", "default_integer_nodata"]

#: Attributes of the input that describe encoding, set again by rioxarray where they apply.
_ENCODING_ATTRS = ("_FillValue", "missing_value", "nodata")


def default_integer_nodata(dtype: np.dtype) -> int:
    """The nodata given to an integer output that had none: the type's maximum (minimum if signed).

    Only used when some pixels stay unfilled (``max_distance``) and the input had no nodata.
    """
    info = np.iinfo(dtype)
    return int(info.min) if np.issubdtype(dtype, np.signedinteger) else int(info.max)


def _as_dtype(values: xr.DataArray, dtype: np.dtype, nodata: float | None) -> xr.DataArray:
    """Cast filled float values to the input's type; NaN (unfilled) becomes ``nodata``."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        values = values.round().clip(info.min, info.max)
        fill = nodata if nodata is not None else default_integer_nodata(dtype)
        return values.fillna(fill).astype(dtype)
    if nodata is not None and not np.isnan(nodata):
        values = values.fillna(nodata)
    return values.astype(dtype)


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
        out_nodata = default_integer_nodata(dtype)
    if out_nodata is None and np.issubdtype(dtype, np.floating):
        out_nodata = float("nan")
    filled_da = _as_dtype(raw, dtype, out_nodata)
    filled_da.attrs = {k: v for k, v in da.attrs.items() if k not in _ENCODING_ATTRS}
    std_da = xr.DataArray(std, dims=da.dims, coords=coords).astype(np.float32)
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
        ds["filled"].attrs["_FillValue"] = out_nodata
    return ds


@xr.register_dataarray_accessor("geonp")
class GeonpAccessor:
    """``da.geonp.fill(...)``: the same as ``geonp.fill(da, ...)``.

    Registered when this module is imported (``import geonp.xarray_result``, which
    ``geonp.fill`` does).
    """

    def __init__(self, da: xr.DataArray) -> None:
        """Keep the DataArray the accessor belongs to."""
        self._da = da

    def fill(self, **kwargs: Any) -> xr.Dataset:
        """Fill the DataArray's gaps; see :func:`geonp.fill` for the options."""
        import geonp

        return geonp.fill(self._da, **kwargs)
