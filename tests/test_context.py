"""Context selection (near + far sets) and the std calibration by distance to data."""

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import ndimage

from geonp.data.tasks import PRIOR_COUNT, TaskWindow, standardize, window_task
from geonp.filling.calibration import (
    DISTANCE_BIN_EDGES,
    apply_std_calibration,
    distance_bin_factors,
    distance_to_observed,
    std_factor,
)
from geonp.filling.tile_tasks import TileOptions
from geonp.model_files.calibration import Calibration
from geonp.tasks.block_context import select_contexts
from geonp.tasks.context import ContextSpec, HaloTooSmall, ring_edges, select_context
from geonp.tasks.tiling import nearest_context


def _box_distance(rows, cols, qb):
    r0, r1, c0, c1 = qb
    dr = np.maximum(np.maximum(r0 - rows, rows - (r1 - 1)), 0)
    dc = np.maximum(np.maximum(c0 - cols, cols - (c1 - 1)), 0)
    return np.sqrt(dr * dr + dc * dc)


def _holey_field(size=1100, hole=150, seed=0):
    """Observed everywhere but in a disk of radius ``hole`` around the centre (and 20 % dropouts)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size]
    centre = size // 2
    observed = ((yy - centre) ** 2 + (xx - centre) ** 2 > hole**2) & (
        rng.random((size, size)) > 0.2
    )
    return observed, centre


def test_spec_round_trip_and_old_cards():
    spec = ContextSpec(n_near=200, n_far=64, search_radius=300, rings=6, sectors=8)
    assert ContextSpec.from_dict(spec.to_dict()) == spec
    assert spec.max_points == 264
    old = {"patch_size": 64, "core_size": 48, "max_context": 256, "max_targets": 128}
    assert ContextSpec.from_dict(old) == ContextSpec(n_near=256, n_far=0)
    assert ContextSpec.from_dict(None) == ContextSpec()
    with pytest.raises(ValueError, match="n_near=0 must be an integer >= 1"):
        ContextSpec(n_near=0)
    np.testing.assert_allclose(
        ring_edges(ContextSpec(search_radius=512, rings=8)), [0, 4, 8, 16, 32, 64, 128, 256, 512]
    )


def test_near_set_is_the_nearest_context_rule():
    rng = np.random.default_rng(1)
    observed = rng.random((100, 100)) > 0.4
    queries = ~observed
    qb = (30, 70, 30, 70)
    rows, cols = select_context(observed, queries, qb, ContextSpec(n_near=150), origin=(7, 9))
    q = np.zeros_like(observed)
    q[30:70, 30:70] = queries[30:70, 30:70]
    ref = nearest_context(
        observed,
        qb,
        max_context=150,
        origin=(7, 9),
        query_distance=ndimage.distance_transform_edt(~q),
    )
    np.testing.assert_array_equal(rows, ref[0])
    np.testing.assert_array_equal(cols, ref[1])


def test_far_set_spreads_over_rings_and_sectors_across_a_large_gap():
    observed, centre = _holey_field()
    qb = (centre - 32, centre + 32, centre - 32, centre + 32)
    queries = ~observed
    spec = ContextSpec(n_near=64, n_far=96, search_radius=512, rings=8, sectors=12)
    rows, cols = select_context(observed, queries, qb, spec)
    assert rows.size == 160
    assert len(set(zip(rows.tolist(), cols.tolist(), strict=True))) == 160  # no pixel twice
    assert observed[rows, cols].all()
    d = _box_distance(rows, cols, qb)
    assert d.max() <= 512
    near_d, far_d = d[:64], d[64:]
    # the near set hugs the stretch of the hole's shore nearest to a corner (150 - 32 sqrt(2) px
    # away); the far set reaches the land beyond
    assert near_d.min() >= 150 - 32 * math.sqrt(2) - 1 and near_d.max() < 120 and far_d.max() > 400
    edges = ring_edges(spec)
    reach = near_d.max()
    ring = np.searchsorted(edges, far_d, side="right") - 1
    for k in range(spec.rings):
        if (
            edges[k + 1] > reach
        ):  # every ring beyond the near set's reach holds observed pixels here
            assert (ring == k).any(), f"ring {k} ({edges[k]}-{edges[k + 1]} px) has no far point"
    # every direction: both shores of the hole and the land beyond it
    angle = np.arctan2(rows[64:] - (centre - 0.5), cols[64:] - (centre - 0.5))
    sector = np.floor((angle + math.pi) / (2 * math.pi) * 12).astype(int) % 12
    assert set(sector.tolist()) == set(range(12))


def test_selection_depends_on_absolute_positions_only():
    observed, centre = _holey_field(size=1300, seed=3)
    spec = ContextSpec(n_near=128, n_far=96, search_radius=400)
    qb = (centre - 20, centre + 44, centre - 30, centre + 34)
    full = select_context(observed, ~observed, qb, spec, origin=(1000, 2000))
    # the same pixels seen through a smaller search window that still holds the whole radius
    r0, c0 = centre - 460, centre - 480
    sub = observed[r0 : centre + 480, c0 : centre + 470]
    part = select_context(
        sub,
        ~sub,
        (qb[0] - r0, qb[1] - r0, qb[2] - c0, qb[3] - c0),
        spec,
        origin=(1000 + r0, 2000 + c0),
    )
    np.testing.assert_array_equal(full[0], part[0] + r0)
    np.testing.assert_array_equal(full[1], part[1] + c0)
    again = select_context(observed, ~observed, qb, spec, origin=(1000, 2000))
    np.testing.assert_array_equal(full[0], again[0])
    # a neighbouring query window shares most of its far set (the lattices are absolute)
    shifted = select_context(
        observed, ~observed, (qb[0], qb[1], qb[2] + 48, qb[3] + 48), spec, origin=(1000, 2000)
    )
    far_a = set(zip(full[0][128:].tolist(), full[1][128:].tolist(), strict=True))
    far_b = set(zip(shifted[0][128:].tolist(), shifted[1][128:].tolist(), strict=True))
    assert len(far_a & far_b) >= 0.25 * len(far_a)


def test_n_far_zero_and_small_windows_keep_every_observed_pixel():
    observed = np.zeros((40, 40), bool)
    observed[5, 5] = observed[30, 12] = True
    rows, cols = select_context(
        observed, ~observed, (10, 26, 10, 26), ContextSpec(n_near=8, n_far=16)
    )
    assert sorted(zip(rows.tolist(), cols.tolist(), strict=True)) == [(5, 5), (30, 12)]


def test_training_and_fill_share_select_context():
    rng = np.random.default_rng(5)
    size = 200
    values = rng.normal(size=(1, size, size)).astype(np.float32)
    valid = np.ones((size, size), bool)
    valid[:, :20] = False  # a footprint collar
    is_gap = np.zeros((size, size), bool)
    is_gap[40:170, 50:180] = True
    core = (80, 128, 90, 138)
    spec = ContextSpec(n_near=100, n_far=48, search_radius=150, rings=5, sectors=8)
    task = window_task(TaskWindow(values, valid, is_gap, origin=(300, 400)), core=core, spec=spec, max_targets=64,
                       rng=rng)
    hidden = np.zeros_like(valid)
    hidden[80:128, 90:138] = (is_gap & valid)[80:128, 90:138]
    rows, cols = select_context(valid & ~is_gap, hidden, core, spec, origin=(300, 400))
    np.testing.assert_array_equal(task.xc, np.stack([rows - 80, cols - 90], -1).astype(np.float32))
    # the fill engine's per-tile search gives the same pixels for the same arrays and spec
    observed = valid & ~is_gap
    opts = TileOptions(context=ContextSpec(n_near=100, search_radius=150, n_far=48, rings=5, sectors=8))
    assert opts.context == spec
    fill_rows, fill_cols = select_contexts(observed, hidden, [core], [opts.context], origin=(300, 400))[0]
    np.testing.assert_array_equal(fill_rows, rows)
    np.testing.assert_array_equal(fill_cols, cols)
    # the far set needs the whole search radius: a narrow block read is refused
    with pytest.raises(HaloTooSmall):
        select_contexts(observed, hidden, [core], [opts.context], origin=(300, 400), limit=64)


def test_fill_takes_the_far_context_geometry_from_the_model_card(tiny_model):
    from geonp.filling.plan import tile_options
    from geonp.model_files.registry import load_model

    lm = load_model(tiny_model)
    assert tile_options(lm, None, None, 8, 512).context.n_far == 0  # a card without far fields: 0.1's rule
    lm.card = replace(lm.card, task_shape={"core_size": 32, "max_context": 96, "n_far": 40, "rings": 6,
                                           "sectors": 12})
    opts = tile_options(lm, None, None, 8, 300)
    assert (opts.tile_size, opts.max_context, opts.context.n_far, opts.context.rings, opts.context.sectors) == (32, 96, 40, 6, 12)
    # the lattice's cap on reference pixels per tile (multi-date models) applies too
    assert opts.context == ContextSpec(n_near=96, n_far=40, search_radius=300, rings=6, sectors=12, n_ref=64)


def test_task_scale_shrinks_towards_the_band_std():
    one = np.array([[0.7]])
    _yc, _, shift, scale = standardize(one, None)
    assert shift[0] == pytest.approx(0.7)
    assert scale[0] == pytest.approx(
        math.sqrt(PRIOR_COUNT / (1 + PRIOR_COUNT))
    )  # not the 0.05 floor
    flat = np.full((5, 1), 0.3)
    assert standardize(flat, None)[3][0] == pytest.approx(
        math.sqrt(PRIOR_COUNT / (5 + PRIOR_COUNT))
    )
    many = np.random.default_rng(0).normal(0.0, 0.4, (4000, 1))
    assert standardize(many, None)[3][0] == pytest.approx(many.std(), rel=0.01)
    water = np.random.default_rng(0).normal(0.0, 0.001, (100000, 1))
    assert standardize(water, None)[3][0] == pytest.approx(0.05)  # the floor still holds


def test_distance_to_observed():
    obs = np.zeros((5, 5), bool)
    obs[0, 0] = True
    d = distance_to_observed(obs)
    assert d[0, 0] == 0 and d[4, 4] == pytest.approx(math.hypot(4, 4))
    assert np.isinf(distance_to_observed(np.zeros((2, 2), bool))).all()
    assert distance_to_observed(np.stack([obs, obs])).shape == (2, 5, 5)


def test_distance_bin_factors_recover_known_scales():
    rng = np.random.default_rng(0)
    distance = rng.uniform(0, 300, 200_000)
    true = np.where(distance < 12, 0.5, np.where(distance < 96, 1.0, 2.0))
    z = rng.normal(0, true)
    bins = distance_bin_factors(z * z, distance)
    edges = DISTANCE_BIN_EDGES
    for i, f in enumerate(bins.factors):
        lo = edges[i]
        expect = 0.5 if lo < 12 else 1.0 if lo < 96 else 2.0
        assert f == pytest.approx(expect, rel=0.05), (i, f)
    assert bins.edges[-1] == math.inf and bins.to_dict()["edges"][-1] is None and sum(bins.pixels) == distance.size
    sparse = distance_bin_factors(np.full(300, 1.959963984540054**2), np.full(300, 2.0))  # |z| = 1.96: factor 1
    assert sparse.factors == (1.0,) * (
        len(edges) - 1
    )  # one fitted bin lends its factor to the rest


def test_std_factors_ignore_a_tail_of_gross_errors():
    """1 % of pixels wildly wrong with a small std must not inflate everyone's std (the 95 % fit)."""
    rng = np.random.default_rng(1)
    z = rng.normal(0, 1.3, 100_000)
    z[:1000] = 200.0  # e.g. a cloud edge the model got wrong with a tiny std
    from scipy.stats import norm

    # 95 % of all errors inside: 95/99 of the Gaussian ones, so a little over 1.3
    expect = 1.3 * norm.ppf(0.5 + 0.5 * 0.95 / 0.99) / norm.ppf(0.975)
    assert 1.3 < expect < 1.4 and std_factor(z * z) == pytest.approx(expect, rel=0.02)
    assert math.sqrt(np.mean(z * z)) > 15  # the mean-square fit would have multiplied std by >15
    distance = rng.uniform(0, 24, z.size)
    assert distance_bin_factors(z * z, distance).factors[:5] == pytest.approx([expect] * 5, rel=0.05)
    assert std_factor(np.array([])) == 1.0


