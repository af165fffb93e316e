"""Fill one block: :func:`fill_block`, the numeric work of every fill, on arrays only.

A block is a region of the input with a halo around it (the tiles near the region's edge find
their context there). :func:`fill_block` takes its arrays (:class:`BlockInput`) and the fill's
:class:`~geonp.filling.plan.FillPlan`, and gives the region's mean and std in the bands' units
with the counts a report needs (:class:`BlockOutput`). It reads and writes no file, starts no
pool and keeps no state: the file driver (:mod:`geonp.filling.engine`, :mod:`geonp.filling.raster`)
and the array driver (:mod:`geonp.filling.arrays`, also Dask chunks) read a block's inputs, call
it, and write or cast its outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from geonp.filling import classes
from geonp.filling.calibration import region_distances
from geonp.filling.near_blend import apply_near_blend
from geonp.filling.plan import FillPlan
from geonp.filling.predict import Predictor, release_heap
from geonp.filling.references import REGRESSION_WEIGHT, ReferenceLines
from geonp.filling.tile_tasks import BlockReference
from geonp.model_files.calibration import Calibration
from geonp.tasks.normalize import Normalizer

#: ``(r0, r1, c0, c1)``: rows and columns of a block's own pixels within its arrays.
Region = tuple[int, int, int, int]
#: Another date on a block's arrays: ``(values, observed, days)``, ``values``/``observed``
#: ``[bands, h, w]`` in the bands' units, ``days`` the date offset from the target's date.
ReferenceArrays = tuple[np.ndarray, np.ndarray, float]


@dataclass(frozen=True, eq=False)
class BlockInput:
    """The arrays of one block: its values and observed flags with the halo, and where it sits.

    Attributes:
        values: ``[bands, h, w]`` float64 values of the block with its halo (anything where not
            observed).
        observed: bool ``[bands, h, w]``, True where a value is observed.
        region: the block's own pixels within the arrays (the rest is context only).
        origin: the arrays' ``(row, col)`` offset in the raster (keeps tiles on the raster's grid).
        fillable: bool ``[h, w]``: where gaps may be filled (the data footprint); None = all.
        references: other dates on the same arrays (multi-date models).
        search_limit: the largest context search radius the halo holds (None: as far as the plan
            searches); a tile that needs more raises
            :class:`~geonp.tasks.context.HaloTooSmall`.
    """

    values: np.ndarray
    observed: np.ndarray
    region: Region
    origin: tuple[int, int] = (0, 0)
    fillable: np.ndarray | None = None
    references: tuple[ReferenceArrays, ...] = ()
    search_limit: int | None = None

    @property
    def core(self) -> tuple[slice, slice, slice]:
        """Index of the region in ``[bands, h, w]`` arrays."""
        r0, r1, c0, c1 = self.region
        return slice(None), slice(r0, r1), slice(c0, c1)


@dataclass(frozen=True, eq=False)
class BlockOutput:
    """The fill of one block's region.

    Attributes:
        mean: ``[bands, rh, rw]`` float64 predictions in the bands' units, NaN where none.
        std: ``[bands, rh, rw]`` predictive std (calibrated), NaN where none.
        observed: bool ``[bands, rh, rw]``: the region's observed pixels.
        filled: bool ``[bands, rh, rw]``: gap pixels that received a prediction.
        done: gap pixels the model predicted (what the progress callback was told).
        beyond: gap pixels of the region inside ``fillable`` left beyond ``max_distance``.
    """

    mean: np.ndarray
    std: np.ndarray
    observed: np.ndarray
    filled: np.ndarray
    done: int
    beyond: int

    @property
    def uncertainty(self) -> np.ndarray:
        """The std as written: float32, 0 on observed pixels, NaN on unfilled gaps."""
        return np.where(self.observed, 0.0, np.where(self.filled, self.std, np.nan)).astype(np.float32)


def fill_block(inputs: BlockInput, plan: FillPlan, predictor: Predictor | None, *,
               progress: Callable[[int], None] | None = None) -> BlockOutput:
    """Fill the gaps of one block's region, in the bands' units.

    Args:
        inputs: the block's arrays.
        plan: the fill's plan.
        predictor: the model's predictor of ``plan`` (:meth:`FillPlan.predictor
            <geonp.filling.plan.FillPlan.predictor>`); None for a nearest-class fill.
        progress: called with gap pixels done as model batches finish.

    Returns:
        The region's mean and std, and counts.

    Raises:
        HaloTooSmall: a tile needs context beyond ``inputs.search_limit``.

    What earlier blocks freed goes back to the system first (:func:`~geonp.filling.predict.release_heap`:
    a Dask worker fills chunk after chunk, file after file).
    """
    release_heap()
    done = [0]

    def count(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(n)

    values, observed, region = inputs.values, inputs.observed, inputs.region
    to_fill = fill_targets(observed, plan.max_distance, inputs.fillable)
    if plan.class_reach is not None:  # a class raster: the nearest observed class, no model
        mean, std = classes.nearest_class(values, observed, region, reach=plan.class_reach, fillable=inputs.fillable)
    else:
        assert predictor is not None and plan.norm is not None, "a model fill needs a predictor and a normaliser"
        mean, std = predict_region(predictor, values, observed, region, origin=inputs.origin, norm=plan.norm,
                                   max_distance=plan.max_distance, calibration=plan.calibration, progress=count,
                                   limit=inputs.search_limit, fillable=inputs.fillable,
                                   references=list(inputs.references), lines=plan.reference_lines,
                                   to_fill=to_fill)
    core_ok = observed[inputs.core]
    return BlockOutput(mean=mean, std=std, observed=core_ok, filled=np.isfinite(mean) & ~core_ok, done=done[0],
                       beyond=_beyond_max_distance(observed, region, inputs.fillable, to_fill))


def within(observed: np.ndarray, max_distance: float | None) -> np.ndarray:
    """Pixels within ``max_distance`` of an observed pixel (all pixels when None)."""
    if max_distance is None:
        return np.ones_like(observed)
    if not observed.any():
        return np.zeros_like(observed)
    return ndimage.distance_transform_edt(~observed) <= max_distance


def fill_targets(observed: np.ndarray, max_distance: float | None, fillable: np.ndarray | None) -> np.ndarray:
    """The pixels a block's fill predicts: gaps within ``max_distance`` of data, inside ``fillable``.

    Gaps in the halo stay in: they shape the context choice and the tile splits of the tiles near
    the region's edge exactly as in the neighbouring block, which keeps blocks seamless.
    """
    to_fill = np.stack([~obs & within(obs, max_distance) for obs in observed])
    if fillable is not None:
        to_fill &= fillable
    return to_fill


def predict_region(
    predictor: Predictor,
    raw: np.ndarray,
    observed: np.ndarray,
    region: Region,
    *,
    origin: tuple[int, int],
    norm: Normalizer,
    max_distance: float | None,
    calibration: Calibration | None,
    progress: Callable[[int], None] | None = None,
    limit: int | None = None,
    fillable: np.ndarray | None = None,
    references: list[ReferenceArrays] | None = None,
    lines: ReferenceLines | None = None,
    to_fill: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The model's fill of one block's region, in the bands' units (the model part of :func:`fill_block`).

    Args:
        predictor: the process's predictor.
        raw: ``[bands, h, w]`` values of the block with its halo.
        observed: bool ``[bands, h, w]``.
        region: ``(r0, r1, c0, c1)`` of the block's own pixels.
        origin: the block array's offset in the raster.
        norm: per-band normaliser.
        max_distance: leave gaps farther than this from observed pixels unfilled.
        calibration: the model's post-hoc std calibration (:meth:`Calibration.apply
            <geonp.model_files.calibration.Calibration.apply>`), or None.
        progress: gap-pixels-done callback.
        limit: the largest context search radius the block's halo holds (None: all of it).
        fillable: bool ``[h, w]``: where predictions may go (the data footprint); None = all.
        references: other dates on the block's window (multi-date models).
        lines: with references, the reference regression: a second estimate of the gap pixels a
            reference observes, its line corrected by similar pixels nearby
            (:meth:`~geonp.filling.references.ReferenceLines.estimate`); there the fill weighs it
            :data:`~geonp.filling.references.REGRESSION_WEIGHT` against ``predictor``'s (the target
            and references as context), elsewhere ``predictor``'s alone; the fill is kept within
            a band's floor and ceiling where the target is saturated
            (:meth:`~geonp.filling.references.ReferenceLines.within_saturation`).
        to_fill: :func:`fill_targets` of ``observed``, ``max_distance`` and ``fillable`` when the
            caller has it already (computed here otherwise).

    Returns:
        ``(mean, std)`` ``[bands, r1 - r0, c1 - c0]``: predictions on gap pixels, NaN elsewhere.

    Raises:
        HaloTooSmall: a tile needs context beyond ``limit``.
    """
    to_fill = fill_targets(observed, max_distance, fillable) if to_fill is None else to_fill
    refs = [BlockReference(norm.apply(np.where(ok, vals, 0.0)), ok, days) for vals, ok, days in references or ()]
    # each pixel's distance to data, for the calibration and a near model's std (once per block)
    needs = (calibration is not None and calibration.needs_distance) or predictor.near is not None
    dist = region_distances(observed, region) if needs else None
    mean, std = predictor.predict(norm.apply(np.where(observed, raw, 0.0)), observed, to_fill, region,
                                  origin=origin, progress=progress, limit=limit, references=refs, distance=dist)
    n = raw.shape[0]
    ms, ss = np.asarray(norm.mean).reshape(n, 1, 1), np.asarray(norm.std).reshape(n, 1, 1)
    mean, std = mean * ss + ms, std * ss  # back to the bands' units
    if lines is not None and references:
        mean, std = _weigh_with_regression(mean, std, raw, observed, to_fill, region, origin, references, lines)
    # the model's calibration is of the fill it makes: with a reference regression, of the weighted mean
    std = _calibrated(std, dist, calibration)
    if calibration is not None and calibration.near_blend is not None and dist is not None:
        mean, std = apply_near_blend(mean, std, raw, observed, region, dist, calibration.near_blend)
    return mean, std


def _weigh_with_regression(mean: np.ndarray, std: np.ndarray, raw: np.ndarray, observed: np.ndarray,
                           to_fill: np.ndarray, region: Region, origin: tuple[int, int],
                           references: list[ReferenceArrays], lines: ReferenceLines
                           ) -> tuple[np.ndarray, np.ndarray]:
    """The model's fill weighed with the reference regression's where a reference observes a gap pixel.

    The regression's estimate of a pixel uses the pixels within
    :data:`~geonp.filling.similar_pixels.ESTIMATE_REACH` of it, which the block's halo holds.
    """
    r0, r1, c0, c1 = region
    at = np.zeros(raw.shape[1:], dtype=bool)
    at[r0:r1, c0:c1] = to_fill[:, r0:r1, c0:c1].any(axis=0)
    r_mean, r_std, _ = lines.estimate(raw, observed, [(vals, ok) for vals, ok, _ in references], at, origin)
    r_mean, r_std = r_mean[:, r0:r1, c0:c1], r_std[:, r0:r1, c0:c1]
    # The weighted mean of the two estimates; the same weighted mean of their stds is the std of
    # that mean when their errors are fully correlated (an upper bound otherwise).
    both = np.isfinite(r_mean) & np.isfinite(mean)
    w = REGRESSION_WEIGHT
    mean = np.where(both, (1 - w) * mean + w * r_mean, mean)
    # where a band is saturated, the model's share (and its fill where no reference sees) stays below it too
    return lines.within_saturation(mean), np.where(both, (1 - w) * std + w * r_std, std)


def _calibrated(std: np.ndarray, distance: np.ndarray | None, calibration: Calibration | None) -> np.ndarray:
    """``std`` ``[bands, ...region]`` with a model's post-hoc calibration applied (a copy).

    ``distance``: :func:`~geonp.filling.calibration.region_distances` of the block (None: the
    calibration has no distance factors).
    """
    if calibration is None or calibration.is_identity:
        return std
    std = std.copy()
    n = std.shape[0]
    for b in range(n):
        dist = distance[b] if distance is not None else np.zeros(std[b].shape)
        std[b] = calibration.apply(std[b], dist, band=b, band_count=n)
    return std


def _beyond_max_distance(observed: np.ndarray, region: Region, fillable: np.ndarray | None,
                         to_fill: np.ndarray) -> int:
    """Gap pixels of a block's region (all bands) inside the footprint left beyond ``max_distance``.

    They are those :func:`fill_targets` leaves out.
    """
    r0, r1, c0, c1 = region
    far = ~observed[:, r0:r1, c0:c1] & ~to_fill[:, r0:r1, c0:c1]
    if fillable is not None:
        far &= fillable[None, r0:r1, c0:c1]
    return int(far.sum())
