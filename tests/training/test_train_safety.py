"""``geonp train`` keeps what exists: no model replaced without --overwrite, nothing written inside
geonp; it says what it does after the last step; a resumed run counts its steps from where it was."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import geonp
from geonp.config import ModelConfig, TrainConfig
from geonp.errors import CheckpointError, OutputError
from geonp.training.windows import TaskShape
from tests.conftest import smooth_field, write_raster
from tests.hardening._helpers import assert_refused, checksums, invoke

#: A model and tasks small enough for a training run of a few seconds.
CLI_ARGS = ["--dim", "8", "--depth", "1", "--heads", "2", "--ff-dim", "8", "--device", "cpu", "--patch-size",
            "24", "--core-size", "12", "--max-context", "32", "--n-far", "8", "--search-radius", "32",
            "--batch-size", "4", "--nodata", "0", "--val-every", "2", "--no-calibrate"]
PACKAGE = Path(geonp.__file__).resolve().parent


def _data(raster: Path) -> geonp.TrainingData:
    return geonp.TrainingData([raster], nodata=0)


def _recipe(steps: int, *, calibrate: bool | None = None) -> geonp.TrainRecipe:
    return geonp.TrainRecipe(model=ModelConfig(dim=8, depth=1, num_heads=2, ff_dim=8), batch_size=4,
                             training=TrainConfig(steps=steps, val_every=2, warmup_steps=1, device="cpu"),
                             task_shape=TaskShape(patch_size=24, core_size=12, max_context=32, max_targets=16,
                                                  n_far=8, search_radius=32),
                             val_tasks=16, pool_size=20, calibrate=calibrate)


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    """Two small two-band rasters (nodata 0)."""
    folder = tmp_path_factory.mktemp("scenes")
    return [write_raster(folder / f"{name}.tif",
                         np.stack([smooth_field((64, 128), seed=s + k) for k in (0, 1)]).astype("uint16"))
            for s, name in ((3, "a"), (5, "b"))]


def test_a_second_train_to_the_same_output_is_refused_until_overwrite(tmp_path, scenes) -> None:
    out = tmp_path / "m"
    first = invoke(["-q", "train", scenes[0], "-o", out, "--steps", "2", *CLI_ARGS])
    assert first.exit_code == 0, first.output
    model = checksums([out])
    assert {Path(p).name for p in model} == {"config.json", "model.safetensors", "state.json", "state.safetensors"}
    refused = invoke(["-q", "train", scenes[1], "-o", out, "--steps", "2", *CLI_ARGS])
    line = assert_refused(refused, ["already holds a model", "--overwrite", "--resume"])
    assert line == (f"Error: {out} already holds a model; pass --overwrite to replace it, --resume to continue "
                    "its training, or choose another output directory")
    assert checksums([out]) == model  # the first model, byte for byte
    replaced = invoke(["-q", "train", scenes[1], "-o", out, "--steps", "2", "--overwrite", *CLI_ARGS])
    assert replaced.exit_code == 0, replaced.output
    assert json.loads((out / "config.json").read_text())["card"]["training_data"] == ["b.tif"]


def test_train_never_writes_inside_the_geonp_package(tmp_path, scenes) -> None:
    """Not over a built-in model, even with --overwrite, and not in a new folder there either."""
    builtin = checksums([PACKAGE / "pretrained"])
    for out, extra in ((PACKAGE / "pretrained" / "default", ["--overwrite"]),
                       (PACKAGE / "pretrained" / "my_model", [])):
        res = invoke(["train", scenes[0], "-o", out, "--steps", "2", *extra, *CLI_ARGS])
        assert_refused(res, [f"{out} is inside the installed geonp package", "directory of your own"])
        assert not (PACKAGE / "pretrained" / "my_model").exists()
    assert checksums([PACKAGE / "pretrained"]) == builtin


def test_the_python_api_refuses_an_existing_model_before_reading_any_data(tmp_path, scenes) -> None:
    out = tmp_path / "m"
    report = geonp.train(_data(scenes[0]), out, _recipe(2, calibrate=False))
    assert (report.steps, report.first_step) == (2, 0)
    model = checksums([out])
    with pytest.raises(OutputError, match="already holds a model; pass --overwrite"):
        geonp.train(_data(tmp_path / "missing.tif"), out, _recipe(2))  # refused before the input
    with pytest.raises(OutputError, match="inside the installed geonp package"):
        geonp.train(_data(tmp_path / "missing.tif"), geonp.TrainOutput(PACKAGE / "pretrained" / "default",
                                                                       overwrite=True), _recipe(2))
    with pytest.raises(CheckpointError, match="has no training state to resume from"):
        geonp.train(_data(scenes[0]), geonp.TrainOutput(tmp_path / "empty", resume=True), _recipe(2))
    assert checksums([out]) == model
    again = geonp.train(_data(scenes[1]), geonp.TrainOutput(out, overwrite=True), _recipe(2, calibrate=False))
    assert again.output == out and checksums([out]) != model


def test_a_resumed_run_counts_its_steps_from_where_it_was(tmp_path, scenes) -> None:
    out = tmp_path / "m"
    assert invoke(["-q", "train", scenes[0], "-o", out, "--steps", "4", *CLI_ARGS]).exit_code == 0
    seen: list[tuple[int, int]] = []
    report = geonp.train(_data(scenes[0]), geonp.TrainOutput(out, resume=True), _recipe(6, calibrate=False),
                         run=geonp.TrainRun(progress=lambda step, total, loss: seen.append((step, total))))
    assert (report.first_step, report.steps) == (4, 6)
    assert seen == [(5, 6), (6, 6)]
    assert [int(r["step"]) for r in report.history] == [2, 4, 6]
    res = invoke(["-q", "train", scenes[0], "-o", out, "--steps", "8", "--resume", *CLI_ARGS])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("Trained 2 steps (resumed at step 6 of 8) in "), res.output


def test_training_says_when_it_calibrates(tmp_path, scenes) -> None:
    lines: list[str] = []
    geonp.train(_data(scenes[0]), tmp_path / "m", _recipe(2, calibrate=True), run=geonp.TrainRun(status=lines.append))
    assert lines == ["Calibrating the std on the validation columns of a.tif..."]
    assert geonp.load_model(tmp_path / "m").calibration is not None
    lines.clear()
    geonp.train(_data(scenes[0]), tmp_path / "n", _recipe(2, calibrate=False), run=geonp.TrainRun(status=lines.append))
    assert lines == []


def test_a_series_train_refuses_an_existing_model_before_reading_any_data(tmp_path, scenes) -> None:
    from geonp.training.multidate import train_series

    out = tmp_path / "m"
    geonp.train(_data(scenes[0]), out, _recipe(2, calibrate=False))
    model = checksums([out])
    with pytest.raises(OutputError, match="already holds a model; pass --overwrite"):
        train_series([], out)  # no dates at all: refused for the model before that
    with pytest.raises(OutputError, match="inside the installed geonp package"):
        train_series([], geonp.TrainOutput(PACKAGE / "pretrained" / "multidate", overwrite=True))
    assert checksums([out]) == model


def test_a_checkpoint_save_holds_an_interrupt_until_it_is_written() -> None:
    """Ctrl-C between a checkpoint's files would pair the weights of one step with another's state."""
    import signal

    from geonp.training.checkpoints import signals_held

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # pytest run in the background ignores it
    try:
        written = []
        with pytest.raises(KeyboardInterrupt), signals_held():
            signal.raise_signal(signal.SIGINT)
            written.append("weights and state")  # still reached: the interrupt waits for the block's end
        assert written == ["weights and state"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
