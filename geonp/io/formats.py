"""Output formats: which GDAL driver writes an output, and whether GDAL accepts the options.

:func:`check_creation_options` makes a small trial write, before any work, so that a driver, data
type and ``--co`` combination GDAL refuses fails at once with GDAL's own reason.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
import rasterio.errors
import rasterio.shutil

from geonp.errors import ConfigError
from geonp.io.profiles import COG_ONLY_OPTIONS, cog_options, output_profile

__all__ = ["OutputSpec", "check_cog_output", "check_creation_options", "holds_float32", "output_driver",
           "suffix_for"]


#: Drivers geonp writes directly (everything else is converted from a GeoTIFF at the end).
DIRECT_DRIVERS = frozenset({"GTiff"})
#: Drivers GDAL (3.10) refuses to create float32 files with: a std raster beside such an output
#: is a GeoTIFF (:func:`geonp.io.paths.default_uncertainty_path`). Found by a trial copy of a
#: float32 raster to every driver that has a file extension.
_NO_FLOAT32_DRIVERS = frozenset({
    "ADRG", "BLX", "BMP", "BYN", "CALS", "GIF", "JP2OpenJPEG", "JPEG", "KMLSUPEROVERLAY", "MBTiles", "PDF",
    "PNG", "PNM", "RMF", "SGI", "USGSDEM", "WEBP", "XPM",
})
#: Extensions a Cloud Optimized GeoTIFF may have (``--cog``).
_COG_SUFFIXES = ("", ".tif", ".tiff")


_TRIAL_MAX_SIDE = 512


class _GdalMessages(logging.Handler):
    """Collect the warnings GDAL reports through rasterio while a trial runs."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.messages.append(" ".join(record.getMessage().split()))


@contextlib.contextmanager
def _capture_gdal() -> Iterator[list[str]]:
    handler = _GdalMessages()
    env_logger = logging.getLogger("rasterio._env")
    old_level, old_propagate = env_logger.level, env_logger.propagate
    env_logger.addHandler(handler)
    env_logger.setLevel(logging.WARNING)
    env_logger.propagate = False  # the trial's warnings are geonp's business, not the terminal's
    try:
        yield handler.messages
    finally:
        env_logger.removeHandler(handler)
        env_logger.setLevel(old_level)
        env_logger.propagate = old_propagate


def _gdal_drivers() -> dict[str, str]:
    with rasterio.Env() as env:
        return dict(env.drivers())


def output_driver(path: str | os.PathLike[str], fmt: str | None = None) -> str:
    """Choose the GDAL driver of an output: ``fmt`` if given, else from the file's extension.

    Args:
        path: The output path.
        fmt: A GDAL driver short name (``-f/--format``), or None.

    Returns:
        The driver's short name (``"GTiff"`` for ``.tif``, ``.tiff`` and names without one).

    Raises:
        ConfigError: If ``fmt`` is no GDAL driver, the extension names no format GDAL knows, or
            the format is VRT (a list of other files, which holds no pixels of its own).
    """
    driver = _driver(path, fmt)
    if driver == "VRT":
        raise ConfigError(f"{os.fspath(path)}: a VRT only refers to other raster files and holds no pixels, so "
                          "geonp cannot write one; name the output .tif (or give -f GTiff).")
    return driver


def _driver(path: str | os.PathLike[str], fmt: str | None) -> str:
    if fmt:
        drivers = _gdal_drivers()
        match = {name.lower(): name for name in drivers}.get(str(fmt).lower())
        if match is None:
            raise ConfigError(f"-f/--format {fmt} is not a GDAL raster driver; use e.g. GTiff, COG, "
                              "PNG or netCDF.")
        return match
    suffix = Path(os.fspath(path)).suffix.lower()
    if suffix in ("", ".tif", ".tiff"):
        return "GTiff"
    from rasterio.drivers import driver_from_extension

    try:
        return str(driver_from_extension(os.fspath(path)))
    except ValueError:
        raise ConfigError(
            f"Cannot tell the format of {os.fspath(path)} from its extension {suffix}; name it "
            ".tif, or give the GDAL driver with -f/--format."
        ) from None


def holds_float32(driver: str) -> bool:
    """Tell whether a GDAL driver can write float32 pixels (the std raster's type).

    Args:
        driver: A GDAL driver short name.

    Returns:
        False for 8- and 16-bit image formats (PNG, JPEG, GIF, WebP...), True otherwise.
    """
    return driver not in _NO_FLOAT32_DRIVERS


