"""Save and load model directories: ``model.safetensors`` and ``config.json`` (and ``card.md``).

Loading never unpickles: weights go through safetensors, everything else is JSON. A corrupt,
tampered or mismatched file raises :class:`~geonp.errors.CheckpointError` with what to do.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from geonp._version import __version__
from geonp.config import ModelConfig
from geonp.errors import CheckpointError, ConfigError
from geonp.io.atomic_file import atomic_write_file
from geonp.model_files.calibration import Calibration
from geonp.model_files.card import ModelCard
from geonp.model_files.checks import check_model_meta, check_weights_header
from geonp.models import build_model

FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
CARD = "card.md"
#: A model directory's optional second model, for the tiles near data (:attr:`LoadedModel.near`).
NEAR = "near"


@dataclass
class LoadedModel:
    """A model with everything needed to use it on rasters.

    Attributes:
        module: the torch module (eval mode).
        config: its architecture.
        normalizer: per-band normalisation statistics (``Normalizer.to_dict()``) or None.
        calibration: the post-hoc std calibration, or None.
        card: the model card (name, command, task shape, scores...).
        path: the directory it came from.
        near: the model of the tiles whose gaps all lie near data, from the directory's
            ``near/`` folder, or None (every tile runs ``module``). It is a model trained with
            near batches (``task_shape.near_context``, :class:`geonp.training.windows.TaskShape`):
            cheaper on such tiles, with its own calibration; a fill gives it the tiles near data
            only (:class:`~geonp.filling.predict.NearModel`). It has the main model's normaliser
            and is single-date.
    """

    module: nn.Module
    config: ModelConfig
    normalizer: dict[str, Any] | None = None
    calibration: Calibration | None = None
    card: ModelCard = field(default_factory=ModelCard)
    path: Path | None = None
    near: LoadedModel | None = None

    @property
    def name(self) -> str:
        """Short name for logs and output tags."""
        return self.card.name or (self.path.name if self.path else "unnamed")


def save_model(
    directory: str | os.PathLike[str],
    module: nn.Module,
    config: ModelConfig,
    *,
    normalizer: dict[str, Any] | None = None,
    calibration: Calibration | None = None,
    card: ModelCard | None = None,
    card_markdown: str | None = None,
) -> Path:
    """Write a model directory (each file atomically); returns its path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    # _orig_mod. is what torch.compile prefixes; strip it here, the one place that saves.
    state = {k.removeprefix("_orig_mod."): v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    atomic_write_file(out / WEIGHTS, lambda p: save_file(state, p, metadata={"format": "pt"}))
    meta = {
        "format_version": FORMAT_VERSION,
        "geonp_version": __version__,
        "model": config.to_dict(),
        "normalizer": normalizer,
        "calibration": None if calibration is None else calibration.to_dict(),
        "card": (card or ModelCard()).to_dict(),
    }
    atomic_write_file(out / CONFIG, lambda p: Path(p).write_text(json.dumps(meta, indent=2)))
    if card_markdown is not None:
        atomic_write_file(out / CARD, lambda p: Path(p).write_text(card_markdown))
    return out


def load_checkpoint(directory: str | os.PathLike[str], *, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a model directory written by :func:`save_model`.

    Raises:
        CheckpointError: missing files, corrupt JSON or weights, wrong format version, or weights
            that do not match the architecture in the config.
    """
    path = Path(directory)
    meta = _read_meta(path)
    check_model_meta(meta, path / CONFIG)
    card = ModelCard.from_dict(meta.get("card"), where=path / CONFIG)
    try:
        config = ModelConfig.from_dict(meta.get("model", {}))
    except ConfigError as err:
        raise CheckpointError(f"{path / CONFIG} describes a model this geonp cannot build: {err}") from err
    check_weights_header(path / WEIGHTS)
    try:
        state = load_file(str(path / WEIGHTS), device="cpu")
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(
            f"{path / WEIGHTS} is corrupt or truncated ({err}); re-download or retrain the model"
        ) from err
    try:
        module = build_model(config)
    except (KeyError, ValueError, TypeError, RuntimeError) as err:
        raise CheckpointError(f"{path / CONFIG} describes a model this geonp cannot build ({err})") from err
    _check_state(module, state, config, path)
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(f"{path / WEIGHTS} cannot be loaded into its architecture ({err})") from err
    module.to(device).eval()
    loaded = LoadedModel(
        module=module,
        config=config,
        normalizer=meta.get("normalizer"),
        calibration=None if meta.get("calibration") is None else Calibration.from_dict(meta["calibration"]),
        card=card,
        path=path,
    )
    if (path / NEAR).is_dir():
        loaded.near = _load_near(loaded, path / NEAR, device)
    return loaded


def _load_near(main: LoadedModel, path: Path, device: str | torch.device) -> LoadedModel:
    """The near-data model of ``main`` from ``path``, checked to fit it.

    Raises:
        CheckpointError: it has a near model of its own, is multi-date, predicts bands jointly,
            lacks a near context, or sees the bands in other units than ``main``.
    """
    near = load_checkpoint(path, device=device)
    shape = near.card.task_shape or {}
    problem = ("has a near/ folder of its own" if near.near is not None
               else "is a multi-date model" if near.config.takes_references or main.config.takes_references
               else "predicts bands jointly" if near.config.dim_y != 1
               else "has no task_shape.near_context (train it with near batches)" if not shape.get("near_context")
               else "has another normalizer than the model it serves" if near.normalizer != main.normalizer
               else None)
    if problem is not None:
        raise CheckpointError(f"{path} {problem}; a near model is a single-date model trained with near batches "
                              f"from the one in {path.parent}: replace or remove {path}")
    return near


def _read_meta(path: Path) -> dict[str, Any]:
    """The ``config.json`` of model directory ``path``, checked to be this geonp's format.

    Raises:
        CheckpointError: ``path`` is a file or lacks a file, or its config is corrupt or of
            another format version.
    """
    if path.is_file():
        raise CheckpointError(
            f"{path} is a file; a geonp model is a directory with {CONFIG} and {WEIGHTS} "
            "(geonp never loads pickled .pt/.pth files)"
        )
    for name in (CONFIG, WEIGHTS):
        if not (path / name).is_file():
            raise CheckpointError(f"{path} is not a geonp model directory: {name} is missing")
    try:
        meta = json.loads((path / CONFIG).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path / CONFIG} is corrupt ({err}); re-download or retrain the model") from err
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        got = meta.get("format_version") if isinstance(meta, dict) else None
        raise CheckpointError(
            f"{path} has format_version={got}; this geonp {__version__} reads {FORMAT_VERSION}. "
            "Retrain the model with this geonp."
        )
    return meta


def _check_state(module: torch.nn.Module, state: dict[str, torch.Tensor], config: ModelConfig, path: Path) -> None:
    """Check that weights ``state`` fit ``module``'s architecture and are finite.

    Raises:
        CheckpointError: missing, unexpected or misshapen tensors, or NaN/Inf weights.
    """
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if expected[k].shape != state[k].shape)
    if missing or unexpected or wrong:
        raise CheckpointError(
            f"{path / WEIGHTS} does not match the {config.arch}/{config.attention} architecture in "
            f"{CONFIG} (missing {missing[:3]}, unexpected {unexpected[:3]}, wrong shape {wrong[:3]}); "
            "the files come from different models"
        )
    if any(not torch.isfinite(t).all() for t in state.values() if t.is_floating_point()):
        raise CheckpointError(f"{path / WEIGHTS} holds NaN or Inf weights; retrain the model")


def write_calibration(directory: str | os.PathLike[str], calibration: Calibration) -> Path:
    """Replace the calibration block of a model directory's ``config.json`` (atomically).

    ``geonp evaluate --calibrate`` stores the std scale it fits this way; ``geonp fill`` applies
    it. Everything else in the file is kept as it is.

    Args:
        directory: The model directory.
        calibration: The new calibration (stored in its JSON form, :meth:`Calibration.to_dict`).

    Returns:
        The path of the ``config.json`` written.
    """
    path = Path(directory) / CONFIG
    meta = json.loads(path.read_text())
    meta["calibration"] = calibration.to_dict()
    atomic_write_file(path, lambda p: Path(p).write_text(json.dumps(meta, indent=2)))
    return path
