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

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from geonp.data.tasks import ReferenceView
from geonp.filling import classes
from geonp.filling.block_input import BlockInput
from geonp.filling.calibration import region_distances
from geonp.filling.corrections import BlockView
from geonp.filling.plan import FillPlan
from geonp.filling.predict import Predictor, release_heap
from geonp.tasks.tiling import Region

__all__ = ["BlockInput", "BlockOutput", "fill_block", "fill_targets", "within"]


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

    to_fill = fill_targets(inputs.observed, plan.max_distance, inputs.fillable)
    if plan.class_reach is not None:  # a class raster: the nearest observed class, no model
        mean, std = classes.nearest_class(inputs.values, inputs.observed, inputs.region, reach=plan.class_reach,
                                          fillable=inputs.fillable)
    else:
        assert predictor is not None, "a model fill needs a predictor"
        mean, std = _model_fill(inputs, plan, predictor, to_fill, count)
    core_ok = inputs.observed[inputs.core]
    return BlockOutput(mean=mean, std=std, observed=core_ok, filled=np.isfinite(mean) & ~core_ok, done=done[0],
                       beyond=_beyond_max_distance(inputs.observed, inputs.region, inputs.fillable, to_fill))


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


def _model_fill(inputs: BlockInput, plan: FillPlan, predictor: Predictor, to_fill: np.ndarray,
                progress: Callable[[int], None]) -> tuple[np.ndarray, np.ndarray]:
    """The model's fill of a block's region in the bands' units, then the plan's corrections in turn.

    ``to_fill``: :func:`fill_targets` of the block. Returns ``(mean, std)`` ``[bands, ...region]``:
    predictions on gap pixels, NaN elsewhere.
    """
    norm, region = plan.norm, inputs.region
    assert norm is not None, "a model fill needs a normaliser"
    refs = tuple(ReferenceView(norm.apply(np.where(r.observed, r.values, 0.0)), r.observed, r.days)
                 for r in inputs.references)
    corrections = plan.corrections
    # each pixel's distance to data, for the corrections and a near model's std (once per block)
    needs = any(c.needs_distance for c in corrections) or predictor.near is not None
    dist = region_distances(inputs.observed, region) if needs else None
    normalised = dataclasses.replace(inputs, values=norm.apply(np.where(inputs.observed, inputs.values, 0.0)),
                                     references=refs)
    mean, std = predictor.predict(normalised, to_fill, progress=progress, distance=dist)
    n = inputs.values.shape[0]
    ms, ss = np.asarray(norm.mean).reshape(n, 1, 1), np.asarray(norm.std).reshape(n, 1, 1)
    mean, std = mean * ss + ms, std * ss  # back to the bands' units
    view = BlockView(inputs, to_fill, dist)
    for correction in corrections:
        mean, std = correction(mean, std, view)
    return mean, std


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
