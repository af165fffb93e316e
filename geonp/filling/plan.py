"""The plan of one fill: everything a block needs, built once from the options, the model and the input.

A :class:`FillPlan` holds the tile options (one context geometry, as the model was trained), the
typed :class:`~geonp.tasks.normalize.Normalizer` and :class:`~geonp.model_files.calibration.Calibration`,
the reference regression's lines, ``max_distance``, the query mode, the batch budget and the device.
It holds no file handle, pool or model weights: it pickles in a few hundred bytes and travels to
worker processes and Dask workers, which load the model it names once each (:func:`plan_model`).
Both drivers build it with :meth:`FillPlan.build` and hand it to
:func:`geonp.filling.block.fill_block`: :mod:`geonp.filling.raster` for files,
:mod:`geonp.filling.arrays` for arrays.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from geonp.config import FillConfig
from geonp.config.checks import check_overlap
from geonp.errors import ConfigError, InputRasterError, NoValidPixelsError
from geonp.filling import classes
from geonp.filling.corrections import Correction, corrections_of
from geonp.filling.predict import NearModel, Predictor
from geonp.filling.references import ReferenceLines
from geonp.filling.similar_pixels import ESTIMATE_REACH
from geonp.filling.tile_tasks import TileOptions
from geonp.model_files.calibration import Calibration
from geonp.models.layers import resolve_device
from geonp.tasks.context import ContextSpec
from geonp.tasks.normalize import Normalizer, prior_std, same_units

if TYPE_CHECKING:
    from geonp.model_files.checkpoint import LoadedModel

# Tile blend margin of single-date models whose card names none. Deep in a scene-scale cloud the
# predictions of neighbouring tiles differ (their context differs); 16 px spreads the step over 33
# px, which takes the jump across tile borders from 1.9x to 1.3x the jump inside tiles
# (benchmarks/seams.py, session 5) for 19-27 % more time (seams.py; benchmarks/fill.py).
DEFAULT_OVERLAP = 16
#: oneDNN primitives a filling process keeps (:meth:`FillPlan.predictor`; same speed and output).
ONEDNN_CACHE_CAPACITY = 32

# Models handed in as objects (not paths) for in-process runs, by key (:func:`model_key`).
LOCAL_MODELS: dict[str, Any] = {}


@dataclass(frozen=True)
class FillPlan:
    """Everything a block of one fill needs, fixed before the first block (picklable, comparable).

    Attributes:
        model: where a worker gets the model: a directory or built-in name, or an ``object:`` key
            of an in-process model (:func:`model_key`); None for a nearest-class fill of an array.
        device: the model's device (``cpu``, ``cuda``, ``auto``).
        batch_rows: the row budget of one model call (:class:`~geonp.filling.predict.Predictor`; None:
            by device).
        opts: tiles and their context geometry (None for a nearest-class fill of an array).
        norm: per-band statistics the model sees the bands in (None with ``opts``).
        calibration: the model's post-hoc std calibration, or None.
        max_distance: gaps farther than this (pixels) from observed pixels stay unfilled.
        queries: ``lattice`` or ``every`` (:class:`~geonp.config.FillConfig`).
        reference_lines: the reference regression of a multi-date fill
            (:class:`~geonp.filling.references.ReferenceLines`), or None.
        class_reach: a class raster: nearest-class fill of this reach, no model
            (:mod:`geonp.filling.classes`); None for a model fill.
    """

    model: str | None
    device: str
    batch_rows: int | None
    opts: TileOptions | None
    norm: Normalizer | None
    calibration: Calibration | None
    max_distance: float | None
    queries: str
    reference_lines: ReferenceLines | None = None
    class_reach: float | None = None

    @classmethod
    def build(cls, cfg: FillConfig, loaded: LoadedModel | None, *, n_bands: int,
              sample: Callable[[], tuple[np.ndarray, np.ndarray]], model: str | None = None,
              reference_lines: ReferenceLines | None = None, class_fill: bool = False) -> FillPlan:
        """The plan of a fill with ``cfg`` and ``loaded`` on an input of ``n_bands`` bands.

        Args:
            cfg: the fill's options.
            loaded: the model (None only for a nearest-class fill, which runs none).
            n_bands: bands of the input.
            sample: ``([bands, n] values, [bands, n] observed)`` of the input, called only when
                the normaliser is fitted on the input (:func:`normalizer_for`).
            model: the model for workers (:func:`model_key`, which lets in-process workers find an
                in-memory model); default its directory or name, or ``object:<id>``.
            reference_lines: the reference regression's lines, fitted by the driver on the whole
                input, or None.
            class_fill: fill each gap with the nearest observed class (no model).

        Raises:
            InputRasterError: the model predicts bands jointly, or takes another band count.
            ConfigError: no model for a model fill.
        """
        class_reach = classes.reach(cfg.max_distance, cfg.search_radius) if class_fill else None
        if loaded is None:
            if not class_fill:
                raise ConfigError("a model fill needs a model; give model= a name, a directory or a loaded model")
            return cls(model=None, device=cfg.device, batch_rows=cfg.batch_rows, opts=None, norm=None,
                       calibration=None, max_distance=cfg.max_distance, queries=cfg.queries,
                       class_reach=class_reach)
        check_per_band(loaded)
        opts = tile_options(loaded, cfg.tile_size, cfg.max_context, cfg.overlap, cfg.search_radius, cfg.queries)
        if model is None:  # a model left to the default is named by its directory
            model = _model_ref(loaded.name if cfg.model is None else cfg.model, loaded)
        return cls(model=model, device=cfg.device,
                   batch_rows=cfg.batch_rows, opts=opts, norm=normalizer_for(loaded, n_bands, sample),
                   calibration=loaded.calibration, max_distance=cfg.max_distance, queries=cfg.queries,
                   reference_lines=reference_lines, class_reach=class_reach)

    @property
    def corrections(self) -> tuple[Correction, ...]:
        """What the fill does to the model's output of a block, in order (:mod:`geonp.filling.corrections`)."""
        return corrections_of(self.reference_lines, self.calibration)

    @property
    def context(self) -> ContextSpec | None:
        """The context geometry of every tile (None for a nearest-class fill of an array)."""
        return None if self.opts is None else self.opts.context

    def halo(self, regression: bool) -> int:
        """Pixels a block is read with around it so that its fill does not depend on the blocks.

        A nearest-class fill reads its reach; a model fill its tiles' halo
        (:attr:`TileOptions.halo <geonp.filling.tile_tasks.TileOptions.halo>`), and with ``regression``
        (the fill weighs the reference regression: its lines exist, or will once a lazy fill
        fits them) at least the regression's reach
        (:data:`~geonp.filling.similar_pixels.ESTIMATE_REACH`). Both drivers size blocks by it.
        """
        if self.class_reach is not None:
            return classes.halo(self.class_reach)
        assert self.opts is not None, "a model fill has tile options"
        return max(self.opts.halo, ESTIMATE_REACH if regression else 0)

    def predictor(self, loaded: LoadedModel) -> Predictor:
        """A predictor of ``loaded`` with this plan's tiles, device and batch budget."""
        assert self.opts is not None, "a nearest-class plan runs no model"
        # oneDNN keeps a primitive per new shape (1,024 by default: a fill worker's RSS before its
        # blocks crept 190 -> 299 MB over an 8192² fill, 266 with 32). It reads this at its first
        # primitive, so it holds where torch has not run yet in the process; a user's own stays.
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_CACHE_CAPACITY))
        near = None
        if loaded.near is not None and self.opts.lattice:  # its tiles are those near data on the lattice
            near = NearModel(loaded.near.module, loaded.near.calibration, self.calibration)
        return Predictor(loaded.module, self.opts, resolve_device(self.device), batch_rows=self.batch_rows,
                         near=near)


