"""The ``geonp`` click group: logging verbosity, ``--version``, and error translation.

Heavy modules (torch, rasterio) are imported inside the commands, so ``geonp --help`` and
``geonp --version`` stay fast.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from typing import Any

import click

from geonp._version import __version__
from geonp.errors import GeonpError, one_line

#: Warnings rasterio issues for rasters without georeferencing; geonp logs its own one-liner.
_NOISY_WARNINGS = (r"Dataset has no geotransform", r"The given matrix is equal to Affine\.identity")


def _quiet_gdal(verbose: int) -> None:
    """Keep rasterio's and GDAL's own log lines off the terminal below ``-vv``.

    ``-v`` is for geonp's own progress messages; ``-vv`` adds rasterio's and GDAL's debug
    output. Errors still reach the user, as geonp's one-line messages (which quote GDAL's text).
    """
    if verbose >= 2:
        if os.environ.get("CPL_LOG") == os.devnull and _SET_CPL_LOG:
            del os.environ["CPL_LOG"]
            _SET_CPL_LOG.clear()
        logging.getLogger("rasterio").setLevel(logging.NOTSET)
        return
    if "CPL_LOG" not in os.environ:  # GDAL's default handler prints "Warning 1: ..." to stderr
        os.environ["CPL_LOG"] = os.devnull
        _SET_CPL_LOG.append(True)
    logging.getLogger("rasterio").setLevel(logging.ERROR)
    for pattern in _NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)


def _configure(verbose: int, quiet: bool) -> None:
    """Set geonp's log level (``-q`` errors only, ``-v`` info, ``-vv`` debug) and GDAL's noise."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    _quiet_gdal(0 if quiet else verbose)


def _verbosity_callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Let ``-v``/``-q`` given after a subcommand count like those given before it."""
    root = ctx.find_root()
    root.ensure_object(dict)
    obj = root.obj
    if param.name == "verbose" and value:
        obj["verbose"] = int(obj.get("verbose", 0)) + int(value)
    elif param.name == "quiet" and value:
        obj["quiet"] = True
    else:
        return value
    _configure(int(obj.get("verbose", 0)), bool(obj.get("quiet", False)))
    return value


def verbosity_options(command: click.Command) -> click.Command:
    """Add ``-v/--verbose`` and ``-q/--quiet`` to a subcommand (same meaning as on ``geonp``)."""
    names = {opt for p in command.params for opt in getattr(p, "opts", [])}
    if "-v" not in names:
        command.params.append(click.Option(
            ["-v", "--verbose"], count=True, expose_value=False, callback=_verbosity_callback,
            help="More log output (-vv adds rasterio/GDAL debug lines); tracebacks on errors."))
    if "-q" not in names:
        command.params.append(click.Option(
            ["-q", "--quiet"], is_flag=True, expose_value=False, callback=_verbosity_callback,
            help="Only errors; no progress bar."))
    return command


_SET_CPL_LOG: list[bool] = []


#: Signals that stop a run like Ctrl-C does: `kill`, `timeout`, a closed terminal.
_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


def _install_signal_handlers(received: list[int]) -> dict[int, Any]:
    """Make SIGTERM and SIGHUP raise KeyboardInterrupt, so outputs are cleaned up as on Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum: int, frame: Any) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    previous = {}
    for sig in _STOP_SIGNALS:
        previous[sig] = signal.signal(sig, stop)
    return previous


def _restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def interrupted_message(name: str, interrupt: BaseException) -> str:
    """The line printed after an interrupt: what is left on disk, as geonp checked it after cleaning up.

    geonp's writers record on the interrupt the partial files that remain once they have removed
    theirs (its ``partials_left`` attribute); an interrupt no writer saw says nothing about files.
    A training run records where it stopped and what it kept (its ``detail`` attribute).
    """
    detail = getattr(interrupt, "detail", None)
    if detail:
        return f"Interrupted ({name}); {detail}."
    left = getattr(interrupt, "partials_left", None)
    if left is None:
        return f"Interrupted ({name})."
    if not left:
        return f"Interrupted ({name}); no partial output was left."
    folders = sorted({os.path.dirname(str(p)) for p in left})
    where = f"in {folders[0]}" if len(folders) == 1 else "in those folders"
    return (f"Interrupted ({name}); {len(left)} partial file(s) remain: "
            f"{', '.join(str(p) for p in left)}; the next geonp run that writes {where} removes them.")


