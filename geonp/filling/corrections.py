"""What a fill does to the model's output of a block, in order: the plan's corrections.

The model predicts each gap pixel's mean and std. A :class:`~geonp.filling.plan.FillPlan` then
applies its corrections in turn (:attr:`FillPlan.corrections
<geonp.filling.plan.FillPlan.corrections>`), each a callable ``(mean, std, view) -> (mean, std)``
on the region's arrays in the bands' units:

1. :class:`RegressionWeight`: with references, the reference regression's estimate weighed in
   where a reference observes a gap pixel;
2. :class:`StdCalibration`: the model's post-hoc std calibration (by band and distance to data),
   of the fill it makes (with a regression, of the weighted mean);
3. :class:`NearBlendCorrection`: next to data, the near blend of classical estimates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from geonp.filling.block_input import BlockInput
from geonp.filling.near_blend import apply_near_blend
from geonp.filling.references import REGRESSION_WEIGHT, ReferenceLines
from geonp.model_files.calibration import Calibration, NearBlend

__all__ = ["BlockView", "Correction", "NearBlendCorrection", "RegressionWeight", "StdCalibration"]


@dataclass(frozen=True, eq=False)
class BlockView:
    """A block as the corrections see it.

    Attributes:
        inputs: the block's arrays (values in the bands' units, observed flags, references).
        to_fill: bool ``[bands, h, w]``: the pixels the fill predicts.
        distance: ``[bands, ...region]`` each region pixel's distance to data, where a
            correction needs it (:attr:`Correction.needs_distance`), else None.
    """

    inputs: BlockInput
    to_fill: np.ndarray
    distance: np.ndarray | None


class Correction(Protocol):
    """One step after the model: ``(mean, std, view) -> (mean, std)`` of a block's region."""

    @property
    def needs_distance(self) -> bool:
        """Whether it reads :attr:`BlockView.distance`."""
        ...

    def __call__(self, mean: np.ndarray, std: np.ndarray, view: BlockView) -> tuple[np.ndarray, np.ndarray]:
        """The corrected ``(mean, std)``."""
        ...


@dataclass(frozen=True)
class RegressionWeight:
    """The model's fill weighed with the reference regression's where a reference observes a gap pixel.

    There the fill is ``(1 - w)`` times the model's plus ``w`` times the regression's estimate
    (:meth:`ReferenceLines.estimate <geonp.filling.references.ReferenceLines.estimate>`, ``w`` =
    :data:`~geonp.filling.references.REGRESSION_WEIGHT`), elsewhere the model's alone; the fill is
    kept within a band's floor and ceiling where the target is saturated. The regression's
    estimate of a pixel uses the pixels within :data:`~geonp.filling.similar_pixels.ESTIMATE_REACH`
    of it, which the block's halo holds.
    """

    lines: ReferenceLines
    needs_distance = False

    def __call__(self, mean: np.ndarray, std: np.ndarray, view: BlockView) -> tuple[np.ndarray, np.ndarray]:
        """The weighted fill (unchanged for a block without references)."""
        block = view.inputs
        if not block.references:
            return mean, std
        at = np.zeros(block.values.shape[1:], dtype=bool)
        at[block.region.slices] = view.to_fill[block.core].any(axis=0)
        r_mean, r_std, _ = self.lines.estimate(block.values, block.observed,
                                               [(r.values, r.observed) for r in block.references], at, block.origin)
        r_mean, r_std = r_mean[block.core], r_std[block.core]
        # The weighted mean of the two estimates; the same weighted mean of their stds is the std of
        # that mean when their errors are fully correlated (an upper bound otherwise).
        both = np.isfinite(r_mean) & np.isfinite(mean)
        w = REGRESSION_WEIGHT
        mean = np.where(both, (1 - w) * mean + w * r_mean, mean)
        # where a band is saturated, the model's share (and its fill where no reference sees) stays below it too
        return self.lines.within_saturation(mean), np.where(both, (1 - w) * std + w * r_std, std)


@dataclass(frozen=True)
class StdCalibration:
    """The model's post-hoc std calibration, band by band.

    :meth:`Calibration.apply <geonp.model_files.calibration.Calibration.apply>` with each pixel's
    distance to data where the calibration has distance factors.
    """

    calibration: Calibration

    @property
    def needs_distance(self) -> bool:
        """Whether the calibration has distance factors."""
        return self.calibration.distance_bins is not None

    def __call__(self, mean: np.ndarray, std: np.ndarray, view: BlockView) -> tuple[np.ndarray, np.ndarray]:
        """``mean``, and ``std`` calibrated (a copy)."""
        std = std.copy()
        n = std.shape[0]
        for b in range(n):
            dist = view.distance[b] if view.distance is not None else np.zeros(std[b].shape)
            std[b] = self.calibration.apply(std[b], dist, band=b, band_count=n)
        return mean, std


@dataclass(frozen=True)
class NearBlendCorrection:
    """Next to data, the mean corrected by classical estimates (:func:`~geonp.filling.near_blend.apply_near_blend`)."""

    blend: NearBlend
    needs_distance = True

    def __call__(self, mean: np.ndarray, std: np.ndarray, view: BlockView) -> tuple[np.ndarray, np.ndarray]:
        """The blended ``(mean, std)``."""
        assert view.distance is not None, "the near blend reads each pixel's distance to data"
        block = view.inputs
        return apply_near_blend(mean, std, block.values, block.observed, block.region, view.distance, self.blend)


def corrections_of(lines: ReferenceLines | None, calibration: Calibration | None) -> tuple[Correction, ...]:
    """The corrections of a fill with these reference lines and this model calibration, in order."""
    steps: list[Correction] = [] if lines is None else [RegressionWeight(lines)]
    if calibration is not None and not calibration.is_identity:
        steps.append(StdCalibration(calibration))
    if calibration is not None and calibration.near_blend is not None:
        steps.append(NearBlendCorrection(calibration.near_blend))
    return tuple(steps)
