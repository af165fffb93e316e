"""Training recipes: the shipped ones by name, YAML files and mappings, merged section by section.

A recipe is a YAML file with up to three sections: ``model`` (ModelConfig fields), ``training``
(TrainConfig fields) and ``data`` (task shape and the data options of geonp.train, the fields of its
TrainingData, TrainRecipe and TrainOutput; or of geonp.train_series for ``multidate``). The shipped ones live in geonp/training/recipes/:
``default.yaml`` is the default model's and holds every default of ``geonp train``, for the
library and the CLI alike; ``multidate.yaml`` is the multi-date model's (``--series``). A file's
entries override those of the shipped recipe it builds on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from geonp.errors import ConfigError

RECIPES = Path(__file__).resolve().parents[1] / "training" / "recipes"
RECIPE_SECTIONS = ("model", "training", "data")

#: A recipe: section name -> {option: value}.
Recipe = dict[str, dict[str, Any]]


def recipe_names() -> list[str]:
    """Names of the shipped recipes."""
    return sorted(p.stem for p in RECIPES.glob("*.yaml"))


def _read_recipe(path: Path, what: str) -> Recipe:
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} is not valid YAML: {str(err).splitlines()[0]}") from err
    if not isinstance(loaded, dict) or set(loaded) - set(RECIPE_SECTIONS):
        raise ConfigError(f"{what} must hold only the sections {list(RECIPE_SECTIONS)}, got {sorted(loaded, key=str)}")
    for key, value in loaded.items():
        if not isinstance(value, dict):
            raise ConfigError(f"section {key!r} of {what} must be a mapping")
    return {s: dict(loaded.get(s) or {}) for s in RECIPE_SECTIONS}


def merge_recipe(base: Mapping[str, Mapping[str, Any]], overrides: Mapping[str, Mapping[str, Any]]) -> Recipe:
    """``base`` with the entries of ``overrides`` (section by section) replacing its own."""
    unknown = set(overrides) - set(RECIPE_SECTIONS)
    if unknown:
        raise ConfigError(f"unknown recipe section(s) {sorted(unknown)}; valid: {list(RECIPE_SECTIONS)}")
    return {s: {**base.get(s, {}), **overrides.get(s, {})} for s in RECIPE_SECTIONS}


def load_recipe(recipe: str | os.PathLike[str] | Mapping[str, Mapping[str, Any]] = "default", *,
                base: str = "default") -> Recipe:
    """A recipe by name (:func:`recipe_names`), from a YAML file, or a mapping, complete.

    A file or mapping overrides the entries of the shipped recipe ``base``.

    Raises:
        ConfigError: an unknown name and no such file, or a malformed file.
    """
    if isinstance(recipe, Mapping):
        return merge_recipe(load_recipe(base), recipe)
    text = str(recipe)
    if text in recipe_names():
        return _read_recipe(RECIPES / f"{text}.yaml", f"recipe {text!r}")
    path = Path(text).expanduser()
    if not path.is_file():
        raise ConfigError(f"unknown recipe {text!r}: not a shipped recipe ({', '.join(recipe_names())}) "
                          "and no such file")
    return merge_recipe(load_recipe(base), _read_recipe(path, str(path)))
