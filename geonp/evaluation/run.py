"""Run an evaluation: read the clean raster, hide pixels, fill them with every method, score.

:func:`evaluate` takes an :class:`EvaluationConfig` (or its fields as keywords) and runs in
steps: read the window (:func:`_read_clean`), build and check the masks (:func:`_masks`), fill
and score every (mask, method) pair (:func:`_run_all`), fit the calibration on the held-out half
(:func:`_calibrate`), and assemble the :class:`~geonp.evaluation.report.EvaluationReport`.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rasterio.windows import Window

from geonp.config import EVALUATION_MASK_KINDS, EvaluationConfig
from geonp.data.gaps import MASK_KINDS, make_mask
from geonp.errors import ConfigError, NoValidPixelsError, UnknownNameError
from geonp.evaluation.methods import load_models, run_method
from geonp.evaluation.report import CalibrationFit, EvaluationReport
from geonp.evaluation.scoring import (
    Scored,
    band_stats,
    binned,
    collect,
    curves_and_scatter,
    fallback,
    refitted_scale,
    scaled,
    score_rows,
)
from geonp.filling.calibration import distance_bin_factors, distance_to_observed
from geonp.io.atomic_file import atomic_write_text
from geonp.io.masks import read_mask_file, resolve_nodata
from geonp.io.observed import read_observed
from geonp.io.raster import RasterInfo, open_raster, raster_info, select_bands
from geonp.model_files.calibration import Calibration, DistanceBins
from geonp.model_files.checkpoint import LoadedModel, write_calibration

logger = logging.getLogger(__name__)

__all__ = ["evaluate", "simulate_masks"]

#: Side of the quicklook panels (arrays are subsampled to at most this many pixels).
_QUICKLOOK_SIDE = 256
#: Salt of the calibration split's random stream, so it never repeats a mask's stream.
_SPLIT_SALT = 7919


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
        UnknownNameError.check("masks", kind, EVALUATION_MASK_KINDS,
                               "to score on a real gap pattern pass mask_file= / --mask FILE" if kind == "borrowed"
                               else "")
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


def _subsample(arr: np.ndarray, side: int) -> np.ndarray:
    step = max(1, math.ceil(max(arr.shape[-2:]) / side))
    return arr[..., ::step, ::step]


@dataclass
class _Clean:
    """The evaluated window of the clean raster."""

    info: RasterInfo
    bands: list[int]
    nodata: float | None
    window: tuple[int, int, int, int]
    values: np.ndarray  # [bands, h, w] float64
    valid: np.ndarray  # [bands, h, w] bool, True = observed by the raster itself


def evaluate(
    raster: str | os.PathLike[str],
    config: EvaluationConfig | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> EvaluationReport:
    """Hide pixels of a clean raster, fill them with each method, and score the fills.

    The raster's own invalid pixels (nodata, NaN, masked) are neither context nor targets: the
    hidden pixels of a mask are ``is_gap & valid``, the context is ``valid & ~is_gap``. Every
    method sees the same context and is scored on the same hidden pixels.

    Args:
        raster: path of a raster whose values are known (no or few gaps).
        config: what to score and write (:class:`EvaluationConfig`); default its defaults.
        progress: optional ``(done, total)`` callback over (mask, method) runs.
        **options: :class:`EvaluationConfig` fields, replacing those of ``config``
            (``evaluate(path, models=(), masks=("random",))``).

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
    cfg = EvaluationConfig.of(config, **options)
    if cfg.kriging:
        from geonp.evaluation.baselines import require_pykrige

        require_pykrige()  # fail before the slow part
    clean = _read_clean(raster, cfg)
    mask_list, mask_meta = _masks(raster, clean, cfg)
    loaded = load_models(cfg.models, cfg.calibrate)
    methods = [label for label, _ in loaded]
    if cfg.fillnodata:
        methods.append("fillnodata")
    if cfg.kriging:
        methods.append("kriging")
    scored, quick = _run_all(clean, mask_list, methods, dict(loaded), cfg, progress)

    calibration: dict[str, CalibrationFit] | None = None
    out_methods = list(methods)
    if cfg.calibrate:
        calibration = _calibrate_all(raster, clean, mask_list, scored, loaded, out_methods, cfg)

    rows: list[dict[str, Any]] = []
    for name, _ in mask_list:
        for method in out_methods:
            rows.extend(score_rows(method, name, clean.bands, scored[(name, method)]))
    curves, scatter = curves_and_scatter(out_methods, mask_list, scored, cfg.seed)
    by_distance = _by_distance(out_methods, mask_list, scored)

    report = EvaluationReport(
        raster=os.fspath(raster), window=clean.window, bands=clean.bands, nodata=clean.nodata,
        coverage=float(cfg.coverage), seed=int(cfg.seed), masks=mask_meta, methods=out_methods,
        rows=rows,
        scored_on=("the held-out half of the hidden pixels (the std scale was fitted on the other half)"
                   if cfg.calibrate else "all hidden pixels"),
        curves=curves, calibration=calibration, scatter=scatter, binned=by_distance,
    )
    if cfg.plot is not None:
        from geonp.evaluation.plot import QuicklookPanels, write_evaluation_plot

        panels = None
        if quick is not None:
            panels = QuicklookPanels(mask=quick["mask"], input=quick["input"], truth=quick["truth"],
                                     hidden=quick["hidden"], predictions=quick["predictions"])
        write_evaluation_plot(cfg.plot, report, panels=panels)
    report.seconds = round(time.perf_counter() - t_start, 3)
    if cfg.json_path is not None:
        atomic_write_text(cfg.json_path, report.to_json())
    return report


