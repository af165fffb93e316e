"""Multi-date evaluation: hide pixels of a date, fill them from its references, score beside the peers.

For each target date of a series (a folder of dated rasters with QA files beside them), pixels
that are clear on that date are hidden under a real cloud-and-shadow shape taken from another
date's QA band; the date is then filled

- by geonp with its references (the ``n_refs`` previous dates, cloud-masked by their own QA),
- by GDAL FillNodata on the date alone (the single-date peer),
- by a per-band linear regression of the date on its clearest reference, fitted on the pixels
  both observe (the simplest classic reference method; it predicts only where that reference
  is observed),
- by temporal linear interpolation (:func:`~geonp.evaluation.baselines.temporal_linear`: each pixel between the nearest dates
  before and after that see it clear, every date of the series allowed, later ones too; what a
  data-cube user gets from ``cube.interpolate_na(dim="time")``),
- and by geonp without references (the single-date default model), to show what references add.

Scores are computed on the hidden pixels the regression can predict (the same pixels for every
method) and, for geonp, also on all hidden pixels; every method is also scored per bin of
distance to the nearest pixel the target date shows (:func:`geonp.evaluation.metrics.binned_scores`).
Every step reads and writes real GeoTIFFs through :func:`geonp.fill_raster`, as a user's fill
would. ``plot=`` draws the RMSE of every date and the binned scores
(:func:`geonp.evaluation.plot.write_series_plot`).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from geonp.evaluation.baselines import fillnodata_baseline, temporal_linear
from geonp.evaluation.metrics import binned_scores, gaussian_nll, interval_coverage, pool_binned
from geonp.filling.calibration import DISTANCE_BIN_EDGES, distance_to_observed

if TYPE_CHECKING:
    from geonp.io.series_stack import SeriesStack

logger = logging.getLogger(__name__)

__all__ = ["SERIES_METHODS", "DateScore", "SeriesProtocol", "evaluate_series", "reference_regression", "report_lines",
           "summary"]

#: The methods of a series evaluation: key in :attr:`DateScore.binned` -> label in tables and plots.
SERIES_METHODS = {"geonp": "geonp", "gdal": "GDAL FillNodata", "regression": "regression",
                  "temporal": "temporal linear", "single_date": "geonp, no refs"}
#: Stds are floored at this before scoring by distance (a filled pixel's std is never 0; this
#: guards the likelihood against one that rounds to it).
_STD_FLOOR = 1e-9


@dataclass
class DateScore:
    """Scores of one target date (RMSE in the bands' units, over all bands' scored pixels).

    ``binned`` holds, per method of :data:`SERIES_METHODS`, the scores of the scored pixels per
    bin of distance to the nearest pixel the date shows (the bands pooled; stds for geonp with
    and without references).
    """

    target: str
    date: str
    references: list[str]
    donor: str
    hidden: int
    scored: int
    rmse_geonp: float
    rmse_gdal: float
    rmse_regression: float
    rmse_temporal: float
    rmse_single_date: float
    rmse_geonp_all_hidden: float
    coverage95_all_hidden: float
    coverage90: float
    coverage95: float
    nll: float
    unfilled: int = 0  # hidden pixels (all bands) geonp's multi-date fill left as nodata
    binned: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def reference_regression(target: np.ndarray, target_ok: np.ndarray, ref: np.ndarray, ref_ok: np.ndarray
                         ) -> np.ndarray:
    """Per-band least-squares line of the target on a reference, fitted where both observe.

    Args:
        target: the target date's values ``[bands, h, w]``.
        target_ok: bool ``[h, w]``, True where the target date is observed.
        ref: the reference date's values ``[bands, h, w]``.
        ref_ok: bool ``[h, w]``, True where the reference date is observed.

    Returns:
        ``[bands, h, w]`` predictions where the reference is observed, NaN elsewhere (and
        everywhere when fewer than 3 pixels are shared).
    """
    from geonp.filling.references import fit_regression

    ok, seen = np.broadcast_to(target_ok, target.shape), np.broadcast_to(ref_ok, target.shape)
    lines = fit_regression(target, ok, [(ref, seen)], min_pixels=3)
    if lines is None:
        return np.full(target.shape, np.nan)
    return lines.predict([(ref, seen)])[0]  # the fill's lines (geonp.filling.references), one reference


def cloud_shapes(items: Sequence[Any], qa_kind: str) -> list[np.ndarray | None]:
    """Each date's cloud and cloud-shadow pixels from its QA file (None without one).

    Only clouds and shadows: a Landsat 7 date's SLC-off stripes sit at nearly the same place on
    every date, so hiding another date's stripes would hide pixels that no reference sees. The
    QA files are read as ``fill`` reads them (:func:`geonp.io.masks.read_mask_file`).
    """
    from rasterio.windows import Window

    from geonp.io.masks import read_mask_file
    from geonp.io.raster import open_raster, raster_info

    shapes: list[np.ndarray | None] = []
    for item in items:
        if item.qa is None:
            shapes.append(None)
            continue
        with open_raster(item.path) as src:
            info = raster_info(src)
        shapes.append(read_mask_file(item.qa, like=info, window=Window(0, 0, info.width, info.height),
                                     qa_kind=qa_kind, qa_classes=("cloud", "shadow")))
    return shapes


def _write_like(path: Path, like: str, values: np.ndarray, ok: np.ndarray) -> None:
    import rasterio

    with rasterio.open(like) as src:
        profile, tags, nodata = src.profile, src.tags(), src.nodata
    data = np.where(ok[None], values, nodata).astype(profile["dtype"])
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
        dst.update_tags(**tags)


def _rmse(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y - p) ** 2))) if y.size else float("nan")


@dataclass(frozen=True)
class SeriesProtocol:
    """How a series evaluation tests its dates: which are targets, and how their pixels are hidden.

    Attributes:
        targets_from: first target date (earlier dates serve only as references and donors).
        targets_until: last target date (None: every date from ``targets_from``).
        n_refs: references per target: the previous dates.
        qa_kind: how QA files are read.
        min_clear: least clear fraction of a target date.
        donor_gaps: cloud-and-shadow fraction range of the dates whose cloud shapes are hidden.
        seed: picks the donor date of each target.
    """

    targets_from: dt.date = dt.date.min
    targets_until: dt.date | None = None
    n_refs: int = 2
    qa_kind: str = "fmask"
    min_clear: float = 0.5
    donor_gaps: tuple[float, float] = (0.05, 0.75)
    seed: int = 0


class _Target(NamedTuple):
    """One target date's test: its index, its references', the donor date's and the pixels hidden."""

    t: int
    refs: list[int]
    donor: int
    hidden: np.ndarray


