"""A model's post-hoc std calibration: one typed value, stored in its ``config.json``. Pure numpy.

A model's raw std can be off by a factor per band, and by one that depends on how far a gap
pixel is from data (deep in a scene-scale cloud, for instance). ``geonp evaluate --calibrate``
fits both (:mod:`geonp.filling.calibration`), :func:`~geonp.model_files.checkpoint.write_calibration`
stores them, and every fill applies them to its std raster (:meth:`Calibration.apply`).

This is the only module that spells the keys of the ``calibration`` block of a model's
``config.json``; everything else holds a :class:`Calibration`. The JSON form is::

    {"std_scale": [s_1, ...],             # one factor per band (or one for all)
     "fitted_on": "geonp evaluate ...",   # how it was fitted, for people
     "distance_bins": {"edges": [0.0, 1.5, ..., null],   # pixels; null = no upper end
                       "factors": [f_1, ...],            # one per bin (or a list per band)
                       "pixels": [n_1, ...]}}            # validation pixels per bin

Every key is optional. The type lives here, beside the model files, because loading a model
builds one (:class:`~geonp.model_files.checkpoint.LoadedModel`) and ``geonp.model_files`` sits
below ``geonp.filling``, ``geonp.training`` and ``geonp.evaluation``, which all use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from geonp.errors import ConfigError

__all__ = ["Calibration", "DistanceBins"]

_KEYS = ("std_scale", "fitted_on", "distance_bins")
_BIN_KEYS = ("edges", "factors", "pixels")


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _unknown_keys(data: Mapping[str, Any], valid: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(valid), key=str)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}={data[unknown[0]]!r}; the keys of {where} are {list(valid)}")


def _pick(values: Sequence[Any], band: int | None, band_count: int | None) -> Any:
    """A band's entry of per-band ``values``; the first when they are of other bands (or ``band`` is None)."""
    b = 0 if band is None else int(band)
    if band_count is not None and len(values) != band_count:
        return values[0]
    return values[b] if len(values) > b else values[0]


def _bin_centres(edges: Sequence[float]) -> np.ndarray:
    """A representative distance per bin: its geometric middle (open last bin: 1.5 x its start)."""
    e = np.asarray(edges, float)
    lo, hi = e[:-1], e[1:]
    mid = np.where(np.isfinite(hi), 0.5 * (lo + hi), 1.5 * lo)
    return np.where(lo > 0, np.sqrt(lo * np.where(np.isfinite(hi), hi, 2.25 * lo)), mid)


