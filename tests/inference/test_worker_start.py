"""A fill's pool workers: forked from the fill's process where that is safe (its imports and model
come with them), spawned elsewhere, filling the same pixels with their own GDAL cache; a small
raster's blocks cut smaller so that every worker gets some."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import rasterio
import torch

from geonp.data.gap_shapes import cloud_mask
from geonp.io.raster import GDAL_CACHE_MB, WORKER_GDAL_CACHE_MB
from tests.conftest import fresh_python, smooth_field, write_raster

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="fork is used on Linux only")


@linux_only
def test_workers_are_forked_from_a_plain_cpu_process_and_spawned_beside_threads_or_cuda():
    code = ("import threading, torch; from geonp.filling.pool import worker_start_method as m; "
            "plain, gpu = m(torch.device('cpu')), m(torch.device('cuda')); e = threading.Event(); "
            "t = threading.Thread(target=e.wait); t.start(); threaded = m(torch.device('cpu')); e.set(); t.join(); "
            "print(plain, gpu, threaded)")
    assert fresh_python(code).split() == ["fork", "spawn", "spawn"]


@linux_only
def test_a_forked_worker_holds_its_own_gdal_cache_and_takes_its_parents_model():
    # GDAL starts in the parent at the fill's 128 MiB; the worker's initializer sets its own 32
    code = """
import concurrent.futures as cf, multiprocessing, os, rasterio
from geonp.filling import engine
from geonp.io.raster import gdal_cache_env
from tests.conftest import gdal_cache_max_mib
def probe():  # opened inside the parent's rasterio.Env, whose options every open applies again
    rasterio.open('sample_data/landsat8_cloudy.tif').close()
    return gdal_cache_max_mib(), [key for key, _ in engine._INHERITED]
with gdal_cache_env():
    rasterio.open('sample_data/landsat8_cloudy.tif').close()
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context('fork'), initializer=engine._init_worker,
                                initargs=(os.getpid(), ('the-model', object()))) as pool:
        mib, keys = pool.submit(probe).result()
    print(gdal_cache_max_mib(), mib, *keys)
