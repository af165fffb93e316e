"""The ``geonp`` click group: logging verbosity, ``--version``, and error translation.

Heavy modules (torch, rasterio) are imported inside the commands, so ``geonp --help`` and
``geonp --version`` stay fast.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any

import click

from geonp._version import __version__
from geonp.errors import GeonpError


class GeonpGroup(click.Group):
    """A click group that turns geonp errors into one-line messages and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; print a geonp error as one line (with a traceback under ``-v``)."""
        try:
            return super().invoke(ctx)
        except GeonpError as err:
            if ctx.obj and ctx.obj.get("verbose"):
                traceback.print_exc()
            raise click.ClickException(str(err)) from None
        except KeyboardInterrupt:
            click.echo("Interrupted; no partial output was left.", err=True)
            sys.exit(130)


@click.group(cls=GeonpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="geonp")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug); tracebacks on errors.")
@click.option("-q", "--quiet", is_flag=True, help="Only errors; no progress bar.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """Fill gaps in geospatial rasters, with a calibrated per-pixel uncertainty.

    \b
    Examples:
      geonp fill scene.tif filled.tif          # also writes filled_std.tif
      geonp train my_scenes/ --output my_model --nodata 0
      geonp evaluate clean.tif --plot scores.png
    """
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    ctx.ensure_object(dict)
    ctx.obj.update(verbose=verbose, quiet=quiet)


def _register() -> None:
    from geonp_cli import train

    cli.add_command(train.train)
    for name in ("fill", "models", "evaluate", "batch"):
        try:
            module = __import__(f"geonp_cli.{name}", fromlist=[name])
        except ModuleNotFoundError:
            continue
        cli.add_command(getattr(module, name))


_register()
