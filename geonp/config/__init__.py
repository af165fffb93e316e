"""Configuration dataclasses, built once at the edge (``from_dict`` rejects unknown keys), and training recipes."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from geonp.config.checks import check_int, check_number, check_overlap, from_dict
from geonp.config.names import (
    ARCHS,
    ATTENTION_NAMES,
    CATEGORICAL,
    DEVICES,
    EVALUATION_MASK_KINDS,
    MASK_KINDS,
    OPTIMIZERS,
    QA_KINDS,
    QUERY_MODES,
    REFERENCE_FITS,
)
from geonp.config.recipes import (
    RECIPE_SECTIONS,
    RECIPES,
    Recipe,
    load_recipe,
    merge_recipe,
    recipe_names,
)
from geonp.errors import ConfigError, UnknownNameError

__all__ = ["ARCHS", "ATTENTION_NAMES", "CATEGORICAL", "DEFAULT_EVALUATION_MASKS", "DEVICES", "EVALUATION_MASK_KINDS",
           "MASK_KINDS", "OPTIMIZERS", "QA_KINDS", "QUERY_MODES", "RECIPES", "RECIPE_SECTIONS", "REFERENCE_FITS",
           "EvaluationConfig", "FillConfig", "ModelConfig", "Recipe", "TrainConfig", "load_recipe", "merge_recipe",
           "recipe_names"]


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a model; stored in every model file so it can be rebuilt without code.

    Attributes:
        arch: ``"tnpkr"`` (default), ``"tnpd"`` (TNP-D, Nguyen & Grover), ``"cmanp"`` (Feng et al.;
            constant memory in the context; embeds coordinates divided by ``4 * bias_length_scale``).
        attention: TNP-KR attention: ``"scan"``, ``"dense"``, ``"dka"``, ``"performer"``.
        dim_y: value channels modelled jointly (1 = each band on its own, any band count).
        dim_x: coordinate dimension.
        dim: model width.
        depth: blocks.
        num_heads: attention heads.
        ff_dim: feed-forward width.
        bias: kernel bias (``"rbf"``) or None.
        num_basis: basis functions of the RBF bias.
        bias_length_scale: typical distance in coordinate units (bias initialisation; CMANP's
            coordinate scale).
        embed_coords: put coordinates into tokens (not translation invariant).
        sigma_min: lower bound of the std in normalised units.
        dropout: residual dropout.
        coord_unit: what one coordinate unit is (``"pixel"`` for raster models).
        num_latents: CMANP latents per set (``|L_0| = |L_B|``).
        temporal: multi-date TNP-KR: coordinates are (row, col, days from the target's date),
            other dates enter as context (references), a temporal kernel bias joins the spatial
            one (``dim_x`` is then 3).
        time_length_scale: typical date difference in days (initialises the temporal bias).
        query_prior: TNP-KR queries carry an inverse-distance estimate of the context and their
            distance to data; the mean is a learned correction to it (single-date models).
        ref_slots: multi-date TNP-KR reading other dates as *features*: every point carries, per
            slot, a reference's value at its pixel, whether it sees it, and the date offset, after
            its (row, col) in ``x`` (``dim_x = 2 + 3 * ref_slots``); 0: none.
    """

    arch: Literal["tnpkr", "tnpd", "cmanp"] = "tnpkr"
    attention: Literal["scan", "dense", "dka", "performer"] = "scan"
    dim_y: int = 1
    dim_x: int = 2
    dim: int = 64
    depth: int = 6
    num_heads: int = 4
    ff_dim: int = 256
    bias: str | None = "rbf"
    num_basis: int = 5
    bias_length_scale: float = 4.0
    embed_coords: bool = False
    sigma_min: float = 0.01
    dropout: float = 0.0
    coord_unit: str = "pixel"
    num_latents: int = 64
    temporal: bool = False
    time_length_scale: float = 32.0
    query_prior: bool = False
    ref_slots: int = 0

    def __post_init__(self) -> None:
        """Check the values; a bad one raises ConfigError naming it."""
        UnknownNameError.check("arch", self.arch, ARCHS)
        UnknownNameError.check("attention", self.attention, ATTENTION_NAMES)
        for name in ("dim_y", "dim_x", "dim", "depth", "num_heads", "ff_dim", "num_basis", "num_latents"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)!r} must be a positive integer")
        if self.dim % self.num_heads:
            raise ConfigError(f"dim={self.dim} must be divisible by num_heads={self.num_heads}")
        check_int("ref_slots", self.ref_slots, 0)
        check_number("sigma_min", self.sigma_min, low=0.0, high=1.0, high_open=True)
        check_number("dropout", self.dropout, low=0.0, high=1.0, high_open=True)
        check_number("bias_length_scale", self.bias_length_scale, low=0.0, low_open=True)
        if self.bias not in (None, "rbf"):
            raise ConfigError(f"bias={self.bias!r} is not one of ['rbf', None]")
        for name in ("embed_coords", "temporal", "query_prior"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}={getattr(self, name)!r} must be true or false")
        if self.temporal and (self.arch != "tnpkr" or self.attention not in ("scan", "dense")
                              or self.bias is None or self.dim_x != 3):
            raise ConfigError("temporal=true needs arch tnpkr, scan or dense attention, bias rbf and "
                              f"dim_x 3 (row, col, days); got arch={self.arch}, attention={self.attention}, "
                              f"bias={self.bias}, dim_x={self.dim_x}")
        check_number("time_length_scale", self.time_length_scale, low=0.0, low_open=True)
        if self.query_prior and (self.arch != "tnpkr" or self.temporal or self.ref_slots):
            raise ConfigError("query_prior=true needs arch tnpkr and a single-date model (temporal false)")
        if self.ref_slots and (self.arch != "tnpkr" or self.temporal or self.dim_x != 2 + 3 * self.ref_slots):
            raise ConfigError(f"ref_slots={self.ref_slots} needs arch tnpkr, temporal false and dim_x "
                              f"{2 + 3 * self.ref_slots}; got arch={self.arch}, dim_x={self.dim_x}")
        if not isinstance(self.coord_unit, str):
            raise ConfigError(f"coord_unit={self.coord_unit!r} must be a string such as 'pixel'")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Build from a mapping, rejecting unknown keys."""
        return from_dict(cls, data, "model")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready)."""
        return asdict(self)

    @property
    def takes_references(self) -> bool:
        """A multi-date model: other dates as context tokens (``temporal``) or as features (``ref_slots``)."""
        return self.temporal or self.ref_slots > 0


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of :func:`geonp.training.loop.fit`.

    Attributes:
        steps: optimiser steps.
        lr: peak learning rate (cosine-annealed to ``lr * min_lr_ratio``).
        warmup_steps: linear warm-up steps.
        min_lr_ratio: final learning rate as a fraction of ``lr``.
        weight_decay: decoupled weight decay.
        optimizer: ``"adamw"`` or ``"yogi"``.
        grad_clip: global gradient-norm clip (3.0 in the TNP-KR paper).
        val_every: validate every this many steps (and at the end).
        seed: seed of the model initialisation and the task sampler.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"``.
        distill_from: a teacher model (a built-in name or a model directory): the loss adds the
            KL divergence from the teacher's predictive Gaussian to the student's (distillation,
            e.g. a shallower near model from a deeper one); None: the data alone.
        distill_weight: the KL term's weight; the data NLL gets ``1 - distill_weight``.
    """

    steps: int = 1000
    lr: float = 1e-3
    warmup_steps: int = 50
    min_lr_ratio: float = 0.05
    weight_decay: float = 1e-4
    optimizer: Literal["adamw", "yogi"] = "adamw"
    grad_clip: float = 3.0
    val_every: int = 100
    seed: int = 0
    device: str = "auto"
    distill_from: str | None = None
    distill_weight: float = 0.5

    def __post_init__(self) -> None:
        """Check the values; a bad one raises ConfigError naming it."""
        UnknownNameError.check("optimizer", self.optimizer, OPTIMIZERS)
        check_number("distill_weight", self.distill_weight, low=0.0, high=1.0)
        if self.distill_from is not None and not isinstance(self.distill_from, str):
            raise ConfigError(f"distill_from={self.distill_from!r} must be a model name or directory")
        for name in ("steps", "val_every", "seed", "warmup_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name in ("seed", "warmup_steps") else 1):
                raise ConfigError(f"{name}={value!r} must be an integer >= {0 if name in ('seed', 'warmup_steps') else 1}")
        check_number("lr", self.lr, low=0.0, low_open=True)
        check_number("grad_clip", self.grad_clip, low=0.0, low_open=True)
        check_number("weight_decay", self.weight_decay, low=0.0)
        check_number("min_lr_ratio", self.min_lr_ratio, low=0.0, high=1.0)
        UnknownNameError.check("device", self.device, DEVICES)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build from a mapping, rejecting unknown keys."""
        return from_dict(cls, data, "training")


