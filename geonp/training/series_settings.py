"""The settings of a ``geonp train --series`` run: what :func:`geonp.train_series` is given, and what it resolves.

:class:`SeriesData` is what a multi-date run trains on, :class:`SeriesRecipe` how its tasks are cut;
:func:`from_series_recipe` resolves each setting left as None to the entry of the ``multidate``
recipe (``recipes/multidate.yaml``) and returns them as one :class:`SeriesSettings`.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from geonp.config import TrainConfig, load_recipe
from geonp.errors import ConfigError
from geonp.io.series_stack import Dated
from geonp.tasks.context import ContextSpec

__all__ = ["FILL_OVERLAP", "GEOMETRY_KEYS", "SeriesData", "SeriesRecipe", "SeriesSettings", "from_series_recipe",
           "series_geometry"]

#: Tile blend margin of fills with a multi-date model (its card's ``task_shape.overlap``): small
#: tiles with a wide margin would carry each reference pixel into many tiles.
FILL_OVERLAP = 2


@dataclass(frozen=True)
class SeriesRecipe:
    """How tasks are cut from a series.

    Attributes:
        spec: context geometry (near, far and reference pixels).
        core_size: query window edge (the fill's tile size for this model).
        max_targets: cap on targets per task.
        max_references: references per task are drawn from 1..this.
        previous_probability: chance the references are the nearest earlier dates (else the
            nearest dates on either side, in random order).
        min_observed: least fraction of observed pixels for a date to be a target.
    """

    spec: ContextSpec
    core_size: int = 32
    max_targets: int = 256
    max_references: int = 3
    previous_probability: float = 0.6
    min_observed: float = 0.3

    def card_shape(self) -> dict[str, Any]:
        """The task shape a model card states for this geometry (with the fills' tile overlap)."""
        return {**self.spec.to_dict(), "max_context": self.spec.n_near, "core_size": self.core_size,
                "max_targets": self.max_targets, "overlap": FILL_OVERLAP, "max_references": self.max_references}


@dataclass(frozen=True)
class SeriesData:
    """What a multi-date run trains on: dated rasters, which of their dates, how they are read.

    Attributes:
        items: dated rasters (:func:`geonp.scan_series`), co-registered.
        before: use only dates before this one (targets and references alike).
        val_from: dates from this one on (and before ``before``) are validation targets only;
            default: the last 20 % of the dates.
        bands: 1-based bands (None: the recipe's entry, else all).
        nodata: nodata when the files lack a tag (None: the recipe's entry, if any).
        qa_kind: how the series' QA files are read (None: they are not read).
    """

    items: Sequence[Dated]
    before: dt.date | None = None
    val_from: dt.date | None = None
    bands: Sequence[int] | None = None
    nodata: float | None = None
    qa_kind: str | None = "fmask"


@dataclass(frozen=True)
class SeriesSettings:
    """Everything a multi-date run is set by, resolved: optimisation, task geometry, data options.

    Attributes:
        training: optimisation settings.
        geometry: how tasks are cut.
        init_from: single-date (or multi-date) model whose weights start training.
        batch_size: tasks per step.
        spacetime_fraction: fraction of tasks drawn from simulated space-time fields.
        pretrain_steps: steps on simulated space-time fields first.
        bands: 1-based bands (None: all).
        nodata: nodata when the files lack a tag.
        name: model name for its card (None: the output directory's name).
    """

    training: TrainConfig
    geometry: SeriesRecipe
    init_from: str | os.PathLike[str]
    batch_size: int
    spacetime_fraction: float
    pretrain_steps: int
    bands: Sequence[int] | None
    nodata: float | None
    name: str | None


#: ``data`` entries of a multi-date recipe that set the task geometry (:func:`series_geometry`).
GEOMETRY_KEYS = ("core_size", "max_context", "n_far", "search_radius", "rings", "sectors", "n_ref", "ref_margin",
                 "max_references", "ref_slots")
#: ``data`` entries of a multi-date recipe that are options of the run (:class:`SeriesSettings`).
OPTION_KEYS = tuple(f.name for f in fields(SeriesSettings))[2:]


def series_geometry(data: Mapping[str, Any]) -> SeriesRecipe:
    """The task geometry set by a multi-date recipe's ``data`` entries (:data:`GEOMETRY_KEYS`).

    ``max_context`` is the near context; each task has at most ``core_size²`` targets (its whole
    query window).

    Raises:
        ConfigError: an entry is missing.
    """
    try:
        spec = ContextSpec(n_near=data["max_context"], n_far=data["n_far"], search_radius=data["search_radius"],
                           rings=data["rings"], sectors=data["sectors"], n_ref=data["n_ref"],
                           ref_margin=data["ref_margin"], ref_slots=data.get("ref_slots", 0))
        return SeriesRecipe(spec=spec, core_size=data["core_size"], max_targets=data["core_size"] ** 2,
                            max_references=data["max_references"])
    except KeyError as err:
        raise ConfigError(f"the multi-date recipe lacks the data entry {err}") from err


def from_series_recipe(
    recipe: SeriesRecipe | str | os.PathLike[str] | Mapping[str, Mapping[str, Any]] | None,
    training: TrainConfig | None,
    given: Mapping[str, Any],
) -> SeriesSettings:
    """A multi-date run's settings: ``recipe`` (a geometry), ``training`` and ``given``'s options, else the recipe's.

    ``given`` maps some of :data:`OPTION_KEYS` to a value (None: not given).
    """
    rec = load_recipe("multidate" if recipe is None or isinstance(recipe, SeriesRecipe) else recipe, base="multidate")
    if rec["model"]:
        raise ConfigError(f"the multi-date recipe takes no model section (the architecture is init_from's), "
                          f"got {sorted(rec['model'])}")
    data = dict(rec["data"])
    geometry = {k: data.pop(k) for k in list(data) if k in GEOMETRY_KEYS}
    unknown = sorted(set(data) - set(OPTION_KEYS))
    if unknown:
        flags = ", ".join("--" + k.replace("_", "-") for k in unknown)
        raise ConfigError(f"a multi-date model takes no {', '.join(unknown)} (geonp train --series: drop {flags}); "
                          f"valid data options: {sorted(set(OPTION_KEYS) | set(GEOMETRY_KEYS))}")
    options: dict[str, Any] = {k: data.get(k) if given.get(k) is None else given[k] for k in OPTION_KEYS}
    try:
        tcfg = training or TrainConfig.from_dict(rec["training"])
    except TypeError as err:
        raise ConfigError(f"invalid recipe: {err}") from err
    return SeriesSettings(tcfg, recipe if isinstance(recipe, SeriesRecipe) else series_geometry(geometry), **options)