def plan_model(plan: FillPlan) -> Any:
    """The model of ``plan`` in this process: the in-process object, else loaded once per process."""
    from geonp.model_files.registry import cached_model

    assert plan.model is not None, "a nearest-class plan names no model"
    return LOCAL_MODELS.get(plan.model) or cached_model(plan.model, "cpu")


def model_key(model: Any, loaded: Any) -> str:
    """A picklable reference to a model: its directory, or a key into :data:`LOCAL_MODELS`."""
    key = _model_ref(model, loaded)
    if key.startswith("object:"):
        LOCAL_MODELS[key] = loaded
    return key


def _model_ref(model: Any, loaded: Any) -> str:
    """The model's directory or name, or ``object:<id>`` for a model given as an object."""
    if isinstance(model, str | os.PathLike):
        return str(loaded.path) if loaded.path is not None else str(model)
    return f"object:{id(loaded)}"


def tile_options(loaded: Any, tile_size: int | None, max_context: int | None, overlap: int | None,
                 search_radius: int | None, queries: str = "lattice") -> TileOptions:
    """Tiling options: tile size, overlap, context cap and context geometry as the model was trained.

    The model card's ``task_shape`` gives what the arguments leave as None (the search radius:
    the one the model was trained with, :class:`ContextSpec`'s where the card has none; the near
    context of tiles near data, its near model's where it has one, and that of the other tiles,
    ``FAR_TILE_CONTEXT``, unless ``max_context`` sets every tile's); ``queries`` (a
    :class:`~geonp.config.FillConfig` field) the query lattice and near blend margin.
    """
    shape = loaded.card.task_shape or {}
    spec = ContextSpec.from_dict(shape)
    # the tiles near data take the near context of the model that runs them
    near_model = getattr(loaded, "near", None)
    near_shape = shape if near_model is None else (near_model.card.task_shape or {})
    size = int(tile_size or shape.get("core_size", 48))
    if overlap is not None:  # the user's, against the user's tile size or the model's
        check_overlap(overlap, size, "--tile-size" if tile_size else f"model {loaded.name}'s core size")
    overlap = int(shape.get("overlap", DEFAULT_OVERLAP)) if overlap is None else overlap
    spec = dataclasses.replace(spec, n_near=int(max_context or spec.n_near), ref_slots=loaded.config.ref_slots,
                               search_radius=spec.search_radius if search_radius is None else search_radius)
    opts = TileOptions(tile_size=size, overlap=overlap, context=spec,
                       temporal=loaded.config.temporal,
                       near_context=(int(near_shape.get("near_context", 0)) or None) if max_context is None else None)
    if queries != "lattice":
        return opts
    opts = lattice_options(opts)
    # a context size the caller sets holds for every tile
    return opts if max_context is None else dataclasses.replace(opts, far_context=None)


