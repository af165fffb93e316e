"""Options shared by several commands, with the same names as the library keywords."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

F = Callable[..., Any]

RASTER_SUFFIXES = (".tif", ".tiff", ".vrt", ".img", ".jp2")

model_option = click.option(
    "--model", "model", default="default", show_default=True, metavar="NAME|PATH",
    help="A built-in model name (see `geonp models`) or a model directory.",
)
device_option = click.option(
    "--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
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
            bar["bar"] = tqdm(total=total, desc=label, unit="step", dynamic_ncols=True, mininterval=5)
            bar["bar"].update(done - 1)
        bar["bar"].update(1)
        if value == value:  # not NaN
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

    def __enter__(self) -> CountBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
