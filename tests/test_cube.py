"""``geonp.fill`` on a data cube ``(time, band, y, x)``: every date filled from its nearest dates, on Dask."""

import datetime

import numpy as np
import pytest
import rioxarray  # noqa: F401 - the .rio accessor
import xarray as xr

import geonp
from geonp.data.gap_shapes import cloud_mask
from geonp.errors import ConfigError, InputRasterError
from geonp.filling import xarray_fill
from geonp.filling.cube import cube_neighbours
from geonp.io.timeseries import DatedRaster, nearest

from .conftest import gdal_cache_max_mib, smooth_field

H = W = 64
NODATA = -9999
TIMES = np.array(["2020-03-01", "2020-03-17", "2020-04-18"], dtype="datetime64[ns]")
BASE = (1400.0, 2800.0, 1300.0)  # red, NIR, SWIR1 reflectance x 10,000, as the multidate model's units


def _cube(times=TIMES):
    """An int16 cube with nodata holes (one per date) and a CRS; the dates differ smoothly."""
    rng = np.random.default_rng(0)
    base = np.stack([smooth_field((H, W), seed=b, scale=300, offset=BASE[b]) for b in range(3)])
    vals = np.stack([base * (1 + 0.04 * t) + 25 * t for t in range(len(times))]).astype(np.int16)
    for t in range(len(times)):
        r0, c0 = rng.integers(4, 40, 2)
        vals[t, :, r0:r0 + 8, c0:c0 + 8] = NODATA
    cube = xr.DataArray(vals, dims=("time", "band", "y", "x"),
                        coords={"time": times, "band": ["red", "nir", "swir1"],
                                "y": 4_400_000.0 - 30 * np.arange(H), "x": 500_000.0 + 30 * np.arange(W)},
                        attrs={"scale_factor": 0.0001, "units": "reflectance"})
    return cube.rio.write_crs("EPSG:32613").rio.write_nodata(NODATA)


def _clouds():
    """A mask cube ``(time, y, x)``: a simulated cloud with its shadow per date, True = gap."""
    masks = np.zeros((len(TIMES), H, W), dtype=bool)
    for t in range(len(TIMES)):  # in a 24 px patch: few model tiles keep the test fast
        masks[t, 36:60, 8 + 16 * t:32 + 16 * t] = cloud_mask((24, 24), coverage=0.2, rng=t)
    return xr.DataArray(masks, dims=("time", "y", "x"), coords={"time": TIMES})


@pytest.fixture(scope="module")
def client(cluster):
    import distributed

    with distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def masked_fill(client):
    """The cube filled on the cluster, its clouds given as a mask cube (chunks 32 x 32)."""
    ds = geonp.fill(_cube().chunk({"time": 1, "y": 32, "x": 32}), mask=_clouds())
    assert hasattr(ds["filled"].data, "dask")  # lazy until computed
    return ds.compute()


def test_each_date_equals_a_single_date_fill_with_the_same_references(masked_fill, client):
    cube, clouds = _cube(), _clouds()
    hidden = cube.where(~clouds, NODATA).astype(np.int16).rio.write_nodata(NODATA)  # the clouds as nodata
    plan = cube_neighbours(TIMES, 2)
    assert plan == [[(1, 16.0), (2, 48.0)], [(0, -16.0), (2, 32.0)], [(1, -32.0), (0, -48.0)]]
    dates = [geonp.fill(hidden.isel(time=t).chunk(), references=[(hidden.isel(time=j).chunk(), d) for j, d in refs])
             for t, refs in enumerate(plan)]
    dates = xr.concat(dates, dim="time").compute()  # one compute: the dates run in parallel
    np.testing.assert_array_equal(masked_fill["filled"].values, dates["filled"].values)
    np.testing.assert_array_equal(masked_fill["uncertainty"].values, dates["uncertainty"].values)
    # the mask is honoured: cloud pixels are predicted (std > 0), the clear ones copied bit for bit
    gaps = np.broadcast_to(clouds.values[:, None], cube.shape) | (cube.values == NODATA)
    std = masked_fill["uncertainty"].values
    assert (std[gaps] > 0).mean() > 0.99 and (std[~gaps] == 0).all()
    np.testing.assert_array_equal(masked_fill["filled"].values[~gaps], cube.values[~gaps])
    # predicted, not copied from under the mask (a close int16 prediction can round to the truth:
    # 12 % of these pixels do)
    assert (masked_fill["filled"].values[gaps] != cube.values[gaps]).mean() > 0.75