def _calibrate_all(
    raster: str | os.PathLike[str],
    clean: _Clean,
    mask_list: list[tuple[str, np.ndarray]],
    scored: dict[tuple[str, str], Scored],
    loaded: list[tuple[str, Any]],
    out_methods: list[str],
    cfg: EvaluationConfig,
) -> dict[str, CalibrationFit]:
    """Fit each model's std scale; score it as ``LABEL+cal``, listed after its model in ``out_methods``."""
    calibration = {}
    for label, lm in loaded:
        calibration[label], factor, bins = _calibrate(raster, clean, mask_list, scored, label, lm, cfg)
        cal_label = f"{label}+cal"
        for name, _ in mask_list:
            scored[(name, cal_label)] = scaled(scored[(name, label)], factor, bins)
        out_methods.insert(out_methods.index(label) + 1, cal_label)
    return calibration


def _by_distance(
    out_methods: list[str], mask_list: list[tuple[str, np.ndarray]], scored: dict[tuple[str, str], Scored]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Scores by distance to the nearest observed pixel: per method, per mask and all masks pooled."""
    by_distance: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for method in out_methods:
        parts = [scored[(name, method)] for name, _ in mask_list]
        by_distance[method] = {name: binned(p) for (name, _), p in zip(mask_list, parts, strict=True)}
        pooled = Scored([y for p in parts for y in p.y], [mu for p in parts for mu in p.mu],
                        None if parts[0].sigma is None else [s for p in parts for s in p.sigma or []],
                        [], 0.0, dist=[d for p in parts for d in p.dist or []])
        by_distance[method]["all"] = binned(pooled)
    return by_distance


def _read_clean(raster: str | os.PathLike[str], cfg: EvaluationConfig) -> _Clean:
    """Read the evaluated window with which pixels the raster itself observes."""
    with open_raster(raster) as src:
        info = raster_info(src)
        band_list = select_bands(info, cfg.bands)
        nodata_v = resolve_nodata(info, cfg.nodata)
        col, row, w, h = _check_window(info, cfg.window, cfg.max_pixels)
        values, valid = read_observed(src, Window(col, row, w, h), band_list, info=info, nodata=nodata_v)
    if not valid.any():
        raise NoValidPixelsError(
            f"{raster} has no valid pixel in window {col} {row} {w} {h}, band(s) {band_list} "
            f"(nodata={nodata_v}); check --nodata, --band and --window"
        )
    return _Clean(info, band_list, nodata_v, (col, row, w, h), values, valid)


def _masks(
    raster: str | os.PathLike[str], clean: _Clean, cfg: EvaluationConfig
) -> tuple[list[tuple[str, np.ndarray]], list[dict[str, Any]]]:
    """The simulated masks (and the mask file), checked; and their description for the report."""
    col, row, w, h = clean.window
    mask_list = [(kind if d == 0 else f"{kind}#{d + 1}", gap) for d in range(cfg.draws)  # draw d: seed + d
                 for kind, gap in simulate_masks((h, w), cfg.masks or (), coverage=cfg.coverage, seed=cfg.seed + d)]
    if cfg.mask_file is not None:
        mask_list.append(("file", read_mask_file(cfg.mask_file, like=clean.info, window=Window(col, row, w, h))))
    valid = clean.valid
    mask_meta = []
    for name, is_gap in mask_list:
        hidden = is_gap[None] & valid
        context = valid & ~is_gap[None]
        for b, band in enumerate(clean.bands):
            if valid[b].any() and not context[b].any():
                raise ConfigError(
                    f"mask {name!r} hides every valid pixel of band {band}; nothing is left to fill "
                    f"from. Lower --coverage (now {cfg.coverage}) or use a sparser mask"
                )
        if not hidden.any():
            raise ConfigError(
                f"mask {name!r} hides no valid pixel of {raster}; raise --coverage or use a mask "
                "that covers valid pixels"
            )
        mask_meta.append({"name": name, "kind": name.split("#")[0], "hidden_pixels": int(hidden.sum()),
                          "hidden_fraction": round(float(hidden.sum() / valid.sum()), 4),
                          **({"path": str(cfg.mask_file)} if name == "file" else {})})
    return mask_list, mask_meta


def _run_all(
    clean: _Clean,
    mask_list: list[tuple[str, np.ndarray]],
    methods: list[str],
    models: dict[str, LoadedModel],
    cfg: EvaluationConfig,
    progress: Callable[[int, int], None] | None,
) -> tuple[dict[tuple[str, str], Scored], dict[str, Any] | None]:
    """Fill every mask with every method; the scored pixels per (mask, method), and the panels."""
    values, valid = clean.values, clean.valid
    _, _, w, h = clean.window
    total = len(mask_list) * len(methods)
    done = 0
    scored: dict[tuple[str, str], Scored] = {}
    quick: dict[str, Any] | None = None
    for i, (name, is_gap) in enumerate(mask_list):
        hidden = is_gap[None] & valid
        context = valid & ~is_gap[None]
        dist = distance_to_observed(context)
        stats = band_stats(values, context)
        inputs = np.where(context, values, np.nan)
        fit = None
        targets = hidden
        if cfg.calibrate:
            in_fit = np.random.default_rng([int(cfg.seed), _SPLIT_SALT, i]).random((h, w)) < 0.5
            fit = hidden & in_fit[None]
            targets = hidden & ~in_fit[None]
        keep_quick = cfg.plot is not None and i == 0
        if keep_quick:
            quick = {"mask": name, "input": _subsample(inputs, _QUICKLOOK_SIDE),
                     "truth": _subsample(np.where(valid, values, np.nan), _QUICKLOOK_SIDE),
                     "hidden": _subsample(hidden.any(0), _QUICKLOOK_SIDE), "predictions": {}}
        for method in methods:
            t0 = time.perf_counter()
            mean, std = run_method(method, inputs, context, hidden, models=models, seed=cfg.seed,
                                   device=cfg.device)
            seconds = time.perf_counter() - t0
            mean, std, unfilled = fallback(mean, std, hidden, stats)
            scored[(name, method)] = collect(values, mean, std, unfilled, targets, stats, seconds,
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
    return scored, quick


def _calibrate(
    raster: str | os.PathLike[str],
    clean: _Clean,
    mask_list: list[tuple[str, np.ndarray]],
    scored: dict[tuple[str, str], Scored],
    label: str,
    lm: LoadedModel,
    cfg: EvaluationConfig,
) -> tuple[CalibrationFit, list[float], DistanceBins]:
    """Fit a model's std scale (and distance factors) on the fit half, and store them.

    Returns:
        The report's calibration entry, the per-band factor fitted now, and the distance bins.
    """
    n_bands = len(clean.bands)
    z2 = [np.concatenate([scored[(name, label)].fit_z2[b] for name, _ in mask_list])  # type: ignore[index]
          for b in range(n_bands)]
    factor, prev, new_scale = refitted_scale(lm, z2)
    n_fit = int(sum(z.size for z in z2))
    # distance factors on top of the band factors, pooled over bands
    fd = [np.concatenate([scored[(name, label)].fit_dist[b] for name, _ in mask_list])  # type: ignore[index]
          for b in range(n_bands)]
    bins = distance_bin_factors(np.concatenate([z / f**2 for z, f in zip(z2, factor, strict=True)]),
                                np.concatenate(fd))
    stored_bins = bins.stacked_on(None if lm.calibration is None else lm.calibration.distance_bins)
    col, row, w, h = clean.window
    fitted_on = (
        f"geonp evaluate --calibrate, {datetime.date.today().isoformat()}: {n_fit} hidden "
        f"pixels (a random half; seed {cfg.seed}) of {Path(os.fspath(raster)).name} window "
        f"{col} {row} {w} {h}, band(s) {clean.bands}, masks "
        f"{', '.join(n for n, _ in mask_list)} at coverage {cfg.coverage}; std scale "
        f"{', '.join(f'{v:.4g}' for v in factor)} on top of the previous {prev}; then per "
        f"distance bin {list(bins.factors)}"
    )
    assert lm.path is not None, "load_models refuses --calibrate for a model without a directory"
    calibration = Calibration(std_scale=tuple(new_scale), fitted_on=fitted_on, distance_bins=stored_bins,
                              near_blend=None if lm.calibration is None else lm.calibration.near_blend)
    path = write_calibration(lm.path, calibration)
    if lm.near is not None and lm.near.path is not None:
        # The fill gives near tiles the near model's calibrated std (NearModel): the correction
        # fitted on the fill applies to it too, so that the two calibrations keep their ratio.
        near = lm.near.calibration or Calibration()
        write_calibration(lm.near.path, Calibration(
            std_scale=tuple(refitted_scale(lm.near, z2)[2]),
            fitted_on=f"{near.fitted_on or 'uncalibrated'}; then the main model's refit ({fitted_on})",
            distance_bins=bins.stacked_on(near.distance_bins)))
    logger.info("calibrated %s: std x %s -> %s", label, factor, path)
    entry = CalibrationFit(path=str(path.parent), calibration=calibration, previous_std_scale=prev, factor=factor,
                           n_fit=n_fit)
    return entry, factor, bins
