"""The query lattice (geonp.tasks.lattice): targets, read-off, its twin, and its fill against predicting every pixel."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import geonp
from geonp.data.synthetic import gp_grid_field
from geonp.data.tasks import ReferenceView
from geonp.filling import tile_tasks
from geonp.filling.block_input import BlockInput
from geonp.filling.predict import Predictor, reference_predict
from geonp.filling.tile_tasks import TileOptions, block_tasks
from geonp.model_files.registry import load_model
from geonp.tasks.context import ContextSpec
from geonp.tasks.lattice import LATTICE, read_off, spacing_map, tile_targets
from geonp.tasks.tiling import Region, Tile
from tests.conftest import smooth_field

LATTICE_OPTS = {"lattice": LATTICE, "near_overlap": 3}


def _hole(size=120, hole=(20, 100), seed=0):
    """Two smooth bands with the same 80-px square hole and a few dropped pixels."""
    values = np.stack([smooth_field((size, size), seed=s, scale=1.0, offset=0.0) for s in (seed, seed + 1)])
    gap = np.zeros((size, size), bool)
    gap[hole[0]:hole[1], hole[0]:hole[1]] = True
    gap |= np.random.default_rng(seed).random((size, size)) < 0.05
    return values, np.broadcast_to(~gap, values.shape).copy(), np.broadcast_to(gap, values.shape).copy()


def test_spacing_grows_with_the_distance_to_data():
    observed = np.zeros((100, 100), bool)
    observed[:, 0] = True
    spacing = spacing_map(observed, LATTICE)
    assert spacing[0, 8] == 1 and spacing[0, 9] == 2 and spacing[0, 17] == 4 and spacing[0, 33] == 8
    assert spacing_map(observed, ()) is None and spacing_map(np.zeros((4, 4), bool), LATTICE) is None


def test_read_off_is_exact_for_a_plane_and_covers_every_pixel():
    """Bilinear read-off reproduces a linear field exactly; every candidate gets an output."""
    observed = np.zeros((200, 200), bool)
    observed[:, :2] = True
    spacing = spacing_map(observed, LATTICE)
    tile = Tile(96, 96, 48, 48, 16)
    rows, cols = np.mgrid[80:160, 80:160]
    tt = tile_targets(rows.ravel(), cols.ravel(), tile, spacing=spacing, near_overlap=4, origin=(37, 5),
                      shape=(200, 200))
    assert tt.src is not None and tt.rows.size < 0.1 * tt.out_rows.size  # deep pixels: few queries
    plane = 3.0 + 0.25 * tt.rows - 0.5 * tt.cols
    np.testing.assert_allclose(read_off(plane, tt.src, tt.coef), 3.0 + 0.25 * tt.out_rows - 0.5 * tt.out_cols,
                               atol=1e-9)
    np.testing.assert_allclose(tt.coef.sum(1), 1.0)
    assert tt.out_rows.size == rows.size  # all deep (spacing > 1): the wide margin keeps all
    on_core = tt.weights >= 1.0
    assert on_core.sum() == 48 * 48


def test_pixels_near_data_use_the_narrow_margin():
    observed = np.ones((100, 100), bool)
    observed[::2] = False  # stripes: every gap pixel touches data
    spacing = spacing_map(observed, LATTICE)
    tile = Tile(40, 40, 20, 20, 8)
    rows, cols = np.nonzero(~observed[32:68, 32:68])
    tt = tile_targets(rows + 32, cols + 32, tile, spacing=spacing, near_overlap=2, origin=(0, 0), shape=(100, 100))
    assert tt.src is None  # no lattice near data
    assert tt.out_rows.min() >= 38 and tt.out_rows.max() <= 61  # core 40..59 grown by 2
    edge = (tt.out_rows == 38) & (tt.out_cols >= 40) & (tt.out_cols < 60)  # 2 px above the core
    assert edge.sum() == 20
    np.testing.assert_allclose(tt.weights[edge], 1 / 3)


def test_pixels_on_the_finest_lattice_use_the_mid_margin():
    """Spacing-2 pixels (8-16 px from data) blend over ``mid_overlap``; deeper ones over the tile's overlap."""
    observed = np.zeros((200, 200), bool)
    observed[:, :2] = True  # data in columns 0-1: spacing 2 from column 10, 4 from 18, 8 from 34
    spacing = spacing_map(observed, LATTICE)
    tile = Tile(64, 8, 48, 48, 16)  # core columns 8-55
    rows, cols = np.mgrid[48:128, 2:72]
    kept = {}
    for mid in (None, 4):
        tt = tile_targets(rows.ravel(), cols.ravel(), tile, spacing=spacing, near_overlap=1, mid_overlap=mid,
                          origin=(0, 0), shape=(200, 200))
        kept[mid] = tt
        out_spacing = spacing[tt.out_rows, tt.out_cols]
        above = tt.out_rows < 64  # rows above the core (48..63)
        # above the core, spacing-2 pixels reach 16 px (the overlap) or 4 (mid); spacing 4 and 8 keep 16
        assert tt.out_rows[above & (out_spacing == 2)].min() == (48 if mid is None else 60)
        assert tt.out_rows[above & (out_spacing >= 4)].min() == 48
        assert tt.out_rows[above & (out_spacing == 1)].min() == 63  # the near margin, 1 px
        edge = (tt.out_rows == 62) & (out_spacing == 2) & (tt.out_cols >= 8)
        np.testing.assert_allclose(tt.weights[edge], 1 - 2 / ((16 if mid is None else 4) + 1))
    # the core's pixels are the same either way
    assert (kept[None].weights >= 1).sum() == (kept[4].weights >= 1).sum()