def test_apply_std_calibration_contract():
    std = np.array([[1.0, 2.0, np.nan]])
    dist = np.array([[1.0, 50.0, 3.0]])
    assert np.array_equal(apply_std_calibration(std, dist, None), std, equal_nan=True)
    two = Calibration.from_dict({"std_scale": [2.0, 3.0]})
    scaled = apply_std_calibration(std, dist, two, band=1)
    np.testing.assert_allclose(scaled, [[3.0, 6.0, np.nan]])
    # a 2-factor calibration on a 3-band input: the first factor for every band, as fill does
    np.testing.assert_allclose(
        apply_std_calibration(std, dist, two, band=1, band_count=3),
        [[2.0, 4.0, np.nan]],
    )
    edges = [0.0, 1.5, 3.0, 6.0, None]
    bins = {"edges": edges, "factors": [1.0, 2.0, 3.0, 4.0]}
    cal = Calibration.from_dict({"std_scale": [0.5], "distance_bins": bins})
    d = np.array([0.75, math.sqrt(1.5 * 3.0), math.sqrt(3.0 * 6.0), 9.0, 1000.0, 0.0])
    out = apply_std_calibration(np.ones(6), d, cal)
    # bin representatives get their factor exactly; beyond the ends the factor is held
    np.testing.assert_allclose(out, 0.5 * np.array([1.0, 2.0, 3.0, 4.0, 4.0, 1.0]))
    between = apply_std_calibration(np.ones(50), np.linspace(0.75, 9.0, 50), cal)
    assert np.all(np.diff(between) >= 0)  # smooth and monotone between bins: no steps
    per_band = Calibration.from_dict({"distance_bins": {"edges": edges, "factors": [[1, 1, 1, 1], [2, 2, 2, 2]]}})
    np.testing.assert_allclose(
        apply_std_calibration(np.ones(2), np.array([1.0, 9.0]), per_band, band=1), [2.0, 2.0]
    )
