"""The CLI has no defaults of its own: what a command leaves out, the library decides.

Each command is run with its library call replaced by a stub that records the keywords; the
library's own resolution of them must give what it gives when called with nothing.
"""

import dataclasses
import inspect
from dataclasses import asdict, fields
from unittest.mock import ANY

import pytest
from click.testing import CliRunner
from geonp_cli.batch import BATCH_DEFAULTS
from geonp_cli.evaluate import SERIES_DEFAULTS
from geonp_cli.main import cli

import geonp
from geonp.config import EvaluationConfig, FillConfig, TrainConfig


class _Report:
    steps, seconds, best_val_nll, best_step, output = 1, 0.0, 0.0, 1, "stub"
    ok, dry_run, gap_pixels, outside_pixels, filled_pixels, missing_pixels = True, False, 0, 0, 0, 0
    calibration, uncertainty, model, hints = None, "stub_std", "stub", []

    def table(self, **kwargs):
        return ""

    def format_table(self):
        return ""

    def summary(self):
        return ""

    def left_unfilled(self):
        return []


class _Seen(dict):
    """The keywords of a library call; ``args`` its positional arguments."""

    args: tuple = ()


def _run(monkeypatch, name, args, **stubs):
    seen = _Seen()

    def record(*a, **kwargs):
        seen.update(kwargs)
        seen.args = a
        return [] if name == "evaluate_series" else _Report()

    monkeypatch.setattr(geonp, name, record, raising=False)
    for other, value in stubs.items():
        monkeypatch.setattr(geonp, other, value, raising=False)
    res = CliRunner().invoke(cli, ["-q", *map(str, args)])
    assert res.exit_code == 0, res.output
    return seen


def test_train_series_cli_and_library_train_the_same_model_by_default(tmp_path, monkeypatch):
    from geonp.training.series_settings import SeriesData, from_series_recipe

    seen = _run(monkeypatch, "train_series", ["train", tmp_path, "--series", "-o", tmp_path / "m"],
                scan_series=lambda folder: [])
    assert set(seen) == {"recipe", "progress"}
    assert seen.args == (SeriesData([]), geonp.TrainOutput(str(tmp_path / "m"), command=ANY))
    from_cli = from_series_recipe(seen["recipe"], None, {})
    from_library = from_series_recipe(None, None, {})
    assert from_cli == from_library
    # ... and that is the shipped multi-date model's recipe (its card records how it was trained)
    training, geometry = from_library.training, from_library.geometry
    card = geonp.load_model("multidate").card
    assert asdict(training) == card.train_config
    shape = card.task_shape
    assert (geometry.core_size, geometry.max_targets, geometry.max_references) == (
        shape["core_size"], shape["max_targets"], shape["max_references"]) == (12, 144, 4)
    assert {k: v for k, v in geometry.spec.to_dict().items() if k in shape} == {
        k: shape[k] for k in geometry.spec.to_dict() if k in shape}
    assert from_library.batch_size == card.batch_size == 8 and from_library.init_from == "default"
    # the library's own defaults for the options a recipe does not hold
    assert SeriesData([]).qa_kind == "fmask"
    help_text = CliRunner().invoke(cli, ["train", "--help"], terminal_width=200).output
    assert f"how the QA files are read [default: {SeriesData([]).qa_kind}]" in help_text


def test_train_series_cli_options_reach_the_library(tmp_path, monkeypatch):
    from geonp.training.series_settings import from_series_recipe

    seen = _run(monkeypatch, "train_series", ["train", tmp_path, "--series", "-o", tmp_path / "m", "--steps", 5,
                                             "--core-size", 8, "--qa-kind", "landsat-c2", "--before", "2012-01-01"],
                scan_series=lambda folder: [])
    data, _ = seen.args
    assert data.qa_kind == "landsat-c2" and str(data.before) == "2012-01-01"
    run = from_series_recipe(seen["recipe"], None, {})
    assert run.training.steps == 5 and run.geometry.core_size == 8 and run.geometry.max_targets == 64
    with pytest.raises(geonp.errors.ConfigError, match=r"takes no gap_source \(geonp train --series: drop "
                                                       r"--gap-source\)"):
        from_series_recipe({"data": {"gap_source": "x.tif"}}, None, {})


