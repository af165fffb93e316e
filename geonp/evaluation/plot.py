"""The picture of a ``geonp evaluate`` run: is the std honest, and what do the fills look like.

Top row: the calibration curve (expected against observed coverage of central intervals; on the
diagonal = calibrated, below = over-confident) and the absolute error against the predicted std
(a calibrated Gaussian std has mean absolute error ``sqrt(2/pi) * std``). Then the 95 % coverage,
and the error against the std, by distance to the nearest observed pixel. Below: quicklook panels
of the first mask: the input with its gaps, the truth, each method's fill, and each std.

A multi-date run (``geonp evaluate --series``) gets :func:`write_series_plot`: the RMSE of every
method on every date, and the same scores by distance to data, all dates pooled.
"""

from __future__ import annotations

import io
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from geonp.io.atomic_file import atomic_write_bytes

if TYPE_CHECKING:
    from geonp.evaluation.report import EvaluationReport

__all__ = ["QuicklookPanels", "write_evaluation_plot", "write_series_plot"]


@dataclass
class QuicklookPanels:
    """Arrays for the quicklook panels of one mask (already subsampled for display).

    Attributes:
        mask: the mask's name.
        input: ``[bands, h, w]`` values the methods saw, NaN on hidden and invalid pixels.
        truth: ``[bands, h, w]`` true values, NaN on the raster's own invalid pixels.
        hidden: bool ``[h, w]``, True where a pixel of some band was hidden.
        predictions: per method ``(mean, std)``: ``[bands, h, w]`` on hidden pixels (NaN
            elsewhere); ``std`` None for a method without one.
    """

    mask: str
    input: np.ndarray
    truth: np.ndarray
    hidden: np.ndarray
    predictions: dict[str, tuple[np.ndarray, np.ndarray | None]] = field(default_factory=dict)


def _stretch(truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2-98 % percentiles per band of the true values (the same stretch for every panel)."""
    lo, hi = [], []
    for band in truth[:3]:
        vals = band[np.isfinite(band)]
        lo.append(float(np.percentile(vals, 2)) if vals.size else 0.0)
        hi.append(float(np.percentile(vals, 98)) if vals.size else 1.0)
    return np.array(lo), np.array(hi)


def _rgba(arr: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Show 1-2 bands as grey, 3+ as RGB; pixels not finite in every shown band are transparent.

    Three bands are shown in the order 3, 2, 1, which is red, green, blue for Landsat B2-B4.
    """
    shown = arr[:3] if arr.shape[0] >= 3 else arr[:1]
    k = shown.shape[0]
    img = (shown - lo[:k, None, None]) / np.maximum(hi[:k] - lo[:k], 1e-12)[:, None, None]
    img = np.clip(np.nan_to_num(img, nan=0.0), 0.0, 1.0)
    rgb = np.repeat(img, 3, 0) if k == 1 else img[::-1]
    alpha = np.isfinite(shown).all(0)[None].astype(float)
    return np.moveaxis(np.concatenate([rgb, alpha]), 0, -1)


def _calibration_axes(ax: Any, report: EvaluationReport) -> None:
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="calibrated")
    for method, curve in report.curves.items():
        ax.plot(curve["levels"], curve["observed"], "o-", ms=3, label=method)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("expected coverage (central interval level)")
    ax.set_ylabel("observed coverage")
    ax.set_title(f"calibration on hidden pixels ({report.scored_on.split(' (')[0]})")
    if not report.curves:
        ax.text(0.5, 0.5, "no method with a std", ha="center", va="center", transform=ax.transAxes)
    ax.legend(fontsize=8, loc="upper left")


