"""Score gap filling and its uncertainty on a raster whose true values are known.

Users trust an uncertainty only if they can check it on their own data. :func:`evaluate` hides
pixels of a gap-free ("clean") raster under simulated gaps (the same generator that training
uses, :mod:`geonp.data.gaps`) or a user's mask, fills them with geonp models and with what users
would use instead (GDAL FillNodata, local ordinary kriging), and scores every method on the hidden
pixels, per band and pooled (:mod:`geonp.evaluation.metrics`).

With ``calibrate=True`` the hidden pixels are split at random in two halves: a per-band std scale
factor ``s = sqrt(mean(z²))`` (``z = (y - mu) / sigma``) and, on top of it, one factor per bin of
distance to the nearest observed pixel (:func:`geonp.filling.calibration.distance_bin_factors`) are fitted on
one half and written into the model directory's ``config.json`` (``geonp fill`` applies them with
:func:`geonp.filling.calibration.apply_std_calibration`), and every method is scored on the other half only,
so the calibrated scores are honest.

Every method is also scored per bin of distance to the nearest observed pixel
(:func:`geonp.evaluation.metrics.binned_scores`): an honest std grows with the distance as the error does.

Modules: :mod:`~geonp.evaluation.run` (options and the run), :mod:`~geonp.evaluation.methods`
(the methods compared), :mod:`~geonp.evaluation.scoring` (scores of one fill),
:mod:`~geonp.evaluation.report` (the report, table and JSON), :mod:`~geonp.evaluation.plot` (the
PNGs), :mod:`~geonp.evaluation.series` (multi-date scores, ``geonp evaluate --series``). The
calibration is written by :func:`geonp.model_files.checkpoint.write_calibration`.
"""

from geonp.config import EVALUATION_MASK_KINDS, EvaluationConfig
from geonp.evaluation.report import EvaluationReport
from geonp.evaluation.run import evaluate, simulate_masks
from geonp.evaluation.series import DateScore, SeriesProtocol, evaluate_series

__all__ = ["EVALUATION_MASK_KINDS", "DateScore", "EvaluationConfig", "EvaluationReport", "SeriesProtocol", "evaluate",
           "evaluate_series", "simulate_masks"]
