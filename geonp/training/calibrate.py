"""Std calibration at the end of ``geonp train``: a trained model ships calibrated.

The model's std is fitted, as ``geonp evaluate --calibrate`` fits it (:mod:`geonp.filling.calibration`),
on the validation columns of the first training raster: columns training never read for
targets, and not the test columns kept for evaluation. Pixels are hidden under the evaluation
masks, filled by the new model, and half of them fit a per-band std scale and per-distance
factors, stored in the model's ``config.json`` and applied by every fill.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from geonp.config import EvaluationConfig
from geonp.data.datasets import ColumnSplit
from geonp.errors import GeonpError

if TYPE_CHECKING:
    from geonp.evaluation.report import CalibrationFit

logger = logging.getLogger(__name__)

__all__ = ["CALIBRATION_MASKS", "calibrate_on_validation", "recipe_calibration", "validation_window"]

#: Gap kinds the calibration hides pixels with (those the shipped default was calibrated on).
CALIBRATION_MASKS = ("cloud", "stripe", "random", "scene_cloud")
#: Most pixels of the calibration window: ~60,000 fitted pixels per mask at 30 % coverage, plenty
#: for a 95 % quantile, in about a minute on 2 CPU cores (the full 306 x 1860 validation columns
#: of the shared Landsat scene took 235 s).
_MAX_PIXELS = 1 << 18


def validation_window(width: int, height: int, split: ColumnSplit,
                      max_pixels: int = _MAX_PIXELS) -> tuple[int, int, int, int]:
    """``(col_off, row_off, width, height)``: the validation columns, rows centred and capped to ``max_pixels``."""
    region = split.regions(width).val
    w = region[1] - region[0]
    h = max(1, min(height, max_pixels // max(w, 1)))
    return region[0], (height - h) // 2, w, h


def recipe_calibration(recipe: str = "default") -> tuple[ColumnSplit, EvaluationConfig]:
    """The column split and evaluation settings that ``geonp train --recipe RECIPE`` calibrates with.

    The arguments of :func:`calibrate_on_validation` (the evaluation's seed is the recipe's; its nodata,
    bands and device are the defaults): the shipped models' calibration, for scripts that refit it.
    """
    from geonp.config.recipes import load_recipe

    r = load_recipe(recipe)
    data = r["data"]
    split = ColumnSplit(data["val_fraction"], data["test_fraction"], min_val_columns=data["patch_size"])
    return split, EvaluationConfig(seed=r["training"]["seed"])


def calibrate_on_validation(
    model_dir: str | os.PathLike[str],
    raster: str | os.PathLike[str],
    split: ColumnSplit,
    evaluation: EvaluationConfig | None = None,
    *,
    near_blend: bool = False,
) -> CalibrationFit | None:
    """Fit and store the std calibration of ``model_dir`` on ``raster``'s validation columns.

    Args:
        model_dir: the model directory; its ``config.json`` takes the calibration.
        raster: the raster (training's first).
        split: the columns training split it into (``min_val_columns``: its patch size).
        evaluation: the evaluation that fits it, for its ``nodata``, ``bands``, ``seed``, ``draws``
            (masks of each kind fitted on, seeds ``seed``, ``seed + 1``, ...), ``coverage`` and
            ``device``; its models, masks, window and methods are set here. None: the defaults.
        near_blend: then fit the near blend on the same window, on as many other draws
            (:func:`geonp.evaluation.near_fit.fit_near_blend_on_validation`; single-date models).

    Returns:
        The calibration entry of the evaluation report (what was written, and how), or
        None when the window cannot be evaluated (too small, too few valid pixels): the model
        then stays uncalibrated, with a warning naming the reason.
    """
    from geonp.evaluation.run import evaluate
    from geonp.io.raster import open_raster

    with open_raster(raster) as src:
        width, height = int(src.width), int(src.height)
    window = validation_window(width, height, split)
    cfg = replace(evaluation or EvaluationConfig(), models=(Path(model_dir),), masks=CALIBRATION_MASKS,
                  mask_file=None, window=window, calibrate=True, fillnodata=False, kriging=False)
    try:
        report = evaluate(raster, cfg)
    except GeonpError as err:
        logger.warning("the model is left uncalibrated: the validation window %s of %s could not be "
                       "evaluated (%s); run geonp evaluate --calibrate on held-out data", window,
                       Path(raster).name, err)
        return None
    entry = next(iter((report.calibration or {}).values()), None)
    if entry is not None:
        logger.info("std calibrated on validation window %s: %s", window, entry.calibration.fitted_on)
        if near_blend:
            from geonp.evaluation.near_fit import fit_near_blend_on_validation

            fit_near_blend_on_validation(model_dir, raster, window=window, nodata=cfg.nodata, bands=cfg.bands,
                                         masks=CALIBRATION_MASKS,
                                         seeds=[cfg.seed + cfg.draws + k for k in range(cfg.draws)],
                                         coverage=cfg.coverage, device=cfg.device)
    return entry