def evaluate_series(
    series: Sequence[Any],
    protocol: SeriesProtocol = SeriesProtocol(),
    *,
    model: str = "multidate",
    plot: str | os.PathLike[str] | None = None,
    calibrate: bool = False,
) -> list[DateScore]:
    """Score multi-date filling on every target date of ``series`` (see the module docstring).

    Args:
        series: dated rasters with ``path``, ``date``, ``qa`` (``geonp.io.timeseries.scan_series``).
        protocol: the target dates, their references and the cloud shapes hidden on them.
        model: the multi-date model (the single-date peer is the ``default`` model).
        plot: write a PNG here: RMSE per date of every method, coverage and error against std
            by distance to data (:func:`geonp.evaluation.plot.write_series_plot`).
        calibrate: fit the multi-date fill's std scale per band to these dates' hidden pixels
            (the 95 % rule of :func:`geonp.filling.calibration.std_factor`, on top of the model's
            present scale) and write it into the model's directory, as ``geonp evaluate
            --calibrate`` does for single-date models. Fit it on dates kept from testing.
    """
    from geonp.io.series_stack import load_series

    p = protocol
    items = sorted(series, key=lambda d: (d.date, str(d.path)))
    stack = load_series(items, qa_kind=p.qa_kind)
    gaps = 1.0 - stack.clear
    shapes = cloud_shapes(items, p.qa_kind)
    cloudy = np.array([np.nan if c is None else c.mean() for c in shapes])
    donors = np.flatnonzero((cloudy >= p.donor_gaps[0]) & (cloudy <= p.donor_gaps[1]))
    rng = np.random.default_rng(p.seed)
    scores: list[DateScore] = []
    z2: list[list[np.ndarray]] = []  # per date and band, the squared standardised errors of geonp
    for t, item in enumerate(items):
        if item.date < p.targets_from or t < p.n_refs or gaps[t] > 1 - p.min_clear or \
                (p.targets_until is not None and item.date > p.targets_until) or not (donors != t).any():
            continue
        donor = int(rng.choice(donors[donors != t]))
        hidden = shapes[donor] & stack.observed[t]
        if not hidden.any():
            continue
        score, z2_date = _score_date(items, stack, _Target(t, list(range(t - p.n_refs, t)), donor, hidden),
                                     model=model, qa_kind=p.qa_kind)
        scores.append(score)
        z2.append(z2_date)
    if calibrate:
        _write_calibration(model, z2, [s.date for s in scores])
    if plot is not None:
        from geonp.evaluation.plot import write_series_plot

        write_series_plot(plot, [(s.date, {label: getattr(s, f"rmse_{key}") for key, label in SERIES_METHODS.items()})
                                 for s in scores if s.scored > 0],
                          {SERIES_METHODS[key]: rows for key, rows in pooled_bins(scores).items()})
    return scores