def check_cog_output(path: str | os.PathLike[str], driver: str, *, role: str = "OUTPUT") -> None:
    """Refuse ``--cog`` for an output whose name or ``-f/--format`` says another format.

    ``--cog`` writes a GeoTIFF; a ``.png`` file holding one would mislead every program that
    trusts the extension.

    Args:
        path: The output path.
        driver: Its driver (:func:`output_driver`).
        role: What the output is, for the message (``"OUTPUT"``, ``"--uncertainty"``).

    Raises:
        ConfigError: If the path's extension is not ``.tif``/``.tiff`` or the driver is not
            GTiff or COG.
    """
    name = Path(os.fspath(path))
    suffix_ok = name.suffix.lower() in _COG_SUFFIXES
    if suffix_ok and driver in ("GTiff", "COG"):
        return
    if not suffix_ok:
        raise ConfigError(
            f"--cog writes a Cloud Optimized GeoTIFF, but {role} {name} is named {name.suffix}; name it "
            f"{name.stem}.tif, or drop --cog to write the format its extension names."
        )
    raise ConfigError(
        f"--cog writes a Cloud Optimized GeoTIFF, but -f/--format asks for {driver}; drop one of them."
    )


@dataclass(frozen=True)
class OutputSpec:
    """What an output raster will be, as far as GDAL's creation options care.

    Attributes:
        dtype: Numpy name of its data type.
        count: Band count.
        nodata: Nodata value, or None.
        driver: GDAL driver of the final file.
        cog: Whether it becomes a COG.
        width: Its columns (a trial write uses at most 512).
        height: Its rows (a trial write uses at most 512).
        crs: Its CRS (some COG options need one).
        transform: Its transform (None: 30 m pixels).
    """

    dtype: str
    count: int
    nodata: float | None
    driver: str = "GTiff"
    cog: bool = False
    width: int = 256
    height: int = 256
    crs: Any = "EPSG:3857"
    transform: Any = None


def check_creation_options(
    creation_options: Mapping[str, str],
    output: OutputSpec,
    *,
    what: str = "OUTPUT",
    option: str = "--co",
    names_only: bool = False,
) -> None:
    """Ask GDAL whether an output can be written with these options, before any work.

    A small file of the same type, band count and nodata is written in memory (``/vsimem``)
    through the same steps as the real output (GeoTIFF, then COG or another driver), and any
    error or creation-option warning GDAL reports is turned into a one-line ConfigError.

    Args:
        creation_options: Parsed ``--co`` (or ``--std-co``) options.
        output: The output's type, bands, nodata, driver and grid.
        what: What the output is, for the message (``"OUTPUT"``, ``"std raster"``).
        option: The option the user gave them with, for the message.
        names_only: Only check that GDAL knows every key and keyword value (for options that
            will serve rasters of several types, as in ``geonp batch``).

    Raises:
        ConfigError: If GDAL refuses the options, the type or the driver.
    """
    opts = {k.upper(): v for k, v in creation_options.items()}
    driver, cog = output.driver, output.cog
    trial = replace(output, width=max(1, min(int(output.width), _TRIAL_MAX_SIDE)),
                    height=max(1, min(int(output.height), _TRIAL_MAX_SIDE)))
    token = secrets.token_hex(6)
    # GTiff and COG are tried in memory; other drivers (netCDF, for one) need a real file.
    scratch = None if driver in DIRECT_DRIVERS or cog else tempfile.mkdtemp(prefix="geonp-trial-")
    where = "/vsimem" if scratch is None else scratch
    tmp, final = f"{where}/geonp-trial-{token}.tif", f"{where}/geonp-trial-{token}-final"
    try:
        problems = _trial_problems(opts, trial, tmp, final, names_only=names_only)
    finally:
        for name in (tmp, final + ".tif", final + suffix_for(driver)):
            with contextlib.suppress(Exception):
                rasterio.shutil.delete(name)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if problems:
        raise ConfigError(_refusal(problems, opts, output, what=what, option=option))


