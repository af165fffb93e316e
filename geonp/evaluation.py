"""Score gap filling and its uncertainty on a raster whose true values are known.

Users trust an uncertainty only if they can check it on their own data. :func:`evaluate` hides
pixels of a gap-free ("clean") raster under simulated gaps (the same generator that training
uses, :mod:`geonp.data.gaps`) or a user's mask, fills them with geonp models and with what users
would use instead (GDAL FillNodata, local ordinary kriging), and scores every method on the hidden
pixels, per band and pooled (:mod:`geonp.metrics`).

With ``calibrate=True`` the hidden pixels are split at random in two halves: a per-band std scale
factor ``s = sqrt(mean(z²))`` (``z = (y - mu) / sigma``) and, on top of it, one factor per bin of
distance to the nearest observed pixel (:func:`geonp.context.distance_bin_factors`) are fitted on
one half and written into the model directory's ``config.json`` (``geonp fill`` applies them with
:func:`geonp.context.apply_std_calibration`), and every method is scored on the other half only,
so the calibrated scores are honest.

Every method is also scored per bin of distance to the nearest observed pixel
(:func:`geonp.metrics.binned_scores`): an honest std grows with the distance as the error does.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os

import time

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rasterio.windows import Window

from geonp._version import __version__
from geonp.data.gaps import MASK_KINDS, make_mask
from geonp.errors import ConfigError, NoValidPixelsError
from geonp.io.masks import read_mask_file, resolve_nodata
from geonp.io.observed import read_observed
from geonp.io.atomic import atomic_write_text
from geonp.io.raster import RasterInfo, open_raster, raster_info, select_bands
from geonp.context import (
    DISTANCE_BIN_EDGES,
    apply_std_calibration,
    distance_bin_factors,
    distance_to_observed,
)
from geonp.metrics import DEFAULT_LEVELS, METRICS, binned_scores, calibration_curve, score

logger = logging.getLogger(__name__)

__all__ = ["EVALUATION_MASK_KINDS", "EvaluationReport", "evaluate", "simulate_masks"]

#: Simulated gap kinds ``evaluate`` accepts (``borrowed`` needs a real pattern: pass ``mask_file``).
EVALUATION_MASK_KINDS: tuple[str, ...] = tuple(k for k in MASK_KINDS if k != "borrowed")

#: Largest number of (|error|, std) pairs kept per method for the error-vs-std scatter.
_SCATTER_POINTS = 4000
#: Stds are floored at this fraction of the band's spread before scoring (a zero std would make
#: the likelihood of any error infinite; kriging variances can round to 0).
_STD_FLOOR = 1e-6
#: Side of the quicklook panels (arrays are subsampled to at most this many pixels).
_QUICKLOOK_SIDE = 256
#: Salt of the calibration split's random stream, so it never repeats a mask's stream.
_SPLIT_SALT = 7919


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
            :data:`geonp.metrics.METRICS` (None where undefined or, for methods without a std,
            not applicable), and ``seconds`` (the method's time on that mask, all bands).
        scored_on: which hidden pixels were scored (all, or the held-out half under calibration).
        curves: per method, the calibration curve pooled over masks and bands:
            ``{"levels": [...], "observed": [...], "n": N}``.
        calibration: with ``calibrate=True``, per geonp method: ``path``, ``std_scale``,
            ``previous_std_scale``, ``distance_bins``, ``fitted_on``, ``n_fit``; else None.
        binned: per method, per mask (and ``"all"`` masks pooled), the bands pooled, scores per
            bin of distance to the nearest observed pixel (:func:`geonp.metrics.binned_scores`).
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
    calibration: dict[str, dict[str, Any]] | None = None
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
            "calibration": self.calibration,
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


# --------------------------------------------------------------------------------------------
# masks
# --------------------------------------------------------------------------------------------


def simulate_masks(
    shape: Sequence[int], kinds: Sequence[str], *, coverage: float, seed: int
) -> list[tuple[str, np.ndarray]]:
    """Make one simulated gap mask per kind, reproducible from the seed.

    Each kind draws from its own stream ``default_rng([seed, MASK_KINDS.index(kind)])``, so a
    kind's mask does not depend on which other kinds are asked for.

    Args:
        shape: ``(h, w)`` in pixels.
        kinds: gap kinds from :data:`EVALUATION_MASK_KINDS` (repeats are dropped).
        coverage: fraction of hidden pixels per mask.
        seed: integer seed.

    Returns:
        ``[(kind, is_gap bool [h, w]), ...]`` in the order given.

    Raises:
        ConfigError: unknown kind, or ``borrowed`` (use a mask file instead).
    """
    out = []
    for kind in dict.fromkeys(kinds):
        if kind not in EVALUATION_MASK_KINDS:
            hint = " (to score on a real gap pattern pass mask_file= / --mask FILE)" if kind == "borrowed" else ""
            raise ConfigError(
                f"unknown mask kind {kind!r}{hint}; use one of {', '.join(EVALUATION_MASK_KINDS)}"
            )
        rng = np.random.default_rng([int(seed), MASK_KINDS.index(kind)])
        out.append((kind, make_mask(kind, shape, coverage=coverage, rng=rng)))
    return out


def _check_window(
    info: RasterInfo, window: Sequence[int] | None, max_pixels: int
) -> tuple[int, int, int, int]:
    if window is None:
        col, row, w, h = 0, 0, info.width, info.height
    else:
        try:
            col, row, w, h = (int(v) for v in window)
        except (TypeError, ValueError) as err:
            raise ConfigError(
                f"window={window!r} is not (col_off, row_off, width, height); pass four integers"
            ) from err
        if w < 1 or h < 1 or col < 0 or row < 0 or col + w > info.width or row + h > info.height:
            raise ConfigError(
                f"--window {col} {row} {w} {h} does not lie inside {info.path} "
                f"({info.width}x{info.height} px); pick COL ROW WIDTH HEIGHT with "
                f"COL+WIDTH <= {info.width} and ROW+HEIGHT <= {info.height}"
            )
    if w * h > max_pixels:
        side = int(math.sqrt(max_pixels))
        raise ConfigError(
            f"{'the window of ' if window is not None else ''}{info.path} has {w}x{h} = {w * h} "
            f"pixels, more than max_pixels={max_pixels} that evaluate holds in memory; evaluate "
            f"a part of it with --window COL ROW WIDTH HEIGHT (e.g. --window 0 0 {side} {side})"
        )
    return col, row, w, h


# --------------------------------------------------------------------------------------------
# methods
# --------------------------------------------------------------------------------------------


@dataclass
class _Scored:
    """One method on one mask: per band the truths, means and stds at the scored pixels."""

    y: list[np.ndarray]
    mu: list[np.ndarray]
    sigma: list[np.ndarray] | None
    unfilled: list[int]
    seconds: float
    fit_z2: list[np.ndarray] | None = None  # per band z² on the calibration half (geonp only)
    dist: list[np.ndarray] | None = None  # per band distance to data of the scored pixels
    fit_dist: list[np.ndarray] | None = None  # ... and of the calibration half


def _load_models(models: Sequence[Any], calibrate: bool) -> list[tuple[str, Any]]:
    from geonp.model_files.registry import PRETRAINED, load_model

    out: list[tuple[str, Any]] = []
    seen: dict[str, int] = {}
    unique: list[Any] = []
    for m in models:  # drop repeated names; loaded models (unhashable) are kept as given
        if not isinstance(m, str | os.PathLike) or os.fspath(m) not in [
                os.fspath(u) for u in unique if isinstance(u, str | os.PathLike)]:
            unique.append(m)
    for m in unique:
        lm = m if not isinstance(m, str | os.PathLike) else load_model(m, device="cpu")
        label = f"geonp:{lm.name}"
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        if calibrate:
            if lm.path is None:
                raise ConfigError(
                    f"model {lm.name} was given as an object without a directory; --calibrate "
                    "writes into the model directory, so pass its path"
                )
            path = Path(lm.path).resolve()
            if PRETRAINED.resolve() in path.parents:
                raise ConfigError(
                    f"model {lm.name!r} is built into geonp and is not changed by --calibrate; copy "
                    f"it (cp -r {path} my_model) and pass --model my_model --calibrate"
                )
            if not os.access(path / "config.json", os.W_OK):
                raise ConfigError(
                    f"cannot write {path / 'config.json'}; --calibrate stores the std scale there. "
                    "Copy the model directory somewhere writable and pass that."
                )
        out.append((label, lm))
    return out


def _fallback(
    mean: np.ndarray, std: np.ndarray | None, targets: np.ndarray, stats: list[tuple[float, float]]
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Put the band's observed mean (and std) on targets a method left without a value."""
    unfilled = targets & ~np.isfinite(mean)
    if std is not None:
        unfilled |= targets & ~np.isfinite(std)
    if unfilled.any():
        mean = mean.copy()
        std = None if std is None else std.copy()
        for b, (mu_b, sd_b) in enumerate(stats):
            mean[b][unfilled[b]] = mu_b
            if std is not None:
                std[b][unfilled[b]] = sd_b
    return mean, std, unfilled


