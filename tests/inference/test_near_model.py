"""A model's near model (``<model>/near/``): it runs the tiles near data, the main model the rest."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import rasterio
import torch
from click.testing import CliRunner
from geonp_cli.main import cli

import geonp
from geonp.config import ModelConfig
from geonp.errors import CheckpointError
from geonp.filling.block_input import BlockInput
from geonp.filling.calibration import distance_to_observed, region_distances
from geonp.filling.predict import NearModel, Predictor, reference_predict
from geonp.filling.tile_tasks import TileOptions, block_tasks
from geonp.model_files.calibration import Calibration, DistanceBins
from geonp.model_files.card import ModelCard
from geonp.model_files.checkpoint import save_model
from geonp.model_files.registry import load_model
from geonp.models import build_model
from geonp.tasks.context import ContextSpec
from geonp.tasks.lattice import LATTICE
from geonp.tasks.tiling import Region
from tests.conftest import smooth_field, write_raster

NORM = {"mean": [1000.0], "std": [100.0]}


def _model(path, seed, *, near_context=0, normalizer=NORM, calibration=None):
    torch.manual_seed(seed)
    cfg = ModelConfig(dim=16, depth=1, num_heads=2, ff_dim=32)
    shape = {"near_context": near_context} if near_context else None
    return save_model(path, build_model(cfg), cfg, normalizer=normalizer, calibration=calibration,
                      card=ModelCard(name="tiny", task_shape=shape))


def _with_near(tmp_path, *, near_seed=1, near_calibration=None, main_near_context=0, **near):
    main = _model(tmp_path / "main", 0, calibration=Calibration(std_scale=(1.5,)), near_context=main_near_context)
    _model(main / "near", near_seed, near_context=near.pop("near_context", 32), calibration=near_calibration, **near)
    return main


def _block(size=120):
    """Two bands: an 80-px hole with dropped pixels around it (near and far tiles)."""
    values = np.stack([smooth_field((size, size), seed=s, scale=1.0, offset=0.0) for s in (0, 1)])
    gap = np.zeros((size, size), bool)
    gap[20:100, 20:100] = True
    gap |= np.random.default_rng(0).random((size, size)) < 0.1
    return values, np.broadcast_to(~gap, values.shape).copy(), np.broadcast_to(gap, values.shape).copy()


def _deep(observed):
    """Pixels more than 1.5 px from data."""
    return distance_to_observed(observed) > 1.5


def test_a_model_directory_loads_its_near_model(tmp_path):
    loaded = load_model(_with_near(tmp_path))
    assert loaded.near is not None and loaded.near.card.task_shape == {"near_context": 32}
    assert loaded.near.path == tmp_path / "main" / "near"
    assert load_model(tmp_path / "main" / "near").near is None


@pytest.mark.parametrize(("near", "message"), [
    ({"near_context": 0}, "has no task_shape.near_context"),
    ({"normalizer": {"mean": [0.0], "std": [1.0]}}, "another normalizer"),
])
def test_a_near_model_that_does_not_fit_is_refused(tmp_path, near, message):
    path = _with_near(tmp_path, **near)
    with pytest.raises(CheckpointError, match=message) as err:
        load_model(path)
    assert "replace or remove" in str(err.value) and str(path / "near") in str(err.value)


def test_near_tiles_run_the_near_model_with_its_calibration(tmp_path):
    """Near tasks through the near model, the rest through the main one, equal to the per-tile twin;
    the near std is rescaled by the ratio of the two calibrations (here 2 / 1.5 beyond 3 px, 2 near)."""
    bins = DistanceBins(edges=(0.0, 3.0, float("inf")), factors=(1.0, 1.5), pixels=(1000, 1000))
    loaded = load_model(_with_near(tmp_path, near_calibration=Calibration(std_scale=(2.0,), distance_bins=bins)))
    values, observed, to_fill = _block()
    opts = TileOptions(tile_size=24, overlap=8, context=ContextSpec(n_near=64, search_radius=96), lattice=LATTICE,
                       near_overlap=3, near_context=32)
    region, shape = Region(0, 120, 0, 120), (2, 120, 120)
    block = BlockInput(values, observed, region)
    tasks = block_tasks(block, to_fill, opts)
    assert 0 < sum(t.near for t in tasks) < len(tasks)
    near = NearModel(loaded.near.module, loaded.near.calibration, loaded.calibration)
    distance = region_distances(observed, region)
    np.testing.assert_array_equal(distance, np.stack([distance_to_observed(o) for o in observed]))
    ratio = near.std_ratio(distance)
    gap_ratio = ratio[to_fill]
    assert gap_ratio.min() >= 2 / 1.5 - 1e-9 and gap_ratio.max() <= 2 + 1e-9
    assert ratio[0, 60, 60] == pytest.approx(2.0) and ratio[0][to_fill[0] & ~_deep(observed[0])].max() < 1.6
    predictor = Predictor(loaded.module, opts, near=near)
    mean, std = predictor.predict(block, to_fill)
    ref_mean, ref_std = reference_predict(loaded.module, tasks, shape, near=loaded.near.module, near_ratio=ratio)
    np.testing.assert_allclose(mean, ref_mean, atol=1e-5)
    np.testing.assert_allclose(std, ref_std, atol=1e-5)
    # where no near tile predicts, the main model's maps alone; where only near tiles do, not
    main_mean, _ = Predictor(loaded.module, opts).predict(block, to_fill)
    by = np.zeros((2, int(np.prod(shape))), int)  # tiles of the main model, of the near model
    for t in tasks:
        np.add.at(by[int(t.near)], t.index, 1)
    only_main, only_near = ((by[0] > 0) & (by[1] == 0)).reshape(shape), ((by[1] > 0) & (by[0] == 0)).reshape(shape)
    assert only_main.sum() > 1000 and only_near.sum() > 300
    np.testing.assert_array_equal(mean[only_main], main_mean[only_main])
    assert np.abs(mean[only_near] - main_mean[only_near]).min() > 0


def test_geonp_fill_gives_near_tiles_the_near_model_calibrated_std(tmp_path):
    """The near model is the main model with twice its std scale: on stripes (every tile near data)
    ``geonp fill`` writes the same values and twice the std; with ``--queries every`` (no near
    tiles) the same std as the main model alone."""
    main = _with_near(tmp_path, near_seed=0, main_near_context=32)  # the same model, the same near context
    cfg = json.loads((main / "near" / "config.json").read_text())
    cfg["calibration"] = Calibration(std_scale=(3.0,)).to_dict()
    (main / "near" / "config.json").write_text(json.dumps(cfg))
    alone = tmp_path / "alone"
    shutil.copytree(main, alone, ignore=shutil.ignore_patterns("near"))
    arr = (1000 + 100 * smooth_field((96, 96), seed=3, scale=1.0, offset=0.0)).astype("float32")
    arr[::3] = np.nan  # SLC-off-like stripes: every gap pixel is next to data
    src = write_raster(tmp_path / "in.tif", arr, nodata=float("nan"))
    out = {}
    for name, model, queries in (("near", main, "lattice"), ("alone", alone, "lattice"),
                                 ("near_every", main, "every"), ("alone_every", alone, "every")):
        res = CliRunner().invoke(cli, ["-q", "fill", str(src), str(tmp_path / f"{name}.tif"), "--model", str(model),
                                       "--queries", queries, "--tile-size", "24"])
        assert res.exit_code == 0, res.output
        with rasterio.open(tmp_path / f"{name}.tif") as f, rasterio.open(tmp_path / f"{name}_std.tif") as s:
            out[name] = f.read(1), s.read(1)
    gap = np.isnan(arr)
    np.testing.assert_allclose(out["near"][0][gap], out["alone"][0][gap], rtol=1e-6)
    np.testing.assert_allclose(out["near"][1][gap], 2 * out["alone"][1][gap], rtol=1e-4)
    assert np.isfinite(out["near"][0]).all()
    np.testing.assert_array_equal(out["near_every"][1], out["alone_every"][1])


def test_the_default_model_ships_its_near_model_and_geonp_models_names_it():
    loaded = load_model("default")
    assert loaded.near is not None and loaded.near.card.task_shape["near_context"] == 128
    res = CliRunner().invoke(cli, ["models"])
    assert res.exit_code == 0
    assert "near model: default-near, for the tiles whose gaps all lie near data (near context 128;" in res.output


def test_a_fill_with_a_near_model_does_not_depend_on_blocks_or_workers(tmp_path):
    """Near tiles are told apart by their own query window and the std ratio by the block's halo:
    block size and worker processes leave the maps unchanged."""
    bins = DistanceBins(edges=(0.0, 3.0, float("inf")), factors=(1.0, 1.5), pixels=(1000, 1000))
    main = _with_near(tmp_path, near_calibration=Calibration(std_scale=(2.0,), distance_bins=bins))
    arr = (1000 + 100 * smooth_field((150, 150), seed=4, scale=1.0, offset=0.0)).astype("float32")
    arr[30:110, 40:120] = np.nan  # a hole: far tiles
    arr[::4] = np.nan  # stripes: near tiles
    src = write_raster(tmp_path / "in.tif", arr, nodata=float("nan"))
    kw = {"model": str(main), "tile_size": 24, "overlap": 6, "search_radius": 64}
    geonp.fill_raster(src, tmp_path / "one.tif", block_size=512, workers=1, **kw)
    geonp.fill_raster(src, tmp_path / "pool.tif", block_size=64, workers=2, **kw)
    for name in ("", "_std"):
        with rasterio.open(tmp_path / f"one{name}.tif") as a, rasterio.open(tmp_path / f"pool{name}.tif") as b:
            np.testing.assert_allclose(a.read(), b.read(), rtol=1e-5)
    with rasterio.open(tmp_path / "one.tif") as a:
        assert np.isfinite(a.read()).all()