def _score_date(items: Sequence[Any], stack: SeriesStack, target: _Target, *, model: str,
                qa_kind: str) -> tuple[DateScore, list[np.ndarray]]:
    """Fill a target date with its pixels hidden, with and without references, and score the fills.

    Returns:
        The date's score, and per band the squared standardised errors of the multi-date fill.
    """
    import geonp

    t, refs, donor, hidden = target
    item = items[t]
    truth, ok = np.nan_to_num(stack.values[t]).astype(np.float64), stack.observed[t]
    shown = ok & ~hidden
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        inp = tmp / Path(item.path).name
        _write_like(inp, item.path, truth, shown)
        out, out1 = tmp / "filled.tif", tmp / "single.tif"
        ref_files = [geonp.Reference(items[r].path, qa=items[r].qa) for r in refs]
        reads_qa = any(ref.qa is not None for ref in ref_files)  # qa_kind reads the references' QA alone
        geonp.fill_raster(inp, out, model=model, references=ref_files, overwrite=True,
                          gaps=geonp.Gaps(qa_kind=qa_kind if reads_qa else None))
        geonp.fill_raster(inp, out1, model="default", overwrite=True)  # the user's path: the default footprint
        mean, std = _read(out), _read(tmp / "filled_std.tif")
        single, single_std = _read(out1), _read(tmp / "single_std.tif")
    every = hidden[None].repeat(truth.shape[0], 0)
    fitted = every & (std > 0) & np.isfinite(mean)
    z2_date = [((truth[b][fitted[b]] - mean[b][fitted[b]]) / std[b][fitted[b]]) ** 2
               for b in range(truth.shape[0])]
    gdal = fillnodata_baseline(truth, np.broadcast_to(shown, truth.shape)).mean
    clearest = max(refs, key=lambda r: int((stack.observed[r] & shown).sum()))
    reg = reference_regression(truth, shown, np.nan_to_num(stack.values[clearest]).astype(np.float64),
                               stack.observed[clearest])
    lin = temporal_linear(stack.values, stack.observed, stack.days, t)
    scored = hidden[None] & np.isfinite(reg)  # where a date sees a pixel, lin has a value too
    y = truth[scored]
    z = truth[fitted]  # hidden pixels the fill predicted (the rest are counted as unfilled)
    score = DateScore(
        target=Path(item.path).name, date=str(item.date), references=[Path(items[r].path).name for r in refs],
        donor=Path(items[donor].path).name, hidden=int(hidden.sum()), scored=int(scored[0].sum()),
        rmse_geonp=_rmse(y, mean[scored]), rmse_gdal=_rmse(y, gdal[scored]),
        rmse_regression=_rmse(y, reg[scored]), rmse_temporal=_rmse(y, lin[scored]),
        rmse_single_date=_rmse(y, single[scored]),
        rmse_geonp_all_hidden=_rmse(z, mean[fitted]),
        coverage95_all_hidden=interval_coverage(z, mean[fitted], std[fitted], 0.95),
        coverage90=interval_coverage(y, mean[scored], std[scored], 0.90),
        coverage95=interval_coverage(y, mean[scored], std[scored], 0.95),
        nll=gaussian_nll(y, mean[scored], std[scored]),
        unfilled=int((every & ~np.isfinite(mean)).sum()),
        binned=_binned(y, {"geonp": (mean, std), "gdal": (gdal, None), "regression": (reg, None),
                           "temporal": (lin, None), "single_date": (single, single_std)}, scored, distance_to_observed(shown)),
    )
    return score, z2_date


