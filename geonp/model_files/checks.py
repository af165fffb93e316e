"""Check a model directory's files before anything is built from them.

A tampered or mistyped ``config.json`` must not allocate a huge model, and a weights file must
hold only floating point tensors: both are checked from the JSON and the safetensors header.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from geonp.config import ModelConfig
from geonp.errors import CheckpointError, ConfigError
from geonp.model_files.calibration import Calibration

#: Largest value each size of a model may take (checked before anything is allocated).
SIZE_CAPS = {"dim": 4096, "depth": 64, "num_heads": 64, "ff_dim": 16384, "num_basis": 64,
             "num_latents": 4096, "dim_y": 64, "dim_x": 32}
#: Range of each size a card's ``task_shape`` may give (how a fill tiles and picks context as the
#: model was trained; a fill takes them as its defaults, so 0 or a huge value must not get through).
TASK_SHAPE_RANGES = {"patch_size": (8, 65536), "core_size": (4, 4096), "max_context": (1, 65536),
                     "n_near": (1, 65536), "n_far": (0, 65536), "max_targets": (1, 65536),
                     "search_radius": (1, 65536), "rings": (1, 64), "sectors": (1, 360),
                     "tasks_per_window": (1, 4096), "n_ref": (1, 65536), "ref_margin": (0, 4096), "ref_slots": (0, 64),
                     "max_references": (1, 64), "overlap": (0, 4096), "near_percent": (0, 100)}
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


#: Architecture keys newer than format 1 (absent in older files = their default: single-date, no query prior).
LATER_KEYS = ("temporal", "time_length_scale", "query_prior", "ref_slots")


def check_model_meta(meta: dict[str, Any], where: Path) -> None:
    """Check a model's ``config.json`` before anything is built from it.

    Every architecture key must be present (a missing one would silently take a default and the
    weights would then look like another model's), every size within :data:`SIZE_CAPS` (and the
    card's ``task_shape`` sizes within :data:`TASK_SHAPE_RANGES`), and
    the normalisation and calibration numbers finite (std and every std factor positive). The ``card``
    section may be absent (a blank card); its fields are checked by
    :meth:`~geonp.model_files.card.ModelCard.from_dict`.

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
    _check_task_shape(meta.get("card"), where)
    norm = meta.get("normalizer")
    if norm is not None:
        if not isinstance(norm, dict) or not isinstance(norm.get("mean"), list) or not isinstance(norm.get("std"), list):
            raise _bad(where, "has a 'normalizer' without 'mean' and 'std' lists")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in norm["mean"]):
            raise _bad(where, f"has normalizer.mean={norm['mean']!r}; it must hold finite numbers")
        if not _positive_numbers(norm["std"]) or len(norm["std"]) != len(norm["mean"]):
            raise _bad(where, f"has normalizer.std={norm['std']!r}; it must hold one positive finite "
                              "number per band")
    if meta.get("calibration") is not None:
        try:
            Calibration.from_dict(meta["calibration"])
        except ConfigError as err:
            raise CheckpointError(f"{where} has {err}; re-run geonp evaluate --calibrate with this model "
                                  "(or re-download it)") from err


def _check_task_shape(card: Any, where: Path) -> None:
    """Check the sizes of ``card.task_shape`` that fills use (other card fields: ``ModelCard``)."""
    shape = card.get("task_shape") if isinstance(card, dict) else None
    if not isinstance(shape, dict):
        return  # absent (the defaults), or the wrong type, which ModelCard.from_dict reports
    for key, (low, high) in TASK_SHAPE_RANGES.items():
        if key not in shape:
            continue
        value = shape[key]
        if not isinstance(value, int) or isinstance(value, bool):
            continue  # another type: ModelCard.from_dict names it
        if not low <= value <= high:
            raise _bad(where, f"has card.task_shape.{key}={value!r}; it must be a whole number in {low}..{high}")


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
