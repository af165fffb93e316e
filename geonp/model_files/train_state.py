"""Training state for ``geonp train --resume``: last weights, optimiser state and progress.

The optimiser state is flattened into safetensors (tensors) and JSON (the rest): no pickle.
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

from geonp.errors import CheckpointError
from geonp.io.atomic_file import atomic_write_file

TRAIN_STATE = "train_state"


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
