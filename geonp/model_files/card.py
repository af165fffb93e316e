"""The model card: what a model is, how it was trained and how it scores (``config.json``'s ``card``).

:class:`ModelCard` types the fields geonp and its benchmarks read; every other key of a card
(a split, a selection note, a date range...) is kept in :attr:`ModelCard.extra`, so reading a
card and writing it back loses nothing: ``ModelCard.from_dict(d).to_dict() == d``, keys in the
same order. A field that is None was not stated by the card.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from geonp.errors import CheckpointError

__all__ = ["ModelCard"]


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _flag(v: Any) -> bool:
    return isinstance(v, bool)


def _texts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _mapping(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) for k in v)


def _shape(v: Any) -> bool:
    return _mapping(v) and all(_whole(x) for x in v.values())


def _weights(v: Any) -> bool:
    return _mapping(v) and all(_number(x) for x in v.values())


#: What a typed field must hold (besides None), and how an error message says it.
_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "text": (_text, "a string"),
    "whole": (_whole, "a whole number"),
    "number": (_number, "a number"),
    "flag": (_flag, "true or false"),
    "texts": (_texts, "a list of strings"),
    "mapping": (_mapping, "a mapping"),
    "shape": (_shape, "a mapping of names to whole numbers"),
    "weights": (_weights, "a mapping of names to numbers"),
}


def _kind(kind: str) -> dict[str, str]:
    return {"kind": kind}


@dataclass(frozen=True)
class ModelCard:
    """A model card (the ``card`` section of a model's ``config.json``).

    Attributes:
        name: the model's short name (logs, output tags, ``geonp models``).
        description: one sentence on what the model is.
        geonp_version: the geonp that trained it.
        command: the command line that trained it.
        commands: the command lines, when training ran in several steps.
        training_data: file names of the training rasters (or dates).
        band_count: bands of the training rasters (of the first group).
        any_band_count: False when the model takes only ``band_count`` bands (None = not stated,
            which means it takes any: see :attr:`takes_any_band_count`).
        coord_unit: unit of the coordinates the model was trained on.
        task_shape: how training tasks were cut (``core_size``, ``max_context``, ``n_far``,
            ``overlap``...): ``geonp fill`` takes its tile and context geometry from it.
        init_from: the model the training started from.
        gap_mix: gap kind -> weight of the simulated gaps.
        gp_fraction: fraction of training windows drawn from simulated GP fields.
        hardware: the machine that trained it.
        pretrain_steps: steps on simulated fields before the raster steps.
        steps: raster steps asked for.
        batch_size: tasks per step.
        train_config: the :class:`~geonp.config.TrainConfig` fields.
        best_val_nll: the best validation NLL (the saved weights').
        best_step: the step of the best validation NLL.
        training_seconds: wall time of the training up to the best step.
        scores: benchmark scores (``benchmarks/model_card.py``, ``benchmarks/multidate.py``).
        calibration_note: how the std calibration was fitted.
        extra: every other key of the card, as read.
        key_order: the card's keys in the order read (written back in that order).
    """

    name: str | None = field(default=None, metadata=_kind("text"))
    description: str | None = field(default=None, metadata=_kind("text"))
    geonp_version: str | None = field(default=None, metadata=_kind("text"))
    command: str | None = field(default=None, metadata=_kind("text"))
    commands: list[str] | None = field(default=None, metadata=_kind("texts"))
    training_data: list[str] | None = field(default=None, metadata=_kind("texts"))
    band_count: int | None = field(default=None, metadata=_kind("whole"))
    any_band_count: bool | None = field(default=None, metadata=_kind("flag"))
    coord_unit: str | None = field(default=None, metadata=_kind("text"))
    task_shape: dict[str, int] | None = field(default=None, metadata=_kind("shape"))
    init_from: str | None = field(default=None, metadata=_kind("text"))
    gap_mix: dict[str, float] | None = field(default=None, metadata=_kind("weights"))
    gp_fraction: float | None = field(default=None, metadata=_kind("number"))
    hardware: str | None = field(default=None, metadata=_kind("text"))
    pretrain_steps: int | None = field(default=None, metadata=_kind("whole"))
    steps: int | None = field(default=None, metadata=_kind("whole"))
    batch_size: int | None = field(default=None, metadata=_kind("whole"))
    train_config: dict[str, Any] | None = field(default=None, metadata=_kind("mapping"))
    best_val_nll: float | None = field(default=None, metadata=_kind("number"))
    best_step: int | None = field(default=None, metadata=_kind("whole"))
    training_seconds: float | None = field(default=None, metadata=_kind("number"))
    scores: dict[str, Any] | None = field(default=None, metadata=_kind("mapping"))
    calibration_note: str | None = field(default=None, metadata=_kind("text"))
    extra: dict[str, Any] = field(default_factory=dict)
    key_order: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check every typed field (see :meth:`from_dict` for the error)."""
        _check_fields({f.name: getattr(self, f.name) for f in _typed_fields()}, "model card")
        clash = sorted(set(self.extra) & {f.name for f in _typed_fields()})
        if clash:
            raise ValueError(f"ModelCard.extra repeats the typed field(s) {clash}; set them as fields")

    @property
    def takes_any_band_count(self) -> bool:
        """Whether the model fills rasters of any band count (unless the card says it does not)."""
        return self.any_band_count is not False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, *, where: str | Path = "model card") -> ModelCard:
        """Read a card from its JSON form; unknown keys go to :attr:`extra`.

        Args:
            data: the ``card`` section of a ``config.json`` (None or empty: a blank card).
            where: the file, for error messages.

        Raises:
            CheckpointError: ``data`` is not a mapping, or a typed field holds another type
                (naming the key and value, in the one-line style of the other model-file checks).
        """
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise CheckpointError(f"{where} has card={_short(data)}; it must be a mapping of card fields; "
                                  "re-download the model or retrain it with geonp train")
        typed = {f.name for f in _typed_fields()}
        known = {k: v for k, v in data.items() if k in typed}
        extra = {k: v for k, v in data.items() if k not in typed}
        _check_fields(known, where)
        return cls(**known, extra=extra, key_order=tuple(data))

    def to_dict(self) -> dict[str, Any]:
        """The card as JSON-ready dict: typed fields that are set (or were read), then ``extra``.

        Keys come in the order they were read; keys set since then follow. A typed field that is
        None is left out unless the card read had it (as ``null``).
        """
        out: dict[str, Any] = {}
        typed = {f.name: getattr(self, f.name) for f in _typed_fields()}
        for key in self.key_order:
            if key in typed:
                out[key] = typed[key]
            elif key in self.extra:
                out[key] = self.extra[key]
        for key, value in typed.items():
            if key not in out and value is not None:
                out[key] = value
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out


def _typed_fields() -> tuple[Any, ...]:
    return tuple(f for f in fields(ModelCard) if "kind" in f.metadata)


def _check_fields(values: Mapping[str, Any], where: str | Path) -> None:
    """Raise a one-line :class:`CheckpointError` for the first typed field of the wrong type."""
    kinds = {f.name: f.metadata["kind"] for f in _typed_fields()}
    for key, value in values.items():
        test, what = _KINDS[kinds[key]]
        if value is not None and not test(value):
            raise CheckpointError(f"{where} has card.{key}={_short(value)}; it must be {what}; "
                                  "re-download the model or retrain it with geonp train")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