def test_evaluate_cli_leaves_every_default_to_the_library(tmp_path, monkeypatch):
    raster = tmp_path / "clean.tif"
    raster.write_bytes(b"")
    seen = _run(monkeypatch, "evaluate", ["evaluate", raster])
    progress = seen.pop("progress")
    assert callable(progress)
    assert EvaluationConfig.of(None, **seen) == EvaluationConfig()
    assert EvaluationConfig().masks == ("cloud", "stripe", "random")
    # a mask file alone: scored on it only, in the library as on the command line
    mask = tmp_path / "mask.tif"
    mask.write_bytes(b"")
    seen = _run(monkeypatch, "evaluate", ["evaluate", raster, "--mask", mask])
    seen.pop("progress")
    assert EvaluationConfig.of(None, **seen).masks == () == EvaluationConfig(mask_file=mask).masks


def test_evaluate_series_cli_leaves_every_default_to_the_library(tmp_path, monkeypatch):
    from geonp.evaluation.series import SeriesProtocol, evaluate_series

    protocol = {}
    seen = _run(monkeypatch, "evaluate_series", ["evaluate", tmp_path, "--series"], scan_series=lambda folder: [],
                series_report=lambda scores: [], SeriesProtocol=lambda **kw: protocol.update(kw))
    assert set(seen) == {"plot", "calibrate"} and set(protocol) == {"targets_from", "targets_until"}
    defaults = SeriesProtocol()
    assert SERIES_DEFAULTS == {"model": inspect.signature(evaluate_series).parameters["model"].default,
                               "n_refs": defaults.n_refs, "qa_kind": defaults.qa_kind}
    assert defaults.seed == EvaluationConfig().seed
    help_text = CliRunner().invoke(cli, ["evaluate", "--help"], terminal_width=200).output
    assert f"previous dates used as references.  [default: {defaults.n_refs}]" in help_text
    assert f"how the QA files are read.  [default: {defaults.qa_kind}]" in help_text


def test_batch_cli_leaves_every_default_to_the_library(tmp_path, monkeypatch):
    from geonp.batch.options import Cluster, Files

    seen = _run(monkeypatch, "fill_many", ["batch", tmp_path, tmp_path / "out"])
    assert BATCH_DEFAULTS == {k: getattr(Files(), k, getattr(Cluster(), k, None)) for k in BATCH_DEFAULTS}
    assert seen["files"] == Files() and seen["neighbours"] is None
    assert dataclasses.replace(seen["cluster"], on_ready=None) == Cluster()
    fill_options = {k: v for k, v in seen.items() if k in {f.name for f in fields(FillConfig)}}
    assert FillConfig.of(None, **fill_options) == FillConfig()
    assert set(seen) - set(fill_options) == {"files", "cluster", "neighbours", "progress"}


def test_fill_cli_defaults_are_fill_configs(tmp_path, monkeypatch):
    raster = tmp_path / "in.tif"
    seen = _run(monkeypatch, "fill_raster", ["fill", raster, tmp_path / "out.tif"])
    options = {k: v for k, v in seen.items() if k in {f.name for f in fields(FillConfig)}}
    assert FillConfig.of(None, **options) == FillConfig()
    assert seen["gaps"] == geonp.Gaps() and seen["references"] == () and seen["date"] is None
    assert set(seen) - set(options) == {"gaps", "references", "date", "progress"}


def test_fill_cli_outputs_are_the_library_defaults(tmp_path, monkeypatch):
    got = []
    monkeypatch.setattr(geonp, "fill_raster", lambda inp, out, **kw: got.append(out) or _Report())
    res = CliRunner().invoke(cli, ["-q", "fill", str(tmp_path / "in.tif"), str(tmp_path / "out.tif")])
    assert res.exit_code == 0, res.output
    assert got == [geonp.Outputs(str(tmp_path / "out.tif"))]


def test_every_device_default_is_the_same():
    assert FillConfig().device == TrainConfig().device == EvaluationConfig().device == "auto"
    for command in ("fill", "batch", "train", "evaluate"):
        param = next(p for p in cli.commands[command].params if p.name == "device")
        assert param.default == FillConfig().device, command