def test_the_result_keeps_dims_coords_attrs_crs_and_nodata(masked_fill):
    cube = _cube()
    for name in ("filled", "uncertainty"):
        assert masked_fill[name].dims == ("time", "band", "y", "x") and masked_fill[name].shape == cube.shape
    for dim in ("time", "band", "y", "x"):
        np.testing.assert_array_equal(masked_fill[dim].values, cube[dim].values)
    assert masked_fill["filled"].dtype == np.int16 and masked_fill["filled"].rio.nodata == NODATA
    assert masked_fill["filled"].attrs["scale_factor"] == 0.0001 and masked_fill["uncertainty"].attrs["units"] == "reflectance"
    assert masked_fill.rio.crs.to_epsg() == 32613
    np.testing.assert_array_equal(masked_fill["filled"].rio.transform(), cube.rio.transform())


def test_provenance_says_which_pixels_are_observed_and_how_many_references_saw_each_filled_one(masked_fill):
    from geonp.filling.cube import FROM_SPACE, NOT_FILLED, OBSERVED

    cube, clouds = _cube(), _clouds()
    gap = (cube.values == NODATA) | clouds.values[:, None]
    clear = ~gap
    prov = masked_fill["provenance"]
    assert prov.dims == cube.dims and prov.dtype == np.uint8
    np.testing.assert_array_equal(prov.values == OBSERVED, clear)
    # each date's two references (cube_neighbours(TIMES, 2) uses the other two dates): how many see a gap clear
    seen = clear.sum(axis=0, keepdims=True) - clear
    expected = np.where(clear, OBSERVED, np.where(seen > 0, seen, FROM_SPACE))
    np.testing.assert_array_equal(prov.values, expected)
    assert (prov.values == 2).sum() > 500 and (prov.values == 1).sum() > 0
    assert not (prov.values == NOT_FILLED).any() and np.isfinite(masked_fill["uncertainty"].values).all()


def test_the_workers_that_filled_a_cube_hold_gdals_cache_to_128_mib(masked_fill, client):
    """Each chunk of a cube's files is read once: GDAL's default cache (5 % of RAM) only grew."""
    from geonp.io.raster import GDAL_CACHE_MB

    assert set(client.run(gdal_cache_max_mib).values()) == {GDAL_CACHE_MB}


def test_two_chunkings_give_the_same_result_bit_for_bit(client, monkeypatch):
    monkeypatch.setattr(xarray_fill, "STATS_WINDOW", 24)  # the regression's sums over several windows
    cube = _cube()
    a = geonp.fill(cube.chunk({"time": 1, "y": 32, "x": 32}), block_size=40)
    b = geonp.fill(cube.chunk({"time": 2, "y": 64, "x": 20}), block_size=40)
    assert a["filled"].chunks == b["filled"].chunks == ((1, 1, 1), (3,), (40, 24), (40, 24))
    a, b = a.compute(), b.compute()
    np.testing.assert_array_equal(a["filled"].values, b["filled"].values)
    np.testing.assert_array_equal(a["uncertainty"].values, b["uncertainty"].values)
    assert (a["uncertainty"].values > 0).sum() == (cube.values == NODATA).sum()  # every hole filled


def test_the_cube_is_held_in_the_narrowest_float_that_keeps_every_value(client):
    """16-bit values are held as float32 (half of Dask's memory), 32-bit integers as float64: an
    observed value above 2**24 comes back exactly, as it would not through float32."""
    from geonp.filling.cube import _gaps_as_nan

    cube = _cube()
    assert _gaps_as_nan(cube, NODATA, None).dtype == np.float32
    big = cube.astype(np.int32) + 2**24 + 1  # odd integers above 2**24: not representable in float32
    big = big.where(cube != NODATA, NODATA).rio.write_nodata(NODATA)
    assert _gaps_as_nan(big, NODATA, None).dtype == np.float64
    ds = geonp.fill(big.chunk({"time": 1, "y": 32, "x": 32}), neighbours=1).compute()
    observed = big.values != NODATA
    assert ds["filled"].dtype == np.int32
    np.testing.assert_array_equal(ds["filled"].values[observed], big.values[observed])
    assert (ds["filled"].values[~observed] != NODATA).all()


def test_a_one_date_cube_is_a_single_date_fill(client):
    cube = _cube(TIMES[:1])
    ds = geonp.fill(cube.chunk({"y": 64, "x": 64}))
    alone = geonp.fill(cube.isel(time=0).chunk({"y": 64, "x": 64}))
    assert ds["filled"].dims == ("time", "band", "y", "x")
    np.testing.assert_array_equal(ds["filled"].values[0], alone["filled"].values)
    np.testing.assert_array_equal(ds["uncertainty"].values[0], alone["uncertainty"].values)
    assert (ds["uncertainty"].values[0][cube.values[0] == NODATA] > 0).all()


