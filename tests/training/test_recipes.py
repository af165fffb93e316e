"""Shipped training recipes: loading, overriding, and the defaults of ``geonp train``."""

from __future__ import annotations

from pathlib import Path

import pytest

from geonp.config import RECIPES, ModelConfig, load_recipe, merge_recipe, recipe_names
from geonp.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_recipes_load_and_the_default_is_the_default_models_architecture():
    assert {"default", "multidate"} <= set(recipe_names())
    default = load_recipe("default")
    model = ModelConfig.from_dict(default["model"])
    import json

    shipped = json.loads((ROOT / "geonp" / "pretrained" / "default" / "config.json").read_text())
    assert model == ModelConfig.from_dict(shipped["model"])  # the recipe builds the shipped model's architecture
    assert default["data"]["n_far"] == 96 and default["data"]["batch_size"] == 16
    multidate = load_recipe("multidate")
    assert multidate["training"]["steps"] == 4000
    assert multidate["data"]["init_from"] == "default" and multidate["data"]["ref_slots"] == 4


def test_the_reproduction_config_is_the_packaged_recipe_plus_its_run(tmp_path):
    far = load_recipe(ROOT / "benchmarks" / "configs" / "default_far.yaml")
    # the 4-block model the shipped 3-block default was distilled from
    expected = merge_recipe(load_recipe("default"), {"model": {"depth": 4}, "data": {"init_from": "default", "nodata": 0}})
    assert far == expected


def test_a_recipe_file_overrides_the_default_and_bad_ones_are_refused(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("model:\n  depth: 2\ndata:\n  n_far: 0\n")
    mine = load_recipe(path)
    assert mine["model"]["depth"] == 2 and mine["model"]["dim"] == 64 and mine["data"]["n_far"] == 0
    assert mine["data"]["patch_size"] == 256
    with pytest.raises(ConfigError, match="not a shipped recipe"):
        load_recipe("nope")
    path.write_text("optimiser:\n  lr: 1\n")
    with pytest.raises(ConfigError, match="only the sections"):
        load_recipe(path)


def test_recipes_ship_as_package_data():
    text = (ROOT / "pyproject.toml").read_text()
    assert "training/recipes/*.yaml" in text
    assert (RECIPES / "default.yaml").is_file() and RECIPES.parent.name == "training"  # inside the package
