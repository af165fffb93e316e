"""GDAL's block cache where geonp reads and writes: 128 MiB (32 in a fill's worker processes, which only
read), given to GDAL in the unit it reads."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from affine import Affine

import geonp
from geonp.io.raster import GDAL_CACHE_MB, WORKER_GDAL_CACHE_MB
from tests.conftest import fresh_python, gdal_cache_max_mib


def test_a_file_fill_holds_gdals_cache_to_128_mib_and_gives_the_users_back(tmp_path):
    if gdal_cache_max_mib() is None:
        pytest.skip("libgdal not found in /proc/self/maps")
    profile = {"driver": "GTiff", "width": 40, "height": 40, "count": 1, "dtype": "float32", "nodata": -1.0,
               "crs": "EPSG:32621", "transform": Affine(30.0, 0.0, 300000.0, 0.0, -30.0, 5000000.0)}
    values = np.add.outer(np.arange(40.0), np.arange(40.0)).astype(np.float32)[None]
    values[0, 10:14, 10:14] = -1.0
    with rasterio.open(tmp_path / "in.tif", "w", **profile) as dst:
        dst.write(values)
    seen = []
    with rasterio.Env(GDAL_CACHEMAX=300 * 2**20):
        geonp.fill_raster(tmp_path / "in.tif", tmp_path / "out.tif", progress=lambda *_: seen.append(gdal_cache_max_mib()))
        after = gdal_cache_max_mib()
    # rasterio.Env(GDAL_CACHEMAX=128) would be a cache of 128 bytes (1.2e-4 MiB)
    assert seen and set(seen) == {GDAL_CACHE_MB}
    assert after == 300


@pytest.mark.parametrize(("env", "capped", "mib"), [({}, True, GDAL_CACHE_MB), ({"GDAL_CACHEMAX": "64"}, False, 64)])
def test_cap_gdal_cache_respects_a_cache_the_environment_sets(env, capped, mib):
    code = ("import rasterio; from geonp.io.raster import cap_gdal_cache; from tests.conftest import gdal_cache_max_mib; "
            "c = cap_gdal_cache(); print(c, cap_gdal_cache(), gdal_cache_max_mib())")
    c1, c2, got = fresh_python(code, env).split()
    assert (c1, c2) == (str(capped), str(capped))
    assert float(got) == mib


def test_a_fills_worker_processes_hold_gdals_cache_to_the_workers_size():
    # the pool's initializer (geonp.filling.engine.run_blocks), in a fresh process as a spawned worker (the GDAL of a
    # forked one started in its parent: tests/inference/test_worker_start.py)
    code = ("import rasterio; from geonp.filling.engine import _init_worker; from tests.conftest import gdal_cache_max_mib; "
            "_init_worker(); rasterio.open('sample_data/landsat8_cloudy.tif').close(); print(gdal_cache_max_mib())")
    out = fresh_python(code)
    if out.strip() == "None":
        pytest.skip("libgdal not found in /proc/self/maps")
    assert float(out) == WORKER_GDAL_CACHE_MB < GDAL_CACHE_MB
