"""The arguments every simulated gap mask takes, checked: shape, coverage, rng, borrowed source.

Shared by :mod:`geonp.data.gap_shapes`, :mod:`geonp.data.gaps` and :mod:`geonp.data.synthetic`,
so a bad argument fails with the same message whichever mask or field is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geonp.errors import ConfigError

__all__ = ["as_rng", "check_coverage", "check_shape", "check_source"]


def as_rng(rng: np.random.Generator | int, *, what: str = "gap masks") -> np.random.Generator:
    """A numpy Generator from a Generator or an integer seed (anything else is refused)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise ConfigError(
        f"rng={rng!r} is not a numpy Generator or an integer seed; {what} must be "
        "reproducible. Pass rng=np.random.default_rng(SEED) or an int seed."
    )


def check_shape(shape: Sequence[int]) -> tuple[int, int]:
    """``(h, w)`` of a mask: two positive integers (a float such as 3.5 is refused)."""
    try:
        h, w = (int(s) for s in shape)
    except (TypeError, ValueError) as err:
        raise ConfigError(
            f"shape={shape!r} is not (height, width); masks are 2-D. Pass two positive ints."
        ) from err
    if h < 1 or w < 1 or (h, w) != tuple(shape):
        raise ConfigError(
            f"shape={tuple(shape)!r} is not two positive integers; a mask needs at least one "
            "pixel. Pass e.g. shape=(64, 64)."
        )
    return h, w


def check_coverage(coverage: float) -> float:
    """The fraction of hidden pixels, a float in [0, 1]."""
    c = float(coverage)
    if not (0.0 <= c <= 1.0):
        raise ConfigError(
            f"coverage={coverage!r} is outside [0, 1]; it is the fraction of hidden pixels. "
            "Pass a value such as 0.3."
        )
    return c


def check_source(source: np.ndarray | None) -> np.ndarray:
    """A borrowed gap pattern as a non-empty 2-D bool array."""
    if source is None:
        raise ConfigError(
            "borrowed gaps need a source is_gap pattern, but source=None; pass source= a 2-D "
            "bool array, e.g. the NaN pattern of a real raster (np.isnan(band))."
        )
    src = np.asarray(source)
    if src.ndim != 2 or src.size == 0:
        raise ConfigError(
            f"source has shape {src.shape}; a gap pattern must be a non-empty 2-D [h, w] array. "
            "Pass one band's is_gap mask."
        )
    return src.astype(bool, copy=False)