def _scatter_axes(ax: Any, report: EvaluationReport) -> None:
    if not report.scatter:
        ax.text(0.5, 0.5, "no method with a std", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    lo, hi = math.inf, 0.0
    for method, pts in report.scatter.items():
        std, err = pts["std"], pts["abs_error"]
        if not std.size:
            continue
        pos = err[err > 0]
        floor = float(pos.min()) if pos.size else 1e-12
        err = np.maximum(err, floor)
        (dots,) = ax.plot(std, err, ".", ms=2, alpha=0.25)
        # mean |error| in std quantile bins: the line a calibrated std keeps on the reference
        edges = np.unique(np.quantile(std, np.linspace(0, 1, 11)))
        if edges.size > 1:
            which = np.clip(np.searchsorted(edges, std, side="right") - 1, 0, edges.size - 2)
            mids = [float(np.median(std[which == i])) for i in range(edges.size - 1) if (which == i).any()]
            means = [float(np.mean(err[which == i])) for i in range(edges.size - 1) if (which == i).any()]
            ax.plot(mids, means, "-o", ms=3, color=dots.get_color(), label=f"{method} (binned mean)")
        lo, hi = min(lo, float(std.min())), max(hi, float(std.max()))
    if hi > 0 and math.isfinite(lo):
        ref = np.geomspace(max(lo, hi * 1e-6), hi, 50)
        ax.plot(ref, math.sqrt(2 / math.pi) * ref, "k--", lw=1, label="calibrated: E|err| = 0.80 std")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted std")
    ax.set_ylabel("|error|")
    ax.set_title("error against predicted std")
    ax.legend(fontsize=8, loc="upper left")


def _bin_labels(rows: list[dict[str, Any]]) -> list[str]:
    return [f"{r['lo']:g}-{r['hi']:g}" if r["hi"] is not None else f">={r['lo']:g}" for r in rows]


def _binned_axes(ax_cov: Any, ax_err: Any, binned: Mapping[str, list[dict[str, Any]]], scope: str) -> None:
    """Coverage, and RMSE against RMS std, per bin of distance to the nearest observed pixel.

    Args:
        ax_cov: axes of the 95 % coverage per bin (methods with a std).
        ax_err: axes of the RMSE (and RMS std) per bin.
        binned: per method, :func:`geonp.evaluation.metrics.binned_scores` rows.
        scope: what the rows pool, for the titles (``"all masks"``, ``"all dates"``).
    """
    ax_cov.axhspan(0.93, 0.97, color="0.9", label="target 0.93-0.97")
    ax_cov.axhline(0.95, color="k", ls="--", lw=1)
    labels: list[str] = []
    for method, all_rows in binned.items():
        rows = [r for r in all_rows if r["n"]]
        if not rows:
            continue
        labels = labels if len(labels) >= len(all_rows) else _bin_labels(all_rows)
        x = [i for i, r in enumerate(all_rows) if r["n"]]
        (line,) = ax_err.plot(x, [r["rmse"] for r in rows], "o-", ms=3, label=f"{method} RMSE")
        if "coverage95" in rows[0]:
            ax_cov.plot(x, [r["coverage95"] for r in rows], "o-", ms=3, color=line.get_color(), label=method)
            ax_err.plot(x, [r["rms_std"] for r in rows], "s--", ms=3, color=line.get_color(),
                        label=f"{method} RMS std")
    for ax in (ax_cov, ax_err):
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=45, fontsize=7)
        ax.set_xlabel("distance to the nearest observed pixel (px)")
    ax_cov.set_ylim(0, 1.02)
    ax_cov.set_ylabel("95 % interval coverage")
    ax_cov.set_title(f"coverage by distance to data ({scope})")
    ax_cov.legend(fontsize=7, loc="lower left")
    ax_err.set_yscale("log")
    ax_err.set_ylabel("RMSE and RMS std (band units)")
    ax_err.set_title(f"error and std by distance to data ({scope})")
    ax_err.legend(fontsize=7, loc="upper left")