def test_a_time_coordinate_that_is_missing_or_not_dates_is_refused():
    cube = _cube()
    with pytest.raises(InputRasterError, match=r"time dimension has no coordinate; .*assign_coords\(time="):
        geonp.fill(cube.drop_vars("time"))
    with pytest.raises(InputRasterError, match="holds int64 values, not datetime64 dates; convert it"):
        geonp.fill(cube.assign_coords(time=[0, 1, 2]))
    with pytest.raises(ConfigError, match="a cube's references are its own dates"):
        geonp.fill(cube, references=[(cube.isel(time=0), 3)])
    with pytest.raises(InputRasterError, match="the mask cube has dims"):
        geonp.fill(cube, mask=_clouds().isel(x=slice(0, 10)))
    with pytest.raises(ConfigError, match="neighbours=, max_days= and mask= fill a cube"):
        geonp.fill(cube.isel(time=0), neighbours=2)


def test_neighbours_follow_max_days_and_the_batch_tie_rule():
    times = np.array(["2020-01-01", "2020-01-11", "2020-01-21", "2020-03-01"], dtype="datetime64[ns]")
    assert cube_neighbours(times, 2) == [[(1, 10.0), (2, 20.0)], [(0, -10.0), (2, 10.0)],
                                         [(1, -10.0), (0, -20.0)], [(2, -40.0), (1, -50.0)]]
    assert cube_neighbours(times, 2, max_days=15) == [[(1, 10.0)], [(0, -10.0), (2, 10.0)], [(1, -10.0)], []]
    # the same choice as geonp batch --neighbours (geonp.io.timeseries.nearest) on dated files
    series = [DatedRaster(f"d{i}.tif", t.astype("datetime64[D]").astype(datetime.date)) for i, t in enumerate(times)]
    for i, refs in enumerate(cube_neighbours(times, 2, max_days=15)):
        assert [r.path for r in nearest(series, series[i], 2, max_days=15)] == [f"d{j}.tif" for j, _ in refs]
    with pytest.raises(ConfigError, match="--max-days -1 is negative"):
        cube_neighbours(times, 2, max_days=-1)


def test_a_date_under_full_cloud_is_filled_from_its_references_alone(client):
    """A date with no clear pixel (common in a series) is filled from its neighbours, not refused."""
    cube = _cube()
    cube[1] = NODATA
    ds = geonp.fill(cube.chunk({"time": 1, "y": 32, "x": 32}), neighbours=2).compute()
    filled = ds["filled"].isel(time=1).values
    assert (filled != NODATA).all()
    assert np.isfinite(ds["uncertainty"].isel(time=1).values).all()
    # it follows its references: between the dates before and after it (the series drifts slowly)
    truth = _cube().isel(time=1).values.astype(float)
    known = truth != NODATA  # the date's own nodata hole has no truth
    assert np.abs(filled - truth)[known].mean() < 0.1 * truth[known].std()


def test_a_date_that_sees_no_ground_is_passed_over_as_a_reference(client):
    """Its neighbours take the next nearest date instead, as geonp batch --neighbours does."""
    cube = _cube()
    cube[1] = NODATA
    assert cube_neighbours(TIMES, 1, usable=[True, False, True]) == [[(2, 48.0)], [(0, -16.0)], [(0, -48.0)]]
    ds = geonp.fill(cube.chunk({"time": 1, "y": 32, "x": 32}), neighbours=1).compute()
    date = cube.isel(time=2)
    alone = geonp.fill(date.chunk(), references=[(cube.isel(time=0).chunk(), -48.0)]).compute()
    np.testing.assert_array_equal(ds["filled"].isel(time=2).values, alone["filled"].values)
    np.testing.assert_array_equal(ds["uncertainty"].isel(time=2).values, alone["uncertainty"].values)


def test_fill_array_with_no_pixel_of_its_own_and_a_reference():
    ref = np.stack([smooth_field((24, 24), seed=b, scale=300, offset=BASE[b]) for b in range(3)])
    values = np.full_like(ref, np.nan)
    filled, std = geonp.fill_array(values, np.isfinite(values), references=[(ref, None, -16.0)])
    assert np.isfinite(filled).all() and (std > 0).all()
    with pytest.raises(geonp.errors.NoValidPixelsError):
        geonp.fill_array(values, np.isfinite(values))
