"""Models that read other dates as features of each point (``ModelConfig.ref_slots``)."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
import torch

import geonp
from geonp.config import ModelConfig
from geonp.data.tasks import (
    DAY_UNIT,
    NEAREST_REACH,
    ReferenceView,
    TaskWindow,
    feature_context,
    reference_columns,
    window_task,
)
from geonp.errors import ConfigError
from geonp.filling.block_input import BlockInput
from geonp.filling.tile_tasks import TileOptions, block_tasks
from geonp.tasks.context import ContextSpec
from geonp.tasks.tiling import Region
from geonp.training.multidate import features_from


def _scene(seed=0, size=40):
    rng = np.random.default_rng(seed)
    target = rng.normal(size=(1, size, size))
    observed = rng.random((size, size)) > 0.4
    return rng, target, observed


def test_reference_columns_fill_the_slots_nearest_date_first_matched_to_the_target():
    rng, target, observed = _scene()
    rows, cols = np.nonzero(observed)
    sees_a = rng.random(observed.shape) > 0.3
    refs = [ReferenceView(2.0 * target + 10.0, sees_a[None], -48.0),  # a linear relation: matched exactly
            ReferenceView(0.5 * target - 1.0, np.ones((1, 40, 40), bool), 16.0),
            ReferenceView(target + 3.0, np.ones((1, 40, 40), bool), -100.0)]
    points = (np.array([0, 5, 39]), np.array([0, 7, 39]))
    cols4 = reference_columns(refs, 4, (rows, cols), target[:, rows, cols].T, points)
    q = slice(cols4.n_context, None)  # the context pixels' columns first, then the queries'
    assert cols4.n_context == rows.size and cols4.seen.shape == (rows.size + 3, 4)
    truth = target[0, points[0], points[1]]
    # slot 0 is the date 16 days away, slot 1 the one 48 days away, slot 2 the one 100 days away
    np.testing.assert_allclose(cols4.days, [16 / DAY_UNIT, -48 / DAY_UNIT, -100 / DAY_UNIT, 0.0])
    np.testing.assert_allclose(cols4.values[0, q, 0], truth, atol=1e-9)
    np.testing.assert_allclose(cols4.values[0, q, 2], truth, atol=1e-9)
    seen_a = sees_a[points]
    np.testing.assert_array_equal(cols4.seen[q, 1], seen_a.astype(float))
    # where the date does not see a point, its nearest pixel that it sees stands in
    near_r, near_c, distance = (a[points] for a in refs[0].nearest)
    assert (distance[seen_a] == 0).all() and (distance[~seen_a] > 0).all() and (distance <= NEAREST_REACH).all()
    nearest_truth = target[0, near_r, near_c]
    np.testing.assert_allclose(cols4.values[0, q, 1], nearest_truth, atol=1e-9)
    assert np.isnan(cols4.values[0, q, 3]).all() and (cols4.seen[q, 3] == 0).all()  # no fourth date: an empty slot
    # standardised as the task's values (an empty slot: 0), then the seen flags and the date offsets
    f = cols4.features(0, 0.5, 2.0)[q]
    assert f.shape == (3, 12) and f.dtype == np.float32
    np.testing.assert_allclose(f[:, 0], (truth - 0.5) / 2.0, rtol=1e-5)
    np.testing.assert_allclose(f[:, 1], (nearest_truth - 0.5) / 2.0, rtol=1e-5)
    assert (f[:, 3] == 0).all()
    np.testing.assert_array_equal(f[:, 4:8], cols4.seen[q])
    np.testing.assert_allclose(f[:, 8:], np.broadcast_to(cols4.days, (3, 4)), rtol=1e-6)


def test_a_clouded_over_target_takes_its_references_weighed_by_date_as_its_context():
    _, target, _ = _scene()
    query = np.zeros((40, 40), bool)
    query[10:20, 10:20] = True
    half = np.zeros((1, 40, 40), bool)
    half[0, :15] = True  # the nearest date sees the top rows of the window only
    seeing = np.ones((1, 40, 40), bool)
    refs = [ReferenceView(target + 10.0, half, -8.0), ReferenceView(target + 40.0, seeing, 24.0),
            ReferenceView(target + 100.0, seeing, -100.0)]
    spec = ContextSpec(n_near=16, search_radius=32, n_ref=500, ref_margin=1, ref_slots=2)
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    rows, cols, y = feature_context(target, none, query, (10, 20, 10, 20), spec, references=refs)
    assert rows.size == 12 * 12  # the window grown by ref_margin, where a reference sees
    top = rows < 15
    w = np.array([1 / 8, 1 / 24, 1 / 100])
    np.testing.assert_allclose(y[top, 0] - target[0, rows[top], cols[top]], (w @ [10, 40, 100]) / w.sum())
    np.testing.assert_allclose(y[~top, 0] - target[0, rows[~top], cols[~top]], (w[1:] @ [40, 100]) / w[1:].sum())
    # with context of its own, the target keeps it
    chosen = (np.array([0, 1]), np.array([0, 1]))
    rows, _, y = feature_context(target, chosen, query, (10, 20, 10, 20), spec, references=refs)
    assert rows.tolist() == [0, 1] and np.array_equal(y[:, 0], target[0, [0, 1], [0, 1]])


def test_training_and_filling_build_the_same_feature_task():
    rng, target, observed = _scene(1, 60)
    ref_vals, ref_ok = rng.normal(size=(1, 60, 60)), rng.random((60, 60)) > 0.3
    is_gap = np.zeros((60, 60), bool)
    is_gap[10:40, 12:44] = True
    observed &= ~is_gap
    spec = ContextSpec(n_near=40, search_radius=32, n_ref=100, ref_margin=1, ref_slots=2)
    refs = (ReferenceView(ref_vals, ref_ok[None], -16.0),)
    tasks = block_tasks(BlockInput(target, observed[None], Region(16, 32, 16, 32), references=refs), is_gap[None],
                        TileOptions(tile_size=16, overlap=0, context=spec))
    task = window_task(TaskWindow(target, observed | is_gap, is_gap, references=list(refs)), core=(16, 32, 16, 32),
                       spec=spec, max_targets=10_000, rng=rng)
    fill = next(t.task for t in tasks if t.task.xt.shape[0] == task.xt.shape[0])
    assert task.xc.shape == (40, 2 + 3 * 2)  # the target's context alone, each point with its features
    np.testing.assert_allclose(fill.xc, task.xc, rtol=1e-6)
    np.testing.assert_allclose(fill.xt, task.xt, rtol=1e-6)
    np.testing.assert_allclose(fill.yc, task.yc, rtol=1e-6)
    seen = ref_ok[16:32, 16:32][is_gap[16:32, 16:32]]
    np.testing.assert_array_equal(task.xt[:, 4], seen.astype(np.float32))  # slot 0 sees the queries it sees
    assert (task.xt[:, 5] == 0).all() and (task.xt[:, 7] == 0).all()  # slot 1: no second date


def test_a_feature_model_started_from_a_single_date_model_predicts_as_it_does():
    single = geonp.load_model("default")
    module, cfg = features_from(single.module, single.config, 3)
    assert cfg.ref_slots == 3 and cfg.dim_x == 11
    rng = torch.Generator().manual_seed(0)
    xc, xt = torch.rand(2, 30, 2, generator=rng) * 20, torch.rand(2, 9, 2, generator=rng) * 20
    yc = torch.randn(2, 30, 1, generator=rng)
    fc, ft = torch.randn(2, 30, 9, generator=rng), torch.randn(2, 9, 9, generator=rng)
    with torch.no_grad():
        want = single.module.eval()(xc, yc, xt)
        got = module.eval()(torch.cat([xc, fc], -1), yc, torch.cat([xt, ft], -1))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_ref_slots_need_the_coordinates_and_their_features():
    with pytest.raises(ConfigError, match="ref_slots=2 needs arch tnpkr, temporal false and dim_x 8"):
        ModelConfig(ref_slots=2, dim_x=3)
    with pytest.raises(ConfigError, match="ref_slots=-1 must be an integer >= 0"):
        ModelConfig(ref_slots=-1)
    assert ModelConfig(ref_slots=2, dim_x=8).takes_references and not ModelConfig().takes_references


def test_a_token_model_trained_without_slots_still_fills_with_references(tmp_path):
    """``ref_slots: 0`` trains the reference-token model shipped before (``temporal``), and it fills."""
    from pathlib import Path

    from click.testing import CliRunner
    from geonp_cli.main import cli

    lsts = Path(__file__).resolve().parents[1] / "data" / "lsts"
    recipe = tmp_path / "tokens.yaml"
    recipe.write_text("data:\n  ref_slots: 0\n  max_references: 2\n")
    res = CliRunner().invoke(cli, ["-q", "train", str(lsts), "--series", "--output", str(tmp_path / "m"),
                                   "--recipe", str(recipe), "--steps", "2", "--val-every", "2"])
    assert res.exit_code == 0, res.output
    loaded = geonp.load_model(tmp_path / "m")
    assert loaded.config.temporal and loaded.config.ref_slots == 0 and loaded.config.dim_x == 3
    target = lsts / "LE70350322012145EDC00.tif"  # 2012-05-24, mostly cloud
    res = CliRunner().invoke(cli, ["fill", str(target), str(tmp_path / "f.tif"), "--model", str(tmp_path / "m"),
                                   "--reference", str(lsts / "LE70350322012129EDC00.tif"), "--reference",
                                   str(lsts / "LE70350322012161EDC00.tif"), "--fill-outside"])
    assert res.exit_code == 0, res.output
    assert "Filled 2481 of 2481 missing pixels" in res.output
    with rasterio.open(tmp_path / "f.tif") as src:
        assert (src.read() != -9999).all()


def test_a_run_from_a_multi_date_model_keeps_its_slots():
    from geonp.training.multidate import start_module

    multidate = geonp.load_model("multidate")
    module, cfg = start_module(multidate, 4)
    assert module is multidate.module and cfg.ref_slots == 4
    with pytest.raises(ConfigError, match="reads 4 reference slots, the recipe 0; set ref_slots: 4 in the recipe"):
        start_module(multidate, 0)