def _band_stats(values: np.ndarray, context: np.ndarray) -> list[tuple[float, float]]:
    stats = []
    for b in range(values.shape[0]):
        v = values[b][context[b]]
        sd = float(v.std()) if v.size > 1 else 0.0
        stats.append((float(v.mean()) if v.size else 0.0, sd if sd > 0 else 1.0))
    return stats


def _collect(
    values: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray | None,
    unfilled: np.ndarray,
    scored: np.ndarray,
    stats: list[tuple[float, float]],
    seconds: float,
    fit: np.ndarray | None = None,
    dist: np.ndarray | None = None,
) -> _Scored:
    n = values.shape[0]
    ys = [values[b][scored[b]] for b in range(n)]
    mus = [mean[b][scored[b]] for b in range(n)]
    sigmas = None
    fit_z2 = None
    if std is not None:
        floors = [_STD_FLOOR * stats[b][1] for b in range(n)]
        sigmas = [np.maximum(std[b][scored[b]].astype(np.float64), floors[b]) for b in range(n)]
        if fit is not None:
            fit_z2 = []
            for b in range(n):
                s = np.maximum(std[b][fit[b]].astype(np.float64), floors[b])
                fit_z2.append(((values[b][fit[b]] - mean[b][fit[b]]) / s) ** 2)
    return _Scored(ys, mus, sigmas, [int((unfilled[b] & scored[b]).sum()) for b in range(n)],
                   seconds, fit_z2,
                   None if dist is None else [dist[b][scored[b]] for b in range(n)],
                   None if dist is None or fit is None else [dist[b][fit[b]] for b in range(n)])