def lattice_options(opts: TileOptions) -> TileOptions:
    """``opts`` with the lattice, near blend margin, far and reference context of ``queries="lattice"``.

    See :mod:`geonp.tasks.lattice`; chosen by ``benchmarks/lattice.py``.
    """
    from geonp.tasks.lattice import (
        FAR_CONTEXT,
        FAR_TILE_CONTEXT,
        LATTICE,
        MID_OVERLAP,
        NEAR_FAR_CONTEXT,
        NEAR_OVERLAP,
        REF_CONTEXT,
    )

    far = dataclasses.replace(opts.context, n_far=min(FAR_CONTEXT, opts.context.n_far),
                              n_ref=min(REF_CONTEXT, opts.context.n_ref))
    return dataclasses.replace(opts, lattice=LATTICE, near_overlap=NEAR_OVERLAP, context=far,
                               near_far=NEAR_FAR_CONTEXT, mid_overlap=MID_OVERLAP,
                               far_context=FAR_TILE_CONTEXT)


def normalizer_for(loaded: Any, n_bands: int, sample: Callable[[], tuple[np.ndarray, np.ndarray]]) -> Normalizer:
    """The model's per-band statistics when they fit the input's bands and units, else the input's own.

    The input's own are fitted with the model's :func:`~geonp.tasks.normalize.prior_std` as the
    prior of a band whose pixels are all equal (:meth:`~geonp.tasks.normalize.Normalizer.fit`): one
    observed pixel, or a few equal ones, say nothing of the band's spread, and a std fitted on them
    alone (~0) would make every std of the fill ~0 (it was 0.006-0.01 DN on a uint16 band).

    A model that takes any band count standardises every tile by its own context, so it is not
    tied to its training units, but its statistics are the scale of every tile's prior and std
    floor: applied to a raster in other units (a 3-band float reflectance raster for the
    default model, trained on Landsat digital numbers) they put that floor at ~17 reflectance
    units, and the fill came out 8.5-20 where the truth was -0.03-0.02. Such a model takes its
    statistics only for a raster in their units (:func:`~geonp.tasks.normalize.same_units`); a model of
    fixed bands always takes its statistics.
    """
    stored = loaded.normalizer
    fits = stored is not None and len(stored.get("mean", [])) == n_bands
    any_count = loaded.card.takes_any_band_count
    if fits and not any_count:
        return Normalizer.from_dict(stored)
    if not fits and not any_count:
        trained = "an unknown number of" if stored is None else len(stored["mean"])
        raise InputRasterError(
            f"model {loaded.name} was trained on {trained} band(s) and cannot take "
            f"{n_bands}; select matching bands with -b, or train a model on this sensor with geonp train"
        )
    values, valid = sample()
    try:
        own = Normalizer.fit(values, valid, prior_std=prior_std(stored))
    except NoValidPixelsError:
        if fits:  # the sample missed the observed pixels of a band: nothing says the units differ
            return Normalizer.from_dict(stored)
        raise
    if fits and same_units(Normalizer.from_dict(stored), own):
        return Normalizer.from_dict(stored)
    return own


def fill_model(model: Any, *, references: bool = False) -> Any:
    """The model a fill uses: the one given, else the built-in ``default`` (``multidate`` with references)."""
    if model is not None:
        return model
    return "multidate" if references else "default"


def load_for_fill(model: Any, *, references: bool = False) -> Any:
    """The model of a fill: a loaded model as given, a directory loaded, a built-in name loaded once.

    Raises:
        ConfigError: references are given and the model takes none.
    """
    from geonp.model_files.registry import cached_model, load_model

    if not isinstance(model, str | os.PathLike):
        loaded = model
    elif Path(str(model)).exists():
        loaded = load_model(model, device="cpu")
    else:
        loaded = cached_model(str(model), "cpu")
    if references and not loaded.config.takes_references:
        raise ConfigError(f"model {loaded.name} takes no references; use --model multidate (model='multidate' "
                          "in Python) or a model trained with geonp train --series")
    return loaded


def check_per_band(loaded: Any) -> None:
    """Refuse a model that predicts bands jointly: a fill models each band on its own.

    Raises:
        InputRasterError: the model's ``dim_y`` is not 1.
    """
    if getattr(loaded.config, "dim_y", 1) != 1:
        raise InputRasterError(f"model {loaded.name} predicts {loaded.config.dim_y} bands jointly; "
                               "geonp fill needs a per-band model (dim_y=1)")
