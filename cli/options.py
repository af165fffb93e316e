"""Options shared by several commands, with the same names as the library keywords."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import click

from geonp.config import CATEGORICAL, DEVICES, QUERY_MODES, REFERENCE_FITS, FillConfig

F = Callable[..., Any]

RASTER_SUFFIXES = (".tif", ".tiff", ".vrt", ".img", ".jp2")

model_option = click.option(
    "--model", "model", default=None, metavar="NAME|PATH",
    help="A built-in model name (see `geonp models`) or a model directory [default: default; multidate "
         "with --reference].",
)
device_option = click.option(
    "--device", type=click.Choice(DEVICES), default=FillConfig.device, show_default=True,
    help="Where the model runs; auto = CUDA when available.",
)
nodata_option = click.option(
    "--nodata", type=float, default=None, metavar="V",
    help="Nodata value to use when the file has no (or a wrong) nodata tag.",
)
band_option = click.option(
    "-b", "--band", "bands", type=click.IntRange(min=1), multiple=True,
    help="Band to use (1-based, repeatable); default all bands.",
)
overwrite_option = click.option("--overwrite", is_flag=True, help="Replace outputs that exist.")


def _fill_option_list() -> list[F]:
    """The click options of every FillConfig field, with its defaults (declared once, there)."""
    d = FillConfig()
    return [
        model_option, nodata_option, band_option, device_option,
        click.option("--tile-size", type=click.IntRange(min=4), default=d.tile_size,
                     help="Tile core edge (pixels) [default: the model's training core size, 48 for the "
                          "default model]."),
        click.option("--overlap", type=click.IntRange(min=0), default=d.overlap,
                     help="Tile blend margin (pixels) [default: the model's; 16 for single-date models, 2 for "
                          "multidate]."),
        click.option("--max-context", type=click.IntRange(min=1), default=d.max_context,
                     help="Observed pixels per tile, nearest first [default: as the model was trained, 256 "
                          "for the default model]."),
        click.option("--search-radius", type=click.IntRange(min=1), default=d.search_radius,
                     help="How far (pixels) a tile looks for context [default: as the model was trained, 512 "
                          "for the default model, 128 for multidate]."),
        click.option("--max-distance", type=float, default=d.max_distance, metavar="PIXELS",
                     help="Leave gaps farther than this from observed pixels as nodata (like gdal_fillnodata -md)."),
        click.option("--block-size", type=click.IntRange(min=16), default=d.block_size, show_default=True,
                     help="Pixels per read/write block, at most (a small raster's are cut smaller for the worker "
                          "processes); memory grows with its square."),
        click.option("--batch-rows", type=click.IntRange(min=1), default=d.batch_rows,
                     help="Query rows (tiles x gap pixels) per model call; memory grows with it [default: 4096 "
                          "on the CPU, 32768 on CUDA]."),
        click.option("--co", "creation_options", multiple=True, metavar="KEY=VALUE",
                     help="GDAL creation option of OUTPUT, and of the std raster unless --std-co is given "
                          "(repeatable; checked by GDAL before any work)."),
        click.option("--std-co", "std_creation_options", multiple=True, metavar="KEY=VALUE",
                     callback=none_if_empty, help="GDAL creation option of the std raster (repeatable)."),
        click.option("--cog", is_flag=True, help="Write Cloud Optimized GeoTIFFs (outputs named .tif)."),
        overwrite_option,
        click.option("--fill-outside", is_flag=True,
                     help="Also fill gaps outside the data footprint: the scene's nodata collar beyond a long "
                          "straight edge of the data, which stays nodata by default."),
        click.option("--categorical", type=click.Choice(CATEGORICAL), default=d.categorical,
                     show_default=True,
                     help="Class rasters: auto = refuse a raster with a colour table; nearest = fill each gap with "
                          "the class of the nearest observed pixel (no model; std 0, tagged as no std); "
                          "continuous = fill it with the model as measurements."),
        click.option("--reference-fit", type=click.Choice(REFERENCE_FITS), default=d.reference_fit,
                     show_default=True,
                     help="With --reference: regression = where a reference sees a gap pixel, weigh the "
                          "model's fill with the reference's per-band regression line, corrected by its error on "
                          "similar pixels nearby; none = references are only context of the multi-date model."),
        click.option("--queries", type=click.Choice(QUERY_MODES), default=d.queries, show_default=True,
                     help="lattice = predict gap pixels near data each and read deeper ones off a lattice of "
                          "predictions (faster); every = predict every gap pixel in every overlapping tile."),
    ]


def none_if_empty(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...] | None:
    """An unused repeatable option means "not given" (None), not "no values"."""
    return value or None


def check_dates(ctx: click.Context, param: click.Parameter, value: str | tuple[str, ...] | None) -> Any:
    """Refuse a date option that is not a date (``--date yesterday``) before any work; unused = None.

    Raises:
        ConfigError: naming the option and the forms it takes (:func:`geonp.parse_date`).
    """
    if value:
        from geonp import parse_date

        for text in (value,) if isinstance(value, str) else value:
            parse_date(text, option=param.opts[0])
    return value or None


def fill_config_options(f: F) -> F:
    """Add every fill option (the fields of :class:`geonp.config.FillConfig`) to a command."""
    for option in reversed(_fill_option_list()):
        f = option(f)
    return f


workers_help = ("Worker processes: blocks of the raster in parallel [default: one per CPU core for large "
                "fills on the CPU, else 1].")


def expand_rasters(paths: tuple[str, ...]) -> list[str]:
    """Files as given; directories expanded to the rasters directly inside them (sorted)."""
    out: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(str(f) for f in path.iterdir() if f.suffix.lower() in RASTER_SUFFIXES)
            if not found:
                raise click.BadParameter(f"directory {p} holds no raster files ({', '.join(RASTER_SUFFIXES)})")
            out.extend(found)
        else:
            out.append(p)
    return out


def progress_bar(quiet: bool, label: str) -> tuple[Callable[[int, int, float], None], Callable[[], None]]:
    """A tqdm progress callback ``(done, total, loss)`` and a closer; silent when quiet."""
    if quiet:
        return (lambda done, total, value: None), (lambda: None)
    from tqdm import tqdm

    bar: dict[str, Any] = {}

    def update(done: int, total: int, value: float) -> None:
        if "bar" not in bar:
            # a resumed run starts at its step: initial= keeps those steps out of the rate and ETA
            bar["bar"] = tqdm(total=total, initial=done - 1, desc=label, unit="step", dynamic_ncols=True,
                              mininterval=5)
        bar["bar"].update(1)
        if not math.isnan(value):
            bar["bar"].set_postfix(nll=f"{value:.3f}")

    def close() -> None:
        if "bar" in bar:
            bar["bar"].close()

    return update, close


class CountBar:
    """A ``(done, total)`` progress callback drawing a tqdm bar on first use; silent when quiet.

    Use as a context manager so the bar is closed even when the command fails.
    """

    def __init__(self, quiet: bool, label: str, unit: str, *, leave: bool = True) -> None:
        """A bar that shows nothing when ``quiet``; it opens on the first update."""
        self.quiet, self.label, self.unit, self.leave = quiet, label, unit, leave
        self.bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        """Move the bar to ``done`` of ``total``."""
        if self.quiet:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.label, unit=self.unit, dynamic_ncols=True, leave=self.leave)
        self.bar.total = total
        self.bar.update(done - self.bar.n)

    def stage(self, label: str, unit: str) -> None:
        """Close this bar; the next update opens one for the next step of the command."""
        if self.bar is not None:
            self.bar.close()
        self.bar, self.label, self.unit = None, label, unit

    def __enter__(self) -> Self:
        """The bar itself (it opens on the first update)."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the bar if it opened."""
        if self.bar is not None:
            self.bar.close()
