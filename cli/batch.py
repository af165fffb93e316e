"""``geonp batch``: fill every raster of a directory, in parallel on a Dask cluster."""

from __future__ import annotations

import os
import warnings
from typing import Any

import click
from geonp_cli.options import CountBar, fill_config_options

from geonp.config import QA_KINDS

#: The options of geonp.Files and geonp.Cluster; their defaults (shown in --help) are the library's
#: (tests/test_cli_defaults.py checks that they agree).
FILE_OPTIONS = ("pattern", "recursive", "skip_existing")
CLUSTER_OPTIONS = ("scheduler", "workers", "threads_per_worker", "dashboard_address")
BATCH_DEFAULTS = {"pattern": "*.tif", "skip_existing": True, "threads_per_worker": 1, "dashboard_address": ":8787"}


class _Neighbours(click.ParamType):
    """``--neighbours``: a count of dates (>= 0) or ``auto``."""

    name = "K|auto"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | str:
        """``auto`` as it is, else a whole number >= 0; anything else is refused in one line."""
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
        self.fail(f"{value!r} is neither a count of dates (0, 1, 2, ...) nor 'auto'", param, ctx)


NEIGHBOURS = _Neighbours()


@click.command(short_help="Fill every raster of a directory in parallel (Dask).")
@click.argument("input_dir", type=click.Path(file_okay=False))
@click.argument("output_dir", type=click.Path(file_okay=False))
@click.option("--pattern", default=None,
              help=f"Glob pattern of the input files.  [default: {BATCH_DEFAULTS['pattern']}]")
@click.option("-r", "--recursive", is_flag=True, help="Match --pattern in subdirectories too.")
@click.option("--neighbours", type=NEIGHBOURS, default=None,
              help="Multi-date: fill each raster with the K dates of the same grid in INPUT_DIR nearest to it in "
                   "time as references (dates from tags or names; QA files beside the rasters give clouds); "
                   "'auto': the nearest dates until every gap of the raster is seen clear by 2 of them, at most "
                   "4 (at the series' ends all on one side).  [default: 0, each raster from its own pixels]")
@click.option("--max-days", type=click.FloatRange(min=0), default=None,
              help="With --neighbours: take only dates at most this many days away (default: any).")
@click.option("--qa-kind", type=click.Choice(QA_KINDS),
              help="With --neighbours: how the QA files beside the rasters (<raster>_fmask.tif, _qa, _QA_PIXEL, "
                   "_SCL) are read.")
@fill_config_options
@click.option("--skip-existing/--no-skip-existing", default=None,
              help="Skip files a previous run completed with the same options (a run with other options is "
                   "refused); --no-skip-existing fills them again.  [default: "
                   f"{'skip-existing' if BATCH_DEFAULTS['skip_existing'] else 'no-skip-existing'}]")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes of the local cluster, one file each at a time [default: CPU count / "
                   "--threads-per-worker].")
@click.option("--threads-per-worker", type=click.IntRange(min=1), default=None,
              help=f"Files each local worker fills at once.  [default: {BATCH_DEFAULTS['threads_per_worker']}]")
@click.option("--scheduler", metavar="ADDRESS",
              help="Use an existing Dask cluster (tcp://host:8786) instead of a local one.")
@click.option("--dashboard-address", default=None, metavar="[HOST]:PORT",
              help="Dashboard of the local cluster (':0' for any free port; -v shows its link).  "
                   f"[default: {BATCH_DEFAULTS['dashboard_address']}]")
@click.pass_context
def batch(ctx: click.Context, input_dir: str, output_dir: str, bands: tuple[int, ...], **opts: Any) -> None:
    """Fill every raster of INPUT_DIR matching --pattern; write them under OUTPUT_DIR.

    Outputs keep the inputs' relative paths, each with its <stem>_std.tif. Files run in
    parallel on a local Dask cluster, or on an existing one with --scheduler. A file that
    fails does not stop the others: the run ends with a summary table, writes the manifest
    OUTPUT_DIR/geonp_batch.json, and exits with 1 if any file failed. Run the same command
    again to resume: completed files are skipped. A run with other fill options into the same
    OUTPUT_DIR is refused unless --no-skip-existing or --overwrite asks to refill it.

    \b
    Examples:
      geonp batch scenes/ filled/ --model my_model
      geonp batch archive/ filled/ --pattern "*_SR.tif" -r --workers 8 --co COMPRESS=ZSTD
      geonp batch scenes/ filled/ --scheduler tcp://10.0.0.5:8786
      geonp batch landsat_dates/ filled/ --neighbours 2 --qa-kind fmask
      geonp batch landsat_dates/ filled/ --neighbours 2 --max-days 48 --qa-kind fmask
      geonp batch landsat_dates/ filled/ --neighbours auto --qa-kind fmask
    """
    import geonp

    quiet, verbose = ctx.obj.get("quiet", False), ctx.obj.get("verbose", 0)
    # Dask's own INFO lines (cluster start and stop) only with -v; workers inherit the setting. The
    # dashboard's link is geonp's INFO line (-v), and so is its port taken by another cluster.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "info" if verbose else "warning")
    if not verbose:
        warnings.filterwarnings("ignore", message=r"Port \d+ is already in use")
    given = {k: v for k, v in opts.items() if v is not None}
    # each group's options not given are left to the library's defaults
    files = geonp.Files(**{k: given.pop(k) for k in FILE_OPTIONS if k in given})
    cluster = geonp.Cluster(**{k: given.pop(k) for k in CLUSTER_OPTIONS if k in given})
    count, qa_kind, max_days = (given.pop(k, None) for k in ("neighbours", "qa_kind", "max_days"))
    if not count and (qa_kind is not None or max_days is not None):
        raise click.BadParameter("--qa-kind and --max-days go with --neighbours K", param_hint="--neighbours")
    neighbours = geonp.Neighbours(count, qa_kind=qa_kind, max_days=max_days) if count else None
    if bands:
        given["bands"] = bands
    with CountBar(quiet, "files", "file") as progress:
        report = geonp.fill_many(input_dir, output_dir, files=files, cluster=cluster, neighbours=neighbours,
                                 progress=progress, **given)
    if not quiet or not report.ok:
        click.echo(report.table(failed_only=quiet))
    if not report.ok:
        ctx.exit(1)
