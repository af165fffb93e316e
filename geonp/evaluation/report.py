"""The evaluation report: scores per method, mask and band; as a table, a summary line, or JSON."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from geonp._version import __version__
from geonp.evaluation.metrics import METRICS
from geonp.filling.calibration import DISTANCE_BIN_EDGES
from geonp.model_files.calibration import Calibration

__all__ = ["CalibrationFit", "EvaluationReport"]


@dataclass(frozen=True)
class CalibrationFit:
    """A calibration that ``evaluate(calibrate=True)`` fitted and wrote into a model directory.

    Attributes:
        path: the model directory written.
        calibration: what was written (the new std scale, distance factors and ``fitted_on``).
        previous_std_scale: the per-band scale the model applied before.
        factor: the per-band factor fitted now (``calibration.std_scale`` is ``previous x factor``).
        n_fit: validation pixels it was fitted on.
    """

    path: str
    calibration: Calibration
    previous_std_scale: list[float]
    factor: list[float]
    n_fit: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``path``, the calibration's keys, ``previous_std_scale``, ``factor``, ``n_fit``."""
        return {"path": self.path, **self.calibration.to_dict(), "previous_std_scale": self.previous_std_scale,
                "factor": self.factor, "n_fit": self.n_fit}


@dataclass
class EvaluationReport:
    """Scores of every method on every mask, per band and pooled.

    Attributes:
        raster: the clean raster's path.
        window: ``(col_off, row_off, width, height)`` that was evaluated.
        bands: 1-based band indexes.
        nodata: nodata value used to find the raster's own invalid pixels.
        coverage: requested fraction of hidden pixels per simulated mask.
        seed: seed of the masks (and of the calibration split).
        masks: one dict per mask: ``name``, ``kind``, ``hidden_pixels`` (over all bands),
            ``hidden_fraction``.
        methods: method names in table order (``geonp:<model>``, ``geonp:<model>+cal``,
            ``fillnodata``, ``kriging``).
        rows: one dict per (method, mask, band): ``method``, ``mask``, ``band`` (1-based index,
            or ``"all"`` for the bands pooled), ``n`` (scored pixels), ``unfilled`` (targets the
            method could not reach, scored as the band's observed mean), every metric of
            :data:`geonp.evaluation.metrics.METRICS` (None where undefined or, for methods without a std,
            not applicable), and ``seconds`` (the method's time on that mask, all bands).
        scored_on: which hidden pixels were scored (all, or the held-out half under calibration).
        curves: per method, the calibration curve pooled over masks and bands:
            ``{"levels": [...], "observed": [...], "n": N}``.
        calibration: with ``calibrate=True``, per geonp method, the :class:`CalibrationFit`
            written into its model directory; else None.
        binned: per method, per mask (and ``"all"`` masks pooled), the bands pooled, scores per
            bin of distance to the nearest observed pixel (:func:`geonp.evaluation.metrics.binned_scores`).
        seconds: wall time of the whole evaluation.
        scatter: per method with a std, a sample of ``{"abs_error", "std"}`` arrays for the
            error-vs-std plot (not in the JSON).
    """

    raster: str
    window: tuple[int, int, int, int]
    bands: list[int]
    nodata: float | None
    coverage: float
    seed: int
    masks: list[dict[str, Any]]
    methods: list[str]
    rows: list[dict[str, Any]]
    scored_on: str
    curves: dict[str, dict[str, Any]] = field(default_factory=dict)
    calibration: dict[str, CalibrationFit] | None = None
    seconds: float = 0.0
    binned: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    scatter: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Everything but the scatter sample, as JSON-ready Python objects."""
        return {
            "geonp_version": __version__,
            "raster": self.raster,
            "window": list(self.window),
            "bands": list(self.bands),
            "nodata": self.nodata,
            "coverage": self.coverage,
            "seed": self.seed,
            "scored_on": self.scored_on,
            "masks": self.masks,
            "methods": self.methods,
            "metrics": list(METRICS),
            "rows": self.rows,
            "calibration_curves": self.curves,
            "calibration": None if self.calibration is None else {
                label: fit.to_dict() for label, fit in self.calibration.items()},
            "distance_bin_edges": [None if math.isinf(e) else e for e in DISTANCE_BIN_EDGES],
            "binned_by_distance": self.binned,
            "seconds": self.seconds,
        }

    def to_json(self, indent: int | None = 2) -> str:
        """The report as strict JSON (undefined metrics are ``null``, never NaN)."""
        return json.dumps(_jsonable(self.to_dict()), indent=indent, allow_nan=False)

    def pooled(self, method: str, metric: str) -> float | None:
        """Mean over masks of a method's pooled (``band == "all"``) metric; None if undefined."""
        vals = [r[metric] for r in self.rows if r["method"] == method and r["band"] == "all"]
        vals = [v for v in vals if v is not None]
        return float(np.mean(vals)) if vals else None

    def _best(self, metric: str) -> tuple[str, float] | None:
        """The method with the lowest :meth:`pooled` metric, and that value."""
        values = [(m, v) for m in self.methods if (v := self.pooled(m, metric)) is not None]
        return min(values, key=lambda mv: mv[1]) if values else None

    def format_table(self) -> str:
        """The rows as a fixed-width text table (``-`` = undefined or no std)."""
        width = max([len("method")] + [len(m) for m in self.methods])
        mask_w = max([len("mask")] + [len(m["name"]) for m in self.masks])
        head = (f"{'method':<{width}}  {'mask':<{mask_w}}  {'band':>4}  {'RMSE':>10}  {'MAE':>10}  "
                f"{'R2':>7}  {'NLL':>8}  {'CRPS':>10}  {'cov90':>6}  {'cov95':>6}  {'cal.err':>7}  "
                f"{'seconds':>8}")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            lines.append(
                f"{r['method']:<{width}}  {r['mask']:<{mask_w}}  {r['band']!s:>4}  "
                f"{_fmt(r['rmse'], '10.4g')}  {_fmt(r['mae'], '10.4g')}  {_fmt(r['r2'], '7.3f')}  "
                f"{_fmt(r['nll'], '8.3f')}  {_fmt(r['crps'], '10.4g')}  "
                f"{_fmt(r['coverage90'], '6.3f')}  {_fmt(r['coverage95'], '6.3f')}  "
                f"{_fmt(r['calibration_error'], '7.3f')}  {_fmt(r['seconds'], '8.2f')}"
            )
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: what was scored, and which method was most accurate and best calibrated."""
        n_hidden = sorted({m["hidden_pixels"] for m in self.masks})
        hidden = f"{n_hidden[0]}" if len(n_hidden) == 1 else f"{n_hidden[0]}-{n_hidden[-1]}"
        scored = "scored on all of them" if not self.calibration else "scored on a held-out half"
        parts = [
            (f"Scored {len(self.methods)} method(s) on {len(self.masks)} mask(s) of "
             f"{Path(self.raster).name} ({hidden} hidden px per mask, {scored})")
        ]
        rmse = self._best("rmse")
        if rmse is not None:
            parts.append(f"lowest RMSE: {rmse[0]} ({rmse[1]:.4g})")
        cal = self._best("calibration_error")
        if cal is not None:
            parts.append(f"best calibrated: {cal[0]} (cal.err {cal[1]:.3f})")
        return "; ".join(parts) + f"; {self.seconds:.1f} s"


def _fmt(value: float | None, spec: str) -> str:
    if value is None:
        width = int(spec.split(".")[0])
        return f"{'-':>{width}}"
    return format(value, spec)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(float(obj)) else None
    return obj