def write_evaluation_plot(
    png: str | os.PathLike[str],
    report: EvaluationReport,
    *,
    panels: QuicklookPanels | None = None,
) -> None:
    """Write the evaluation PNG: calibration curve, error-vs-std scatter and quicklook panels.

    Args:
        png: output path (written atomically).
        report: the evaluation's report (its ``curves`` and ``scatter``).
        panels: arrays of one mask for the quicklook row; None leaves the row out.
    """
    plt = _pyplot()
    preds = panels.predictions if panels is not None else {}
    with_std = [m for m, (_, s) in preds.items() if s is not None]
    ncols = max(2, 2 + len(preds))
    first = 2 if report.binned else 1  # rows of line plots: calibration/scatter, binned by distance
    nrows = first if panels is None else (first + 1 if not with_std else first + 2)
    fig = plt.figure(figsize=(3.2 * ncols, 3.4 * nrows + 1.0), constrained_layout=True)
    grid = fig.add_gridspec(nrows, ncols * 2, height_ratios=[1.3] * first + [1] * (nrows - first))
    half = ncols
    _calibration_axes(fig.add_subplot(grid[0, :half]), report)
    _scatter_axes(fig.add_subplot(grid[0, half:]), report)
    if report.binned:
        _binned_axes(fig.add_subplot(grid[1, :half]), fig.add_subplot(grid[1, half:]),
                     {m: per_mask.get("all", []) for m, per_mask in report.binned.items()}, "all masks")

    if panels is not None:
        lo, hi = _stretch(panels.truth)
        hidden_pct = 100.0 * float(panels.hidden.mean())
        filled = {m: np.where(panels.hidden[None], mean, panels.truth) for m, (mean, _) in preds.items()}
        images = [(f"input, mask {panels.mask} ({hidden_pct:.0f}% hidden)", panels.input),
                  ("truth", panels.truth), *[(m, filled[m]) for m in preds]]
        for j, (title, arr) in enumerate(images):
            ax = fig.add_subplot(grid[first, 2 * j:2 * j + 2])
            ax.set_facecolor("#d62728")  # gaps show red through the transparent pixels
            ax.imshow(_rgba(arr, lo, hi), interpolation="nearest")
            ax.set_title(title, fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
        if with_std:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN pixels: not hidden
                sds = {m: np.nanmean(preds[m][1], axis=0) for m in with_std}  # type: ignore[arg-type]
            finite = np.concatenate([v[np.isfinite(v)] for v in sds.values()])
            vmax = float(np.percentile(finite, 99)) if finite.size else 1.0
            im = None
            for m in with_std:
                j = 2 + list(preds).index(m)
                ax = fig.add_subplot(grid[first + 1, 2 * j:2 * j + 2])
                im = ax.imshow(sds[m], cmap="magma", vmin=0.0, vmax=max(vmax, 1e-12), interpolation="nearest")
                ax.set_title(f"std of {m} (mean over bands)", fontsize=9)
                ax.set_xticks([])
                ax.set_yticks([])
            if im is not None:
                fig.colorbar(im, ax=fig.axes[-1], shrink=0.8)
    _save(fig, png)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, png: str | os.PathLike[str]) -> None:
    """Write a figure as PNG (atomically) and close it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    _pyplot().close(fig)
    atomic_write_bytes(png, buf.getvalue())


def _rmse_bars(ax: Any, rmse: Sequence[tuple[str, Mapping[str, float]]]) -> None:
    """Grouped bars: each method's RMSE on each date."""
    methods = list(dict.fromkeys(m for _, per_method in rmse for m in per_method))
    width = 0.8 / max(len(methods), 1)
    for i, method in enumerate(methods):
        x = np.arange(len(rmse)) + (i - (len(methods) - 1) / 2) * width
        ax.bar(x, [per_method.get(method, np.nan) for _, per_method in rmse], width, label=method)
    ax.set_xticks(range(len(rmse)))
    ax.set_xticklabels([date for date, _ in rmse], rotation=45, fontsize=8)
    ax.set_ylabel("RMSE on the scored hidden pixels (band units)")
    ax.set_title("RMSE per target date (clear pixels hidden under another date's clouds)")
    if not rmse:
        ax.text(0.5, 0.5, "no date with scored pixels", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize=8)


def write_series_plot(
    png: str | os.PathLike[str],
    rmse: Sequence[tuple[str, Mapping[str, float]]],
    binned: Mapping[str, list[dict[str, Any]]],
) -> None:
    """Write the PNG of a multi-date evaluation (``geonp evaluate --series --plot``).

    Top: each method's RMSE per target date. Below: the 95 % coverage of the methods with a
    std, and every method's RMSE beside the RMS std, by distance to the nearest observed pixel,
    all dates pooled.

    Args:
        png: output path (written atomically).
        rmse: per target date (in order), ``(date, {method: RMSE})``.
        binned: per method, :func:`geonp.evaluation.metrics.binned_scores` rows of all dates pooled.
    """
    plt = _pyplot()
    fig = plt.figure(figsize=(11, 8), constrained_layout=True)
    grid = fig.add_gridspec(2, 2, height_ratios=[1.1, 1])
    _rmse_bars(fig.add_subplot(grid[0, :]), rmse)
    _binned_axes(fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1]), binned, "all dates")
    _save(fig, png)