"""
    parent, worker, key = fresh_python(code).split()
    if parent == "None":
        pytest.skip("libgdal not found in /proc/self/maps")
    assert (float(parent), float(worker), key) == (GDAL_CACHE_MB, WORKER_GDAL_CACHE_MB, "the-model")


@linux_only
def test_forked_workers_fill_what_one_process_fills(tmp_path, tiny_model):
    """In a fresh process (no other thread: the workers are forked), 2 workers give 1 process's output."""
    size = 150
    arr = np.stack([smooth_field((size, size), seed=s) for s in (1, 2)]).astype("uint16")
    arr[:, cloud_mask((size, size), coverage=0.3, rng=4)] = 0
    src = write_raster(tmp_path / "in.tif", arr, nodata=0)
    code = f"""
import geonp, torch
from geonp.filling.pool import worker_start_method
kw = dict(model={str(tiny_model)!r}, tile_size=24, overlap=6, max_context=64, search_radius=48, device="cpu")
geonp.fill_raster({str(src)!r}, {str(tmp_path / "one.tif")!r}, block_size=512, workers=1, **kw)
report = geonp.fill_raster({str(src)!r}, {str(tmp_path / "pool.tif")!r}, block_size=64, workers=2, **kw)
print(worker_start_method(torch.device("cpu")), report.workers, report.filled_pixels)
"""
    method, workers, filled = fresh_python(code).split()
    assert (method, int(workers)) == ("fork", 2) and int(filled) > 0
    with rasterio.open(tmp_path / "one.tif") as a, rasterio.open(tmp_path / "pool.tif") as b:
        np.testing.assert_array_equal(a.read(), b.read())
    with rasterio.open(tmp_path / "one_std.tif") as a, rasterio.open(tmp_path / "pool_std.tif") as b:
        # blocks of 64 and of 512 blend the std in another order (test_predictor.py's tolerance)
        np.testing.assert_allclose(a.read(), b.read(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("shape", "block", "workers", "gaps", "want"), [
    ((512, 512), 512, 2, 700_000, (4, 256, 2)),      # one block: cut in four, two each
    ((600, 512), 512, 2, 700_000, (6, 256, 2)),      # two blocks: still fewer than two each
    ((2048, 2048), 512, 2, 700_000, (16, 512, 2)),   # enough blocks already
    ((512, 512), 512, 1, 700_000, (1, 512, 1)),      # one process: nothing to share
    ((512, 512), 512, None, 1_000, (1, 512, 1)),     # too few gaps for a pool
    ((300, 300), 512, 8, 200_000, (9, 128, 8)),      # never below MIN_SPLIT_BLOCK
])
def test_a_small_rasters_blocks_are_cut_for_the_worker_processes(shape, block, workers, gaps, want):
    from geonp.filling.pool import plan_pool

    blocks, n = plan_pool(*shape, block, workers, torch.device("cpu"), gaps)
    assert (len(blocks), max(max(r1 - r0, c1 - c0) for r0, r1, c0, c1 in blocks), n) == want
    cover = np.zeros(shape, int)
    for r0, r1, c0, c1 in blocks:
        cover[r0:r1, c0:c1] += 1
    assert (cover == 1).all()  # every pixel in exactly one block


def test_a_cuda_fill_keeps_its_blocks():
    from geonp.filling.pool import plan_pool

    blocks, n = plan_pool(512, 512, 512, None, torch.device("cuda"), 700_000)
    assert (len(blocks), n) == (1, 1)


@linux_only
def test_the_parent_empties_gdals_cache_before_forking_and_keeps_its_limit():
    """A forked worker starts with every page its parent holds: the parent's cached blocks go first."""
    code = """
import rasterio
from geonp.filling import engine
from geonp.io.raster import gdal_cache_bytes, gdal_cache_env
with gdal_cache_env(), rasterio.open('sample_data/landsat8_cloudy.tif') as src:
    src.read()
    before = gdal_cache_bytes()
    engine._empty_caches()
    print(*before, *gdal_cache_bytes())
"""
    out = fresh_python(code).split()
    if out[0] == "None":
        pytest.skip("libgdal not found in /proc/self/maps")
    used, limit, used_after, limit_after = (int(v) for v in out)
    assert used > 100_000 and used_after == 0
    assert limit == limit_after == GDAL_CACHE_MB * 2**20


@pytest.mark.parametrize(("user", "want"), [(None, "32"), ("7", "7")])
def test_a_filling_process_bounds_onednns_primitive_cache_unless_the_user_did(tmp_path, tiny_model, user, want):
    """oneDNN keeps a primitive per new shape (1,024 by default), read from the environment at its
    first primitive: the process that fills blocks sets a small one before its model runs."""
    arr = np.stack([smooth_field((64, 64), seed=1)]).astype("uint16")
    arr[:, 20:40, 20:40] = 0
    src = write_raster(tmp_path / "in.tif", arr, nodata=0)
    code = f"""
import os, geonp
geonp.fill_raster({str(src)!r}, {str(tmp_path / "out.tif")!r}, model={str(tiny_model)!r}, tile_size=24, overlap=6,
                  max_context=64, search_radius=48, workers=1)
print(os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY"))
"""
    # (this test run's own fills set it in its environment)
    env = {} if user is None else {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": user}
    assert fresh_python(code, env, unset=("ONEDNN_PRIMITIVE_CACHE_CAPACITY",)).split()[-1] == want


def test_a_fill_in_this_process_runs_its_model_on_one_cpu_thread_and_gives_the_callers_count_back(tmp_path, tiny_model):
    """Blocks filled in the calling process run on one torch thread (a second one waits on a busy core
    for every small parallel region); the caller's thread count is back once the fill returns."""
    import geonp

    arr = np.stack([smooth_field((64, 64), seed=2)]).astype("uint16")
    arr[:, 20:40, 20:40] = 0
    src = write_raster(tmp_path / "in.tif", arr, nodata=0)
    seen: list[tuple[int, int, int]] = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        report = geonp.fill_raster(src, tmp_path / "out.tif", model=str(tiny_model), tile_size=24, overlap=6,
                                   max_context=64, search_radius=48, workers=1, device="cpu",
                                   progress=lambda done, total: seen.append((done, total, torch.get_num_threads())))
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert report.filled_pixels == 400
    during = {threads for done, total, threads in seen if done < total}  # the last call comes after the blocks
    assert during == {1}
    assert after == 2
