"""The fill of one block (geonp.filling.block) and the plan it follows (geonp.filling.plan)."""

from __future__ import annotations

import pickle

import numpy as np

from geonp.config import FillConfig
from geonp.filling.arrays import fill_array
from geonp.filling.block import BlockInput, fill_block
from geonp.filling.plan import FillPlan, plan_model
from geonp.model_files.registry import load_model
from geonp.tasks.tiling import Region
from tests.conftest import smooth_field


def _block(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A 2-band float block ``[2, 56, 60]`` with a square gap and scattered missing pixels."""
    rng = np.random.default_rng(seed)
    values = np.stack([smooth_field((56, 60), seed=seed), smooth_field((56, 60), seed=seed + 1, offset=3000.0)])
    valid = np.ones(values.shape, bool)
    valid[:, 18:38, 20:44] = False
    valid &= rng.random(values.shape) > 0.05
    return values, valid


def _plan(cfg: FillConfig, loaded, values: np.ndarray, valid: np.ndarray) -> FillPlan:
    n = values.shape[0]
    return FillPlan.build(cfg, loaded, n_bands=n, sample=lambda: (values.reshape(n, -1), valid.reshape(n, -1)))


def test_fill_block_equals_fill_array_on_the_same_pixels(tiny_model):
    values, valid = _block()
    loaded = load_model(tiny_model)
    cfg = FillConfig(model=loaded, tile_size=16, overlap=4, search_radius=24, max_distance=6.0)
    region, origin = Region(8, 48, 10, 52), (100, 40)  # a region inside a halo, off the raster's corner
    plan = _plan(cfg, loaded, values, valid)
    out = fill_block(BlockInput(values, valid, region, origin=origin), plan, plan.predictor(loaded))
    filled, std = fill_array(values, valid, cfg, region=region, origin=origin)
    assert out.mean.shape == filled.shape == (2, 40, 42)
    # some gaps filled, some left beyond max_distance (the square's middle), and they are counted
    assert 0 < out.filled.sum() < (~out.observed).sum()
    assert out.beyond == int((~out.observed & ~out.filled).sum()) > 0
    np.testing.assert_array_equal(filled[out.filled], out.mean[out.filled])
    np.testing.assert_array_equal(filled[out.observed], values[:, 8:48, 10:52][out.observed])
    assert np.isnan(filled[~out.observed & ~out.filled]).all()
    np.testing.assert_array_equal(std, out.uncertainty)
    assert out.done == int(out.filled.sum())


def test_a_class_fill_block_runs_no_model_and_equals_fill_array():
    values = np.repeat(np.arange(6.0), 10)[None, None].repeat(30, axis=1)  # [1, 30, 60] column stripes
    valid = np.ones(values.shape, bool)
    valid[:, 10:20, 22:38] = False
    cfg = FillConfig(categorical="nearest")
    plan = FillPlan.build(cfg, None, n_bands=1, sample=lambda: (values.reshape(1, -1), valid.reshape(1, -1)),
                          class_fill=True)
    assert plan.model is None and plan.class_reach is not None
    out = fill_block(BlockInput(values, valid, Region(0, 30, 0, 60)), plan, None)
    filled, std = fill_array(values, valid, cfg)
    assert out.filled.sum() == (~valid).sum()
    np.testing.assert_array_equal(filled, np.where(out.filled, out.mean, values))
    np.testing.assert_array_equal(std, out.uncertainty)


def test_a_plan_pickles_small_and_round_trips(tiny_model):
    values, valid = _block(1)
    loaded = load_model(tiny_model)
    plan = _plan(FillConfig(model=str(tiny_model), max_distance=30.0), loaded, values, valid)
    data = pickle.dumps(plan)
    assert len(data) < 4000  # options and statistics, no weights
    back = pickle.loads(data)
    assert back == plan and back.norm == plan.norm and back.opts.context == plan.opts.context
    assert back.model == str(tiny_model) and back.max_distance == 30.0
    assert plan_model(back).name == "tiny"  # a worker loads the model the plan names


def test_building_a_plan_twice_gives_equal_plans(tiny_model):
    values, valid = _block(2)
    loaded = load_model(tiny_model)
    cfg = FillConfig(model=str(tiny_model), tile_size=24, queries="every")
    first, second = _plan(cfg, loaded, values, valid), _plan(cfg, loaded, values, valid)
    assert first == second and hash(first) == hash(second)
    assert first.opts.tile_size == 24 and first.queries == "every" and first.norm.n_bands == 2


def test_a_dask_fill_plans_once_with_the_file_fills_normaliser_whatever_the_chunks(tmp_path, tiny_model):
    """The normaliser of a Dask fill is fitted on the windows fill_raster samples, not on a chunk."""
    import dask.array as dsa

    from geonp.filling import survey
    from geonp.filling.plan import normalizer_for
    from geonp.filling.xarray_fill import dask_plan
    from geonp.io.raster import open_raster, raster_info
    from tests.conftest import write_raster

    rng = np.random.default_rng(1)
    values = np.stack([smooth_field((300, 340), seed=2), smooth_field((300, 340), seed=3, offset=3000.0)])
    values[:, 40:90, 100:180] = 0
    values[:, rng.random((300, 340)) < 0.05] = 0
    values = values.astype("float32")
    cfg = FillConfig(model=str(tiny_model), nodata=0)
    plans = [dask_plan(dsa.from_array(values, chunks=chunks), 0, cfg, references=False)[0]
             for chunks in ((2, 64, 64), (2, 300, 100))]
    assert plans[0] == plans[1]
    # a chunk's own statistics differ from the sample's: the plan is not a chunk's
    own = normalizer_for(load_model(tiny_model), 2, lambda: (values[:, :64, :64].reshape(2, -1),
                                                            (values[:, :64, :64] != 0).reshape(2, -1)))
    assert plans[0].norm != own
    path = write_raster(tmp_path / "in.tif", values, nodata=0)
    with open_raster(path) as src:
        info = raster_info(src)
        norm = normalizer_for(load_model(tiny_model), 2,
                              lambda: survey.sample_for_stats(survey.GapReader(src, info, [1, 2], 0.0, lambda win: None)))
    assert plans[0].norm == norm  # the same pixels in the same order: bit for bit


def test_both_drivers_size_a_block_halo_by_the_plan(tiny_model):
    from geonp.filling.engine import BlockRunner
    from geonp.filling.similar_pixels import ESTIMATE_REACH

    values, valid = _block()
    loaded = load_model(tiny_model)
    plan = _plan(FillConfig(model=loaded, tile_size=16, overlap=4, search_radius=24), loaded, values, valid)
    assert plan.halo(False) == plan.opts.halo == 24 + 2 * 4 + 16
    assert plan.halo(True) == ESTIMATE_REACH > plan.opts.halo
    runner = BlockRunner.__new__(BlockRunner)  # its halo rule only: no model, no raster
    runner.job = type("Job", (), {"plan": plan})()
    assert runner._halos()[-1] == (plan.halo(False), None)
    classes_plan = FillPlan.build(FillConfig(max_distance=5.0), None, n_bands=2, sample=lambda: (values, valid),
                                  class_fill=True)
    assert classes_plan.halo(True) == classes_plan.halo(False) > 0


def test_tiles_look_for_context_as_far_as_the_model_was_trained_unless_told():
    """The search radius (and so a block's halo) is the model card's, 128 px for multidate, unless given."""
    from geonp.filling.plan import tile_options

    default, multidate = load_model("default"), load_model("multidate")
    assert default.card.task_shape["search_radius"] == 512
    assert multidate.card.task_shape["search_radius"] == 128
    assert tile_options(default, None, None, None, None).search_radius == 512
    opts = tile_options(multidate, None, None, None, None)
    assert opts.search_radius == 128 and opts.halo == 128 + 2 * 2 + 12
    assert tile_options(multidate, None, None, None, 300).search_radius == 300
    assert FillConfig().search_radius is None


def test_the_plans_corrections_run_in_order_after_the_model(tiny_model):
    """Reference regression, std calibration, near blend: the plan lists them, the block applies them in turn."""
    import dataclasses

    from geonp.filling.corrections import NearBlendCorrection, RegressionWeight, StdCalibration
    from geonp.filling.references import ReferenceLines

    values, valid = _block()
    loaded = load_model(tiny_model)
    plan = _plan(FillConfig(model=loaded, tile_size=16, overlap=4, search_radius=24), loaded, values, valid)
    calibration = load_model("default").calibration  # a std scale, distance factors and a near blend
    steps = dataclasses.replace(plan, calibration=calibration).corrections
    assert [type(c) for c in steps] == [StdCalibration, NearBlendCorrection]
    lines = ReferenceLines.__new__(ReferenceLines)
    steps = dataclasses.replace(plan, calibration=calibration, reference_lines=lines).corrections
    assert [type(c) for c in steps] == [RegressionWeight, StdCalibration, NearBlendCorrection]
    assert steps[0].lines is lines and steps[2].blend is calibration.near_blend
    assert [c.needs_distance for c in steps] == [False, True, True]
    # the tiny model has no calibration: the model's fill is the block's fill
    assert plan.corrections == ()
    out = fill_block(BlockInput(values, valid, Region(0, 56, 0, 60)), plan, plan.predictor(loaded))
    assert out.filled.any() and np.isfinite(out.std[out.filled]).all()
