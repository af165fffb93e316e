"""``geonp train``: train a model on your own rasters."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click
from geonp_cli.options import (
    band_option,
    device_option,
    expand_rasters,
    nodata_option,
    progress_bar,
)


@click.command(short_help="Train a model on your own rasters.")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True), metavar="RASTER_OR_DIR...")
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Model directory to write.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="YAML file with `model:`, `training:` and `data:` sections; options given on the command line win.")
@click.option("--arch", type=click.Choice(["tnpkr", "tnpd", "cmanp"]), default=None, help="Model family [tnpkr].")
@click.option("--attention", type=click.Choice(["scan", "dka", "performer", "dense"]), default=None, help="TNP-KR attention [scan].")
@click.option("--dim", type=click.IntRange(min=8), default=None, help="Model width [64].")
@click.option("--depth", type=click.IntRange(min=1), default=None, help="Number of blocks [6].")
@click.option("--heads", "num_heads", type=click.IntRange(min=1), default=None, help="Attention heads [4].")
@click.option("--ff-dim", type=click.IntRange(min=8), default=None, help="Feed-forward width [256].")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Training steps on the rasters [1000].")
@click.option("--pretrain-steps", type=click.IntRange(min=0), default=None, help="Steps on simulated GP fields first [0].")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Tasks per step [16].")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=None, help="Peak learning rate [1e-3].")
@click.option("--optimizer", type=click.Choice(["adamw", "yogi"]), default=None, help="Optimiser [adamw].")
@click.option("--val-every", type=click.IntRange(min=1), default=None, help="Validate every N steps [100].")
@click.option("--seed", type=int, default=None, help="Random seed [0].")
@device_option
@nodata_option
@band_option
@click.option("--patch-size", type=click.IntRange(min=8), default=None, help="Patch edge in pixels [64].")
@click.option("--max-context", type=click.IntRange(min=1), default=None, help="Context pixels per task [256].")
@click.option("--val-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Fraction of columns for validation [0.15].")
@click.option("--test-fraction", type=click.FloatRange(0, 1, max_open=True), default=None,
              help="Fraction of columns (rightmost) never used, kept for evaluation [0].")
@click.option("--gap-source", type=click.Path(exists=True, dir_okay=False),
              help="A mask raster (non-zero = gap) or a raster whose missing pixels lend real gap shapes.")
@click.option("--n-far", type=click.IntRange(min=0), default=None,
              help="Far context pixels per task, spread over rings and sectors [0].")
@click.option("--search-radius", type=click.IntRange(min=1), default=None, help="Farthest context pixel [512].")
@click.option("--core-size", type=click.IntRange(min=4), default=None,
              help="Query window edge; geonp fill's tile size for the model [48; 12 with --series].")
@click.option("--tasks-per-window", type=click.IntRange(min=1), default=None, help="Tasks cut from one window [1].")
@click.option("--gp-fraction", type=click.FloatRange(0, 1), default=None,
              help="Fraction of windows drawn from simulated GP fields [0].")
@click.option("--init-from", help="Start from this model's weights (a built-in name or a model directory).")
@click.option("--series", is_flag=True,
              help="Multi-date: RASTER_OR_DIR is a folder of co-registered dated rasters (QA files beside them, "
                   "named <raster>_fmask.tif, _qa, _QA_PIXEL or _SCL); tasks hide pixels of one date and give "
                   "others as references.")
@click.option("--before", help="--series: use only dates before this one (YYYY-MM-DD), e.g. to keep later ones for testing.")
@click.option("--qa-kind", type=click.Choice(["fmask", "landsat-c2", "sentinel2-scl"]), default=None,
              help="--series: how the QA files are read [fmask].")
@click.option("--n-ref", type=click.IntRange(min=1), default=None, help="--series: pixels per reference date and task [1024].")
@click.option("--max-references", type=click.IntRange(min=1), default=None,
              help="--series: references per task are 1 to this many [2].")
@click.option("--spacetime-fraction", type=click.FloatRange(0, 1), default=None,
              help="--series: fraction of tasks from simulated space-time fields [0.2].")
@click.option("--resume", is_flag=True, help="Continue from the training state in --output.")
@click.option("--metrics", type=click.Path(dir_okay=False), help="Write validation records to this .csv or .jsonl file.")
@click.option("--name", help="Model name for its card.")
@click.pass_context
def train(ctx: click.Context, inputs: tuple[str, ...], output: str, config_file: str | None,
          **opts: Any) -> None:
    """Train a model on RASTER_OR_DIR... (64x64 patches, simulated gaps) and write it to --output.

    \b
    Example:
      geonp train scenes/ --output my_model --nodata 0 --steps 2000 --metrics my_model/metrics.csv
      geonp fill scene.tif filled.tif --model my_model
    """
    import geonp
    from geonp import TaskShape
    from geonp.config import ModelConfig, TrainConfig
    from geonp.errors import ConfigError

    if (Path(output).exists() and any(Path(output).iterdir()) and not opts["resume"]
            and not (Path(output) / "config.json").exists()):
        raise click.BadParameter(f"{output} exists and is not a geonp model directory", param_hint="--output")
    sections: dict[str, dict[str, Any]] = {"model": {}, "training": {}, "data": {}}
    if config_file:
        import yaml

        try:
            loaded = yaml.safe_load(Path(config_file).read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{config_file} is not valid YAML: {str(err).splitlines()[0]}") from err
        if not isinstance(loaded, dict) or set(loaded) - set(sections):
            raise ConfigError(f"{config_file} must hold only the sections {sorted(sections)}")
        for key, value in loaded.items():
            if not isinstance(value, dict):
                raise ConfigError(f"section {key!r} of {config_file} must be a mapping")
            sections[key].update(value)
    model_keys = {"arch", "attention", "dim", "depth", "num_heads", "ff_dim"}
    train_keys = {"steps", "lr", "optimizer", "val_every", "seed", "device"}
    for key, value in opts.items():
        if value is None or value == () or key in ("resume",):
            continue
        target = "model" if key in model_keys else "training" if key in train_keys else "data"
        sections[target][key] = value
    data = sections["data"]
    if data.pop("series", False):
        _train_series(ctx, inputs, output, sections)
        return
    shape_keys = {"patch_size", "max_context", "core_size", "max_targets"}
    shape = TaskShape(**{k: data.pop(k) for k in list(data) if k in shape_keys})
    update, close = progress_bar(ctx.obj.get("quiet", False), "training")
    command = "geonp " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    try:
        report = geonp.train(
            expand_rasters(inputs), output,
            model=ModelConfig.from_dict(sections["model"]),
            training=TrainConfig.from_dict(sections["training"]),
            task_shape=shape, resume=opts["resume"], command=command, progress=update,
            **{k: (tuple(v) if k == "bands" else v) for k, v in data.items()},
        )
    except TypeError as err:
        raise ConfigError(f"invalid data option: {err}") from err
    finally:
        close()
    click.echo(
        f"Trained {report.steps} steps in {report.seconds:.0f} s; best validation NLL "
        f"{report.best_val_nll:.4f} at step {report.best_step}; model in {report.output}"
    )


def _train_series(ctx: click.Context, inputs: tuple[str, ...], output: str, sections: dict[str, dict[str, Any]]) -> None:
    """``geonp train --series``: a multi-date model from a folder of dated rasters."""
    from dataclasses import replace

    from geonp import ContextSpec, SeriesRecipe, parse_date, scan_series, train_series
    from geonp.config import TrainConfig
    from geonp.errors import ConfigError

    if len(inputs) != 1 or not Path(inputs[0]).is_dir():
        raise ConfigError("--series takes one folder of dated rasters (RASTER_OR_DIR)")
    if sections["model"]:
        raise ConfigError("--series fine-tunes --init-from's architecture; drop "
                          + ", ".join(f"--{k.replace('_', '-')}" for k in sections["model"]))
    data = dict(sections["data"])
    spec = ContextSpec(n_near=data.pop("max_context", 64), n_far=data.pop("n_far", 16),
                       search_radius=data.pop("search_radius", 128), rings=4, sectors=8,
                       n_ref=data.pop("n_ref", 1024), ref_margin=1)
    recipe = SeriesRecipe(spec=spec, core_size=data.pop("core_size", 12),
                          max_references=data.pop("max_references", 2))
    recipe = replace(recipe, max_targets=recipe.core_size ** 2)
    before = data.pop("before", None)
    kwargs = {k: data.pop(k) for k in ("init_from", "spacetime_fraction", "pretrain_steps", "nodata",
                                       "qa_kind", "name", "batch_size") if k in data}
    if "bands" in data:
        kwargs["bands"] = tuple(data.pop("bands"))
    if data:
        raise ConfigError(f"--series does not take {', '.join('--' + k.replace('_', '-') for k in data)}")
    update, close = progress_bar(ctx.obj.get("quiet", False), "training")
    command = "geonp " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    try:
        report = train_series(scan_series(inputs[0]), output, training=TrainConfig.from_dict(sections["training"]),
                              recipe=recipe, before=None if before is None else parse_date(before, option="--before"),
                              command=command, progress=update, **kwargs)
    finally:
        close()
    click.echo(
        f"Trained {report.steps} steps in {report.seconds:.0f} s; best validation NLL "
        f"{report.best_val_nll:.4f} at step {report.best_step}; model in {report.output}"
    )
