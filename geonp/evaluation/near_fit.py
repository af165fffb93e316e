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

import numpy as np
from rasterio.windows import Window

from geonp.evaluation.run import simulate_masks
from geonp.model_files.calibration import NearBlend

logger = logging.getLogger(__name__)

__all__ = ["fit_near_blend_on_validation"]

#: How a near blend's fit starts its part of a calibration's ``fitted_on``.
_BLEND_NOTE = "; near blend fitted on "


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

    Pixels are hidden under each of ``masks`` per seed (as ``geonp evaluate`` hides them) and
    filled by the model without a near blend (its std calibration applied); every hidden pixel
    within the blend's reach fits the weights and std factors, which join the model's calibration
    in its ``config.json``. Fit it after the std calibration: its factors correct what the
    distance factors leave.

    Returns:
        The near blend written.
    """
    from geonp.filling.arrays import fill_array
    from geonp.filling.calibration import distance_to_observed
    from geonp.filling.near_blend import fit_near_blend, near_estimates, observed_neighbours
    from geonp.io.masks import resolve_nodata
    from geonp.io.observed import read_observed
    from geonp.io.raster import open_raster, raster_info, select_bands
    from geonp.model_files.calibration import Calibration
    from geonp.model_files.checkpoint import write_calibration
    from geonp.model_files.registry import load_model

    lm = load_model(Path(model_dir), device="cpu")
    calibration = lm.calibration or Calibration()
    plain = dataclasses.replace(lm, calibration=dataclasses.replace(calibration, near_blend=None))
    col, row, w, h = window
    with open_raster(raster) as src:
        info = raster_info(src)
        values, valid = read_observed(src, Window(col, row, w, h), select_bands(info, bands), info=info,
                                      nodata=resolve_nodata(info, nodata))
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("y", "mean", "std", "estimates", "distance", "neighbours")}
    for seed in seeds:
        for _, gap in simulate_masks((h, w), masks, coverage=coverage, seed=seed):
            hidden, context = gap[None] & valid, valid & ~gap[None]
            mean, std = fill_array(np.where(context, values, np.nan), context, model=plain, device=device)
            for key, arr in (("y", values), ("mean", mean), ("std", std), ("distance", distance_to_observed(context)),
                             ("neighbours", observed_neighbours(context))):
                parts[key].append(np.asarray(arr, float)[hidden])
            parts["estimates"].append(near_estimates(values, context)[:, hidden])
    blend = fit_near_blend(*(np.concatenate(parts[k], axis=-1) for k in parts))
    before = (calibration.fitted_on or "uncalibrated").split(_BLEND_NOTE)[0]
    fitted_on = (f"{before}{_BLEND_NOTE}{sum(map(sum, blend.pixels or ()))} "
                 f"hidden pixels (seeds {list(seeds)}, masks {', '.join(masks)} at coverage {coverage}) "
                 f"of {Path(raster).name} window {col} {row} {w} {h}")
    write_calibration(model_dir, dataclasses.replace(calibration, near_blend=blend, fitted_on=fitted_on))
    logger.info("near blend fitted on window %s: weights %s", window, blend.weights)
    return blend
