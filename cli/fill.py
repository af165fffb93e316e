"""``geonp fill``: fill the gaps of one raster, with an uncertainty raster beside it."""

from __future__ import annotations

import logging

import click
from geonp_cli.options import (
    CountBar,
    check_dates,
    fill_config_options,
    none_if_empty,
    workers_help,
)

from geonp.config import QA_KINDS

GAP_OPTIONS = ("mask", "mask_values", "mask_bits", "qa", "qa_kind", "qa_classes", "footprint")
OUTPUT_OPTIONS = ("uncertainty", "quicklook", "format", "dry_run")


@click.command(short_help="Fill the gaps of a raster; write the filled raster and its std.")
@click.argument("input", type=click.Path(dir_okay=True))
@click.argument("output", type=click.Path())
@click.option("--uncertainty", type=click.Path(),
              help="Std raster path [default: <OUTPUT stem>_std.tif; <OUTPUT stem>_std plus OUTPUT's extension "
                   "when its format holds float32, as netCDF does].")
@click.option("--mask", type=click.Path(),
              help="Gap mask: a raster on any grid or CRS (non-zero = missing) or GeoJSON polygons.")
@click.option("--mask-values", metavar="V,V,...", help="Values of --mask that mean a gap (e.g. 8,9).")
@click.option("--mask-bits", metavar="B,B,...", help="Bits of --mask that mean a gap when set (e.g. 3,4).")
@click.option("--qa", type=click.Path(), help="Quality band to take gaps from (any grid); needs --qa-kind.")
@click.option("--qa-kind", type=click.Choice(QA_KINDS),
              help="How to read --qa: Landsat C2 QA_PIXEL bits, Sentinel-2 SCL classes, or Fmask values.")
@click.option("--qa-classes", metavar="NAME,...",
              help="QA classes that are gaps, e.g. cloud,shadow,cirrus [default: fill, clouds, shadow, cirrus].")
@click.option("--footprint", type=click.Path(),
              help="The data footprint (raster, non-zero = inside, or GeoJSON) instead of computing it.")
@click.option("-f", "--format", "format", metavar="DRIVER",
              help="GDAL driver of OUTPUT [default: from its extension; .tif = GTiff].")
@click.option("--reference", "references", multiple=True, type=click.Path(),
              help="Another date of the same place (any grid or CRS; repeatable): the multi-date model "
                   "(--model multidate unless another is given) reads the 4 nearest at every pixel; "
                   "the reference regression uses all.")
@click.option("--reference-date", "reference_dates", multiple=True, metavar="YYYY-MM-DD", callback=check_dates,
              help="Acquisition date of each --reference, in order, where its tags and name lack one.")
@click.option("--reference-qa", "reference_qa", multiple=True, type=click.Path(), callback=none_if_empty,
              help="Quality band of each --reference, in order (read with --qa-kind).")
@click.option("--date", metavar="YYYY-MM-DD", callback=check_dates,
              help="INPUT's acquisition date, where its tags and name lack one.")