def _verbose(ctx: click.Context) -> bool:
    return bool(ctx.obj and ctx.obj.get("verbose"))  # set by cli(), inside invoke


class GeonpGroup(click.Group):
    """A click group that turns errors into one-line messages and exit code 1.

    geonp errors print their message; a system error (``OSError``: permissions, a full disk)
    prints what the system said; anything else is a bug, printed as one line that asks for a
    report. ``-v`` adds the traceback in every case.
    """

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; print an error as one line (with a traceback under ``-v``)."""
        received: list[int] = []
        previous = _install_signal_handlers(received)
        try:
            return super().invoke(ctx)
        except click.BadParameter as err:
            if isinstance(getattr(err.param, "type", None), click.Path) and "does not exist" in err.message:
                # A missing input is a geonp error (exit 1), not a usage error (exit 2).
                hint = err.param.get_error_hint(ctx) if err.param is not None else "a path"
                raise click.ClickException(f"{hint}: {err.message}; check the path.") from None
            raise
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except GeonpError as err:
            if _verbose(ctx):
                traceback.print_exc()
            raise click.ClickException(one_line(err)) from None
        except KeyboardInterrupt as err:
            name = signal.Signals(received[0]).name if received else "Ctrl-C"
            click.echo(interrupted_message(name, err), err=True)
            sys.exit(128 + received[0] if received else 130)
        except MemoryError:
            if _verbose(ctx):
                traceback.print_exc()
            raise click.ClickException(
                "out of memory; use a smaller --block-size (or --tile-size/--max-context), or a "
                "machine with more memory"
            ) from None
        except OSError as err:
            if _verbose(ctx):
                traceback.print_exc()
            raise click.ClickException(one_line(err)) from None
        except Exception as err:  # noqa: BLE001 - the last line of defence against tracebacks
            if _verbose(ctx):
                traceback.print_exc()
            if type(err).__module__.startswith("rasterio"):
                raise click.ClickException(
                    f"GDAL error ({type(err).__name__}): {one_line(err)}; run again with -v for details"
                ) from None
            raise click.ClickException(
                f"unexpected {type(err).__name__}: {one_line(err)}. This is a bug in geonp; run "
                "again with -v and report the traceback"
            ) from None
        finally:
            _restore_signal_handlers(previous)


@click.group(cls=GeonpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="geonp")
@click.option("-v", "--verbose", count=True,
              help="More log output (-vv adds rasterio/GDAL debug lines); tracebacks on errors.")
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
    ctx.ensure_object(dict)
    ctx.obj.update(verbose=verbose, quiet=quiet)
    _configure(verbose, quiet)


#: The subcommands, one module of ``geonp_cli`` each, holding a command of the same name.
COMMANDS = ("train", "fill", "models", "evaluate", "batch")


def _register(names: tuple[str, ...] = COMMANDS) -> None:
    """Add the subcommands to ``cli``; a command module that fails to import is an error.

    Raises:
        ImportError: Naming the command whose module cannot be imported (never skipped
            silently: a missing command would look like a typo to the user).
    """
    for name in names:
        try:
            module = importlib.import_module(f"geonp_cli.{name}")
        except ImportError as err:
            raise ImportError(
                f"the geonp {name} command cannot be loaded ({one_line(err)}); the installation "
                "is broken: reinstall geonp"
            ) from err
        cli.add_command(verbosity_options(getattr(module, name)))


_register()


def main() -> None:
    """The ``geonp`` command: :func:`cli` in a process of its own, which it ends quickly.

    The objects a command leaves are freed by the process's exit; frozen, they are spared the
    interpreter's last collection, which walks torch's many objects (0.9-1.2 s of a process that
    imported torch, against 0.2-0.3 s: ``python -c "import torch, gc; gc.freeze()"``). Every
    output is closed and verified before a command returns, and ``atexit`` handlers still run.
    Tests call :func:`cli` in-process and leave the collector alone.
    """
    try:
        cli(prog_name="geonp")
    finally:
        gc.freeze()