def test_tiles_not_near_data_take_the_far_tile_context():
    """``far_context``: tiles reaching deep into a hole take fewer near pixels; tiles near data and
    the split rule (which counts the gaps' neighbours against the context's n_near) are unchanged."""
    values, observed, to_fill = _hole()
    spec = ContextSpec(n_near=64, n_far=16, search_radius=96, rings=3, sectors=4)
    counts = {}
    for far_context in (None, 40):
        opts = TileOptions(tile_size=24, overlap=8, context=spec, near_far=0, far_context=far_context, **LATTICE_OPTS)
        tasks = block_tasks(BlockInput(values, observed, Region(0, 120, 0, 120)), to_fill, opts)
        counts[far_context] = {tuple(t.index[:2]): (t.task.xc.shape[0], t.near) for t in tasks}
    assert counts[None].keys() == counts[40].keys()  # the same tiles
    pairs = {(counts[None][k][1], counts[None][k][0], counts[40][k][0]) for k in counts[None]}
    assert pairs == {(True, 64, 64), (False, 80, 56)}  # far tiles: 40 near + 16 far instead of 64 + 16


def test_lattice_predictor_equals_its_per_tile_twin(tiny_model):
    model = load_model(tiny_model).module
    values, observed, to_fill = _hole()
    opts = TileOptions(tile_size=24, overlap=8, context=ContextSpec(n_near=64, search_radius=96), **LATTICE_OPTS)
    region, origin = Region(0, 120, 0, 120), (3, 5)
    block = BlockInput(values, observed, region, origin=origin)
    tasks = block_tasks(block, to_fill, opts)
    assert any(t.src is not None for t in tasks) and any(t.src is None for t in tasks)
    ref_mean, ref_std = reference_predict(model, tasks, (2, 120, 120))
    mean, std = Predictor(model, opts, batch_rows=4096).predict(block, to_fill)
    assert np.isfinite(mean[to_fill]).all() and np.isnan(mean[~to_fill]).all()
    np.testing.assert_allclose(mean, ref_mean, atol=1e-5)
    np.testing.assert_allclose(std, ref_std, atol=1e-5)


