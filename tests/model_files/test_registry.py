"""The registry: built-in names, model paths, cards, ``geonp models``, and calibration updates."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner
from geonp_cli.main import cli

from geonp.errors import CheckpointError
from geonp.model_files.calibration import Calibration
from geonp.model_files.checkpoint import LoadedModel, write_calibration
from geonp.model_files.registry import (
    PRETRAINED,
    builtin_models,
    list_models,
    load_model,
    resolve_model_path,
)


def test_the_default_model_is_built_in():
    models = builtin_models()
    assert models["default"] == PRETRAINED / "default"
    assert resolve_model_path("default") == PRETRAINED / "default"


def test_a_model_directory_resolves_to_its_absolute_path(tiny_model, monkeypatch):
    monkeypatch.chdir(tiny_model.parent)
    assert resolve_model_path(tiny_model.name) == tiny_model
    assert resolve_model_path(tiny_model.name).is_absolute()


def test_an_unknown_name_lists_the_built_in_ones():
    names = ", ".join(builtin_models())
    assert names.startswith("default")
    with pytest.raises(CheckpointError, match=re.escape(f"not a built-in model ({names})")) as err:
        resolve_model_path("nope")
    assert str(err.value).startswith("unknown model 'nope'") and "see `geonp models`" in str(err.value)


def test_load_model_returns_a_typed_loaded_model(tiny_model):
    loaded = load_model(tiny_model)
    assert isinstance(loaded, LoadedModel)
    assert loaded.name == "tiny" and loaded.path == tiny_model
    assert loaded.config.dim == 16 and loaded.config.depth == 1
    assert loaded.module.training is False


def test_list_models_gives_the_cards_with_the_architecture():
    cards = {c["name"]: c for c in list_models()}
    card = cards["default"]
    meta = json.loads((PRETRAINED / "default" / "config.json").read_text())
    assert card["path"] == str(PRETRAINED / "default")
    assert card["model"] == meta["model"] and card["model"]["arch"] == "tnpkr"
    assert card["description"] == meta["card"]["description"]


def test_geonp_models_prints_every_built_in_model():
    res = CliRunner().invoke(cli, ["models"])
    assert res.exit_code == 0, res.output
    meta = json.loads((PRETRAINED / "default" / "config.json").read_text())
    first = res.output.splitlines()[0]
    assert first == f"default: {meta['card']['description']}"
    assert f"  architecture: tnpkr/scan, width {meta['model']['dim']}, depth {meta['model']['depth']}" in res.output
    as_json = CliRunner().invoke(cli, ["models", "--json"])
    assert json.loads(as_json.output)[0]["model"] == meta["model"]


def test_write_calibration_replaces_only_the_calibration_block(tiny_model, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    before = json.loads((model / "config.json").read_text())
    path = write_calibration(model, Calibration(std_scale=(1.5,), fitted_on="a test"))
    after = json.loads(path.read_text())
    assert path == model / "config.json"
    assert after["calibration"] == {"std_scale": [1.5], "fitted_on": "a test"}
    assert {k: v for k, v in after.items() if k != "calibration"} == {
        k: v for k, v in before.items() if k != "calibration"}
    assert load_model(model).calibration == Calibration(std_scale=(1.5,), fitted_on="a test")
    assert sorted(p.name for p in model.iterdir()) == sorted(p.name for p in tiny_model.iterdir())


def test_cached_model_sees_a_calibration_written_in_the_same_process(tmp_path):
    """evaluate --calibrate rewrites config.json; a later fill in this process uses the new scale."""
    import numpy as np
    import rasterio
    from rasterio.windows import Window

    from geonp import evaluate
    from geonp.batch.run import FileTask, fill_one
    from geonp.model_files.registry import cached_model

    sample = PRETRAINED.parents[1] / "sample_data"
    model = tmp_path / "mine"
    shutil.copytree(PRETRAINED / "default", model)
    with rasterio.open(sample / "landsat8_clean.tif") as src:  # a 48 px crop with a gap
        profile = {**src.profile, "width": 48, "height": 48, "nodata": 0,
                   "transform": src.window_transform(Window(96, 96, 48, 48))}
        crop = src.read(window=Window(96, 96, 48, 48))
    crop[:, 10:22, 14:30] = 0
    with rasterio.open(tmp_path / "in.tif", "w", **profile) as dst:
        dst.write(crop)

    def fill(name: str) -> np.ndarray:  # as a geonp batch worker fills: the model from cached_model
        out = tmp_path / f"{name}.tif"
        task = FileTask("in.tif", str(tmp_path / "in.tif"), str(out), str(tmp_path / f"{name}_std.tif"),
                         str(model), False, (("device", "cpu"),))
        assert fill_one(task)["status"] == "done"
        with rasterio.open(tmp_path / f"{name}_std.tif") as src:
            return src.read()

    first = cached_model(str(model), "cpu")
    assert cached_model(str(model), "cpu") is first  # loaded once while the files stay as they are
    std_before = fill("before")
    report = evaluate(sample / "landsat8_clean.tif", models=(str(model),), masks=("random",),
                      window=(0, 0, 48, 48), fillnodata=False, calibrate=True, device="cpu", seed=0)
    new_scale = report.calibration["geonp:default"].calibration.std_scale
    assert new_scale != first.calibration.std_scale
    again = cached_model(str(model), "cpu")
    assert again is not first and again.calibration == load_model(model).calibration
    assert again.calibration.std_scale == new_scale
    # the near model's calibration takes the same correction (near tiles: its calibrated std)
    factor = report.calibration["geonp:default"].factor
    assert again.near.calibration.std_scale == tuple(
        round(p * f, 6) for p, f in zip(first.near.calibration.std_scale, factor, strict=True))
    std_after = fill("after")
    gap = std_after > 0
    assert gap.any() and np.array_equal(gap, std_before > 0)
    # the std changed as the calibration did, and equals a fill with the model freshly loaded
    assert not np.allclose(std_after[gap], std_before[gap])
    from geonp.filling.raster import fill_raster

    fill_raster(tmp_path / "in.tif", tmp_path / "fresh.tif", model=load_model(model), device="cpu")
    with rasterio.open(tmp_path / "fresh_std.tif") as src:
        np.testing.assert_array_equal(std_after, src.read())
