import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from geonp_cli.main import cli

from geonp.config import ModelConfig, TrainConfig
from geonp.data.datasets import ColumnSplit, PatchSpec, sample_patches, split_columns
from geonp.errors import NoValidPixelsError
from geonp.model_files.checkpoint import load_checkpoint
from geonp.training.raster import train
from geonp.training.settings import TrainingData, TrainOutput, TrainRecipe
from geonp.training.windows import TaskShape
from tests.conftest import smooth_field, write_raster

SMALL = TrainRecipe(model=ModelConfig(dim=16, depth=1, num_heads=2, ff_dim=32), batch_size=8,
                    task_shape=TaskShape(patch_size=24, core_size=12, max_context=48, max_targets=32), val_tasks=16,
                    pool_size=60)


def _small(training: TrainConfig, **options) -> TrainRecipe:
    return replace(SMALL, training=training, **options)


@pytest.fixture(scope="module")
def raster(tmp_path_factory):
    d = tmp_path_factory.mktemp("train")
    arr = np.stack([smooth_field((96, 160), seed=s) for s in (1, 2)]).astype("uint16")
    arr[:, :10, :10] = 0  # some nodata
    return write_raster(d / "scene.tif", arr)


def test_short_training_lowers_validation_nll(raster, tmp_path):
    report = train(TrainingData([raster], nodata=0), tmp_path / "m",
                   _small(TrainConfig(steps=40, val_every=10, lr=1e-2, warmup_steps=5)))
    nll = [r["val_nll"] for r in report.history]
    assert len(nll) == 4
    assert min(nll[1:]) < nll[0] - 0.05, nll
    assert report.best_val_nll == pytest.approx(min(nll))
    loaded = load_checkpoint(tmp_path / "m")
    assert loaded.card.best_step == report.best_step
    assert len(loaded.normalizer["mean"]) == 2
    assert loaded.config.coord_unit == "pixel"


def test_resume_continues_from_the_saved_step(raster, tmp_path):
    train(TrainingData([raster], nodata=0), tmp_path / "m", _small(TrainConfig(steps=10, val_every=5, warmup_steps=2)))
    state = json.loads((tmp_path / "m" / "train_state" / "state.json").read_text())
    assert state["progress"]["step"] == 10
    report = train(TrainingData([raster], nodata=0),
                   TrainOutput(tmp_path / "m", resume=True, metrics=tmp_path / "metrics.jsonl"),
                   _small(TrainConfig(steps=20, val_every=5, warmup_steps=2)))
    steps = [r["step"] for r in report.history]
    assert steps == [5, 10, 15, 20]  # history kept, training went on from 10
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [15, 20]
    seconds = [r["seconds"] for r in report.history]
    assert seconds == sorted(seconds) and seconds[2] > seconds[1] > 0  # the clock goes on from the first run's


def test_training_and_validation_patches_do_not_overlap(raster):
    regions = split_columns(160, val_fraction=0.2, test_fraction=0.1)
    assert regions.train == (0, 112) and regions.val == (112, 144) and regions.test == (144, 160)
    spec = PatchSpec(24, nodata=0, bands=None, split=ColumnSplit(0.2, 0.1), min_valid_fraction=0.5)
    tr = sample_patches([raster], spec, region="train", count=50, rng=np.random.default_rng(0))
    va = sample_patches([raster], spec, region="val", count=20, rng=np.random.default_rng(1))
    assert max(c + 24 for _, _, c in tr.offsets) <= 112
    assert min(c for _, _, c in va.offsets) >= 112 and max(c + 24 for _, _, c in va.offsets) <= 144


def test_model_directory_reloads_to_identical_outputs(raster, tmp_path):
    train(TrainingData([raster], nodata=0), tmp_path / "m", _small(TrainConfig(steps=4, val_every=2, warmup_steps=1)))
    a, b = load_checkpoint(tmp_path / "m"), load_checkpoint(tmp_path / "m")
    xc, yc, xt = torch.rand(1, 30, 2) * 20, torch.randn(1, 30, 1), torch.rand(1, 7, 2) * 20
    with torch.no_grad():
        assert torch.equal(a.module(xc, yc, xt)[0], b.module(xc, yc, xt)[0])


