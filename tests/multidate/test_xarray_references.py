"""``geonp.fill`` (xarray, eager and Dask) with other dates as references, on real Landsat 7 dates."""

import numpy as np
import pytest
import rioxarray

import geonp
from geonp.errors import ConfigError, InputRasterError

from .test_fill_references import REF, _hide


def _open(path, chunks=None):
    return rioxarray.open_rasterio(path, chunks=chunks, masked=False)


def test_an_xarray_fill_with_references_equals_fill_array(tmp_path):
    inp, _, hidden = _hide(tmp_path)
    da, ref = _open(inp), _open(REF)
    ds = geonp.fill(da, references=[(ref, 32)], fill_outside=True)
    values = da.values.astype(np.float64)
    ref_values = ref.values.astype(np.float64)
    filled, std = geonp.fill_array(values, values != -9999, references=[(ref_values, ref_values != -9999, 32)],
                                   fill_outside=True)
    gaps = values == -9999
    assert gaps[:, hidden].all()
    assert ds["filled"].dtype == np.int16 and ds["filled"].rio.nodata == -9999
    assert np.abs(ds["filled"].values[gaps] - filled[gaps]).max() <= 0.5  # int16, rounded
    np.testing.assert_allclose(ds["uncertainty"].values[gaps], std[gaps], rtol=1e-6)
    np.testing.assert_array_equal(ds["filled"].values[~gaps], values[~gaps])
    alone = geonp.fill(da, fill_outside=True)
    assert np.abs(alone["filled"].values[gaps].astype(float) - filled[gaps]).max() > 10  # the reference counts


def test_a_chunked_xarray_fill_with_references_equals_the_eager_one_on_a_local_cluster(tmp_path, cluster):
    import distributed

    inp, _, _ = _hide(tmp_path)
    eager = geonp.fill(_open(inp), references=[(_open(REF), 32)], fill_outside=True)
    with distributed.Client(cluster):
        lazy = geonp.fill(_open(inp, chunks={"x": 32, "y": 32}), references=[(_open(REF, chunks={"x": 32, "y": 32}), 32)],
                          fill_outside=True)
        assert hasattr(lazy["filled"].data, "dask")
        filled, std = lazy["filled"].values, lazy["uncertainty"].values
    # the model's float32 batches differ by < 1e-3 DN with a chunk's tiles (an int16 rounding flip at .5)
    np.testing.assert_allclose(filled, eager["filled"].values, atol=1)
    np.testing.assert_allclose(std, eager["uncertainty"].values, rtol=1e-5, atol=1e-3)


def test_xarray_references_must_share_the_grid_and_carry_days(tmp_path):
    inp, _, _ = _hide(tmp_path)
    da = _open(inp)
    with pytest.raises(InputRasterError, match="reproject it onto the array's grid first"):
        geonp.fill(da, references=[(da.isel(x=slice(0, 40)), -16)])
    with pytest.raises(ConfigError, match="reference 1 has days=None; give its date offset"):
        geonp.fill(da, references=[da])
    with pytest.raises(ConfigError, match="reference 1 has days='soon'"):
        geonp.fill(da, references=[(da, "soon")])
