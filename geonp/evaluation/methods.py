"""The methods an evaluation compares: geonp models, GDAL FillNodata and local kriging."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from geonp.errors import ConfigError
from geonp.model_files.checkpoint import LoadedModel

__all__ = ["load_models", "run_method"]


def load_models(models: Sequence[Any], calibrate: bool) -> list[tuple[str, LoadedModel]]:
    """Load the geonp models once each, labelled ``geonp:<name>`` (``#2``... for repeats).

    Raises:
        ConfigError: With ``calibrate``, a model without a directory, a built-in model, or a
            ``config.json`` that cannot be written.
    """
    from geonp.model_files.registry import PRETRAINED, load_model

    out: list[tuple[str, LoadedModel]] = []
    seen: dict[str, int] = {}
    unique: list[Any] = []
    for m in models:  # drop repeated names; loaded models (unhashable) are kept as given
        if not isinstance(m, str | os.PathLike) or os.fspath(m) not in [
                os.fspath(u) for u in unique if isinstance(u, str | os.PathLike)]:
            unique.append(m)
    for m in unique:
        lm = m if not isinstance(m, str | os.PathLike) else load_model(m, device="cpu")
        label = f"geonp:{lm.name}"
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        if calibrate:
            if lm.path is None:
                raise ConfigError(
                    f"model {lm.name} was given as an object without a directory; --calibrate "
                    "writes into the model directory, so pass its path"
                )
            path = Path(lm.path).resolve()
            if PRETRAINED.resolve() in path.parents:
                raise ConfigError(
                    f"model {lm.name!r} is built into geonp and is not changed by --calibrate; copy "
                    f"it (cp -r {path} my_model) and pass --model my_model --calibrate"
                )
            if not os.access(path / "config.json", os.W_OK):
                raise ConfigError(
                    f"cannot write {path / 'config.json'}; --calibrate stores the std scale there. "
                    "Copy the model directory somewhere writable and pass that."
                )
        out.append((label, lm))
    return out


def run_method(
    method: str,
    inputs: np.ndarray,
    context: np.ndarray,
    hidden: np.ndarray,
    *,
    models: dict[str, LoadedModel],
    seed: int,
    device: str,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Fill the hidden pixels with one method; returns ``(mean, std)`` (std None without one).

    Args:
        method: ``"fillnodata"``, ``"kriging"`` or a geonp label from :func:`load_models`.
        inputs: ``[bands, h, w]`` values, NaN where not context.
        context: Bool ``[bands, h, w]``, True = observed and shown to the method.
        hidden: Bool ``[bands, h, w]``, the pixels to predict (kriging predicts only these).
        models: The loaded geonp models by label.
        seed: Seed of the kriging neighbourhoods.
        device: Device for geonp.
    """
    if method == "fillnodata":
        from geonp.evaluation.baselines import fillnodata_baseline

        res = fillnodata_baseline(inputs, context)
        return res.mean, None
    if method == "kriging":
        from geonp.evaluation.baselines import kriging_baseline

        res = kriging_baseline(inputs, context, targets=hidden, seed=seed)
        return res.mean, res.std
    from geonp.filling.arrays import fill_array

    # fill uses the model's own context geometry (its far set) and whole calibration
    mean, std32 = fill_array(inputs, context, model=models[method], device=device, fill_outside=True)
    return mean, std32.astype(np.float64)