def test_bad_training_inputs(tmp_path, raster):
    empty = write_raster(tmp_path / "empty.tif", np.zeros((2, 96, 160), "uint16"))
    with pytest.raises(NoValidPixelsError, match="patches with at least 50% valid pixels"):
        train(TrainingData([empty], nodata=0), tmp_path / "m", _small(TrainConfig(steps=2)))
    # rasters of different band counts train together (one group each); the card keeps the first
    one_band = write_raster(tmp_path / "one.tif", smooth_field((96, 160)).astype("uint16")[None])
    train(TrainingData([raster, one_band], nodata=0), tmp_path / "mixed",
          _small(TrainConfig(steps=2, val_every=2, warmup_steps=1)))
    mixed = load_checkpoint(tmp_path / "mixed")
    assert mixed.card.band_count == 2 and len(mixed.normalizer["mean"]) == 2
    bad = tmp_path / "bad.tif"
    bad.write_text("not a raster")
    res = CliRunner().invoke(cli, ["train", str(bad), "--output", str(tmp_path / "m2"), "--steps", "2"])
    assert res.exit_code == 1 and "bad.tif" in res.output and "Traceback" not in res.output


def test_cli_train_with_config_file(raster, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("model:\n  dim: 16\n  depth: 1\n  num_heads: 2\n  ff_dim: 32\n"
                   "training:\n  steps: 4\n  val_every: 2\n  warmup_steps: 1\n"
                   "data:\n  patch_size: 24\n  core_size: 12\n  max_context: 48\n  max_targets: 16\n"
                   "  batch_size: 4\n  val_tasks: 16\n  pool_size: 30\n  nodata: 0\n")
    res = CliRunner().invoke(cli, ["-q", "train", str(raster), "--output", str(tmp_path / "m"), "--config", str(cfg),
                                   "--metrics", str(tmp_path / "m.csv")])
    assert res.exit_code == 0, res.output
    assert "Trained 4 steps" in res.output
    assert (tmp_path / "m.csv").read_text().splitlines()[0] == "step,train_nll,val_nll,lr,seconds"
    cfg.write_text("model:\n  colour: red\n")
    res = CliRunner().invoke(cli, ["train", str(raster), "--output", str(tmp_path / "m3"), "--config", str(cfg)])
    assert res.exit_code == 1 and "unknown model option(s) ['colour']" in res.output


def test_fill_like_window_recipe_and_fine_tuning(raster, tmp_path):
    """Large windows, far context, several tasks per window, GP windows, starting from a model."""
    from geonp.tasks.context import ContextSpec
    from geonp.training import windows

    window = TaskShape(patch_size=64, core_size=16, max_context=24, max_targets=16)
    data = TrainingData([raster], nodata=0)
    train(data, tmp_path / "start", _small(TrainConfig(steps=2, val_every=2, warmup_steps=1), task_shape=window))
    start = load_checkpoint(tmp_path / "start")
    far = replace(window, n_far=16, search_radius=60, rings=4, sectors=4, tasks_per_window=3)
    report = train(data, tmp_path / "tuned", _small(TrainConfig(steps=2, val_every=2, warmup_steps=1, lr=1e-9),
                                                    task_shape=far, gp_fraction=0.5, init_from=tmp_path / "start",
                                                    gap_mix={"scene_cloud": 1.0, "sparse": 0.5}))
    assert report.steps == 2
    tuned = load_checkpoint(tmp_path / "tuned")
    shape = tuned.card.task_shape
    assert ContextSpec.from_dict(shape) == ContextSpec(n_near=24, n_far=16, search_radius=60, rings=4, sectors=4)
    assert tuned.card.gap_mix == {"scene_cloud": 1.0, "sparse": 0.5} and tuned.card.gp_fraction == 0.5
    # started from the given weights (a learning rate of 1e-9 leaves them where they were)
    for k, v in start.module.state_dict().items():
        torch.testing.assert_close(tuned.module.state_dict()[k], v, atol=1e-6, rtol=0)
    # the tasks of this recipe: 3 per window, targets inside the query window, near + far context
    recipe = windows.TaskRecipe(TaskShape(**{k: shape[k] for k in shape if k != "n_near"}), {"scene_cloud": 1.0}, None, 0.0)
    field = np.random.default_rng(0).normal(size=(1, 64, 64)).astype(np.float32)
    tasks = windows.cut_tasks([field] * 3, np.ones((64, 64), bool), recipe, np.random.default_rng(3))
    assert len(tasks) == 3
    for t in tasks:
        assert t.xt.min() >= 0 and t.xt.max() < 16 and 0 < t.xc.shape[0] <= 40
    with pytest.raises(Exception, match="architecture differs"):
        train(data, tmp_path / "bad", _small(TrainConfig(steps=1), task_shape=window, init_from=tmp_path / "start",
                                             model=ModelConfig(dim=32, depth=1, num_heads=2, ff_dim=32)))
