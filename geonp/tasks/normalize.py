"""Per-band normalisation of raster values to zero mean and unit std.

The model works on standardised values; a checkpoint stores the normaliser it was trained with
(``to_dict``) so that ``geonp fill`` maps predictions back into the band's units with its ``mean``
and ``std`` (:func:`geonp.filling.block.fill_block`). Pure numpy.

A normaliser fitted on a raster's own pixels sets the scale of every fill's std (each tile's
scale shrinks towards the band's std: :func:`geonp.data.tasks.task_scale`). Pixels that are all
equal (one pixel, or a few equal ones) say nothing of a band's spread, so :meth:`Normalizer.fit`
takes a prior std for them (``prior_std``, a model's training spread: :func:`prior_std`): the std
of a fill from a single observed pixel is then of the order of a band's natural variability, not
the 1e-12 floor. The prior is a spread, not a fraction of the mean, so it does not depend on
where the band's units put zero: a raster and the same raster plus a constant get the same std. A
model's stored statistics are only of use to a raster in their units (:func:`same_units`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from geonp.errors import ConfigError, NoValidPixelsError

#: Weight, in pixels, of the prior std in :meth:`Normalizer.fit`: a band of ``n`` valid pixels, all
#: equal, gets a std of ``prior * sqrt(k / (n + k))`` (k = this), the std that ``n`` pixels of one
#: value shrunk towards the prior with weight k would have: one pixel gives 0.97 of the prior, 16
#: pixels 0.71, 1,000 pixels 0.13. A band whose pixels differ keeps its own std, bit for bit (the
#: fill of each band of the sample raster is unchanged).
PRIOR_PIXELS = 16.0

#: Prior std of a band, in its units, for models that store no training statistics to take it from
#: (:func:`prior_std`): one unit of the band.
DEFAULT_PRIOR_STD = 1.0


#: Largest ratio of magnitudes (either way) at which a raster's band is taken to be in the units of
#: a model's statistics (:func:`same_units`). Landsat digital numbers of any scene or crop are
#: within 4x of the default model's (7,000-30,000 against ~7,900); reflectance (0-1), Kelvin,
#: metres or an index are 25x-100,000x off.
UNITS_FACTOR = 10.0


def same_units(stats: Normalizer, own: Normalizer, *, factor: float = UNITS_FACTOR) -> bool:
    """Whether a raster (its own statistics ``own``) is in the units of ``stats`` (a model's).

    Each band's magnitude ``sqrt(mean² + std²)`` must be within ``factor`` of the other's, either
    way. A magnitude rather than the mean alone: a band of mean ~0 is judged by its spread.

    Raises:
        ConfigError: the two have different band counts.
    """
    if stats.n_bands != own.n_bands:
        raise ConfigError(
            f"the normalisers have {stats.n_bands} and {own.n_bands} bands; compare the "
            "statistics of the same bands."
        )
    for m1, s1, m2, s2 in zip(stats.mean, stats.std, own.mean, own.std, strict=True):
        a, b = math.hypot(m1, s1), math.hypot(m2, s2)
        if not (a <= factor * b and b <= factor * a):
            return False
    return True


def prior_std(stats: Mapping[str, Any] | None) -> float:
    """A band's typical spread, in a model's units: the median std of ``stats`` over its bands.

    Args:
        stats: a normaliser's :meth:`Normalizer.to_dict` (a model's training statistics) or None.

    Returns:
        The median of the finite stds > 0; :data:`DEFAULT_PRIOR_STD` when ``stats`` is None or
        has none.
    """
    stds = [float(s) for s in (stats or {}).get("std", ())]
    stds = [s for s in stds if math.isfinite(s) and s > 0]
    return float(np.median(stds)) if stds else DEFAULT_PRIOR_STD


def _float_tuple(values: Sequence[float], name: str) -> tuple[float, ...]:
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError) as err:
        raise ConfigError(
            f"Normalizer {name}={values!r} is not a list of numbers; it holds one "
            "value per band. Pass e.g. [0.0, 0.0, 0.0]."
        ) from err
    if not all(math.isfinite(v) for v in out):
        raise ConfigError(
            f"Normalizer {name}={list(out)} has a non-finite value; every band "
            "needs a finite value. Refit the normaliser on valid pixels."
        )
    return out


@dataclass(frozen=True)
class Normalizer:
    """Per-band affine normalisation ``(x - mean) / std``.

    Attributes:
        mean: per-band mean, in the band's units.
        std: per-band std (> 0), in the band's units.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        """Coerce to tuples of float and check lengths, finiteness and std > 0."""
        mean = _float_tuple(self.mean, "mean")
        std = _float_tuple(self.std, "std")
        if len(mean) != len(std) or not mean:
            raise ConfigError(
                f"Normalizer has {len(mean)} means and {len(std)} stds; it needs "
                "one of each per band (at least one band). Pass equal-length lists."
            )
        if min(std) <= 0:
            raise ConfigError(
                f"Normalizer std={list(std)} has a value <= 0; dividing by it is "
                "undefined. Refit the normaliser (fit floors the std above 0)."
            )
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)

    @property
    def n_bands(self) -> int:
        """Number of bands this normaliser handles."""
        return len(self.mean)

    @classmethod
    def fit(
        cls,
        values: np.ndarray,
        valid: np.ndarray | None = None,
        *,
        max_samples: int = 1_000_000,
        seed: int = 0,
        prior_std: float | None = None,
        prior_pixels: float = PRIOR_PIXELS,
    ) -> Normalizer:
        """Estimate per-band mean and std from the valid pixels.

        NaN and Inf are always ignored. A band with more than ``max_samples`` valid values is
        estimated from a seeded random subset of them, which keeps fitting fast on big rasters.
        The std is floored at ``1e-6 * |mean| + 1e-12`` so a constant band does not divide by 0.

        With ``prior_std``, a band whose ``n`` valid values are all equal (one observed pixel, or
        a few equal ones) has no spread of its own and takes ``prior_std * sqrt(prior_pixels /
        (n + prior_pixels))``: about ``prior_std`` for one pixel, the band's natural spread as
        far as anything knows, instead of ~0, whatever the value (0 included). A band whose values
        differ keeps its own std: its spread is in its units, which the prior's may not be.

        Args:
            values: ``[bands, ...]`` array (e.g. ``[bands, h, w]``).
            valid: bool mask, True = use; shape ``values.shape``, ``values.shape[1:]`` (the same
                mask for every band) or anything broadcastable to ``values.shape``. None = all.
            max_samples: most values used per band.
            seed: seed of the subsampling.
            prior_std: prior std of a band with no spread of its own, in its units (e.g. a
                model's :func:`prior_std`); None = no prior (the std of the pixels alone).
            prior_pixels: the prior's weight in pixels (:data:`PRIOR_PIXELS`).

        Returns:
            The fitted normaliser.

        Raises:
            ConfigError: ``valid`` does not match ``values``, or ``values`` has no band axis.
            NoValidPixelsError: a band has no valid finite value.
        """
        arr = np.asarray(values)
        if arr.ndim < 1 or arr.shape[0] == 0:
            raise ConfigError(
                f"values has shape {arr.shape}; fit needs [bands, ...] with at "
                "least one band. Add a leading band axis."
            )
        ok = _usable(arr, valid)
        if max_samples < 1:
            raise ConfigError(
                f"max_samples={max_samples} is < 1; fit needs at least one value "
                "per band. Pass e.g. max_samples=1_000_000."
            )
        if prior_std is not None and not (math.isfinite(prior_std) and prior_std > 0
                                          and math.isfinite(prior_pixels) and prior_pixels > 0):
            raise ConfigError(
                f"prior_std={prior_std} and prior_pixels={prior_pixels}: the prior std must be a "
                "finite number > 0 and its weight > 0. Pass e.g. prior_std=450, prior_pixels=16."
            )
        rng = np.random.default_rng(seed)
        means: list[float] = []
        stds: list[float] = []
        for b in range(arr.shape[0]):
            idx = np.flatnonzero(ok[b])
            n_valid = idx.size
            if idx.size == 0:
                raise NoValidPixelsError(
                    f"band {b + 1} has no valid pixels (all nodata, NaN or masked), so its "
                    "mean and std are unknown. Check the nodata value or the mask."
                )
            if idx.size > max_samples:
                idx = np.sort(rng.choice(idx, size=max_samples, replace=False))
            sample = np.asarray(arr[b]).ravel()[idx].astype(np.float64)
            mean = float(sample.mean())
            std = max(float(sample.std()), 1e-6 * abs(mean) + 1e-12)
            if prior_std is not None and sample.min() == sample.max():  # no spread of its own
                std = max(std, prior_std * math.sqrt(prior_pixels / (n_valid + prior_pixels)))
            means.append(mean)
            stds.append(std)
        return cls(mean=tuple(means), std=tuple(stds))

    def _params(self, values: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        arr = np.asarray(values)
        dtype = np.result_type(arr.dtype, np.float32)
        if arr.ndim == 0 or not -arr.ndim <= axis < arr.ndim:
            raise ConfigError(
                f"values has shape {arr.shape}, no band axis {axis}; pass "
                "[bands, ...] arrays or the right axis=."
            )
        if arr.shape[axis] != self.n_bands:
            raise ConfigError(
                f"values has {arr.shape[axis]} bands on axis {axis} but the "
                f"normaliser has {self.n_bands}; use the normaliser fitted on "
                "these bands, or select the same bands."
            )
        shape = [1] * arr.ndim
        shape[axis] = self.n_bands
        mean = np.asarray(self.mean, dtype=np.float64).reshape(shape).astype(dtype)
        std = np.asarray(self.std, dtype=np.float64).reshape(shape).astype(dtype)
        return arr.astype(dtype, copy=False), mean, std

    def apply(self, values: np.ndarray, *, axis: int = 0) -> np.ndarray:
        """Standardise: ``(values - mean) / std`` per band.

        Args:
            values: array with the bands on ``axis``. Float32 stays float32, float64 stays
                float64, integers become float64.
            axis: the band axis (0 for ``[bands, h, w]``, -1 for ``[n, bands]``).

        Returns:
            Standardised values, same shape.
        """
        arr, mean, std = self._params(values, axis)
        return (arr - mean) / std

    def invert_std(self, std: np.ndarray, *, axis: int = 0) -> np.ndarray:
        """Map a standardised predictive std to band units (scale only, no shift).

        Args:
            std: standardised std with the bands on ``axis``.
            axis: the band axis.

        Returns:
            Std in the band's units, same shape.
        """
        arr, _, band_std = self._params(std, axis)
        return arr * band_std

    def to_dict(self) -> dict[str, list[float]]:
        """JSON-ready form ``{"mean": [...], "std": [...]}`` (stored in model configs)."""
        return {"mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Normalizer:
        """Rebuild from :meth:`to_dict` output.

        Raises:
            ConfigError: unknown or missing keys, lists of different lengths, bad values.
        """
        if not isinstance(d, Mapping):
            raise ConfigError(
                f"normalizer entry is a {type(d).__name__}, not a mapping; expected "
                '{"mean": [...], "std": [...]}. Re-save the model config.'
            )
        unknown = sorted(set(d) - {"mean", "std"})
        missing = sorted({"mean", "std"} - set(d))
        if unknown or missing:
            raise ConfigError(
                f"normalizer has unknown keys {unknown} / missing keys {missing}; "
                'it takes exactly "mean" and "std". Fix the model config.'
            )
        return cls(mean=d["mean"], std=d["std"])


def _usable(arr: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    """Bool ``arr.shape``: finite values that ``valid`` (per pixel or per value) marks valid.

    Raises:
        ConfigError: ``valid`` does not broadcast to ``arr``.
    """
    ok = np.isfinite(arr) if np.issubdtype(arr.dtype, np.inexact) else np.ones(arr.shape, bool)
    if valid is not None:
        v = np.asarray(valid, dtype=bool)
        if v.ndim == arr.ndim - 1 and v.shape == arr.shape[1:]:
            v = v[None]
        try:
            ok &= np.broadcast_to(v, arr.shape)
        except ValueError as err:
            raise ConfigError(
                f"valid has shape {v.shape} but values has shape {arr.shape}; "
                "pass a mask of shape values.shape or values.shape[1:]."
            ) from err
    return ok