def _write_calibration(model: str, z2: list[list[np.ndarray]], dates: list[str]) -> list[float]:
    """Fit the multi-date fill's std scale per band (95 % rule) and write it into the model's directory."""
    from geonp.errors import ConfigError
    from geonp.evaluation.scoring import refitted_scale
    from geonp.model_files.calibration import Calibration
    from geonp.model_files.checkpoint import write_calibration
    from geonp.model_files.registry import load_model

    if not z2:
        raise ConfigError("--calibrate found no target date to fit on; widen --targets-from/--targets-until")
    lm = load_model(model)
    factor, prev, new_scale = refitted_scale(lm, [np.concatenate([date[b] for date in z2])
                                                  for b in range(len(z2[0]))])
    n_fit = int(sum(z.size for date in z2 for z in date))
    fitted_on = (f"geonp evaluate --series --calibrate, {dt.date.today().isoformat()}: {n_fit} hidden pixels of "
                 f"{len(z2)} dates from {dates[0]} to {dates[-1]}, filled with their previous dates as references "
                 f"(reference fit: regression); std scale {', '.join(f'{v:.4g}' for v in factor)} on top of the "
                 f"previous {prev}")
    assert lm.path is not None, "load_model reads a model from its directory"
    path = write_calibration(lm.path, Calibration(std_scale=tuple(new_scale), fitted_on=fitted_on))
    logger.info("calibrated %s: std x %s -> %s", model, factor, path)
    return new_scale


def _binned(y: np.ndarray, predictions: dict[str, tuple[np.ndarray, np.ndarray | None]], scored: np.ndarray,
            distance: np.ndarray) -> dict[str, list[dict[str, Any]]]:
    """Every method's scores on the scored pixels ``[bands, h, w]`` per bin of ``distance`` ``[h, w]``.

    A method scores where it predicted: pixels it left unfilled (NaN mean or std: the single-date
    fill's footprint rule may take a hidden area at a crop's edge for the scene's collar) are left
    out of its bins (their ``n`` counts predicted pixels only); the date's RMSE columns keep them
    (NaN), and ``unfilled`` counts geonp's.
    """
    d = np.broadcast_to(distance, scored.shape)[scored]
    out = {}
    for key, (mean, std) in predictions.items():
        m, s = mean[scored], None if std is None else std[scored]
        ok = np.isfinite(m) if s is None else np.isfinite(m) & np.isfinite(s)
        out[key] = binned_scores(y[ok], m[ok], None if s is None else np.maximum(s[ok], _STD_FLOOR), d[ok],
                                 DISTANCE_BIN_EDGES)
    return out


