"""Fit a model's near blend (:mod:`geonp.filling.near_blend`) on held-out pixels of a clean raster.

``geonp train`` fits it at the end of a run, after the std calibration, on the validation columns
(:func:`geonp.training.calibrate.calibrate_on_validation` with ``near_blend=True``); the shipped
default's was fitted with the same function.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rasterio.windows import Window

from geonp.evaluation.run import simulate_masks
from geonp.model_files.calibration import NearBlend

if TYPE_CHECKING:
    from geonp.model_files.checkpoint import LoadedModel

logger = logging.getLogger(__name__)

__all__ = ["fit_near_blend_on_validation", "near_pixels"]

#: How a near blend's fit starts its part of a calibration's ``fitted_on``.
_BLEND_NOTE = "; near blend fitted on "


def near_pixels(
    model: LoadedModel,
    values: np.ndarray,
    valid: np.ndarray,
    *,
    masks: Sequence[str],
    seeds: Sequence[int],
    coverage: float = 0.3,
    device: str = "auto",
    peer: bool = False,
) -> dict[str, dict[str, np.ndarray]]:
    """What a near blend is fitted (or scored) on: the hidden pixels of ``values`` ``[bands, h, w]``, per mask kind.

    Pixels are hidden under each of ``masks`` per seed (as ``geonp evaluate`` hides them) and
    filled by ``model`` without its near blend (its std calibration applied). Per kind, flat arrays
    over the seeds' hidden pixels: ``y`` (truth), ``mean``, ``std``, ``estimates`` ``[estimates,
    n]`` (:data:`~geonp.filling.near_blend.NEAR_ESTIMATES`), ``distance`` (to data),
    ``neighbours`` (observed 8-neighbours), and with ``peer`` GDAL FillNodata's fill (``peer``).
    """
    from geonp.evaluation.baselines import fillnodata_baseline
    from geonp.filling.arrays import fill_array
    from geonp.filling.calibration import distance_to_observed
    from geonp.filling.near_blend import near_estimates, observed_neighbours
    from geonp.model_files.calibration import Calibration

    plain = dataclasses.replace(model, calibration=dataclasses.replace(model.calibration or Calibration(),
                                                                       near_blend=None))
    h, w = values.shape[1:]
    out: dict[str, dict[str, list[np.ndarray]]] = {}
    for seed in seeds:
        for kind, gap in simulate_masks((h, w), masks, coverage=coverage, seed=seed):
            hidden, context = gap[None] & valid, valid & ~gap[None]
            inputs = np.where(context, values, np.nan)
            mean, std = fill_array(inputs, context, model=plain, device=device, fill_outside=True)
            parts = {"y": values, "mean": mean, "std": std, "distance": distance_to_observed(context),
                     "neighbours": observed_neighbours(context)}
            if peer:
                parts["peer"] = fillnodata_baseline(inputs, context).mean
            got = out.setdefault(kind, {})
            for key, arr in parts.items():
                got.setdefault(key, []).append(np.asarray(arr, float)[hidden])
            got.setdefault("estimates", []).append(near_estimates(values, context)[:, hidden])
    return {kind: {key: np.concatenate(v, axis=-1) for key, v in got.items()} for kind, got in out.items()}


def fit_near_blend_on_validation(
    model_dir: str | os.PathLike[str],
    raster: str | os.PathLike[str],
    *,
    window: tuple[int, int, int, int],
    nodata: float | None,
    bands: Sequence[int] | None,
    masks: Sequence[str] = ("cloud", "stripe", "random", "scene_cloud"),
    seeds: Sequence[int] = (0,),
    coverage: float = 0.3,
    device: str = "auto",
) -> NearBlend:
    """Fit and store the near blend of ``model_dir`` (:mod:`geonp.filling.near_blend`) on a window of ``raster``.

    Every hidden pixel of :func:`near_pixels` within the blend's reach fits the weights and std
    factors, which join the model's calibration in its ``config.json``. Fit it after the std
    calibration: its factors correct what the distance factors leave.

    Returns:
        The near blend written.
    """
    from geonp.filling.near_blend import NearPixels, fit_near_blend
    from geonp.io.masks import resolve_nodata
    from geonp.io.observed import read_observed
    from geonp.io.raster import open_raster, raster_info, select_bands
    from geonp.model_files.calibration import Calibration
    from geonp.model_files.checkpoint import write_calibration
    from geonp.model_files.registry import load_model

    lm = load_model(Path(model_dir), device="cpu")
    calibration = lm.calibration or Calibration()
    col, row, w, h = window
    with open_raster(raster) as src:
        info = raster_info(src)
        values, valid = read_observed(src, Window(col, row, w, h), select_bands(info, bands), info=info,
                                      nodata=resolve_nodata(info, nodata))
    kinds = near_pixels(lm, values, valid, masks=masks, seeds=seeds, coverage=coverage, device=device).values()
    blend = fit_near_blend(NearPixels(*(np.concatenate([k[key] for k in kinds], axis=-1) for key in NearPixels._fields)))
    before = (calibration.fitted_on or "uncalibrated").split(_BLEND_NOTE)[0]
    fitted_on = (f"{before}{_BLEND_NOTE}{sum(map(sum, blend.pixels or ()))} "
                 f"hidden pixels (seeds {list(seeds)}, masks {', '.join(masks)} at coverage {coverage}) "
                 f"of {Path(raster).name} window {col} {row} {w} {h}")
    write_calibration(model_dir, dataclasses.replace(calibration, near_blend=blend, fitted_on=fitted_on))
    logger.info("near blend fitted on window %s: weights %s", window, blend.weights)
    return blend
