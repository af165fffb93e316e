"""The batched Predictor against its slow per-tile twin, and invariance to batching and blocks."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio

import geonp
from geonp.data.gap_shapes import cloud_mask
from geonp.filling.block_input import BlockInput
from geonp.filling.predict import Predictor, geometry_units, pack, reference_predict
from geonp.filling.tile_tasks import BandGroup, TileOptions, band_tasks, block_tasks
from geonp.model_files.registry import load_model
from geonp.tasks.context import ContextSpec, HaloTooSmall
from geonp.tasks.tiling import Region
from tests.conftest import DEVICES, smooth_field, write_raster


def _block(size=150, seed=0):
    """Normalised values, observed and to-fill masks ``[2, size, size]`` with clouds and dropped pixels."""
    rng = np.random.default_rng(seed)
    values = np.stack([smooth_field((size, size), seed=s, scale=1.0, offset=0.0) for s in (seed, seed + 1)])
    gaps = np.stack([cloud_mask((size, size), coverage=0.25, rng=seed),
                     rng.random((size, size)) < 0.4])  # band 2: scattered gaps -> split tiles
    return values, ~gaps, gaps


@pytest.mark.parametrize("device", DEVICES)
def test_batched_predictor_equals_per_tile_reference(tiny_model, device):
    model = load_model(tiny_model).module
    values, observed, to_fill = _block()
    opts = TileOptions(tile_size=24, overlap=6, context=ContextSpec(n_near=64, search_radius=64))
    region, origin = Region(20, 130, 10, 140), (300, 700)  # a block with a halo, somewhere in a raster
    block = BlockInput(values, observed, region, origin=origin)
    tasks = block_tasks(block, to_fill, opts)
    shape = (2, 110, 130)
    sizes = {t.task.xt.shape[0] for t in tasks}
    assert len(sizes) > 3 and any(t.task.xt.shape[0] < 24 * 24 for t in tasks)  # split and clipped tiles
    ref_mean, ref_std = reference_predict(model, tasks, shape)
    predictor = Predictor(model, opts, device, batch_rows=4096)
    mean, std = predictor.predict(block, to_fill)
    gap = to_fill[:, 20:130, 10:140]
    assert np.isfinite(mean[gap]).all() and np.isnan(mean[~gap]).all()
    np.testing.assert_allclose(mean, ref_mean, atol=1e-5)
    np.testing.assert_allclose(std, ref_std, atol=1e-5)
    assert next(model.parameters()).device.type == "cpu"  # the caller's model was not moved


def test_results_do_not_depend_on_batch_size(tiny_model):
    model = load_model(tiny_model).module
    values, observed, to_fill = _block(seed=3)
    opts = TileOptions(tile_size=20, overlap=4, context=ContextSpec(n_near=48, search_radius=40))
    region = Region(10, 140, 10, 140)
    block = BlockInput(values, observed, region)
    runs = [Predictor(model, opts, batch_rows=rows, chunk_rows=chunk).predict(block, to_fill)
            for rows, chunk in ((1, 100), (2048, 512), (10**6, 10**6))]
    for mean, std in runs[1:]:
        np.testing.assert_allclose(mean, runs[0][0], atol=1e-5)
        np.testing.assert_allclose(std, runs[0][1], atol=1e-5)


def test_progress_counts_every_gap_pixel_of_the_region(tiny_model):
    model = load_model(tiny_model).module
    values, observed, to_fill = _block(seed=5)
    opts = TileOptions(tile_size=24, overlap=6, context=ContextSpec(n_near=64, search_radius=64))
    region = Region(20, 130, 10, 140)
    done = []
    Predictor(model, opts, batch_rows=2048).predict(BlockInput(values, observed, region), to_fill,
                                                    progress=done.append)
    assert len(done) > 1  # moves batch by batch
    assert sum(done) == int(to_fill[:, 20:130, 10:140].sum())


def test_pack_groups_by_queries_then_context_within_the_row_budget():
    queries = [100, 105, 110, 10, 10, 900, 400]
    contexts = [150, 190, 170, 250, 300, 300, 190]
    batches = pack(queries, contexts, batch_rows=820)
    assert sorted(i for b in batches for i in b) == list(range(len(queries)))
    # larger than the budget: alone; then query buckets, largest first, by context within
    assert batches == [[5], [6], [1, 2, 0], [4, 3]]
    for b in batches[1:]:
        assert len(b) * max(max(queries[i], contexts[i]) for i in b) <= 820


def test_pack_keeps_units_of_one_size_per_call_and_counts_their_tasks():
    queries = [100, 105, 110, 10, 10, 900, 400]
    contexts = [150, 190, 170, 250, 300, 300, 190]
    runs = [3, 3, 1, 3, 3, 1, 3]
    batches = pack(queries, contexts, batch_rows=1200, runs=runs)
    assert sorted(i for b in batches for i in b) == list(range(len(queries)))
    assert batches == [[6], [1, 0], [4], [3], [5], [2]]
    for b in batches:
        assert len({runs[i] for i in b}) == 1
        assert len(b) == 1 or sum(runs[i] for i in b) * max(max(queries[i], contexts[i]) for i in b) <= 1200


def test_bands_that_share_a_gap_pattern_run_as_one_unit(tiny_model):
    """Bands 0 and 2 share their gaps: their tasks share one geometry and run band after band in one
    call (the model reads their bias once); the maps equal the per-tile twin's."""
    model = load_model(tiny_model).module
    values, observed, to_fill = _block(seed=7)
    values = np.concatenate([values, values[:1] * 0.5 + 0.2])
    observed, to_fill = np.concatenate([observed, observed[:1]]), np.concatenate([to_fill, to_fill[:1]])
    opts = TileOptions(tile_size=24, overlap=6, context=ContextSpec(n_near=64, search_radius=64))
    region, shape = Region(20, 130, 10, 140), (3, 110, 130)
    tasks = block_tasks(BlockInput(values, observed, region), to_fill, opts)
    units = geometry_units(tasks)
    assert {tuple(tasks[i].band for i in u) for u in units} == {(0, 2), (1,)}
    assert sum(len(u) == 2 for u in units) == sum(t.band == 0 for t in tasks)
    predictor = Predictor(model, opts, batch_rows=4096)
    assert predictor.shares_geometry
    ref_mean, ref_std = reference_predict(model, tasks, shape)
    mean, std = predictor.run(tasks, shape)
    np.testing.assert_allclose(mean, ref_mean, atol=1e-5)
    np.testing.assert_allclose(std, ref_std, atol=1e-5)
    predictor.shares_geometry = False  # every task on its own: the same maps
    alone = predictor.run(tasks, shape)
    np.testing.assert_allclose(alone[0], mean, atol=1e-6)
    np.testing.assert_allclose(alone[1], std, atol=1e-6)