def _read(path: Path) -> np.ndarray:
    import rasterio

    with rasterio.open(path) as src:  # unfilled pixels (nodata) read as NaN
        return src.read(masked=True).astype(np.float64).filled(np.nan)


def summary(scores: Sequence[DateScore]) -> dict[str, Any]:
    """Means over the dates with scored pixels (ratios are of the mean RMSEs).

    A date whose references are both cloudy where its pixels are hidden has no pixel the
    regression can predict; it is listed but not in the means.
    """
    per_date = [asdict(s) for s in scores]
    scores = [s for s in scores if s.scored > 0]
    if not scores:
        return {"dates": 0, "per_date": per_date}
    mean = {k: float(np.mean([getattr(s, k) for s in scores]))
            for k in ("rmse_geonp", "rmse_gdal", "rmse_regression", "rmse_temporal", "rmse_single_date",
                      "rmse_geonp_all_hidden",
                      "coverage95_all_hidden", "coverage90", "coverage95", "nll")}
    return {"dates": len(scores), **mean, "unfilled": int(sum(s.unfilled for s in scores)),
            "geonp_over_gdal": mean["rmse_geonp"] / mean["rmse_gdal"],
            "geonp_over_regression": mean["rmse_geonp"] / mean["rmse_regression"],
            "geonp_over_temporal": mean["rmse_geonp"] / mean["rmse_temporal"],
            "distance_bin_edges": [None if math.isinf(e) else e for e in DISTANCE_BIN_EDGES],
            "binned_by_distance": pooled_bins(scores),
            "per_date": per_date}


def pooled_bins(scores: Sequence[DateScore]) -> dict[str, list[dict[str, Any]]]:
    """Per method, the scores by distance to data of every date's scored pixels together."""
    return {key: pool_binned([s.binned[key] for s in scores if key in s.binned]) for key in SERIES_METHODS}


def report_lines(scores: Sequence[DateScore]) -> list[str]:
    """The scores as a Markdown table (one row per date, then the means) and a closing line."""
    s = summary(scores)
    lines = [("| date | hidden px | scored px | geonp | GDAL FillNodata | regression | temporal linear | "
              "geonp, no refs | geonp / GDAL | geonp / regression | geonp / temporal | cov95 |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in scores:
        lines.append(f"| {d.date} | {d.hidden} | {d.scored} | {d.rmse_geonp:.0f} | {d.rmse_gdal:.0f} | "
                     f"{d.rmse_regression:.0f} | {d.rmse_temporal:.0f} | {d.rmse_single_date:.0f} | "
                     f"{d.rmse_geonp / d.rmse_gdal:.2f} | {d.rmse_geonp / d.rmse_regression:.2f} | "
                     f"{d.rmse_geonp / d.rmse_temporal:.2f} | {d.coverage95:.3f} |")
    if s["dates"]:
        lines.append(f"| **mean of {s['dates']} dates** | | | {s['rmse_geonp']:.0f} | {s['rmse_gdal']:.0f} | "
                     f"{s['rmse_regression']:.0f} | {s['rmse_temporal']:.0f} | {s['rmse_single_date']:.0f} | "
                     f"{s['geonp_over_gdal']:.2f} | {s['geonp_over_regression']:.2f} | "
                     f"{s['geonp_over_temporal']:.2f} | {s['coverage95']:.3f} |")
        lines.append(f"geonp on all hidden pixels (also where the regression's reference is cloudy): "
                     f"mean RMSE {s['rmse_geonp_all_hidden']:.0f}, 95% coverage {s['coverage95_all_hidden']:.3f}; "
                     f"on the scored pixels 90% coverage {s['coverage90']:.3f}; hidden pixels geonp left unfilled "
                     f"(all bands): {s['unfilled']}")
    return lines
