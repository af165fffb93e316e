"""Misused arguments of the Python fills raise geonp errors with one line saying what to do.

The CLI turns bad input into one-line messages; ``fill_array``, ``geonp.fill`` and ``fill_raster``
raised ``too many values to unpack``, numpy broadcast errors, ``OverflowError`` or
``AttributeError`` for the same mistakes. Every case here fails before a model is loaded.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import geonp
from geonp.errors import ConfigError, InputRasterError

VALUES = np.linspace(0.0, 1.0, 2 * 20 * 20, dtype=np.float32).reshape(2, 20, 20)
VALID = np.ones((2, 20, 20), bool)
VALID[:, 5:8, 5:8] = False
DA = xr.DataArray(VALUES, dims=("band", "y", "x"))


def _fill_array(*args, **kwargs):
    return lambda: geonp.fill_array(*args, **kwargs)


def _fill(*args, **kwargs):
    return lambda: geonp.fill(*args, **kwargs)


CASES = {
    "4-D values": (_fill_array(VALUES[None], VALID[None]), InputRasterError,
                   "values has shape (1, 2, 20, 20); fill_array takes [bands, h, w] or [h, w]"),
    "1-D values": (_fill_array(VALUES[0, 0], VALID[0, 0]), InputRasterError, "values has shape (20,)"),
    "valid of another rank": (_fill_array(VALUES, VALID[0, 0]), InputRasterError,
                              ("valid has shape (20,), values (2, 20, 20); give valid the shape of values or "
                               "[h, w] (20, 20)")),
    "valid of another shape": (_fill_array(VALUES, VALID[:, :10]), InputRasterError, "valid has shape (2, 10, 20)"),
    "nodata below uint16": (_fill_array((VALUES * 1000).astype("uint16"), VALID, nodata=-5), ConfigError,
                            "nodata=-5 cannot be stored in the array's uint16 values (0..65535, whole numbers)"),
    "nodata above uint8": (_fill_array((VALUES * 100).astype("uint8"), VALID, nodata=300), ConfigError,
                           "nodata=300 cannot be stored in the array's uint8 values (0..255"),
    "fractional nodata of integers": (_fill_array((VALUES * 1000).astype("int16"), VALID, nodata=0.5),
                                      ConfigError, "nodata=0.5 cannot be stored in the array's int16 values"),
    "fillable of another shape": (_fill_array(VALUES, VALID, fillable=np.ones((10, 10), bool)), InputRasterError,
                                  "fillable has shape (10, 10); give a bool [h, w] mask of shape (20, 20)"),
    "region of two numbers": (_fill_array(VALUES, VALID, region=(0, 10)), ConfigError,
                              "region=(0, 10) must be (r0, r1, c0, c1) with 0 <= r0 < r1 <= 20"),
    "region beyond the array": (_fill_array(VALUES, VALID, region=(0, 30, 0, 10)), ConfigError,
                                "region=(0, 30, 0, 10) must be"),
    "origin of one number": (_fill_array(VALUES, VALID, origin=(0,)), ConfigError,
                             "origin=(0,) must be the array's (row, col) offset"),
    "reference mask of another shape": (_fill_array(VALUES, VALID, references=[(VALUES, VALID[:, :5], -16)]),
                                        InputRasterError, "reference 1 has shape (2, 20, 20) and valid (2, 5, 20)"),
    "config given positionally as a value": (_fill_array(VALUES, VALID, 0), ConfigError,
                                             "config must be a geonp.FillConfig, got int; give options as keywords"),
    "a Dataset to fill": (_fill(xr.Dataset({"B04": DA})), InputRasterError,
                          ("geonp.fill's input must be an xarray DataArray, not a Dataset; pick one variable: "
                           "ds['B04'], or its variables as bands: ds.to_array('band')")),
    "a numpy array to fill": (_fill(VALUES), InputRasterError,
                              "not a numpy array; geonp.fill_array fills numpy arrays"),
    "a numpy reference to fill": (_fill(DA, references=[(VALUES, -16)]), InputRasterError,
                                  "geonp.fill's reference 1 must be an xarray DataArray, not a numpy array"),
    "a DataArray of four dims": (_fill(DA.expand_dims("z")), InputRasterError,
                                 "got ('z', 'band', 'y', 'x'); select or stack the other dimensions first"),
    "nodata a uint16 DataArray cannot hold": (_fill(DA.astype("uint16"), nodata=-5), ConfigError,
                                              "nodata=-5 cannot be stored in the array's uint16 values"),
    "an array to fill_raster": (lambda: geonp.fill_raster(VALUES, "out.tif"), ConfigError,
                                "fill_raster reads a raster file: give its path (got ndarray)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_misuse_raises_a_one_line_geonp_error(case):
    call, kind, message = CASES[case]
    with pytest.raises(kind) as info:
        call()
    assert type(info.value) is kind and isinstance(info.value, ValueError)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_valid_none_marks_only_nan_and_nodata(tiny_model):
    values = VALUES.copy()
    values[:, 5:8, 5:8] = np.nan
    filled, std = geonp.fill_array(values, None, model=str(tiny_model), device="cpu", fill_outside=True)
    same, same_std = geonp.fill_array(values, np.isfinite(values), model=str(tiny_model), device="cpu",
                                      fill_outside=True)
    np.testing.assert_array_equal(filled, same)
    np.testing.assert_array_equal(std, same_std)
    assert np.isfinite(filled).all() and (std[:, 5:8, 5:8] > 0).all()
