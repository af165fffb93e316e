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
                       "pixels": [n_1, ...]},            # validation pixels per bin
     "near_blend": {"estimates": ["gdal", "ring1", ...],         # classical estimates
                    "distance_edges": [0.0, 1.5, 3.0, 6.0, 12.0],  # a gap pixel's cell: its
                    "neighbour_edges": [0, 3, 5, 7, 9],            # distance bin x its count of
                    "weights": [[[w_1, ...], ...], ...],           # observed 8-neighbours
                    "std_factors": [[f, ...], ...],
                    "pixels": [[n, ...], ...]}}

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

__all__ = ["Calibration", "DistanceBins", "NearBlend"]

_KEYS = ("std_scale", "fitted_on", "distance_bins", "near_blend")
_BIN_KEYS = ("edges", "factors", "pixels")
_BLEND_KEYS = ("estimates", "distance_edges", "neighbour_edges", "weights", "std_factors", "pixels")


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
                    and all(_is_number(v) and v > 0 for v in values))

        per_band = isinstance(factors, list | tuple) and bool(factors) and isinstance(factors[0], list | tuple)
        if not (all(row(f) for f in factors) if per_band else row(factors)):
            raise ConfigError(f"{where}.factors={factors!r}; it must be {n} finite factors > 0 (one per "
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


def _table(value: Any, shape: tuple[int, ...], ok: Any) -> bool:
    """Whether ``value`` is nested lists of ``shape`` whose leaves pass ``ok``."""
    if not shape:
        return bool(ok(value))
    return (isinstance(value, list | tuple) and len(value) == shape[0]
            and all(_table(v, shape[1:], ok) for v in value))


def _nested(value: Any) -> Any:
    return tuple(_nested(v) for v in value) if isinstance(value, list | tuple) else value


#: Largest size of a near blend's weight: a bound that no fit on real data comes near.
_MAX_BLEND_WEIGHT = 100.0


@dataclass(frozen=True)
class NearBlend:
    """Next to data, a linear correction of the fill's mean by classical estimates, per cell.

    A gap pixel's cell is its distance bin (``distance_edges``, pixels to the nearest observed
    pixel) and the bin of its count of observed 8-neighbours (``neighbour_edges``). In cell
    ``(i, j)`` the fill is ``mean + sum_k weights[i][j][k] * (estimate_k - mean)`` over the
    ``estimates`` (named in :data:`geonp.filling.near_blend.NEAR_ESTIMATES`; an estimate without
    a value at a pixel adds nothing there), and its std is multiplied by ``std_factors[i][j]``
    (after the distance factors). Pixels at or beyond the last distance edge keep the model's
    mean and std. Fitted on validation pixels (:func:`geonp.filling.near_blend.fit_near_blend`).
    """

    estimates: tuple[str, ...]
    distance_edges: tuple[float, ...]
    neighbour_edges: tuple[int, ...]
    weights: tuple[tuple[tuple[float, ...], ...], ...]
    std_factors: tuple[tuple[float, ...], ...]
    pixels: tuple[tuple[int, ...], ...] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(distance bins, neighbour bins)``."""
        return len(self.distance_edges) - 1, len(self.neighbour_edges) - 1

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "calibration.near_blend") -> NearBlend:
        """Read the JSON form.

        Raises:
            ConfigError: a value of the wrong type or shape, naming it (``where.key=value``).
        """
        if not isinstance(data, Mapping) or not all(k in data for k in _BLEND_KEYS[:5]):
            raise ConfigError(f"{where}={data!r}; it must be a mapping with {list(_BLEND_KEYS[:5])}")
        _unknown_keys(data, _BLEND_KEYS, where)
        names = data["estimates"]
        if not isinstance(names, list | tuple) or not names or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"{where}.estimates={names!r}; it must be a list of estimate names")
        for key, num in (("distance_edges", _is_number), ("neighbour_edges", lambda v: isinstance(v, int))):
            edges = data[key]
            if (not isinstance(edges, list | tuple) or len(edges) < 2 or not all(num(e) for e in edges)
                    or edges[0] != 0 or any(b <= a for a, b in pairwise(edges))):
                raise ConfigError(f"{where}.{key}={edges!r}; it must be 2 or more increasing numbers from 0")
        shape = (len(data["distance_edges"]) - 1, len(data["neighbour_edges"]) - 1)
        checks = {"weights": ((*shape, len(names)), lambda v: _is_number(v) and abs(v) <= _MAX_BLEND_WEIGHT,
                              f"rows of {shape[1]} lists of {len(names)} weights (one per estimate)"),
                  "std_factors": (shape, lambda v: _is_number(v) and v > 0, f"rows of {shape[1]} positive factors"),
                  "pixels": (shape, lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                             f"rows of {shape[1]} pixel counts")}
        for key, (want, ok, what) in checks.items():
            if not (key == "pixels" and data.get(key) is None) and not _table(data[key], want, ok):
                raise ConfigError(f"{where}.{key}={data[key]!r}; it must be {shape[0]} {what}")
        return cls(estimates=tuple(names), distance_edges=tuple(data["distance_edges"]),
                   neighbour_edges=tuple(data["neighbour_edges"]), weights=_nested(data["weights"]),
                   std_factors=_nested(data["std_factors"]), pixels=_nested(data.get("pixels")))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        out: dict[str, Any] = {"estimates": list(self.estimates), "distance_edges": list(self.distance_edges),
                               "neighbour_edges": list(self.neighbour_edges),
                               "weights": [[list(w) for w in r] for r in self.weights],
                               "std_factors": [list(r) for r in self.std_factors]}
        if self.pixels is not None:
            out["pixels"] = [list(r) for r in self.pixels]
        return out

    def cells(self, distance: np.ndarray, neighbours: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(inside, i, j)``: which pixels lie within the last distance edge, and their cell's indices."""
        d = np.asarray(distance, float)
        inside = d < self.distance_edges[-1]
        i = np.clip(np.searchsorted(self.distance_edges, d, side="right") - 1, 0, self.shape[0] - 1)
        j = np.clip(np.searchsorted(self.neighbour_edges, np.asarray(neighbours), side="right") - 1,
                    0, self.shape[1] - 1)
        return inside, i, j

    def weights_and_factor(self, distance: np.ndarray, neighbours: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per pixel its cell's weights ``[estimates, ...]`` (0 beyond the last distance edge) and std factor (1 there)."""
        inside, i, j = self.cells(distance, neighbours)
        w = np.where(inside[None], np.moveaxis(np.asarray(self.weights, float)[i, j], -1, 0), 0.0)
        return w, np.where(inside, np.asarray(self.std_factors, float)[i, j], 1.0)


@dataclass(frozen=True)
class Calibration:
    """A model's post-hoc std calibration: per-band factors, then factors by distance to data.

    Attributes:
        std_scale: one std factor per band (or one for all bands); None = 1.
        fitted_on: how and on what it was fitted (a sentence for people).
        distance_bins: factors by distance to the nearest observed pixel, on top of
            ``std_scale``; None = 1.
        near_blend: next to data, a correction of the mean by classical estimates and std factors
            per cell (:class:`NearBlend`), applied by the fill (:mod:`geonp.filling.near_blend`); None = none.
    """

    std_scale: tuple[float, ...] | None = None
    fitted_on: str | None = None
    distance_bins: DistanceBins | None = None
    near_blend: NearBlend | None = None

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
        bins, blend = data.get("distance_bins"), data.get("near_blend")
        return cls(std_scale=scale, fitted_on=fitted_on,
                   distance_bins=None if bins is None else DistanceBins.from_dict(bins, where=f"{where}.distance_bins"),
                   near_blend=None if blend is None else NearBlend.from_dict(blend, where=f"{where}.near_blend"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the keys of the fields that are set, in the order geonp writes them."""
        out: dict[str, Any] = {}
        if self.std_scale is not None:
            out["std_scale"] = list(self.std_scale)
        if self.fitted_on is not None:
            out["fitted_on"] = self.fitted_on
        if self.distance_bins is not None:
            out["distance_bins"] = self.distance_bins.to_dict()
        if self.near_blend is not None:
            out["near_blend"] = self.near_blend.to_dict()
        return out

    @property
    def is_identity(self) -> bool:
        """True when it changes no std (no factor of any kind) and no mean."""
        return not self.std_scale and self.distance_bins is None and self.near_blend is None

    @property
    def needs_distance(self) -> bool:
        """Whether the fill needs each pixel's distance to data (distance factors or a near blend)."""
        return self.distance_bins is not None or self.near_blend is not None

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
        blend = "" if self.near_blend is None else f", a near blend of {', '.join(self.near_blend.estimates)}"
        return f"std scale {scale} and distance-bin factors {factors}{blend}: {self.fitted_on or ''}"
