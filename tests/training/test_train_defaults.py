"""``geonp train`` and ``geonp.train`` share one set of defaults: the packaged default recipe."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from geonp_cli.main import cli

import geonp
from geonp.config import TrainConfig, load_recipe
from geonp.model_files.checkpoint import load_checkpoint
from geonp.model_files.registry import resolve_model_path
from geonp.training.settings import TrainingData, TrainRecipe, from_recipe
from geonp.training.windows import TaskShape
from tests.conftest import smooth_field, write_raster


@pytest.fixture(scope="module")
def raster(tmp_path_factory):
    arr = np.stack([smooth_field((64, 128), seed=s) for s in (5, 6)]).astype("uint16")
    return write_raster(tmp_path_factory.mktemp("defaults") / "scene.tif", arr)


def _captured(monkeypatch, args):
    seen = {}

    class Report:
        steps, seconds, best_val_nll, best_step, output, first_step = 1, 0.0, 0.0, 1, "stub", 0

    def fake_train(inputs, output, **kwargs):
        seen.update(kwargs)
        return Report()

    monkeypatch.setattr(geonp, "train", fake_train, raising=False)
    res = CliRunner().invoke(cli, ["-q", "train", *args])
    assert res.exit_code == 0, res.output
    return seen


def test_plain_cli_train_passes_the_default_recipe_with_only_the_given_options(raster, tmp_path, monkeypatch):
    seen = _captured(monkeypatch, [str(raster), "-o", str(tmp_path / "m"), "--steps", "3", "--init-from", "default"])
    recipe = seen["recipe"]
    default = load_recipe("default")
    assert recipe["model"] == default["model"]  # depth 4, ff 128: the default model's, not the old 6 / 256
    assert recipe["training"] == {**default["training"], "steps": 3, "device": "auto"}
    assert recipe["data"] == {**default["data"], "init_from": "default"}
    # --config FILE is --recipe FILE
    cfg = tmp_path / "r.yaml"
    cfg.write_text("model:\n  depth: 2\n")
    for flag in ("--config", "--recipe"):
        seen = _captured(monkeypatch, [str(raster), "-o", str(tmp_path / "m2"), flag, str(cfg)])
        assert seen["recipe"]["model"] == {**default["model"], "depth": 2}


def test_the_library_reads_the_same_recipe():
    keys = ("batch_size", "val_fraction", "test_fraction", "val_tasks", "pool_size", "pretrain_steps",
            "footprint_probability", "gp_fraction", "pool_megabytes", "calibrate", "init_from")
    explicit = dict.fromkeys(keys)
    model, train_cfg, shape, opts = from_recipe(TrainRecipe(), explicit)
    default = load_recipe("default")
    assert model.depth == default["model"]["depth"] == 3 and model.ff_dim == 128
    assert train_cfg.lr == default["training"]["lr"] and train_cfg.steps == default["training"]["steps"]
    assert shape == TaskShape(**{k: default["data"][k] for k in shape.__dict__})
    assert opts == {**{k: default["data"][k] for k in keys[:-1]}, "init_from": None}
    assert opts["batch_size"] == 16 and opts["gp_fraction"] == 0.1


def test_init_from_default_fine_tunes_the_shipped_weights(raster, tmp_path):
    report = geonp.train(TrainingData([raster], nodata=0), tmp_path / "tuned",
                         TrainRecipe(init_from="default", batch_size=4, val_tasks=16, pool_size=20,
                                     task_shape=TaskShape(patch_size=24, core_size=12, max_context=32, max_targets=16),
                                     training=TrainConfig(steps=1, val_every=1, lr=1e-9, warmup_steps=0, device="cpu")),
                         run=geonp.TrainRun(data_workers=0))
    assert report.steps == 1
    tuned = load_checkpoint(tmp_path / "tuned")
    shipped = load_checkpoint(resolve_model_path("default"))
    assert tuned.config == shipped.config and tuned.card.init_from == "default"
    for k, v in shipped.module.state_dict().items():
        torch.testing.assert_close(tuned.module.state_dict()[k], v, atol=1e-6, rtol=0)


def test_a_trained_model_ships_calibrated_on_its_validation_columns(raster, tmp_path):
    from geonp.data.datasets import ColumnSplit, split_columns
    from geonp.training.calibrate import validation_window

    shape = TaskShape(patch_size=24, core_size=12, max_context=32, max_targets=16)
    small = TrainRecipe(batch_size=4, val_tasks=16, pool_size=20, task_shape=shape,
                        training=TrainConfig(steps=2, val_every=2, warmup_steps=0, device="cpu"))
    geonp.train(TrainingData([raster], nodata=0, test_fraction=0.2, val_fraction=0.2), tmp_path / "m", small,
                run=geonp.TrainRun(data_workers=0))
    loaded = load_checkpoint(tmp_path / "m")
    cal = loaded.calibration
    assert cal is not None and len(cal.std_scale) == 2 and all(0.05 < f < 20 for f in cal.std_scale)
    col, row, w, h = validation_window(128, 64, ColumnSplit(0.2, 0.2, min_val_columns=24))
    assert (col, w) == (split_columns(128, val_fraction=0.2, test_fraction=0.2, min_val_columns=24).val[0], 26)
    assert f"window {col} {row} {w} {h}" in cal.fitted_on  # validation columns, not training or test ones
    # then the near blend, on the same window and another draw of the masks
    blend_note = cal.fitted_on.split("; near blend fitted on ")[1]
    assert cal.near_blend is not None and f"window {col} {row} {w} {h}" in blend_note and "seeds [1]" in blend_note
    assert sum(map(sum, cal.near_blend.pixels)) > 0 and np.asarray(cal.near_blend.weights).shape == (4, 4, 7)
    geonp.train(TrainingData([raster], nodata=0), tmp_path / "raw", replace(small, calibrate=False),
                run=geonp.TrainRun(data_workers=0))
    assert load_checkpoint(tmp_path / "raw").calibration is None