@pytest.mark.parametrize("dated", [False, True], ids=["one date", "with references"])
def test_bands_sharing_a_gap_pattern_share_geometry_and_give_the_same_tasks(monkeypatch, dated):
    values, observed, to_fill = _hole(size=96, hole=(30, 70))
    refs = []
    if dated:  # two other dates, each with its own hole shared by both bands
        for k, days in ((1, -16.0), (2, 16.0)):
            ref_values, ref_observed, _ = _hole(size=96, hole=(10 + 20 * k, 40 + 20 * k), seed=k)
            refs.append(ReferenceView(ref_values, ref_observed, days))
    opts = TileOptions(tile_size=24, overlap=8, context=ContextSpec(n_near=64, search_radius=96, n_ref=32),
                       temporal=dated, **LATTICE_OPTS)
    block = BlockInput(values, observed, Region(0, 96, 0, 96), references=tuple(refs))
    shared = block_tasks(block, to_fill, opts)
    monkeypatch.setattr(tile_tasks, "_pattern_groups", lambda o, t, r=(): [[b] for b in range(o.shape[0])])
    alone = block_tasks(block, to_fill, opts)
    key = lambda t: (t.band, tuple(t.index[:4]))
    assert len(shared) == len(alone) > 4
    if dated:  # the references' pixels are in the context
        assert all(np.unique(t.task.xc[:, 2]).tolist() == [-16.0, 0.0, 16.0] for t in shared[:4])
    for a, b in zip(sorted(shared, key=key), sorted(alone, key=key), strict=True):
        for field in ("xc", "yc", "xt", "shift", "scale"):
            np.testing.assert_array_equal(getattr(a.task, field), getattr(b.task, field))
        np.testing.assert_array_equal(a.index, b.index)
        np.testing.assert_array_equal(a.weights, b.weights)


def test_pattern_groups_split_bands_whose_gaps_differ_on_any_date():
    observed = np.ones((3, 8, 8), bool)
    observed[:, 2:5, 2:5] = False
    observed[1, 0, 0] = False
    assert tile_tasks._pattern_groups(observed, ~observed) == [[0, 2], [1]]
    reference = np.ones((3, 8, 8), bool)
    reference[2, 7, 7] = False  # band 2 differs on another date
    assert tile_tasks._pattern_groups(observed, ~observed, [reference]) == [[0], [1], [2]]


def test_lattice_fill_matches_every_pixel_fill_on_a_gp_field_with_a_large_hole():
    """The shipped model on a GP field (Matérn 5/2, length scale 12 px) with a 72-px hole.

    The lattice alone (same tiles, context and margins) moves the mean by 4 % of the field's std on
    average and 25 % at most (the widest cells, 8 px, deep in the hole), the std by 25 % at most; the
    whole ``queries="lattice"`` mode (lattice, narrow margin near data, smaller context) keeps the
    RMSE within 1 % of ``queries="every"``.
    """
    from geonp.filling.plan import tile_options

    field = gp_grid_field((112, 112), kernel="matern52", lengthscale=12.0, rng=3)
    gap = np.zeros((112, 112), bool)
    gap[20:92, 20:92] = True
    observed = ~gap[None]
    loaded = load_model("default")
    with_lattice = tile_options(loaded, None, None, None, 512, "lattice")
    block = BlockInput(np.where(observed, field[None], 0.0), observed, Region(0, 112, 0, 112))
    runs = [Predictor(loaded.module, opts).predict(block, ~observed)
            for opts in (with_lattice, dataclasses.replace(with_lattice, lattice=()))]
    diff = np.abs(runs[0][0] - runs[1][0])[0][gap]
    assert diff.mean() < 0.04 * field.std() and diff.max() < 0.25 * field.std()
    assert (np.abs(runs[0][1] - runs[1][1])[0][gap] / runs[1][1][0][gap]).max() < 0.25
    truth = 5000.0 + 400.0 * field[None]
    rmse = []
    for queries in ("lattice", "every"):
        filled, _ = geonp.fill_array(np.where(observed, truth, 0.0), observed, model="default", queries=queries)
        rmse.append(np.sqrt(np.mean((filled[0][gap] - truth[0][gap]) ** 2)))
    assert rmse[0] < 1.01 * rmse[1]


def test_tiles_whose_gaps_all_lie_near_data_get_no_far_context():
    """``near_far=0``: a tile of dropped pixels only has its near set; a tile over the hole keeps 16 far pixels."""
    values, observed, to_fill = _hole()
    spec = ContextSpec(n_near=64, n_far=16, search_radius=96, rings=3, sectors=4)
    counts = {}
    for near_far in (None, 0):
        opts = TileOptions(tile_size=24, overlap=8, context=spec, near_far=near_far, **LATTICE_OPTS)
        tasks = block_tasks(BlockInput(values, observed, Region(0, 120, 0, 120)), to_fill, opts)
        counts[near_far] = {tuple(t.index[:2]): t.task.xc.shape[0] for t in tasks}
    assert counts[None].keys() == counts[0].keys()
    sizes = {(counts[None][k], counts[0][k]) for k in counts[None]}
    assert sizes == {(80, 64), (80, 80)}  # near-only tiles lose the far 16; tiles reaching the hole keep them