def _rows(method: str, mask: str, bands: list[int], s: _Scored) -> list[dict[str, Any]]:
    rows = []
    for b in [*range(len(bands)), None]:  # None = the bands pooled
        band: int | str
        if b is None:
            y, mu = np.concatenate(s.y), np.concatenate(s.mu)
            sig = None if s.sigma is None else np.concatenate(s.sigma)
            unfilled, band = sum(s.unfilled), "all"
        else:
            y, mu = s.y[b], s.mu[b]
            sig = None if s.sigma is None else s.sigma[b]
            unfilled, band = s.unfilled[b], bands[b]
        rows.append({"method": method, "mask": mask, "band": band, "unfilled": unfilled,
                     **score(y, mu, sig), "seconds": round(s.seconds, 4)})
    return rows


def _scaled(s: _Scored, scale: Sequence[float], bins: dict[str, Any] | None = None) -> _Scored:
    assert s.sigma is not None and s.dist is not None, "only methods with a std are calibrated"
    cal = {"std_scale": list(scale), "distance_bins": bins}
    sig = [apply_std_calibration(sd, d, cal, band=b) for b, (sd, d) in enumerate(zip(s.sigma, s.dist, strict=True))]
    return _Scored(s.y, s.mu, sig, s.unfilled, s.seconds, dist=s.dist)


def _binned(s: _Scored) -> list[dict[str, Any]]:
    assert s.dist is not None, "distances are kept for every method"
    return binned_scores(np.concatenate(s.y), np.concatenate(s.mu),
                         None if s.sigma is None else np.concatenate(s.sigma), np.concatenate(s.dist),
                         DISTANCE_BIN_EDGES)


