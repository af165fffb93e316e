"""Sparse rasters read only their blocks with data; the dry run prices tiles; long steps show progress."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli
from rasterio.transform import from_origin
from rasterio.windows import Window

import geonp
from geonp.filling import engine, survey
from geonp.tasks.tiling import Region
from tests.conftest import smooth_field

SIZE = 1536  # 3 x 3 blocks of 512
DATA = (slice(280, 420), slice(600, 1100))  # in blocks (0, 1) and (0, 2); missed by the 16 sample windows
GAP = (slice(330, 350), slice(650, 670))  # 400 px in block (0, 1), on 2 x 2 of its 48-px tiles


@pytest.fixture
def sparse(tmp_path):
    """A tiled, compressed uint16 raster of nodata with one area of data (a gap in it)."""
    rows, cols = DATA
    arr = np.clip(smooth_field((rows.stop - rows.start, cols.stop - cols.start)), 1, 65535).astype("uint16")
    arr[GAP[0].start - rows.start:GAP[0].stop - rows.start, GAP[1].start - cols.start:GAP[1].stop - cols.start] = 0
    profile = {"driver": "GTiff", "width": SIZE, "height": SIZE, "count": 1, "dtype": "uint16", "nodata": 0,
               "crs": "EPSG:32621", "transform": from_origin(500000, 7000000, 30, 30), "tiled": True,
               "blockxsize": 256, "blockysize": 256, "compress": "deflate"}
    path = tmp_path / "sparse.tif"
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(arr[None], window=Window(cols.start, rows.start, arr.shape[1], arr.shape[0]))
    return path


def test_dry_run_of_a_sparse_raster_counts_its_gap_and_blocks(sparse, tmp_path, tiny_model):
    report = geonp.fill_raster(sparse, geonp.Outputs(tmp_path / "o.tif", dry_run=True), model=tiny_model,
                               workers=1)
    plan = report.plan
    assert (plan["gap_pixels"], plan["tiles_with_gaps"], plan["blocks"]) == (400, 4, 9)
    assert report.outside_pixels == SIZE * SIZE - 140 * 500
    assert plan["estimated_cpu_seconds_by_step"].endswith("(1 blocks with gaps over 1 process(es), 1 copied)")
    assert plan["estimated_seconds"] == plan["estimated_cpu_seconds"] > 0


def test_sparse_fill_reads_only_blocks_with_data_and_writes_what_a_fill_of_every_block_writes(
        sparse, tmp_path, tiny_model, monkeypatch):
    calls = {"fill": 0, "copy": 0}
    fill, copy = engine.BlockRunner.__call__, engine.BlockRunner.copy

    def counted(name, method):
        def call(self, *args, **kwargs):
            calls[name] += 1
            return method(self, *args, **kwargs)
        return call

    monkeypatch.setattr(engine.BlockRunner, "__call__", counted("fill", fill))
    monkeypatch.setattr(engine.BlockRunner, "copy", counted("copy", copy))
    report = geonp.fill_raster(sparse, tmp_path / "o.tif", model=tiny_model, workers=1)
    assert calls == {"fill": 1, "copy": 1}  # 7 blocks of nodata are never read
    assert report.gap_pixels == report.filled_pixels == 400
    # every block through the model, as before the survey routed them
    monkeypatch.setattr(survey.BlockCounts, "of", lambda self, block: (1, 1))
    geonp.fill_raster(sparse, tmp_path / "every.tif", model=tiny_model, workers=1)
    assert calls == {"fill": 10, "copy": 1}
    with rasterio.open(sparse) as a, rasterio.open(tmp_path / "o.tif") as b, \
            rasterio.open(tmp_path / "o_std.tif") as s, rasterio.open(tmp_path / "every.tif") as e, \
            rasterio.open(tmp_path / "every_std.tif") as es:
        src, out, std = a.read(1), b.read(1), s.read(1)
        np.testing.assert_array_equal(out, e.read(1))
        np.testing.assert_array_equal(std, es.read(1))
    gap = np.zeros_like(src, bool)
    gap[GAP] = True
    data = np.zeros_like(gap)
    data[DATA] = True
    np.testing.assert_array_equal(out[data & ~gap], src[data & ~gap])
    assert (out[gap] > 0).all() and (out[~data] == 0).all()
    assert (std[data & ~gap] == 0).all() and (std[gap] > 0).all() and np.isnan(std[~data]).all()


def test_normalising_sample_skips_windows_without_data_and_is_the_same(sparse):
    from geonp.io.raster import open_raster, raster_info

    with open_raster(sparse) as src:
        info = raster_info(src)
        counts = survey.BlockCounts(SIZE, SIZE, 512)
        blocks = [Region(r, r + 512, c, c + 512) for r in range(0, SIZE, 512) for c in range(0, SIZE, 512)]
        survey.count_gaps(survey.GapReader(src, info, [1], 0.0, lambda win: None), blocks, 48, counts=counts)
        assert counts.observed.tolist() == [[0, 140 * 424 - 400, 140 * 76], [0, 0, 0], [0, 0, 0]]
        assert counts.to_fill[0, 0] == 512 * 512  # no footprint given: every nodata pixel
        skipped = survey.sample_for_stats(survey.GapReader(src, info, [1], 0.0, lambda win: None), counts)
        every = survey.sample_for_stats(survey.GapReader(src, info, [1], 0.0, lambda win: None))
    for a, b in zip(skipped, every, strict=True):
        np.testing.assert_array_equal(a, b)
    assert skipped[1].sum() == 140 * 500 - 400


def test_dry_run_prices_the_tasks_the_fill_builds():
    from geonp.data.gap_shapes import cloud_mask
    from geonp.filling.block_input import BlockInput
    from geonp.filling.tile_tasks import TileOptions, block_tasks
    from geonp.tasks.context import ContextSpec
    from geonp.tasks.lattice import LATTICE
    from geonp.tasks.tiling import Region

    opts = TileOptions(tile_size=48, overlap=16, context=ContextSpec(n_near=256, n_far=48, search_radius=512),
                       lattice=LATTICE, near_overlap=1, near_far=0, near_context=128, mid_overlap=8)
    gap = cloud_mask((192, 192), coverage=0.4, rng=3)
    gap |= np.random.default_rng(0).random(gap.shape) < 0.3  # dropped pixels too
    observed = np.stack([~gap, ~gap])
    tasks = block_tasks(BlockInput(np.zeros(observed.shape), observed, Region(0, 192, 0, 192), origin=(1000, 2000)),
                        ~observed, opts)
    c = np.array([t.task.xc.shape[0] for t in tasks])
    q = np.array([t.task.xt.shape[0] for t in tasks])
    want = (survey._TASK_SECONDS + c * c * survey._CONTEXT_PAIR_SECONDS + q * c * survey._QUERY_PAIR_SECONDS).sum()
    assert survey.task_seconds(observed, ~observed, (1000, 2000), opts) == pytest.approx(want, rel=0.02)


def test_footprint_of_whole_windows_is_the_pixel_by_pixel_one():
    from geonp.io.footprint import Footprint

    planes = np.array([[1.0, 0.3, -900.0], [-1.0, 0.0, 100.0], [0.0, 1.0, -700.0], [0.2, -1.0, 50.0]])
    fp = Footprint(1000, 800, "hull", planes, data_fraction=0.5)
    rows, cols = np.mgrid[0:800, 0:1000] + 0.5
    tol = 1e-6 * (np.abs(planes).sum(axis=1) + 1.0)
    want = np.all([a * cols + b * rows + c <= t for (a, b, c), t in zip(planes, tol, strict=True)], axis=0)
    for r0, c0, h, w in [(0, 0, 800, 1000), (300, 300, 128, 128), (0, 0, 64, 64), (700, 900, 200, 200),
                         (-10, -10, 40, 40), (200, 80, 300, 50)]:
        got = fp.fillable(Window(c0, r0, w, h))
        rr, cc = np.arange(r0, r0 + h), np.arange(c0, c0 + w)
        ok_r, ok_c = (rr >= 0) & (rr < 800), (cc >= 0) & (cc < 1000)
        expect = np.zeros((h, w), bool)
        expect[np.ix_(ok_r, ok_c)] = want[np.ix_(rr[ok_r], cc[ok_c])]
        np.testing.assert_array_equal(got, expect)


class _Steps:
    """A progress callback that shows steps: what each step's last call said."""

    def __init__(self):
        self.steps: dict[str, tuple[int, int]] = {}
        self.label = "filling"

    def stage(self, label, unit):
        self.label = label
        self.steps[label] = (0, 0)

    def __call__(self, done, total):
        self.steps[self.label] = (done, total)


def test_every_long_step_reports_progress(sparse, tmp_path, tiny_model):
    steps = _Steps()
    geonp.fill_raster(sparse, tmp_path / "o.tif", model=tiny_model, workers=1, progress=steps)
    assert steps.steps == {"surveying": (9, 9), "filling": (400, 400), "copying blocks without gaps": (1, 1),
                           "closing and verifying": (1, 1)}
    res = CliRunner().invoke(cli, ["fill", str(sparse), str(tmp_path / "c.tif"), "--model", str(tiny_model)])
    assert res.exit_code == 0, res.output
    for label in steps.steps:
        assert f"{label}: 100%" in res.stderr
    res = CliRunner().invoke(cli, ["-q", "fill", str(sparse), str(tmp_path / "q.tif"), "--model", str(tiny_model)])
    assert res.exit_code == 0 and "surveying" not in res.stderr and "100%" not in res.stderr
