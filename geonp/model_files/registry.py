"""Built-in models and ``load_model(name_or_path)``.

Built-in models live in ``geonp/pretrained/<name>/`` inside the package.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from geonp.errors import CheckpointError
from geonp.model_files.card import ModelCard
from geonp.model_files.checkpoint import CONFIG, NEAR, WEIGHTS, LoadedModel, load_checkpoint

PRETRAINED = Path(__file__).resolve().parent.parent / "pretrained"


def builtin_models() -> dict[str, Path]:
    """Names and directories of the models shipped inside the package."""
    if not PRETRAINED.is_dir():
        return {}
    return {p.name: p for p in sorted(PRETRAINED.iterdir()) if (p / "config.json").is_file()}


def resolve_model_path(name_or_path: str | os.PathLike[str]) -> Path:
    """A built-in name or a model directory, as a path.

    Raises:
        CheckpointError: neither a built-in name nor an existing path.
    """
    text = str(name_or_path)
    models = builtin_models()
    if text in models:
        return models[text]
    path = Path(text).expanduser()
    if path.exists():
        return path.absolute()  # Dask workers may run in another directory
    raise CheckpointError(
        f"unknown model {text!r}: not a built-in model ({', '.join(models) or 'none installed'}) "
        "and no such directory; see `geonp models`"
    )


def load_model(name_or_path: str | os.PathLike[str] = "default", *, device: str = "cpu") -> LoadedModel:
    """Load a built-in model by name, or a model directory, as a :class:`LoadedModel`."""
    return load_checkpoint(resolve_model_path(name_or_path), device=device)


def _files_stamp(directory: Path) -> tuple[int, ...]:
    """Inode, modification time (ns) and size of a model's ``config.json`` and weights (its near model's too)."""
    stamp: list[int] = []
    for name in (CONFIG, WEIGHTS, f"{NEAR}/{CONFIG}", f"{NEAR}/{WEIGHTS}"):
        try:
            st = (directory / name).stat()
        except OSError:
            stamp += [-1, -1, -1]  # no near model; or load_checkpoint names the missing file
        else:
            stamp += [st.st_ino, st.st_mtime_ns, st.st_size]
    return tuple(stamp)


@functools.lru_cache(maxsize=4)
def _load_once(path: str, device: str, stamp: tuple[int, ...]) -> LoadedModel:
    return load_model(path, device=device)


def cached_model(path: str, device: str) -> LoadedModel:
    """Load a model once per process (Dask workers reuse it across tiles and files).

    The cache is keyed by the model's files as they are on disk (inode, modification time and
    size of ``config.json`` and the weights), not only by the path: a model rewritten in place
    (``geonp evaluate --calibrate`` stores a new calibration with an atomic replace) is loaded
    again, never served stale. ``cached_model.cache_info()`` reports the cache's hits and misses.
    """
    return _load_once(path, device, _files_stamp(resolve_model_path(path)))


cached_model.cache_info = _load_once.cache_info  # type: ignore[attr-defined]
cached_model.cache_clear = _load_once.cache_clear  # type: ignore[attr-defined]


def list_models() -> list[dict[str, Any]]:
    """The built-in models' cards, JSON-ready: ``name``, ``path``, the card's fields and ``model``.

    A model with a near model also has ``near``: that model's card and path.

    Raises:
        CheckpointError: a built-in model's card holds a field of the wrong type.
    """
    import json

    cards = []
    for name, path in builtin_models().items():
        meta = json.loads((path / CONFIG).read_text())
        card = ModelCard.from_dict(meta.get("card"), where=path / CONFIG)
        entry = {"name": name, "path": str(path), **card.to_dict(), "model": meta.get("model")}
        if (path / NEAR / CONFIG).is_file():  # the model of the tiles near data (LoadedModel.near)
            near = ModelCard.from_dict(json.loads((path / NEAR / CONFIG).read_text()).get("card"),
                                       where=path / NEAR / CONFIG)
            entry["near"] = {"path": str(path / NEAR), **near.to_dict()}
        cards.append(entry)
    return cards