def _combine_bins(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Distance factors fitted on top of a model's previous ones (same edges) multiply them."""
    if not old or old.get("edges") != new["edges"] or isinstance(old["factors"][0], list):
        return new
    return {**new, "factors": [round(a * b, 6) for a, b in zip(old["factors"], new["factors"], strict=True)]}


def _previous_scale(lm: Any, n_bands: int) -> list[float]:
    """The std scale ``fill`` applies now, per band (the same rule as ``fill_block``)."""
    prev = (lm.calibration or {}).get("std_scale")
    if prev and len(prev) == n_bands:
        return [float(v) for v in prev]
    if prev:
        return [float(prev[0])] * n_bands
    return [1.0] * n_bands


def _write_calibration(lm: Any, std_scale: list[float], fitted_on: str,
                       distance_bins: dict[str, Any] | None = None) -> Path:
    path = Path(lm.path) / "config.json"
    meta = json.loads(path.read_text())
    meta["calibration"] = {"std_scale": std_scale, "fitted_on": fitted_on,
                           **({"distance_bins": distance_bins} if distance_bins else {})}
    atomic_write_text(path, json.dumps(meta, indent=2))
    return path


def _subsample(arr: np.ndarray, side: int) -> np.ndarray:
    step = max(1, math.ceil(max(arr.shape[-2:]) / side))
    return arr[..., ::step, ::step]


# --------------------------------------------------------------------------------------------
# the evaluation
# --------------------------------------------------------------------------------------------


def evaluate(
    raster: str | os.PathLike[str],
    *,
    models: Sequence[Any] = ("default",),
    masks: Sequence[str] = ("cloud", "stripe", "random"),
    mask_file: str | os.PathLike[str] | None = None,
    coverage: float = 0.3,
    seed: int = 0,
    nodata: float | None = None,
    bands: Sequence[int] | None = None,
    window: Sequence[int] | None = None,
    kriging: bool = False,
    fillnodata: bool = True,
    calibrate: bool = False,
    device: str = "auto",
    max_pixels: int = 1_048_576,
    json_path: str | os.PathLike[str] | None = None,
    plot: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> EvaluationReport:
    """Hide pixels of a clean raster, fill them with each method, and score the fills.

    The raster's own invalid pixels (nodata, NaN, masked) are neither context nor targets: the
    hidden pixels of a mask are ``is_gap & valid``, the context is ``valid & ~is_gap``. Every
    method sees the same context and is scored on the same hidden pixels.

    Args:
        raster: path of a raster whose values are known (no or few gaps).
        models: geonp models (built-in names, model directories or loaded models); may be empty
            to score only the baselines.
        masks: simulated gap kinds from :data:`EVALUATION_MASK_KINDS`.
        mask_file: a gap mask on the raster's grid (non-zero = hide), scored as mask ``file``.
        coverage: fraction of pixels each simulated mask hides, in (0, 1).
        seed: seed of the masks and of the calibration split.
        nodata: nodata value overriding the file's tag.
        bands: 1-based bands (default all).
        window: ``(col_off, row_off, width, height)`` in pixels (default the whole raster).
        kriging: also run local ordinary kriging (slow; needs ``geonp[krige]``).
        fillnodata: also run GDAL FillNodata.
        calibrate: fit a per-band std scale for each geonp model on half of the hidden pixels,
            write it into the model's ``config.json`` and score everything on the other half.
        device: ``auto``, ``cpu`` or ``cuda`` for geonp.
        max_pixels: the largest window held in memory.
        json_path: write the report as JSON here.
        plot: write a PNG here: calibration curves, error-vs-std scatter, quicklook panels.
        progress: optional ``(done, total)`` callback over (mask, method) runs.

    Returns:
        The :class:`EvaluationReport`.

    Raises:
        ConfigError: bad options; window too large; a mask leaving a band without context;
            ``calibrate`` on a built-in model.
        InputRasterError: unreadable raster or mask on another grid.
        NoValidPixelsError: the window has no valid pixel.
        MissingDependencyError: ``kriging=True`` without PyKrige.
        CheckpointError: a model cannot be loaded.
    """
    t_start = time.perf_counter()
    if not 0.0 < float(coverage) < 1.0:
        raise ConfigError(f"coverage={coverage} must be between 0 and 1 (the fraction of pixels to hide), e.g. 0.3")
    if not masks and mask_file is None:
        raise ConfigError("no mask to evaluate on; pass a mask kind (--mask-kind) or a mask file (--mask)")
    if not models and not fillnodata and not kriging:
        raise ConfigError("no method to evaluate; pass --model, or drop --no-fillnodata, or add --kriging")
    if calibrate and not models:
        raise ConfigError("--calibrate fits a geonp model's std; pass at least one --model")
    if kriging:
        from geonp.baselines import require_pykrige

        require_pykrige()  # fail before the slow part

    with open_raster(raster) as src:
        info = raster_info(src)
        band_list = select_bands(info, bands)
        nodata_v = resolve_nodata(info, nodata)
        col, row, w, h = _check_window(info, window, max_pixels)
        win = Window(col, row, w, h)
        values, valid = read_observed(src, win, band_list, info=info, nodata=nodata_v)
    if not valid.any():
        raise NoValidPixelsError(
            f"{raster} has no valid pixel in window {col} {row} {w} {h}, band(s) {band_list} "
            f"(nodata={nodata_v}); check --nodata, --band and --window"
        )
    mask_list = simulate_masks((h, w), masks, coverage=coverage, seed=seed)
    if mask_file is not None:
        mask_list.append(("file", read_mask_file(mask_file, like=info, window=win)))
    loaded = _load_models(models, calibrate)

    mask_meta = []
    for name, is_gap in mask_list:
        hidden = is_gap[None] & valid
        context = valid & ~is_gap[None]
        for b, band in enumerate(band_list):
            if valid[b].any() and not context[b].any():
                raise ConfigError(
                    f"mask {name!r} hides every valid pixel of band {band}; nothing is left to fill "
                    f"from. Lower --coverage (now {coverage}) or use a sparser mask"
                )
        if not hidden.any():
            raise ConfigError(
                f"mask {name!r} hides no valid pixel of {raster}; raise --coverage or use a mask "
                "that covers valid pixels"
            )
        mask_meta.append({"name": name, "kind": name, "hidden_pixels": int(hidden.sum()),
                          "hidden_fraction": round(float(hidden.sum() / valid.sum()), 4),
                          **({"path": str(mask_file)} if name == "file" else {})})

    methods = [label for label, _ in loaded]
    if fillnodata:
        methods.append("fillnodata")
    if kriging:
        methods.append("kriging")
    total = len(mask_list) * len(methods)
    done = 0
    scored: dict[tuple[str, str], _Scored] = {}
    quick: dict[str, Any] | None = None
    for i, (name, is_gap) in enumerate(mask_list):
        hidden = is_gap[None] & valid
        context = valid & ~is_gap[None]
        dist = distance_to_observed(context)
        stats = _band_stats(values, context)
        inputs = np.where(context, values, np.nan)
        fit = None
        targets = hidden
        if calibrate:
            in_fit = np.random.default_rng([int(seed), _SPLIT_SALT, i]).random((h, w)) < 0.5
            fit = hidden & in_fit[None]
            targets = hidden & ~in_fit[None]
        keep_quick = plot is not None and i == 0
        if keep_quick:
            quick = {"mask": name, "input": _subsample(inputs, _QUICKLOOK_SIDE),
                     "truth": _subsample(np.where(valid, values, np.nan), _QUICKLOOK_SIDE),
                     "hidden": _subsample(hidden.any(0), _QUICKLOOK_SIDE), "predictions": {}}
        for method in methods:
            t0 = time.perf_counter()
            if method == "fillnodata":
                from geonp.baselines import fillnodata_baseline

                res = fillnodata_baseline(inputs, context)
                mean, std = res.mean, None
            elif method == "kriging":
                from geonp.baselines import kriging_baseline

                res = kriging_baseline(inputs, context, targets=hidden, seed=seed)
                mean, std = res.mean, res.std
            else:
                from geonp.inference import fill_array

                lm = dict(loaded)[method]
                # fill uses the model's own context geometry (its far set) and whole calibration
                mean, std32 = fill_array(inputs, context, model=lm, device=device)
                std = std32.astype(np.float64)
            seconds = time.perf_counter() - t0
            mean, std, unfilled = _fallback(mean, std, hidden, stats)
            scored[(name, method)] = _collect(values, mean, std, unfilled, targets, stats, seconds,
                                              fit if method.startswith("geonp:") else None, dist)
            logger.info("%s on mask %s: %.2f s", method, name, seconds)
            if keep_quick and quick is not None:
                quick["predictions"][method] = (
                    _subsample(np.where(hidden, mean, np.nan), _QUICKLOOK_SIDE),
                    None if std is None else _subsample(np.where(hidden, std, np.nan), _QUICKLOOK_SIDE),
                )
            done += 1
            if progress is not None:
                progress(done, total)

    calibration: dict[str, dict[str, Any]] | None = None
    out_methods = list(methods)
    if calibrate:
        calibration = {}
        for label, lm in loaded:
            z2 = [np.concatenate([scored[(name, label)].fit_z2[b] for name, _ in mask_list])  # type: ignore[index]
                  for b in range(len(band_list))]
            factor = [math.sqrt(float(np.mean(z))) if z.size else 1.0 for z in z2]
            prev = _previous_scale(lm, len(band_list))
            new_scale = [round(p * f, 6) for p, f in zip(prev, factor, strict=True)]
            n_fit = int(sum(z.size for z in z2))
            # distance factors on top of the band factors, pooled over bands
            fd = [np.concatenate([scored[(name, label)].fit_dist[b] for name, _ in mask_list])  # type: ignore[index]
                  for b in range(len(band_list))]
            bins = distance_bin_factors(np.concatenate([z / f**2 for z, f in zip(z2, factor, strict=True)]),
                                        np.concatenate(fd))
            stored_bins = _combine_bins((lm.calibration or {}).get("distance_bins"), bins)
            fitted_on = (
                f"geonp evaluate --calibrate, {datetime.date.today().isoformat()}: {n_fit} hidden "
                f"pixels (a random half; seed {seed}) of {Path(os.fspath(raster)).name} window "
                f"{col} {row} {w} {h}, band(s) {band_list}, masks "
                f"{', '.join(n for n, _ in mask_list)} at coverage {coverage}; std scale "
                f"{', '.join(f'{v:.4g}' for v in factor)} on top of the previous {prev}; then per "
                f"distance bin {bins['factors']}"
            )
            path = _write_calibration(lm, new_scale, fitted_on, stored_bins)
            calibration[label] = {"path": str(path.parent), "std_scale": new_scale,
                                  "previous_std_scale": prev, "factor": factor,
                                  "distance_bins": stored_bins, "fitted_on": fitted_on, "n_fit": n_fit}
            cal_label = f"{label}+cal"
            for name, _ in mask_list:
                scored[(name, cal_label)] = _scaled(scored[(name, label)], factor, bins)
            out_methods.insert(out_methods.index(label) + 1, cal_label)
            logger.info("calibrated %s: std x %s -> %s", label, factor, path)

    rows: list[dict[str, Any]] = []
    for name, _ in mask_list:
        for method in out_methods:
            rows.extend(_rows(method, name, band_list, scored[(name, method)]))
    curves, scatter = _curves_and_scatter(out_methods, mask_list, scored, seed)
    binned: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for method in out_methods:
        parts = [scored[(name, method)] for name, _ in mask_list]
        binned[method] = {name: _binned(p) for (name, _), p in zip(mask_list, parts, strict=True)}
        pooled = _Scored(sum((p.y for p in parts), []), sum((p.mu for p in parts), []),
                         None if parts[0].sigma is None else sum((p.sigma or [] for p in parts), []),
                         [], 0.0, dist=sum((p.dist or [] for p in parts), []))
        binned[method]["all"] = _binned(pooled)

    report = EvaluationReport(
        raster=os.fspath(raster), window=(col, row, w, h), bands=band_list, nodata=nodata_v,
        coverage=float(coverage), seed=int(seed), masks=mask_meta, methods=out_methods, rows=rows,
        scored_on=("the held-out half of the hidden pixels (the std scale was fitted on the other half)"
                   if calibrate else "all hidden pixels"),
        curves=curves, calibration=calibration, scatter=scatter, binned=binned,
    )
    if plot is not None:
        from geonp.evaluate_plot import QuicklookPanels, write_evaluation_plot

        panels = None
        if quick is not None:
            panels = QuicklookPanels(mask=quick["mask"], input=quick["input"], truth=quick["truth"],
                                     hidden=quick["hidden"], predictions=quick["predictions"])
        write_evaluation_plot(plot, report, panels=panels)
    report.seconds = round(time.perf_counter() - t_start, 3)
    if json_path is not None:
        atomic_write_text(json_path, report.to_json())
    return report


def _curves_and_scatter(
    methods: list[str], mask_list: list[tuple[str, np.ndarray]], scored: dict[tuple[str, str], _Scored],
    seed: int,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, np.ndarray]]]:
    """Per method with a std: calibration curve pooled over masks and bands, and a scatter sample."""
    curves: dict[str, dict[str, Any]] = {}
    scatter: dict[str, dict[str, np.ndarray]] = {}
    rng = np.random.default_rng(seed)
    for method in methods:
        parts = [scored[(name, method)] for name, _ in mask_list]
        if parts[0].sigma is None:
            continue
        y = np.concatenate([np.concatenate(p.y) for p in parts])
        mu = np.concatenate([np.concatenate(p.mu) for p in parts])
        sig = np.concatenate([np.concatenate(p.sigma) for p in parts if p.sigma is not None])
        levels, observed = calibration_curve(y, mu, sig, DEFAULT_LEVELS)
        curves[method] = {"levels": levels.tolist(), "observed": observed.tolist(), "n": int(y.size)}
        pick = rng.permutation(y.size)[:_SCATTER_POINTS]
        scatter[method] = {"abs_error": np.abs(y - mu)[pick], "std": sig[pick]}
    return curves, scatter
