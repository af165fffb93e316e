"""``geonp fill``: fill the gaps of one raster, with an uncertainty raster beside it."""

from __future__ import annotations

import click

from geonp_cli.options import CountBar, band_option, device_option, model_option, nodata_option, overwrite_option


@click.command(short_help="Fill the gaps of a raster; write the filled raster and its std.")
@click.argument("input", type=click.Path(dir_okay=True))
@click.argument("output", type=click.Path())
@click.option("--uncertainty", type=click.Path(), help="Std raster path [default: <OUTPUT stem>_std.tif].")
@model_option
@click.option("--mask", type=click.Path(),
              help="Gap mask: a raster on any grid or CRS (non-zero = missing) or GeoJSON polygons.")
@click.option("--mask-values", metavar="V,V,...", help="Values of --mask that mean a gap (e.g. 8,9).")
@click.option("--mask-bits", metavar="B,B,...", help="Bits of --mask that mean a gap when set (e.g. 3,4).")
@click.option("--qa", type=click.Path(), help="Quality band to take gaps from (any grid); needs --qa-kind.")
@click.option("--qa-kind", type=click.Choice(["landsat-c2", "sentinel2-scl", "fmask"]),
              help="How to read --qa: Landsat C2 QA_PIXEL bits, Sentinel-2 SCL classes, or Fmask values.")
@click.option("--qa-classes", metavar="NAME,...",
              help="QA classes that are gaps, e.g. cloud,shadow,cirrus [default: fill, clouds, shadow, cirrus].")
@click.option("--footprint", type=click.Path(),
              help="The data footprint (raster, non-zero = inside, or GeoJSON) instead of computing it.")
@click.option("--fill-outside", is_flag=True,
              help="Also fill gaps outside the data footprint (the scene's nodata collar).")
@nodata_option
@band_option
@device_option
@click.option("--tile-size", type=click.IntRange(min=4), default=None,
              help="Tile core edge (pixels) [default: the model's training core size, 48 for the default model].")
@click.option("--overlap", type=click.IntRange(min=0), default=8, show_default=True, help="Tile blend margin (pixels).")
@click.option("--max-context", type=click.IntRange(min=1), default=None,
              help="Observed pixels per tile, nearest first [default: as the model was trained, 256 for the default model].")
@click.option("--search-radius", type=click.IntRange(min=1), default=512, show_default=True,
              help="How far (pixels) a tile looks for context.")
@click.option("--max-distance", type=float, default=None, metavar="PIXELS",
              help="Leave gaps farther than this from observed pixels as nodata (like gdal_fillnodata -md).")
@click.option("--block-size", type=click.IntRange(min=16), default=512, show_default=True,
              help="Pixels per read/write block; memory grows with its square.")
@click.option("--co", "creation_options", multiple=True, metavar="KEY=VALUE",
              help="GDAL creation option of OUTPUT (and of the std raster unless --std-co; repeatable).")
@click.option("--std-co", "std_creation_options", multiple=True, metavar="KEY=VALUE",
              help="GDAL creation option of the std raster (repeatable).")
@click.option("-f", "--format", "format", metavar="DRIVER",
              help="GDAL driver of OUTPUT [default: from its extension; .tif = GTiff].")
@click.option("--cog", is_flag=True, help="Write Cloud Optimized GeoTIFFs.")
@overwrite_option
@click.option("--quicklook", type=click.Path(dir_okay=False), help="Write a PNG: input, prediction, std.")
@click.option("--scheduler", metavar="ADDRESS", help="Dask scheduler address (tcp://host:8786): spread the blocks over its workers.")
@click.option("--dry-run", is_flag=True, help="Print tiles, context sizes, memory and time estimates; write nothing.")
@click.pass_context
def fill(ctx: click.Context, input: str, output: str, bands: tuple[int, ...], **opts: object) -> None:
    """Fill every gap of INPUT and write OUTPUT plus an uncertainty raster.

    Gaps are the nodata value, NaN/Inf, the GDAL mask/alpha band, and the --mask and --qa pixels.
    Only gaps inside the data footprint are filled: the footprint is the convex hull of the
    pixels that have data (a scene's collar stays nodata; a cloud over a corner of a crop is
    inside). --fill-outside fills everything, --footprint FILE gives it. Unfilled pixels read as
    nodata (or masked). Observed pixels are copied bit for bit; metadata, CRS and transform are kept.

    \b
    Examples:
      geonp fill sample_data/landsat8_cloudy.tif filled.tif --quicklook filled.png
      geonp fill scene.tif filled.tif --nodata 0 -b 1 -b 2 --max-distance 200 --co COMPRESS=ZSTD
    """
    import geonp

    _check_quicklook(input, output, opts)
    if opts.get("std_creation_options") == ():
        opts["std_creation_options"] = None
    with CountBar(ctx.obj.get("quiet", False), "filling", "tile") as progress:
        report = geonp.fill_raster(input, output, bands=bands or None, progress=progress, **opts)  # type: ignore[arg-type]
    if report.dry_run:
        click.echo(f"Dry run of {input} with model {report.model} (nothing written):")
        for key, value in report.plan.items():
            click.echo(f"  {key}: {value}")
        return
    if report.gap_pixels == 0:
        click.echo(f"{input} has no missing pixel{' inside its data footprint' if report.outside_pixels else ''}: "
                   f"copied it unchanged to {report.output}; std (all 0) in {report.uncertainty}")
        for hint in report.hints:
            click.echo(f"Hint: {hint}", err=True)
        return
    msg = (f"Filled {report.filled_pixels} of {report.gap_pixels} gap pixels in {report.seconds:.1f} s "
           f"with model {report.model}: {report.output}, std in {report.uncertainty}")
    if report.unfilled_pixels:
        msg += f"; {report.unfilled_pixels} left as nodata (beyond --max-distance or any context)"
    if report.outside_pixels:
        msg += f"; {report.outside_pixels} outside the data footprint left as nodata (--fill-outside fills them)"
    click.echo(msg)


def _check_quicklook(input: str, output: str, opts: dict[str, object]) -> None:
    """Refuse a --quicklook path that would overwrite an input or an output, before any work."""
    quicklook = opts.get("quicklook")
    if quicklook is None or opts.get("dry_run"):
        return
    from pathlib import Path

    from geonp.errors import OutputError
    from geonp.inference import default_uncertainty_path
    from geonp.io.output import check_output_path

    std = opts.get("uncertainty") or default_uncertainty_path(output)
    others = [p for p in (input, opts.get("mask")) if p is not None]
    ql = check_output_path(str(quicklook), inputs=others, overwrite=bool(opts.get("overwrite")),
                           role="--quicklook")
    for name, path in (("OUTPUT", output), ("--uncertainty", std)):
        full = Path(str(path)).expanduser().absolute()
        if ql == full.parent.resolve() / full.name:
            raise OutputError(f"--quicklook {quicklook} is the same path as {name}; give another path.")