@dataclass(frozen=True)
class FillConfig:
    """Every option of a fill, declared once: the API, ``geonp fill`` and ``geonp batch`` use it.

    The click options (``geonp_cli.options.fill_options``) are generated from these fields and
    their defaults, and ``geonp.batch.jobs`` keys its resume records on them.

    Attributes:
        model: built-in model name or model directory (the API also takes a loaded model); None =
            ``default``, or ``multidate`` when references are given.
        nodata: nodata value overriding a missing or wrong tag.
        bands: 1-based bands to fill (None = all).
        device: ``auto``, ``cpu`` or ``cuda``.
        tile_size: tile core edge in pixels (None = the model's training core size).
        overlap: tile blend margin in pixels (None = the model's, 16 for single-date models).
        max_context: observed pixels per tile (None = the model's training context size).
        search_radius: farthest a tile looks for context, in pixels (None = the model's training
            radius: 512 for ``default``, 128 for ``multidate``; a nearest-class fill 512).
        max_distance: leave gaps farther than this (pixels) from observed pixels as nodata.
        block_size: pixels per read/write block, at most (memory grows with its square); a raster
            of fewer blocks than two per worker process has them cut smaller (down to 128 px).
        workers: CPU processes filling blocks in parallel (None = one per core on the CPU, one
            on CUDA). ``geonp batch`` uses them for files instead.
        scheduler: address of a Dask distributed scheduler (``tcp://host:8786``); blocks are spread
            over its workers (each loads the model once). The model must then be a name or a
            directory. ``geonp batch`` spreads files instead (its own ``scheduler``).
        batch_rows: query rows (tiles x targets) per model call; bounds the model's memory (None:
            4096 on the CPU, 32768 on CUDA: :data:`geonp.filling.predict.BATCH_ROWS`).
        creation_options: GDAL creation options, ``KEY=VALUE`` strings (a dict is accepted).
        std_creation_options: creation options of the std raster (None = ``creation_options``).
        cog: write Cloud Optimized GeoTIFFs.
        overwrite: replace existing outputs.
        fill_outside: also fill gaps outside the data footprint (a scene's nodata collar).
        reference_fit: with references, ``regression``: where a reference observes a gap pixel,
            the fill weighs the model's with the reference's per-band regression line, corrected
            by the line's error on similar pixels nearby (:mod:`geonp.filling.references`); ``none``:
            references are only context of the model.
        categorical: how a class raster (land cover, a classification: values are labels, not
            measurements) is filled. ``auto``: a raster with a colour table is refused (its
            values are classes, and a model would blend them into classes that are not there);
            others are filled as measurements. ``nearest``: the raster is a class raster,
            colour table or not; each gap pixel inside the footprint gets the class of the
            nearest observed pixel of its band, up to ``max_distance`` (else ``search_radius``)
            pixels away, no model runs, and the std raster holds 0 on those pixels, tagged as
            having no std (:mod:`geonp.filling.classes`). ``continuous``: fill with the model even
            when a colour table is present (its values are measurements drawn with a colour
            ramp). The colour table is kept in every case.
        queries: ``lattice``: gap pixels within a few pixels of data are predicted each, deeper
            ones read off a lattice of predictions whose spacing grows with the distance to data,
            and pixels near data are blended over a narrower margin (:mod:`geonp.tasks.lattice`);
            ``every``: every gap pixel predicted by every tile whose query window holds it (slower;
            the reference the lattice is measured against).
    """

    model: Any = None
    nodata: float | None = None
    bands: tuple[int, ...] | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    tile_size: int | None = None
    overlap: int | None = None
    max_context: int | None = None
    search_radius: int | None = None
    max_distance: float | None = None
    block_size: int = 512
    workers: int | None = None
    scheduler: str | None = None
    batch_rows: int | None = None
    creation_options: tuple[str, ...] = ()
    std_creation_options: tuple[str, ...] | None = None
    cog: bool = False
    overwrite: bool = False
    fill_outside: bool = False
    reference_fit: Literal["regression", "none"] = "regression"
    categorical: Literal["auto", "nearest", "continuous"] = "auto"
    queries: Literal["lattice", "every"] = "lattice"

    def __post_init__(self) -> None:
        """Check the values; a bad one raises ConfigError naming it."""
        for name, choices in (("device", DEVICES), ("reference_fit", REFERENCE_FITS), ("queries", QUERY_MODES),
                              ("categorical", CATEGORICAL)):
            value = getattr(self, name)
            if value not in choices:
                raise ConfigError(f"--{name.replace('_', '-')} {value!r} must be {', '.join(choices[:-1])} or "
                                  f"{choices[-1]}")
        for name, low in (("tile_size", 4), ("max_context", 1), ("overlap", 0), ("search_radius", 1),
                          ("batch_rows", 1), ("workers", 1)):
            value = getattr(self, name)
            if value is not None:
                check_int(name, value, low)
        if self.overlap is not None and self.tile_size is not None:
            check_overlap(self.overlap, self.tile_size)
        if self.block_size < 16:
            raise ConfigError(f"--block-size {self.block_size} must be >= 16 pixels")
        if self.max_distance is not None and not self.max_distance > 0:
            raise ConfigError(f"--max-distance {self.max_distance} must be > 0 pixels")
        if self.bands is not None:
            object.__setattr__(self, "bands", tuple(int(b) for b in self.bands))
        for name in ("creation_options", "std_creation_options"):
            if (co := getattr(self, name)) is not None:
                items = [f"{k}={v}" for k, v in co.items()] if isinstance(co, dict) else [str(i) for i in co]
                object.__setattr__(self, name, tuple(items))

    @classmethod
    def of(cls, config: FillConfig | None = None, **options: Any) -> FillConfig:
        """A config from another one and/or option values (None values keep the default)."""
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - valid)
        if unknown:
            raise ConfigError(f"unknown fill option(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
        given = {k: v for k, v in options.items() if v is not None}
        if not isinstance(config, cls | None):
            raise ConfigError(f"config must be a geonp.FillConfig, got {type(config).__name__}; give options as "
                              "keywords (nodata=0), or config=geonp.FillConfig(nodata=0)")
        base = {} if config is None else {f.name: getattr(config, f.name) for f in fields(cls)}
        return cls(**{**base, **given})

    def key_values(self) -> dict[str, Any]:
        """Options that change the outputs (for resume keys): all but where and how fast it runs."""
        skip = ("device", "workers", "scheduler", "overwrite", "batch_rows")
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


#: The simulated gap kinds :func:`geonp.evaluate` scores on when none are named and no mask file is given.
DEFAULT_EVALUATION_MASKS = ("cloud", "stripe", "random")


@dataclass(frozen=True)
class EvaluationConfig:
    """What :func:`geonp.evaluate` scores, on which masks, and what it writes (``geonp evaluate``'s defaults).

    Attributes:
        models: geonp models (built-in names, model directories or loaded models); may be empty
            to score only the baselines.
        masks: simulated gap kinds from :data:`EVALUATION_MASK_KINDS`; None (the default):
            :data:`DEFAULT_EVALUATION_MASKS`, or none when ``mask_file`` is given.
        mask_file: a gap mask on the raster's grid (non-zero = hide), scored as mask ``file``.
        coverage: fraction of pixels each simulated mask hides, in (0, 1).
        seed: seed of the masks and of the calibration split.
        draws: masks of each kind, with seeds ``seed``, ``seed + 1``, ...: scored apart (``cloud``,
            ``cloud#2``, ...), pooled by ``calibrate`` (one scene-scale cloud per draw makes a
            one-draw fit of the far distance factors that cloud's).
        nodata: nodata value overriding the file's tag.
        bands: 1-based bands (default all).
        window: ``(col_off, row_off, width, height)`` in pixels (default the whole raster).
        kriging: also run local ordinary kriging (slow; needs ``geonp[krige]``).
        fillnodata: also run GDAL FillNodata.
        calibrate: fit a per-band std scale for each geonp model on half of the hidden pixels,
            write it into the model's ``config.json`` and score everything on the other half.
        device: ``auto``, ``cpu`` or ``cuda`` for geonp.
        max_pixels: the largest window held in memory.
        json_path: write the report as JSON here.
        plot: write a PNG here: calibration curves, error-vs-std scatter, quicklook panels.

    Raises:
        ConfigError: coverage outside (0, 1), no mask, no method, or ``calibrate`` without a
            model.
    """

    models: Sequence[Any] = ("default",)
    masks: Sequence[str] | None = None
    mask_file: str | os.PathLike[str] | None = None
    coverage: float = 0.3
    seed: int = 0
    draws: int = 1
    nodata: float | None = None
    bands: Sequence[int] | None = None
    window: Sequence[int] | None = None
    kriging: bool = False
    fillnodata: bool = True
    calibrate: bool = False
    device: str = "auto"
    max_pixels: int = 1_048_576
    json_path: str | os.PathLike[str] | None = None
    plot: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        """Check the options that need no file."""
        if self.masks is None:
            object.__setattr__(self, "masks", () if self.mask_file is not None else DEFAULT_EVALUATION_MASKS)
        if not 0.0 < float(self.coverage) < 1.0:
            raise ConfigError(
                f"coverage={self.coverage} must be between 0 and 1 (the fraction of pixels to "
                "hide), e.g. 0.3")
        if not self.masks and self.mask_file is None:
            raise ConfigError("no mask to evaluate on; pass a mask kind (--mask-kind) or a mask file (--mask)")
        if int(self.draws) < 1:
            raise ConfigError(f"draws={self.draws}: pass 1 or more masks of each kind (--draws)")
        if not self.models and not self.fillnodata and not self.kriging:
            raise ConfigError("no method to evaluate; pass --model, or drop --no-fillnodata, or add --kriging")
        if self.calibrate and not self.models:
            raise ConfigError("--calibrate fits a geonp model's std; pass at least one --model")

    @classmethod
    def of(cls, config: EvaluationConfig | None = None, **options: Any) -> EvaluationConfig:
        """``config`` (or the defaults) with ``options`` replacing its fields.

        Raises:
            ConfigError: An option that is no field, listing the valid ones.
        """
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise ConfigError(f"unknown evaluate option(s) {', '.join(unknown)}; valid: {', '.join(names)}")
        return replace(config, **options) if config is not None else cls(**options)