@dataclass(frozen=True)
class DistanceBins:
    """Std factors by distance to the nearest observed pixel, fitted on top of the band factors.

    Attributes:
        edges: bin edges in pixels, increasing, from 0; the last may be ``inf`` (no upper end).
            A pixel at distance ``d`` is in bin ``i`` when ``edges[i] <= d < edges[i + 1]``.
        factors: one factor per bin, or one such tuple per band.
        pixels: validation pixels per bin (what the factors were fitted on), if known.
    """

    edges: tuple[float, ...]
    factors: tuple[float, ...] | tuple[tuple[float, ...], ...]
    pixels: tuple[int, ...] | None = None

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "calibration.distance_bins") -> DistanceBins:
        """Read the JSON form (``null`` edges are ``inf``).

        Raises:
            ConfigError: a value of the wrong type or length, naming it (``where.key=value``).
        """
        if not isinstance(data, Mapping) or "edges" not in data or "factors" not in data:
            raise ConfigError(f"{where}={data!r}; it must be a mapping with 'edges' and 'factors'")
        _unknown_keys(data, _BIN_KEYS, where)
        edges, factors, pixels = data["edges"], data["factors"], data.get("pixels")
        if (not isinstance(edges, list | tuple) or len(edges) < 2
                or not all(_is_number(e) or e is None or e == math.inf for e in edges)
                or any(e is None or e == math.inf for e in edges[:-1])):
            raise ConfigError(f"{where}.edges={edges!r}; it must be 2 or more numbers of pixels (the last "
                              "may be null)")
        edges = tuple(math.inf if e is None else e for e in edges)
        if any(b <= a for a, b in pairwise(edges)):
            raise ConfigError(f"{where}.edges={list(data['edges'])!r}; they must increase")
        n = len(edges) - 1

        def row(values: Any) -> bool:
            return (isinstance(values, list | tuple) and len(values) == n
                    and all(_is_number(v) and v >= 0 for v in values))

        per_band = isinstance(factors, list | tuple) and bool(factors) and isinstance(factors[0], list | tuple)
        if not (all(row(f) for f in factors) if per_band else row(factors)):
            raise ConfigError(f"{where}.factors={factors!r}; it must be {n} finite factors >= 0 (one per "
                              "bin), or such a list per band")
        if pixels is not None and not (isinstance(pixels, list | tuple) and len(pixels) == n and all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in pixels)):
            raise ConfigError(f"{where}.pixels={pixels!r}; it must be {n} pixel counts (one per bin)")
        return cls(edges=edges,
                   factors=tuple(tuple(f) for f in factors) if per_band else tuple(factors),
                   pixels=None if pixels is None else tuple(pixels))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``inf`` edges as None)."""
        out: dict[str, Any] = {
            "edges": [None if e == math.inf else e for e in self.edges],
            "factors": [list(f) if isinstance(f, tuple) else f for f in self.factors],
        }
        if self.pixels is not None:
            out["pixels"] = list(self.pixels)
        return out

    @property
    def per_band(self) -> bool:
        """Whether :attr:`factors` holds one tuple per band."""
        return bool(self.factors) and isinstance(self.factors[0], tuple)

    def factor_at(self, distance: np.ndarray, *, band: int | None = None,
                  band_count: int | None = None) -> np.ndarray:
        """The factor at each ``distance`` (pixels), float64, shaped like it.

        It is interpolated linearly in ``log(1 + distance)`` between the bins' representative
        distances and held constant beyond the first and last, so a std raster has no steps at
        bin edges. Per-band factors are picked as :meth:`Calibration.scale_for` picks a scale.
        """
        factors = _pick(self.factors, band, band_count) if self.per_band else self.factors
        centres = np.log1p(_bin_centres([float(e) for e in self.edges]))
        return np.interp(np.log1p(np.asarray(distance, float)), centres, np.asarray(factors, float))

    def stacked_on(self, previous: DistanceBins | None) -> DistanceBins:
        """These factors, fitted on top of a model's ``previous`` ones, multiplied by them.

        Factors fitted on a model that already applied ``previous`` correct what is left, so the
        model file stores their product. Other edges or per-band previous factors are replaced.
        """
        if previous is None or previous.edges != self.edges or previous.per_band or self.per_band:
            return self
        pairs = zip(previous.factors, self.factors, strict=True)
        return DistanceBins(edges=self.edges, factors=tuple(round(a * b, 6) for a, b in pairs),  # type: ignore[operator]
                            pixels=self.pixels)


@dataclass(frozen=True)
class Calibration:
    """A model's post-hoc std calibration: per-band factors, then factors by distance to data.

    Attributes:
        std_scale: one std factor per band (or one for all bands); None = 1.
        fitted_on: how and on what it was fitted (a sentence for people).
        distance_bins: factors by distance to the nearest observed pixel, on top of
            ``std_scale``; None = 1.
    """

    std_scale: tuple[float, ...] | None = None
    fitted_on: str | None = None
    distance_bins: DistanceBins | None = None

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "calibration") -> Calibration:
        """Read the ``calibration`` block of a model's ``config.json`` (every key optional).

        Raises:
            ConfigError: a value of the wrong type, naming it (``calibration.std_scale=...``);
                ``geonp.model_files.checks`` turns it into a ``CheckpointError`` naming the file.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}={data!r}; it must be a mapping with 'std_scale'")
        _unknown_keys(data, _KEYS, where)
        scale = data.get("std_scale")
        if scale is not None:
            values = scale if isinstance(scale, list | tuple) else [scale]
            if not values or not all(_is_number(v) and v > 0 for v in values):
                raise ConfigError(f"{where}.std_scale={scale!r}; it must be positive finite number(s)")
            scale = tuple(values)
        fitted_on = data.get("fitted_on")
        if fitted_on is not None and not isinstance(fitted_on, str):
            raise ConfigError(f"{where}.fitted_on={fitted_on!r}; it must be text")
        bins = data.get("distance_bins")
        return cls(std_scale=scale, fitted_on=fitted_on,
                   distance_bins=None if bins is None else DistanceBins.from_dict(bins, where=f"{where}.distance_bins"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the keys of the fields that are set, in the order geonp writes them."""
        out: dict[str, Any] = {}
        if self.std_scale is not None:
            out["std_scale"] = list(self.std_scale)
        if self.fitted_on is not None:
            out["fitted_on"] = self.fitted_on
        if self.distance_bins is not None:
            out["distance_bins"] = self.distance_bins.to_dict()
        return out

    @property
    def is_identity(self) -> bool:
        """True when it changes no std (no factor of either kind)."""
        return not self.std_scale and self.distance_bins is None

    @property
    def needs_distance(self) -> bool:
        """Whether :meth:`apply` needs each pixel's distance to data (it has distance factors)."""
        return self.distance_bins is not None

    def scale_for(self, band: int | None = None, band_count: int | None = None) -> float:
        """The std factor of ``band`` (0-based; None = the first).

        The first factor serves every band when ``band_count`` (the input's band count) is given
        and differs from the number of factors: a model calibrated on 3 bands filling a 1-band
        raster, as ``fill`` does.
        """
        return float(_pick(self.std_scale, band, band_count)) if self.std_scale else 1.0

    def band_scales(self, band_count: int) -> list[float]:
        """:meth:`scale_for` of every band of a ``band_count``-band input."""
        return [self.scale_for(b, band_count) for b in range(band_count)]

    def apply(self, std: np.ndarray, distance: np.ndarray, *, band: int | None = None,
              band_count: int | None = None) -> np.ndarray:
        """Apply the calibration to a std array of one band.

        Contract (what the fill engine relies on):

        * ``std`` and ``distance`` have the same shape (any shape, e.g. a block's ``[h, w]``);
          ``distance`` is each pixel's Euclidean distance, in pixels, to the nearest observed
          pixel of the same band (:func:`geonp.filling.calibration.distance_to_observed`); on a
          block, compute it with a halo of at least 288 px (1.5 x the last bin edge, beyond which
          the factor is constant), or the std of neighbouring blocks will not match. It is not
          read without distance factors (:attr:`needs_distance`). Units of ``std`` are kept.
        * ``std`` is multiplied by :meth:`scale_for` ``(band, band_count)``, then by
          :meth:`DistanceBins.factor_at` of ``distance``.
        * It returns a new float array; NaN stays NaN. It is the whole calibration: do not
          multiply by ``std_scale`` again.
        """
        out = np.asarray(std, dtype=np.result_type(np.asarray(std).dtype, np.float32)).copy()
        if self.std_scale:
            out *= self.scale_for(band, band_count)
        if self.distance_bins is not None:
            out *= self.distance_bins.factor_at(distance, band=band, band_count=band_count).astype(out.dtype)
        return out

    def describe(self) -> str:
        """One line for a model card or a log: the factors and how they were fitted."""
        factors = None if self.distance_bins is None else self.distance_bins.to_dict()["factors"]
        scale = None if self.std_scale is None else list(self.std_scale)
        return f"std scale {scale} and distance-bin factors {factors}: {self.fitted_on or ''}"