def _trial_problems(opts: dict[str, str], trial: OutputSpec, tmp: str, final: str, *, names_only: bool) -> list[str]:
    """Write the ``trial`` file ``tmp`` (and its ``final`` copy); what GDAL reported against it."""
    driver, cog, count, dtype = trial.driver, trial.cog, trial.count, trial.dtype
    convert = cog or driver not in DIRECT_DRIVERS
    side_w, side_h = trial.width, trial.height
    problems: list[str] = []
    with _capture_gdal() as messages, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from affine import Affine

            grid = {"width": side_w, "height": side_h, "crs": trial.crs,
                    "transform": trial.transform or Affine(30.0, 0.0, 0.0, 0.0, -30.0, 0.0)}
            profile = output_profile(grid, count=count, dtype=dtype,
                                     nodata=trial.nodata, creation_options={} if convert else opts,
                                     cog=convert)
            with rasterio.open(tmp, "w", **profile) as dst:
                dst.write(np.zeros((count, side_h, side_w), dtype=dtype))
            if cog:
                rasterio.shutil.copy(tmp, final + ".tif", driver="COG", **cog_options(opts))
            elif convert:
                rasterio.shutil.copy(tmp, final + suffix_for(driver), driver=driver, **opts)
                with rasterio.open(final + suffix_for(driver)) as back:
                    if (back.count, back.width, back.height) != (count, side_w, side_h):
                        problems.append(
                            f"its {count}-band copy reads back as {back.count} band(s) of "
                            f"{back.width}x{back.height} px (the {driver} driver splits or "
                            "changes the bands); use one band with -b")
        except ConfigError:
            raise
        except Exception as err:  # noqa: BLE001 - GDAL's refusal, reported below
            problems.extend(messages)  # GDAL's own reasons come as messages before the error
            text = " ".join(str(err).split())
            if text and "See previous exception" not in text:
                problems.append(text)
            if not problems:
                problems.append(type(err).__name__)
        problems.extend(m for m in messages if _is_option_problem(m))
        if names_only:
            problems = [p for p in problems if "creation option" in p.lower()
                        or "not recognised" in p.lower()]
    return problems


def _refusal(problems: list[str], opts: dict[str, str], output: OutputSpec, *, what: str, option: str) -> str:
    """The one-line message of a refused trial: the options, GDAL's reasons and a fix."""
    dtype, driver, cog = output.dtype, output.driver, output.cog
    shown = " ".join(f"{k}={v}" for k, v in opts.items()) or "the default options"
    target = "COG" if cog else driver
    text = "; ".join(dict.fromkeys(p.split(" in ", 1)[1] if p.startswith("CPLE_") and " in " in p else p
                                   for p in problems)).rstrip(".")
    unknown = [k for k in opts if f"creation option {k}" in text and "does not support" in text]
    if unknown and not cog and set(unknown) & COG_ONLY_OPTIONS:
        hint = "that option applies only to COG output; add --cog or drop it."
    elif what == "std raster" and driver not in DIRECT_DRIVERS and not cog:
        hint = "write the std raster as a GeoTIFF with --uncertainty NAME_std.tif."
    elif what == "std raster" and option == "--co":
        hint = ("give the std raster its own options with --std-co (for example "
                "--std-co COMPRESS=DEFLATE).")
    elif opts:
        hint = f"check the option against GDAL's {target} driver documentation."
    else:
        hint = f"write it in another format (.tif, or -f/--format) than {target}."
    lead = f"Unknown creation option {unknown[0]}: " if unknown else ""
    if opts.get("COMPRESS", "").upper() == "JPEG" and dtype not in ("uint8", "int8"):
        text = f"JPEG compression holds only 8-bit values, not {dtype} ({text})"
    subject = f"{option} {shown} cannot write" if opts else "geonp cannot write"
    return f"{lead}{subject} the {dtype} {what} as {target}: GDAL says {text}; {hint}"


def _is_option_problem(message: str) -> bool:
    low = message.lower()
    return ("creation option" in low or "not recognised" in low or "unexpected value" in low
            or "not supported" in low)


_DRIVER_SUFFIXES = {"PNG": ".png", "JPEG": ".jpg", "netCDF": ".nc", "HFA": ".img", "GPKG": ".gpkg",
                    "JP2OpenJPEG": ".jp2", "WEBP": ".webp", "ENVI": ".bin", "EHdr": ".bil"}


def suffix_for(driver: str) -> str:
    """The file extension of a driver's temporary files (``.dat`` for drivers not listed)."""
    return _DRIVER_SUFFIXES.get(driver, ".dat")
