"""``geonp train``: train a model on your own rasters."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from geonp_cli.options import (
    band_option,
    device_option,
    expand_rasters,
    nodata_option,
    overwrite_option,
    progress_bar,
)

from geonp.config import ARCHS, ATTENTION_NAMES, OPTIMIZERS, QA_KINDS


@click.command(short_help="Train a model on your own rasters.")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True), metavar="RASTER_OR_DIR...")
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Model directory to write.")
@click.option("--recipe", help="Training recipe: a shipped one (`default`, the default model's; `multidate`, the "
              "multi-date model's, the default with --series) or a YAML file with `model:`, `training:` and "
              "`data:` sections overriding the default's. Options given on the command line win.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="Same as --recipe FILE.")
@click.option("--arch", type=click.Choice(ARCHS), default=None, help="Model family [recipe: tnpkr].")
@click.option("--attention", type=click.Choice(ATTENTION_NAMES), default=None, help="TNP-KR attention [recipe: scan].")
@click.option("--dim", type=click.IntRange(min=8), default=None, help="Model width [recipe: 64].")
@click.option("--depth", type=click.IntRange(min=1), default=None, help="Number of blocks [recipe: 4].")
@click.option("--heads", "num_heads", type=click.IntRange(min=1), default=None, help="Attention heads [recipe: 4].")
@click.option("--ff-dim", type=click.IntRange(min=8), default=None, help="Feed-forward width [recipe: 128].")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Training steps on the rasters [recipe: 820; 2600 with --series].")
@click.option("--pretrain-steps", type=click.IntRange(min=0), default=None, help="Steps on simulated GP fields first [recipe: 0].")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Tasks per step [recipe: 16; 8 with --series].")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=None, help="Peak learning rate [recipe: 3e-4].")
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default=None, help="Optimiser [recipe: adamw].")
@click.option("--val-every", type=click.IntRange(min=1), default=None, help="Validate every N steps [recipe: 100; 200 with --series].")
@click.option("--seed", type=int, default=None, help="Random seed [recipe: 1; 0 with --series].")
@device_option
@nodata_option
@band_option
@click.option("--patch-size", type=click.IntRange(min=8), default=None, help="Window edge in pixels [recipe: 256].")
@click.option("--max-context", type=click.IntRange(min=1), default=None, help="Near context pixels per task [recipe: 256; 64 with --series].")
@click.option("--val-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Fraction of columns for validation [recipe: 0.15].")
@click.option("--test-fraction", type=click.FloatRange(0, 1, max_open=True), default=None,
              help="Fraction of columns (rightmost) never used, kept for evaluation [recipe: 0.2].")
@click.option("--gap-source", type=click.Path(exists=True, dir_okay=False),
              help="A mask raster (non-zero = gap) or a raster whose missing pixels lend real gap shapes.")
@click.option("--n-far", type=click.IntRange(min=0), default=None,
              help="Far context pixels per task, spread over rings and sectors [recipe: 96; 16 with --series].")
@click.option("--search-radius", type=click.IntRange(min=1), default=None, help="Farthest context pixel [recipe: 512; 128 with --series].")
@click.option("--core-size", type=click.IntRange(min=4), default=None,
              help="Query window edge; geonp fill's tile size for the model [recipe: 48; 12 with --series].")
@click.option("--tasks-per-window", type=click.IntRange(min=1), default=None, help="Tasks cut from one window [recipe: 4].")
@click.option("--gp-fraction", type=click.FloatRange(0, 1), default=None,
              help="Fraction of windows drawn from simulated GP fields [recipe: 0.1].")
@click.option("--init-from", help="Start from this model's weights: a built-in name (`default` fine-tunes the shipped "
              "model) or a model directory [none; default with --series].")
@click.option("--series", is_flag=True,
              help="Multi-date: RASTER_OR_DIR is a folder of co-registered dated rasters (QA files beside them, "
                   "named <raster>_fmask.tif, _qa, _QA_PIXEL or _SCL); tasks hide pixels of one date and give "
                   "others as references.")
@click.option("--before", help="--series: use only dates before this one (YYYY-MM-DD), e.g. to keep later ones for testing.")
@click.option("--qa-kind", type=click.Choice(QA_KINDS), default=None,
              help="--series: how the QA files are read [default: fmask].")
@click.option("--n-ref", type=click.IntRange(min=1), default=None, help="--series: pixels per reference date and task of a token model (ref_slots: 0 in the recipe) "
              "[recipe: 1024].")
@click.option("--max-references", type=click.IntRange(min=1), default=None,
              help="--series: references per task are 1 to this many [recipe: 4].")
@click.option("--spacetime-fraction", type=click.FloatRange(0, 1), default=None,
              help="--series: fraction of tasks from simulated space-time fields [recipe: 0.2].")
@click.option("--processes", type=click.IntRange(min=1), default=None,
              help="Training processes sharing each step's batch (data parallel, one thread each; 2 on a 2-core "
                   "CPU trains about twice as fast). Resume with the same number [1].")
@click.option("--calibrate/--no-calibrate", default=None,
              help="Fit the std calibration on the validation columns once trained, as geonp evaluate "
                   "--calibrate does [recipe: on].")
@click.option("--resume", is_flag=True, help="Continue from the training state in --output.")
@overwrite_option
@click.option("--metrics", type=click.Path(dir_okay=False), help="Write validation records to this .csv or .jsonl file.")
@click.option("--name", help="Model name for its card.")
@click.pass_context
def train(ctx: click.Context, inputs: tuple[str, ...], output: str, recipe: str | None, config_file: str | None,
          **opts: Any) -> None:
    """Train a model on RASTER_OR_DIR... with the default model's recipe (or --recipe) and write it to --output.

    \b
    Example:
      geonp train scenes/ --output my_model --nodata 0 --metrics my_model/metrics.csv
      geonp train scenes/ --output tuned --nodata 0 --init-from default --steps 400 --processes 2
      geonp fill scene.tif filled.tif --model my_model
    """
    import geonp
    from geonp.config import load_recipe, merge_recipe
    from geonp.errors import ConfigError

    if recipe and config_file:
        raise click.BadParameter("give --recipe or --config (its alias), not both", param_hint="--config")
    series = opts.pop("series")
    base = "multidate" if series else "default"
    sections = load_recipe(recipe or config_file or base, base=base)
    overrides: dict[str, dict[str, Any]] = {"model": {}, "training": {}, "data": {}}
    model_keys = {"arch", "attention", "dim", "depth", "num_heads", "ff_dim"}
    train_keys = {"steps", "lr", "optimizer", "val_every", "seed", "device"}
    for key, value in opts.items():
        if value is None or value == () or key in ("resume", "overwrite"):
            continue
        target = "model" if key in model_keys else "training" if key in train_keys else "data"
        overrides[target][key] = value
    if series:
        if overrides["model"]:
            raise ConfigError("--series fine-tunes --init-from's architecture; drop "
                              + ", ".join(f"--{k.replace('_', '-')}" for k in overrides["model"]))
        _train_series(ctx, inputs, output, merge_recipe(sections, overrides), overwrite=opts["overwrite"])
        return
    command = "geonp " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    given = overrides["data"]
    data = geonp.TrainingData(expand_rasters(inputs), **_take(given, "nodata", "bands", "val_fraction",
                                                              "test_fraction", "gap_source"))
    out = geonp.TrainOutput(output, resume=opts["resume"], overwrite=opts["overwrite"], command=command,
                            **_take(given, "metrics", "name"))
    update, close = progress_bar(ctx.obj.get("quiet", False), "training")
    try:
        report = geonp.train(data, out, recipe=merge_recipe(sections, overrides),
                             run=geonp.TrainRun(progress=update, status=_status(ctx, close),
                                                **_take(given, "processes")))
    finally:
        close()
    resumed = f" (resumed at step {report.first_step} of {report.steps})" if report.first_step else ""
    click.echo(
        f"Trained {report.steps - report.first_step} steps{resumed} in {report.seconds:.0f} s; best validation "
        f"NLL {report.best_val_nll:.4f} at step {report.best_step}; model in {report.output}"
    )


def _status(ctx: click.Context, close_bar: Callable[[], None]) -> Callable[[str], None]:
    """Print what a run does after its last step (calibrating) on stderr, below the closed bar."""

    def status(line: str) -> None:
        if not ctx.obj.get("quiet", False):
            close_bar()
            click.echo(line, err=True)

    return status


def _take(options: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The entries ``keys`` of ``options`` that were given, taken out of it."""
    return {k: options.pop(k) for k in keys if k in options}


