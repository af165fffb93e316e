"""``geonp evaluate``: hide pixels of a clean raster, fill them, and score fill and uncertainty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from geonp_cli.options import CountBar, band_option, device_option, nodata_option

from geonp.config import DEFAULT_EVALUATION_MASKS, EVALUATION_MASK_KINDS, QA_KINDS, EvaluationConfig

#: The defaults of --series options, shown in --help; geonp.evaluate_series and geonp.SeriesProtocol
#: apply them (tests/test_cli_defaults.py checks that they agree).
SERIES_DEFAULTS = {"model": "multidate", "n_refs": 2, "qa_kind": "fmask"}


@click.command(short_help="Score geonp and its uncertainty against baselines on a clean raster.")
@click.argument("clean_raster", type=click.Path(exists=True))
@click.option("--model", "models", multiple=True, metavar="NAME|PATH",
              help=f"geonp model to score (repeatable) [default: {', '.join(EvaluationConfig.models)}; "
                   f"{SERIES_DEFAULTS['model']} with --series].")
@click.option("--mask-kind", "mask_kinds", type=click.Choice(EVALUATION_MASK_KINDS), multiple=True,
              help=f"Simulated gaps (repeatable) [default: {', '.join(DEFAULT_EVALUATION_MASKS)}; none with --mask].")
@click.option("--mask", "mask_file", type=click.Path(exists=True, dir_okay=False),
              help="Also score on this gap mask (same grid; non-zero = hide).")
@click.option("--coverage", type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
              default=EvaluationConfig.coverage, show_default=True,
              help="Fraction of pixels each simulated mask hides.")
@click.option("--seed", type=int, default=None,
              help=f"Seed of the masks (same seed, same masks).  [default: {EvaluationConfig.seed}]")
@click.option("--draws", type=click.IntRange(min=1), default=None,
              help="Masks of each kind, with seeds SEED, SEED+1, ... (KIND, KIND#2, ...); --calibrate fits on "
                   f"all of them.  [default: {EvaluationConfig.draws}]")
@nodata_option
@band_option
@click.option("--window", type=int, nargs=4, default=None, metavar="COL ROW WIDTH HEIGHT",
              help="Evaluate only this window (pixels) of the raster.")
@click.option("--kriging", is_flag=True, help="Also score local ordinary kriging (slow; needs geonp[krige]).")
@click.option("--no-fillnodata", "no_fillnodata", is_flag=True, help="Do not score GDAL FillNodata.")
@click.option("--calibrate", is_flag=True,
              help="Fit a std scale on half of the hidden pixels, store it in the model directory "
                   "(used by geonp fill), and score on the other half (--series: fit on every scored date; "
                   "keep test dates out with --targets-until).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write every score as JSON here.")
@click.option("--plot", type=click.Path(dir_okay=False),
              help="Write a PNG: calibration curve, error vs std, coverage and std by distance to data, "
                   "quicklook panels (--series: RMSE per date and method, coverage and std by distance to data).")
@click.option("--series", is_flag=True,
              help="Multi-date mode: CLEAN_RASTER is a folder of dated rasters with QA files beside them; each date "
                   "from --targets-from gets clear pixels hidden under another date's clouds and is filled with its "
                   "previous dates as references, beside GDAL FillNodata and per-band reference regression.")
@click.option("--targets-from", metavar="YYYY-MM-DD", help="--series: first date scored [every date].")
@click.option("--targets-until", metavar="YYYY-MM-DD", help="--series: last date scored [every date].")
@click.option("--references", "n_refs", type=click.IntRange(min=1), default=None,
              help=f"--series: previous dates used as references.  [default: {SERIES_DEFAULTS['n_refs']}]")
@click.option("--qa-kind", type=click.Choice(QA_KINDS), default=None,
              help=f"--series: how the QA files are read.  [default: {SERIES_DEFAULTS['qa_kind']}]")
@device_option
@click.pass_context
def evaluate(ctx: click.Context, clean_raster: str, models: tuple[str, ...], mask_kinds: tuple[str, ...],
             mask_file: str | None, bands: tuple[int, ...], window: tuple[int, int, int, int] | None,
             no_fillnodata: bool, **opts: Any) -> None:
    """Hide pixels of CLEAN_RASTER, fill them, and score the fills and their uncertainty.

    geonp is scored beside GDAL FillNodata (and kriging with --kriging) on the same hidden
    pixels: RMSE, MAE, R2, Gaussian NLL, CRPS, 90 % and 95 % interval coverage, calibration
    error and seconds, per band and pooled ("all").

    \b
    Examples:
      geonp evaluate sample_data/landsat8_clean.tif --plot scores.png --json scores.json
      geonp evaluate clean.tif --model default --model my_model --mask-kind cloud --coverage 0.5
      geonp evaluate clean.tif --model my_model --calibrate --window 0 0 512 512
      geonp evaluate dates/ --series --targets-from 2012-01-01 --json series.json --plot series.png
      geonp evaluate dates/ --series --targets-until 2011-12-31 --model my_multidate --calibrate
    """
    from geonp import evaluate as run_evaluation

    series, targets_from, targets_until, n_refs, qa_kind = (
        opts.pop(k) for k in ("series", "targets_from", "targets_until", "n_refs", "qa_kind"))
    if series:
        _evaluate_series(clean_raster, models, (targets_from, targets_until), n_refs, qa_kind, opts.get("json_path"),
                         opts.get("seed"), opts.get("plot"), opts.get("calibrate", False))
        return
    if Path(clean_raster).is_dir():
        raise click.BadParameter(f"{clean_raster} is a folder; give a raster, or --series for a folder of dates",
                                 param_hint="CLEAN_RASTER")
    # an option not given is left to geonp.evaluate (EvaluationConfig's defaults)
    given = {k: v for k, v in {**opts, "models": models, "masks": mask_kinds, "bands": bands, "window": window}.items()
             if v is not None and v != ()}
    quiet = ctx.obj.get("quiet", False) if ctx.obj else False
    with CountBar(quiet, "evaluating", "run", leave=False) as progress:
        report = run_evaluation(clean_raster, mask_file=mask_file, fillnodata=not no_fillnodata, progress=progress,
                                **given)
    click.echo(report.format_table())
    click.echo(report.summary())
    for label, fit in (report.calibration or {}).items():
        scale = ", ".join(f"{v:.4g}" for v in fit.calibration.std_scale)
        click.echo(f"Calibrated {label}: std scale [{scale}] written to {fit.path}/config.json "
                   f"(fitted on {fit.n_fit} held-out pixels); geonp fill applies it. "
                   f"Rows '{label}+cal' show it on the other half.")
    if opts.get("json_path"):
        click.echo(f"Scores: {opts['json_path']}")
    if opts.get("plot"):
        click.echo(f"Plot: {opts['plot']}")


def _evaluate_series(folder: str, models: tuple[str, ...], targets: tuple[str | None, str | None], n_refs: int | None,
                     qa_kind: str | None, json_path: str | None, seed: int | None, plot: str | None,
                     calibrate: bool) -> None:
    """``geonp evaluate --series``: multi-date scores per target date, and their means."""
    import datetime as dt
    import json

    from geonp import (
        SeriesProtocol,
        evaluate_series,
        parse_date,
        scan_series,
        series_report,
        series_summary,
    )

    start = parse_date(targets[0], option="--targets-from") if targets[0] else dt.date.min
    until = parse_date(targets[1], option="--targets-until") if targets[1] else None
    # an option not given is left to geonp.evaluate_series and geonp.SeriesProtocol
    given = {k: v for k, v in (("n_refs", n_refs), ("qa_kind", qa_kind), ("seed", seed)) if v is not None}
    protocol = SeriesProtocol(targets_from=start, targets_until=until, **given)
    model = {"model": models[0]} if models else {}
    scores = evaluate_series(scan_series(folder), protocol, plot=plot, calibrate=calibrate, **model)
    for line in series_report(scores):
        click.echo(line)
    if json_path:
        Path(json_path).write_text(json.dumps(series_summary(scores), indent=1))
        click.echo(f"Scores: {json_path}")
    if plot:
        click.echo(f"Plot: {plot}")
    if calibrate:
        from geonp import load_model

        written = load_model(models[0] if models else SERIES_DEFAULTS["model"])
        click.echo(f"Calibration written to {written.path}: {written.calibration.fitted_on}")