def test_pack_pads_the_queries_of_multi_date_tiles_little():
    """Small tiles with ~190 context tokens and 1-256 queries: padded queries and contexts within 10 %
    of the real ones (sorted by the larger count alone, queries were padded to 2.6x)."""
    rng = np.random.default_rng(0)
    queries, contexts = rng.integers(1, 257, 3000), rng.integers(180, 193, 3000)
    batches = pack(queries.tolist(), contexts.tolist(), 4096)
    assert sum(len(b) * max(queries[i] for i in b) for b in batches) < 1.1 * queries.sum()
    assert sum(len(b) * max(contexts[i] for i in b) for b in batches) < 1.1 * contexts.sum()


@pytest.mark.parametrize("device", DEVICES)
def test_fill_raster_same_on_blocks_workers_and_devices(tmp_path, tiny_model, device):
    """Block size, worker processes and device leave the output unchanged."""
    size = 150
    arr = np.stack([smooth_field((size, size), seed=s) for s in (1, 2)]).astype("uint16")
    arr[:, cloud_mask((size, size), coverage=0.3, rng=4)] = 0
    src = write_raster(tmp_path / "in.tif", arr, nodata=0)
    kw = {"model": str(tiny_model), "tile_size": 24, "overlap": 6, "max_context": 64, "search_radius": 48}
    geonp.fill_raster(src, tmp_path / "one.tif", block_size=512, workers=1, device="cpu", **kw)
    geonp.fill_raster(src, tmp_path / "pool.tif", block_size=64, workers=2, device=device, **kw)
    with rasterio.open(tmp_path / "one.tif") as a, rasterio.open(tmp_path / "pool.tif") as b:
        np.testing.assert_array_equal(a.read(), b.read())
    with rasterio.open(tmp_path / "one_std.tif") as a, rasterio.open(tmp_path / "pool_std.tif") as b:
        np.testing.assert_allclose(a.read(), b.read(), rtol=1e-4, atol=1e-3)