@fill_config_options
@click.option("--workers", type=click.IntRange(min=1), default=None, help=workers_help)
@click.option("--quicklook", type=click.Path(dir_okay=False), help="Write a PNG: input, prediction, std.")
@click.option("--scheduler", metavar="ADDRESS", help="Dask scheduler address (tcp://host:8786): spread the blocks over its workers.")
@click.option("--dry-run", is_flag=True, help="Print tiles, context sizes, memory and time estimates; write nothing.")
@click.pass_context
def fill(ctx: click.Context, input: str, output: str, bands: tuple[int, ...], **opts: object) -> None:
    """Fill every gap of INPUT and write OUTPUT plus an uncertainty raster.

    Gaps are the nodata value, NaN/Inf, the GDAL mask/alpha band, and the --mask and --qa pixels.
    Every gap is filled unless there is evidence that it lies outside the scene: --footprint
    FILE, or a collar of nodata beyond a long straight edge of the data (a swath edge). Pixels
    a --reference observes are inside; clouds over a crop's corner or edge are filled.
    --fill-outside fills everything. The summary counts every missing pixel by what became of
    it, and says which option fills those left. Unfilled pixels read as nodata (or masked).
    Observed pixels are copied bit for bit; metadata, CRS and transform are kept.

    \b
    Examples:
      geonp fill sample_data/landsat8_cloudy.tif filled.tif --quicklook filled.png
      geonp fill scene.tif filled.tif --nodata 0 -b 1 -b 2 --max-distance 200 --co COMPRESS=ZSTD
      geonp fill scene.tif filled.tif --nodata 0 --qa QA_PIXEL.TIF --qa-kind landsat-c2
      geonp fill s2_B04.tif filled.tif --qa SCL_20m.tif --qa-kind sentinel2-scl --qa-classes cloud,shadow
      geonp fill LE07_..._20120524.tif filled.tif --reference LE07_..._20120508.tif --reference LE07_..._20120422.tif
    """
    import geonp

    _check_quicklook(input, output, opts)
    gaps = geonp.Gaps(**{k: opts.pop(k) for k in GAP_OPTIONS})  # type: ignore[arg-type]
    outputs = geonp.Outputs(output, **{k: opts.pop(k) for k in OUTPUT_OPTIONS})  # type: ignore[arg-type]
    references = geonp.Reference.from_options(opts.pop("references"), opts.pop("reference_dates"),  # type: ignore[arg-type]
                                              opts.pop("reference_qa"))  # type: ignore[arg-type]
    logged = _Logged()  # a hint geonp logged as a warning (a data band tagged alpha) is not repeated
    logging.getLogger("geonp").addHandler(logged)
    try:
        with CountBar(ctx.obj.get("quiet", False), "filling", "px") as progress:
            report = geonp.fill_raster(input, outputs, gaps=gaps, references=references, bands=bands or None,
                                       progress=progress, **opts)  # type: ignore[arg-type]
    finally:
        logging.getLogger("geonp").removeHandler(logged)
    hints = [hint for hint in report.hints if hint not in logged.messages]
    if report.dry_run:
        click.echo(f"Dry run of {input} with model {report.model} (nothing written):")
        for key, value in report.plan.items():
            click.echo(f"  {key}: {value}")
        for hint in hints:
            click.echo(f"Hint: {hint}", err=True)
        return
    if ctx.obj.get("quiet", False):  # -q: only errors
        return
    if report.gap_pixels == 0 and not report.outside_pixels:
        click.echo(f"{input} has no missing pixel: copied it unchanged to {report.output}; "
                   f"std (all 0) in {report.uncertainty}")
    else:
        click.echo(f"Filled {report.filled_pixels} of {report.missing_pixels} missing pixels (all bands) in "
                   f"{report.seconds:.1f} s with model {report.model}: {report.output}, std in {report.uncertainty}")
    left = report.left_unfilled()
    if left:  # every missing pixel is filled or counted here, with the option that fills it
        click.echo(f"Warning: {report.missing_pixels - report.filled_pixels} missing pixels left as nodata: "
                   + "; ".join(left), err=True)
    for hint in hints:
        click.echo(f"Hint: {hint}", err=True)


class _Logged(logging.Handler):
    """The messages logged at WARNING or above while it is attached (already on the terminal)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.add(record.getMessage())


def _check_quicklook(input: str, output: str, opts: dict[str, object]) -> None:
    """Refuse a --quicklook path that would overwrite an input or an output, or is not a .png, before any work."""
    quicklook = opts.get("quicklook")
    if quicklook is None or opts.get("dry_run"):
        return
    from pathlib import Path

    from geonp import check_output_path, check_quicklook_path, default_uncertainty_path
    from geonp.errors import OutputError

    std = opts.get("uncertainty") or default_uncertainty_path(output, opts.get("format"))  # type: ignore[arg-type]
    others = [p for p in (input, opts.get("mask"), opts.get("qa"), opts.get("footprint")) if p is not None]
    ql = check_output_path(str(quicklook), inputs=others, overwrite=bool(opts.get("overwrite")),
                           role="--quicklook")
    for name, path in (("OUTPUT", output), ("--uncertainty", std)):
        full = Path(str(path)).expanduser().absolute()
        if ql == full.parent.resolve() / full.name:
            raise OutputError(f"--quicklook {quicklook} is the same path as {name}; give another path.")
    check_quicklook_path(str(quicklook))  # after those, which say more when it names the input or OUTPUT
