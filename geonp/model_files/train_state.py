"""Training state for ``geonp train --resume``: last weights, optimiser state and progress.

The optimiser state is flattened into safetensors (tensors) and JSON (the rest): no pickle.
:func:`check_training_output` is the check of a run's model directory before it starts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from geonp.errors import CheckpointError, OutputError
from geonp.io.atomic_file import atomic_write_file
from geonp.model_files.checkpoint import CONFIG

TRAIN_STATE = "train_state"
#: The installed geonp package: its built-in models live there, and no training run writes in it.
_PACKAGE = Path(__file__).resolve().parents[1]


def check_training_output(directory: str | os.PathLike[str], *, overwrite: bool, resume: bool) -> None:
    """Check, before any work, that a training run may write its model to ``directory``.

    Raises:
        OutputError: ``directory`` lies inside the installed geonp package (its built-in models),
            is a file, or is a non-empty directory: one holding a model, without ``overwrite``
            or ``resume``, or one holding no model at all.
        CheckpointError: ``resume`` and ``directory`` holds no training state.
    """
    out = Path(directory).expanduser()
    if out.resolve() == _PACKAGE or _PACKAGE in out.resolve().parents:
        raise OutputError(f"{out} is inside the installed geonp package ({_PACKAGE}), whose built-in models "
                          "a training run must not replace; write the model to a directory of your own")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out} is a file; give a directory for the model")
    if resume:
        if training_state_step(out) is None:
            raise CheckpointError(f"{out} has no training state to resume from; train without --resume")
    elif out.is_dir() and any(out.iterdir()):
        if not (out / CONFIG).is_file() and not (out / TRAIN_STATE).is_dir():
            raise OutputError(f"{out} exists and is not a geonp model directory; choose a new or empty directory")
        if not overwrite:
            raise OutputError(f"{out} already holds a model; pass --overwrite to replace it, --resume to "
                              "continue its training, or choose another output directory")


def training_state_step(directory: str | os.PathLike[str]) -> int | None:
    """The step of the training state in ``directory``; None where it holds none, or an unreadable one."""
    try:
        return int(json.loads((Path(directory) / TRAIN_STATE / "state.json").read_text())["progress"]["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_training_state(
    directory: str | os.PathLike[str],
    module: nn.Module,
    optimizer_state: dict[str, Any],
    progress: dict[str, Any],
) -> None:
    """Save what ``--resume`` needs (last weights, optimiser state, step) under ``train_state/``.

    The optimiser state is flattened into safetensors (tensors) and JSON (the rest): no pickle.
    """
    out = Path(directory) / TRAIN_STATE
    out.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    scalars: dict[str, Any] = {}
    for pid, st in optimizer_state["state"].items():
        for name, val in st.items():
            if torch.is_tensor(val):
                tensors[f"opt.{pid}.{name}"] = val.detach().cpu().contiguous()
            else:
                scalars[f"{pid}.{name}"] = val
    atomic_write_file(out / "state.safetensors", lambda p: save_file(tensors, p))
    meta = {"progress": progress, "param_groups": optimizer_state["param_groups"], "scalars": scalars}
    atomic_write_file(out / "state.json", lambda p: Path(p).write_text(json.dumps(meta)))


def load_training_state(directory: str | os.PathLike[str]) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
    """Load ``(model_state, optimizer_state, progress)`` written by :func:`save_training_state`."""
    root = Path(directory) / TRAIN_STATE
    if not (root / "state.json").is_file() or not (root / "state.safetensors").is_file():
        raise CheckpointError(f"{directory} has no training state to resume from; train without --resume")
    try:
        meta = json.loads((root / "state.json").read_text())
        tensors = load_file(str(root / "state.safetensors"))
    except (json.JSONDecodeError, SafetensorError, OSError) as err:
        raise CheckpointError(f"training state in {root} is corrupt ({err}); train without --resume") from err
    model_state = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    state: dict[int, dict[str, Any]] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, pid, name = k.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    for k, v in meta["scalars"].items():
        pid, name = k.split(".", 1)
        state.setdefault(int(pid), {})[name] = v
    return model_state, {"state": state, "param_groups": meta["param_groups"]}, meta["progress"]