def test_narrow_halo_reads_give_the_same_fill_as_full_halo_reads(tmp_path, tiny_model, monkeypatch):
    """Blocks are read with a narrow halo first; a tile deep in a big gap forces the full halo."""
    from geonp.filling import engine

    size = 200
    arr = smooth_field((size, size), seed=7).astype("float32")
    arr[20:190, 20:190] = np.nan  # a 170-px cloud: its centre needs a context search past 64 px
    arr[np.random.default_rng(1).random((size, size)) < 0.05] = np.nan
    opts = TileOptions(tile_size=24, overlap=6, context=ContextSpec(n_near=64, search_radius=160))
    obs = np.isfinite(arr)
    with pytest.raises(HaloTooSmall):
        band_tasks(BandGroup(np.nan_to_num(arr), obs, ~obs), (96, 120, 96, 120), origin=(0, 0), opts=opts, limit=64)
    src = write_raster(tmp_path / "in.tif", arr, nodata=float("nan"))
    kw = {"model": str(tiny_model), "tile_size": 24, "overlap": 6, "max_context": 64, "search_radius": 160, "workers": 1,
              "block_size": 64}
    geonp.fill_raster(src, tmp_path / "narrow.tif", **kw)
    monkeypatch.setattr(engine, "_NARROW_SEARCH", 10**6)  # always the full halo
    geonp.fill_raster(src, tmp_path / "full.tif", **kw)
    for name in ("", "_std"):
        with rasterio.open(tmp_path / f"narrow{name}.tif") as a, rasterio.open(tmp_path / f"full{name}.tif") as b:
            np.testing.assert_array_equal(a.read(), b.read())


_FAULTS = """
import resource, sys, torch
from geonp.filling.predict import tune_heap
if sys.argv[1] == "tuned":
    tune_heap()
x = torch.ones(8 * 2**20)  # the first allocation faults in its pages either way
del x
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    x = torch.ones(8 * 2**20)  # 32 MB, freed at once
    del x
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_tune_heap_reuses_freed_tensor_memory_under_dasks_trim_threshold():
    """Dask's workers run with MALLOC_TRIM_THRESHOLD_=65536: without tune_heap every 32 MB tensor is
    mapped afresh (8,192 page faults each); with it the freed memory is reused."""
    import os
    import subprocess
    import sys

    # a clean environment: what other tests leave in os.environ does not reach the heap
    env = {"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1", "MALLOC_TRIM_THRESHOLD_": "65536"}
    faults = {mode: int(subprocess.run([sys.executable, "-c", _FAULTS, mode], env=env, check=True,
                                       capture_output=True, text=True).stdout.split()[-1])
              for mode in ("plain", "tuned")}
    assert faults["plain"] > 20 * 8000  # each allocation faulted in page by page
    assert faults["tuned"] < faults["plain"] / 2  # freed memory reused


_TRIM = """
import sys, numpy as np
from geonp.filling.predict import release_heap, tune_heap
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
tune_heap()
blocks = [np.ones(2**17) for _ in range(200)]  # 200 MB in 1 MB arrays, on the heap below 256 MB
keep = blocks[-1]  # the heap's top stays in use, so glibc trims nothing by itself
del blocks
before = rss_mb()
release_heap()
print(before, rss_mb())
"""


def test_release_heap_gives_a_tuned_heaps_free_memory_back():
    """Under tune_heap's thresholds freed arrays stay in the heap (a Dask worker's RSS grew with its
    blocks); release_heap returns them, and does nothing in a process tune_heap left alone."""
    import os
    import subprocess
    import sys

    results = {}
    for name, extra in (("dask", {"MALLOC_TRIM_THRESHOLD_": "65536"}), ("plain", {})):
        env = {"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1", **extra}
        out = subprocess.run([sys.executable, "-c", _TRIM], env=env, check=True, capture_output=True, text=True)
        results[name] = [float(v) for v in out.stdout.split()[-2:]]
    before, after = results["dask"]
    assert before - after > 150, results  # the freed 199 MB went back
    before, after = results["plain"]
    assert abs(before - after) < 20, results  # glibc's own thresholds: already returned (mmapped), nothing to do
