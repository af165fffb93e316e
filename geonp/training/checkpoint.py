"""Model files: a directory with ``model.safetensors`` and ``config.json`` (and ``card.md``).

Loading never unpickles: weights go through safetensors, everything else is JSON. A corrupt,
tampered or mismatched file raises :class:`~geonp.errors.CheckpointError` with what to do.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
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
from geonp.models import build_model

FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
CARD = "card.md"


@dataclass
class LoadedModel:
    """A model with everything needed to use it on rasters.

    Attributes:
        module: the torch module (eval mode).
        config: its architecture.
        normalizer: per-band normalisation statistics (``Normalizer.to_dict()``) or None.
        calibration: post-hoc std scale factors (``{"std_scale": [...]}``) or None.
        card: model card fields (name, command, scores...).
        path: the directory it came from.
    """

    module: nn.Module
    config: ModelConfig
    normalizer: dict[str, Any] | None = None
    calibration: dict[str, Any] | None = None
    card: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def name(self) -> str:
        """Short name for logs and output tags."""
        return str(self.card.get("name") or (self.path.name if self.path else "unnamed"))


def _umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic_write(path: Path, write: Any) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        # mkstemp creates 0600 files; a model is meant to be shared like any file the user writes.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_model(
    directory: str | os.PathLike[str],
    module: nn.Module,
    config: ModelConfig,
    *,
    normalizer: dict[str, Any] | None = None,
    calibration: dict[str, Any] | None = None,
    card: dict[str, Any] | None = None,
    card_markdown: str | None = None,
) -> Path:
    """Write a model directory (each file atomically); returns its path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    # _orig_mod. is what torch.compile prefixes; strip it here, the one place that saves.
    state = {k.removeprefix("_orig_mod."): v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    _atomic_write(out / WEIGHTS, lambda p: save_file(state, p, metadata={"format": "pt"}))
    meta = {
        "format_version": FORMAT_VERSION,
        "geonp_version": __version__,
        "model": config.to_dict(),
        "normalizer": normalizer,
        "calibration": calibration,
        "card": card or {},
    }
    _atomic_write(out / CONFIG, lambda p: Path(p).write_text(json.dumps(meta, indent=2)))
    if card_markdown is not None:
        _atomic_write(out / CARD, lambda p: Path(p).write_text(card_markdown))
    return out


def load_checkpoint(directory: str | os.PathLike[str], *, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a model directory written by :func:`save_model`.

    Raises:
        CheckpointError: missing files, corrupt JSON or weights, wrong format version, or weights
            that do not match the architecture in the config.
    """
    path = Path(directory)
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
    check_model_meta(meta, path / CONFIG)
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
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(f"{path / WEIGHTS} cannot be loaded into its architecture ({err})") from err
    module.to(device).eval()
    return LoadedModel(
        module=module,
        config=config,
        normalizer=meta.get("normalizer"),
        calibration=meta.get("calibration"),
        card=meta.get("card") or {},
        path=path,
    )


#: Largest value each size of a model may take (checked before anything is allocated).
SIZE_CAPS = {"dim": 4096, "depth": 64, "num_heads": 64, "ff_dim": 16384, "num_basis": 64,
             "num_latents": 4096, "dim_y": 64, "dim_x": 8}
#: Largest weights file geonp loads (bytes).
MAX_WEIGHTS_BYTES = 4 * 2**30
_FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})


def _bad(where: Path, text: str) -> CheckpointError:
    return CheckpointError(f"{where} {text}; re-download the model or retrain it with geonp train")


def _positive_numbers(value: Any) -> bool:
    values = value if isinstance(value, list) else [value]
    return bool(values) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in values
    )


#: Architecture keys newer than format 1 (absent in older files = their default: single-date).
LATER_KEYS = ("temporal", "time_length_scale")


def check_model_meta(meta: dict[str, Any], where: Path) -> None:
    """Check a model's ``config.json`` before anything is built from it.

    Every architecture key must be present (a missing one would silently take a default and the
    weights would then look like another model's), every size within :data:`SIZE_CAPS`, and
    the normalisation and calibration numbers finite (std and std scale positive).

    Args:
        meta: The parsed ``config.json``.
        where: Its path, for messages.

    Raises:
        CheckpointError: Naming the key and the value at fault.
    """
    from dataclasses import fields

    model = meta.get("model")
    if not isinstance(model, dict):
        raise _bad(where, "has no 'model' section describing the architecture")
    # keys added after format 1 may be absent: their defaults are what older files meant
    missing = [f.name for f in fields(ModelConfig) if f.name not in model and f.name not in LATER_KEYS]
    if missing:
        raise _bad(where, f"lacks model.{missing[0]}" + (f" (and {', '.join(missing[1:])})" if missing[1:] else ""))
    for key, cap in SIZE_CAPS.items():
        value = model.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= cap:
            raise _bad(where, f"has model.{key}={value!r}; it must be a whole number in 1..{cap}")
    norm = meta.get("normalizer")
    if norm is not None:
        if not isinstance(norm, dict) or not isinstance(norm.get("mean"), list) or not isinstance(norm.get("std"), list):
            raise _bad(where, "has a 'normalizer' without 'mean' and 'std' lists")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in norm["mean"]):
            raise _bad(where, f"has normalizer.mean={norm['mean']!r}; it must hold finite numbers")
        if not _positive_numbers(norm["std"]) or len(norm["std"]) != len(norm["mean"]):
            raise _bad(where, f"has normalizer.std={norm['std']!r}; it must hold one positive finite "
                              "number per band")
    calib = meta.get("calibration")
    if calib is not None:
        if not isinstance(calib, dict):
            raise _bad(where, f"has calibration={calib!r}; it must be a mapping with 'std_scale'")
        scale = calib.get("std_scale")
        if scale is not None and not _positive_numbers(scale):
            raise _bad(where, f"has calibration.std_scale={scale!r}; it must be positive finite number(s)")


def check_weights_header(path: Path) -> None:
    """Check a safetensors file's size and tensor types from its header, before loading it.

    Raises:
        CheckpointError: If the file is too large, its header unreadable, or a tensor is not
            floating point (a model's weights always are).
    """
    size = path.stat().st_size
    if size > MAX_WEIGHTS_BYTES:
        raise _bad(path, f"is {size / 2**30:.1f} GiB, more than the {MAX_WEIGHTS_BYTES // 2**30} GiB "
                         "geonp loads")
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n <= 1 or n > min(size - 8, 100 * 2**20):
                raise ValueError(f"header length {n}")
            header = json.loads(fh.read(n))
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise _bad(path, f"is corrupt or truncated ({err})") from err
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        if info.get("dtype") not in _FLOAT_DTYPES:
            raise _bad(path, f"holds tensor {name} as {info.get('dtype')}; model weights must be "
                             "floating point")


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
    _atomic_write(out / "state.safetensors", lambda p: save_file(tensors, p))
    meta = {"progress": progress, "param_groups": optimizer_state["param_groups"], "scalars": scalars}
    _atomic_write(out / "state.json", lambda p: Path(p).write_text(json.dumps(meta)))


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