def _train_series(ctx: click.Context, inputs: tuple[str, ...], output: str, recipe: dict[str, dict[str, Any]],
                  *, overwrite: bool) -> None:
    """``geonp train --series``: a multi-date model from a folder of dated rasters (``geonp.train_series``)."""
    from geonp import SeriesData, TrainOutput, parse_date, scan_series, train_series
    from geonp.errors import ConfigError

    if len(inputs) != 1 or not Path(inputs[0]).is_dir():
        raise ConfigError("--series takes one folder of dated rasters (RASTER_OR_DIR)")
    given = dict(recipe["data"])
    # options of the run, not entries of a recipe
    before = given.pop("before", None)
    data = SeriesData(scan_series(inputs[0]), before=None if before is None else parse_date(before, option="--before"),
                      **_take(given, "qa_kind"))
    out = TrainOutput(output, overwrite=overwrite, command="geonp " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                      **_take(given, "metrics"))
    update, close = progress_bar(ctx.obj.get("quiet", False), "training")
    try:
        report = train_series(data, out, recipe={**recipe, "data": given}, progress=update)
    finally:
        close()
    click.echo(
        f"Trained {report.steps} steps in {report.seconds:.0f} s; best validation NLL "
        f"{report.best_val_nll:.4f} at step {report.best_step}; model in {report.output}"
    )
