"""Checks shared by the option dataclasses of :mod:`geonp.config`: one-line ConfigErrors."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, TypeVar

from geonp.errors import ConfigError

T = TypeVar("T")


def from_dict(cls: type[T], data: dict[str, Any], what: str) -> T:
    """``cls(**data)``, refusing a non-mapping, unknown keys and bad values with one ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError(f"{what} must be a mapping of option names to values, got {type(data).__name__}")
    valid = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - valid, key=str)
    if unknown:
        raise ConfigError(f"unknown {what} option(s) {unknown}; valid options: {sorted(valid)}")
    try:
        return cls(**data)
    except TypeError as err:
        raise ConfigError(f"invalid {what}: {err}") from err


def check_number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
                  low_open: bool = False, high_open: bool = False) -> None:
    """Raise ConfigError unless ``value`` is a finite real number in the given range."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        lo = "" if low is None else f"{'>' if low_open else '>='} {low}"
        hi = "" if high is None else f"{'<' if high_open else '<='} {high}"
        raise ConfigError(f"{name}={value!r} must be a finite number {' and '.join(p for p in (lo, hi) if p)}")


def check_int(name: str, value: Any, low: int) -> None:
    """Raise ConfigError unless ``value`` is an integer >= ``low``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{name}={value!r} must be an integer >= {low}")


def check_overlap(overlap: int, tile_size: int, source: str = "--tile-size") -> None:
    """Raise ConfigError unless the tile blend margin ``overlap`` is at most half of ``tile_size``.

    Up to half a tile, every pixel is predicted by at most two tiles along each axis, its own and
    the nearest neighbour; beyond, the query windows reach past the neighbours and each tile costs
    ``((tile_size + 2 * overlap) / tile_size)²`` times its core for no better blend. ``source``
    says where the tile size came from, for the message.
    """
    if overlap > tile_size // 2:
        raise ConfigError(f"--overlap {overlap} is more than half of the {tile_size}-px tiles ({source}); give "
                          f"--overlap {tile_size // 2} or less, or a larger --tile-size")
