"""Write output rasters safely: checked paths, sensible profiles, atomic replacement.

geonp never modifies its input and never leaves a half-written output: every file is written
to a hidden temporary file in the output's directory and moved onto its final name only when
it is complete (``os.replace`` is atomic within one file system), after it has been read back in
full (GDAL can report success for a file a full disk truncated). A filled raster and its std
raster are written as one transaction: both appear, or neither. A killed run leaves at most a
``.<name>.geonp-partial-<host>-<pid>-*`` file, never a truncated OUTPUT, and the next run that
writes the same output removes it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import rasterio
import rasterio.errors
import rasterio.shutil
from rasterio.enums import ColorInterp
from rasterio.io import DatasetReader, DatasetWriter
from rasterio.windows import Window

from geonp.errors import ConfigError, OutputError
from geonp.io.raster import check_nodata_in_range

logger = logging.getLogger(__name__)

__all__ = [
    "AtomicRasterWriter",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output_path",
    "copy_metadata",
    "finalize_cog",
    "output_profile",
    "parse_creation_options",
    "remove_stale_partials",
    "verify_raster_file",
]

#: Options of GDAL's COG driver that the GTiff driver does not take (only with ``--cog``); used
#: for a hint only, GDAL itself decides what is valid (:func:`check_creation_options`).
COG_ONLY_OPTIONS = frozenset(
    {
        "BLOCKSIZE", "LEVEL", "QUALITY", "OVERVIEWS", "OVERVIEW_RESAMPLING", "RESAMPLING",
        "OVERVIEW_COMPRESS", "OVERVIEW_PREDICTOR", "OVERVIEW_QUALITY", "OVERVIEW_COUNT",
        "TILING_SCHEME", "ADD_ALPHA", "WARP_RESAMPLING", "TARGET_SRS",
    }
)
#: Keyword-valued options whose values are upper-cased (GDAL compares them case-insensitively,
#: geonp's own defaults logic compares them as upper case).
_UPPER_VALUES = frozenset({"COMPRESS", "OVERVIEW_COMPRESS", "TILED", "SPARSE_OK", "BIGTIFF",
                           "INTERLEAVE", "PREDICTOR", "WEBP_LOSSLESS", "COPY_SRC_OVERVIEWS"})
_DEFAULT_BLOCK = 256
_PARTIAL_TAG = ".geonp-partial-"


# --------------------------------------------------------------------------------------------
# Paths


def check_output_path(
    output: str | os.PathLike[str],
    *,
    inputs: Sequence[str | os.PathLike[str]],
    overwrite: bool,
    role: str = "OUTPUT",
) -> Path:
    """Check that an output can be written without harming anything.

    Args:
        output: Path of the file to write.
        inputs: Paths this run reads; the output must be none of them.
        overwrite: Whether an existing output may be replaced.
        role: What the output is, as error messages name it (``"OUTPUT"``, ``"--quicklook"``).

    Returns:
        The absolute output path.

    Raises:
        OutputError: If the output is an input, is a directory, exists without
            ``overwrite``, or its directory is missing or not writable.
    """
    out = Path(os.fspath(output)).expanduser()
    for inp in inputs:
        if _same_file(out, Path(os.fspath(inp)).expanduser()):
            raise OutputError(
                f"{role} {out} is the input {inp}; write to another path (geonp never "
                "modifies its input)."
            )
    if out.is_dir():
        raise OutputError(
            f"{role} {out} is a directory; give a file path such as {out / 'filled.tif'}."
        )
    parent = out.parent.resolve() if str(out.parent) else Path.cwd()
    if not parent.exists():
        raise OutputError(
            f"Output directory {parent} does not exist; create it first (mkdir -p {parent})."
        )
    if not parent.is_dir():
        raise OutputError(f"Output directory {parent} is not a directory; choose another path.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(
            f"Output directory {parent} is not writable; choose another directory or fix its "
            "permissions."
        )
    if out.exists() and not overwrite:
        raise OutputError(f"{out} already exists; pass --overwrite to replace it.")
    return parent / out.name


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


# --------------------------------------------------------------------------------------------
# Creation options and profiles


def parse_creation_options(items: Sequence[str]) -> dict[str, str]:
    """Parse ``--co KEY=VALUE`` creation options (syntax only; GDAL checks them later).

    Which keys and values are valid depends on the driver and the data type, so geonp keeps no
    list of its own: :func:`check_creation_options` asks GDAL, before any work.

    Args:
        items: Strings such as ``"COMPRESS=ZSTD"``. Keys are case-insensitive.

    Returns:
        Options with upper-case keys (and upper-case values for keyword-valued options).

    Raises:
        ConfigError: If an item is not ``KEY=VALUE``.
    """
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        key, value = key.strip().upper(), value.strip()
        if not sep or not key or not value:
            raise ConfigError(
                f"Creation option {item!r} is not KEY=VALUE; write it like --co COMPRESS=ZSTD."
            )
        options[key] = value.upper() if key in _UPPER_VALUES else value
    return options


def _default_predictor(dtype: str) -> str | None:
    kind = np.dtype(dtype)
    if np.issubdtype(kind, np.integer):
        return "2"
    if np.issubdtype(kind, np.floating):
        return "3"
    return None


def output_profile(
    src_profile: Mapping[str, Any],
    *,
    count: int,
    dtype: str,
    nodata: float | None,
    creation_options: Mapping[str, str],
    cog: bool,
) -> dict[str, Any]:
    """Build the rasterio profile of a GeoTIFF output on the same grid as its source.

    Only the grid (size, CRS, transform) comes from the source; its compression, photometric
    and block layout do not, because they may not suit the output type (a JPEG-compressed RGB
    input cannot hold float values). Defaults: 256x256 tiles when the raster is at least that
    big in both directions, DEFLATE compression with the predictor that suits the type
    (horizontal differencing for integers, floating point for floats), BIGTIFF=IF_SAFER. The
    user's options override these; a user COMPRESS drops the default predictor.

    With ``cog=True`` the profile is for the temporary GTiff that :func:`finalize_cog` turns
    into a Cloud Optimized GeoTIFF; the user's options are then applied by
    :func:`finalize_cog`, not here.

    Args:
        src_profile: Profile of the source raster (needs width, height, crs, transform).
        count: Number of bands to write.
        dtype: Numpy name of the output data type.
        nodata: Nodata value to tag, or None.
        creation_options: Parsed ``--co`` options (see :func:`parse_creation_options`).
        cog: Whether the output will be converted to a COG.

    Returns:
        A profile for ``rasterio.open(path, "w", **profile)``.

    Raises:
        ConfigError: If ``nodata`` does not fit ``dtype``, a COG-only option is given without
            ``cog``, or PREDICTOR=3 is asked for an integer type.
    """
    if nodata is not None:
        check_nodata_in_range(nodata, dtype)
    width, height = int(src_profile["width"]), int(src_profile["height"])
    profile: dict[str, Any] = {
        "driver": "GTiff",
        "width": width,
        "height": height,
        "count": int(count),
        "dtype": dtype,
        "nodata": nodata,
        "crs": src_profile.get("crs"),
        "transform": src_profile.get("transform"),
        "bigtiff": "IF_SAFER",
    }
    predictor = _default_predictor(dtype)
    if cog:
        # A fast, compact scratch file; the COG driver re-tiles and recompresses it.
        profile.update(tiled=True, blockxsize=512, blockysize=512, compress="deflate", zlevel=1)
        if predictor:
            profile["predictor"] = predictor
        return profile

    cog_only = sorted(set(creation_options) & COG_ONLY_OPTIONS)
    if cog_only:
        raise ConfigError(
            f"Creation option {cog_only[0]} applies only to COG output; add --cog or drop it."
        )
    if width >= _DEFAULT_BLOCK and height >= _DEFAULT_BLOCK:
        profile.update(tiled=True, blockxsize=_DEFAULT_BLOCK, blockysize=_DEFAULT_BLOCK)
    user = {k.upper(): v for k, v in creation_options.items()}
    if "COMPRESS" not in user:
        profile["compress"] = "deflate"
        if predictor:
            profile["predictor"] = predictor
    if user.get("PREDICTOR") == "3" and not np.issubdtype(np.dtype(dtype), np.floating):
        raise ConfigError(
            f"--co PREDICTOR=3 (floating point) needs a float output, but it is {dtype}; "
            "use PREDICTOR=2."
        )
    if user.get("TILED", "YES") in {"NO", "FALSE", "OFF", "0"}:
        profile.pop("tiled", None)
        for key in ("blockxsize", "blockysize"):
            if key.upper() not in user:
                profile.pop(key, None)
    for key, value in user.items():
        profile[key.lower()] = value
    return profile


_COG_RENAMES = {"ZLEVEL": "LEVEL", "ZSTD_LEVEL": "LEVEL", "JPEG_QUALITY": "QUALITY",
                "WEBP_LEVEL": "QUALITY", "LERC_MAXZERROR": "MAX_Z_ERROR", "BLOCKXSIZE": "BLOCKSIZE"}
_COG_DROPPED = {"TILED", "BLOCKYSIZE", "INTERLEAVE", "PHOTOMETRIC", "SPARSE_OK", "NBITS",
                "GEOTIFF_VERSION"}
_COG_PREDICTOR = {"1": "NO", "2": "STANDARD", "3": "FLOATING_POINT"}


def cog_options(creation_options: Mapping[str, str]) -> dict[str, str]:
    """Translate GTiff-style ``--co`` options to the COG driver's names.

    Args:
        creation_options: Parsed ``--co`` options.

    Returns:
        Options for GDAL's COG driver (DEFLATE with a predictor unless COMPRESS is given).
    """
    options: dict[str, str] = {}
    for key, value in creation_options.items():
        key = key.upper()
        if key in _COG_DROPPED:
            logger.debug("creation option %s has no COG equivalent; ignored", key)
            continue
        if key == "PREDICTOR":
            value = _COG_PREDICTOR.get(value, value)
        options[_COG_RENAMES.get(key, key)] = value
    if "COMPRESS" not in options:
        options["COMPRESS"] = "DEFLATE"
        options.setdefault("PREDICTOR", "YES")
    options.setdefault("BIGTIFF", "IF_SAFER")
    return options


def finalize_cog(
    tmp_path: str | os.PathLike[str],
    final_path: str | os.PathLike[str],
    creation_options: Mapping[str, str],
    *,
    resampling: str | None = None,
) -> None:
    """Convert a finished GTiff into a Cloud Optimized GeoTIFF.

    ``final_path`` is written directly; :class:`AtomicRasterWriter` points it at a second
    temporary file and moves that into place. A raster that fits in one COG block gets
    overviews too (GDAL makes none by default), down to about 32 px.

    Args:
        tmp_path: The GTiff to convert (left in place).
        final_path: Where the COG goes.
        creation_options: Parsed ``--co`` options; see :func:`cog_options`.
        resampling: Overview resampling unless the options set one (``"RMS"`` for a std
            raster, where GDAL's default could make negative values).

    Raises:
        OutputError: If the disk fills up.
        rasterio.errors.RasterioError: If GDAL cannot write the COG for another reason.
    """
    options = cog_options(creation_options)
    if resampling and not {"RESAMPLING", "OVERVIEW_RESAMPLING"} & set(options):
        options["RESAMPLING"] = resampling
    if "OVERVIEW_COUNT" not in options and options.get("OVERVIEWS", "AUTO").upper() == "AUTO":
        with rasterio.open(os.fspath(tmp_path)) as src:
            width, height = src.width, src.height
        block = int(options.get("BLOCKSIZE", 512))
        if max(width, height) <= block and overview_count(width, height):
            options["OVERVIEW_COUNT"] = str(overview_count(width, height))
    try:
        rasterio.shutil.copy(os.fspath(tmp_path), os.fspath(final_path), driver="COG", **options)
    except Exception as err:
        if _is_disk_full(err):
            raise OutputError(_disk_full_message(final_path)) from err
        raise


def convert_raster(tmp_path: str | os.PathLike[str], final_path: str | os.PathLike[str], driver: str,
                   creation_options: Mapping[str, str]) -> None:
    """Copy a finished GTiff into another GDAL format (``OUTPUT.png``, ``-f netCDF``).

    Raises:
        OutputError: If the disk fills up.
    """
    try:
        rasterio.shutil.copy(os.fspath(tmp_path), os.fspath(final_path), driver=driver,
                             **dict(creation_options))
    except Exception as err:
        if _is_disk_full(err):
            raise OutputError(_disk_full_message(final_path)) from err
        raise


# --------------------------------------------------------------------------------------------
# Output formats and creation options, checked by GDAL

#: Drivers geonp writes directly (everything else is converted from a GeoTIFF at the end).
_DIRECT_DRIVERS = frozenset({"GTiff"})
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
        ConfigError: If ``fmt`` is no GDAL driver, or the extension names no format GDAL knows.
    """
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


def check_creation_options(
    creation_options: Mapping[str, str],
    *,
    dtype: str,
    count: int,
    nodata: float | None,
    driver: str = "GTiff",
    cog: bool = False,
    width: int = 256,
    height: int = 256,
    what: str = "OUTPUT",
    option: str = "--co",
    crs: Any = "EPSG:3857",
    transform: Any = None,
    names_only: bool = False,
) -> None:
    """Ask GDAL whether an output can be written with these options, before any work.

    A small file of the same type, band count and nodata is written in memory (``/vsimem``)
    through the same steps as the real output (GeoTIFF, then COG or another driver), and any
    error or creation-option warning GDAL reports is turned into a one-line ConfigError.

    Args:
        creation_options: Parsed ``--co`` (or ``--std-co``) options.
        dtype: Numpy name of the output's data type.
        count: Band count.
        nodata: Nodata value, or None.
        driver: GDAL driver of the final file.
        cog: Whether the output becomes a COG.
        width: Columns of the real output (the trial uses at most 512).
        height: Rows of the real output (the trial uses at most 512).
        what: What the output is, for the message (``"OUTPUT"``, ``"std raster"``).
        option: The option the user gave them with, for the message.
        crs: The output's CRS (some COG options need one).
        transform: The output's transform (default: 30 m pixels).
        names_only: Only check that GDAL knows every key and keyword value (for options that
            will serve rasters of several types, as in ``geonp batch``).

    Raises:
        ConfigError: If GDAL refuses the options, the type or the driver.
    """
    opts = {k.upper(): v for k, v in creation_options.items()}
    side_w, side_h = max(1, min(int(width), _TRIAL_MAX_SIDE)), max(1, min(int(height), _TRIAL_MAX_SIDE))
    convert = cog or driver not in _DIRECT_DRIVERS
    token = secrets.token_hex(6)
    # GTiff and COG are tried in memory; other drivers (netCDF, for one) need a real file.
    scratch = None if driver in _DIRECT_DRIVERS or cog else tempfile.mkdtemp(prefix="geonp-trial-")
    where = "/vsimem" if scratch is None else scratch
    tmp, final = f"{where}/geonp-trial-{token}.tif", f"{where}/geonp-trial-{token}-final"
    problems: list[str] = []
    try:
        with _capture_gdal() as messages, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                from affine import Affine

                grid = {"width": side_w, "height": side_h, "crs": crs,
                        "transform": transform or Affine(30.0, 0.0, 0.0, 0.0, -30.0, 0.0)}
                profile = output_profile(grid, count=count, dtype=dtype,
                                         nodata=nodata, creation_options={} if convert else opts,
                                         cog=convert)
                with rasterio.open(tmp, "w", **profile) as dst:
                    dst.write(np.zeros((count, side_h, side_w), dtype=dtype))
                if cog:
                    rasterio.shutil.copy(tmp, final + ".tif", driver="COG", **cog_options(opts))
                elif convert:
                    rasterio.shutil.copy(tmp, final + _suffix_for(driver), driver=driver, **opts)
                    with rasterio.open(final + _suffix_for(driver)) as back:
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
    finally:
        for name in (tmp, final + ".tif", final + _suffix_for(driver)):
            with contextlib.suppress(Exception):
                rasterio.shutil.delete(name)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if not problems:
        return
    shown = " ".join(f"{k}={v}" for k, v in opts.items()) or "the default options"
    target = "COG" if cog else driver
    text = "; ".join(dict.fromkeys(p.split(" in ", 1)[1] if p.startswith("CPLE_") and " in " in p else p
                                   for p in problems)).rstrip(".")
    unknown = [k for k in opts if f"creation option {k}" in text and "does not support" in text]
    if unknown and not cog and set(unknown) & COG_ONLY_OPTIONS:
        hint = "that option applies only to COG output; add --cog or drop it."
    elif what == "std raster" and driver not in _DIRECT_DRIVERS and not cog:
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
    raise ConfigError(f"{lead}{subject} the {dtype} {what} as {target}: GDAL says {text}; {hint}")


def _is_option_problem(message: str) -> bool:
    low = message.lower()
    return ("creation option" in low or "not recognised" in low or "unexpected value" in low
            or "not supported" in low)


_DRIVER_SUFFIXES = {"PNG": ".png", "JPEG": ".jpg", "netCDF": ".nc", "HFA": ".img", "GPKG": ".gpkg",
                    "JP2OpenJPEG": ".jp2", "WEBP": ".webp", "ENVI": ".bin", "EHdr": ".bil"}


def _suffix_for(driver: str) -> str:
    return _DRIVER_SUFFIXES.get(driver, ".dat")


def overview_count(width: int, height: int, *, smallest: int = 32) -> int:
    """Overview levels for a COG: halve until the smaller overview side would drop below ``smallest``.

    GDAL's COG driver makes no overview for a raster that fits in one block (512 px); geonp asks
    for them explicitly, so that even a small COG displays from overviews.
    """
    side, levels = max(int(width), int(height)), 0
    while side // 2 >= smallest:
        side //= 2
        levels += 1
    return levels


def copy_std_metadata(src: DatasetReader, dst: DatasetWriter, *, bands: Sequence[int]) -> None:
    """Give the std raster the bands' scale and units (a std has no offset).

    The std is in the stored values' units, so ``scale * std`` is the std in physical units,
    exactly as for the data; the offset cancels in a standard deviation.

    Args:
        src: The open input.
        dst: The open std raster, with ``len(bands)`` bands.
        bands: 1-based source band indexes, in output order.
    """
    dst.scales = tuple(src.scales[b - 1] for b in bands)
    dst.offsets = tuple(0.0 for _ in bands)
    units = tuple(src.units[b - 1] or "" for b in bands)
    if any(units):
        dst.units = units


# --------------------------------------------------------------------------------------------
# Atomic writes


def _is_disk_full(err: BaseException | None) -> bool:
    """Tell whether an error (or one it was raised from) means the disk is full."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(err).lower()
        if "no space left" in text or "free disk space" in text or "disk full" in text:
            return True
        err = err.__cause__ or err.__context__
    return False


def _disk_full_message(path: str | os.PathLike[str]) -> str:
    return (
        f"No space left on device while writing {os.fspath(path)}; free space or write "
        "elsewhere. No file was written."
    )


def _host_tag() -> str:
    """Six hex digits naming this machine (partial files on shared disks name their writer)."""
    return hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:6]


def _partial_path(final: Path, suffix: str) -> Path:
    """``.<name>.geonp-partial-<host>-<pid>-<random><suffix>`` beside ``final``."""
    owner = f"{_host_tag()}-{os.getpid()}"
    return final.with_name(f".{final.name}{_PARTIAL_TAG}{owner}-{secrets.token_hex(6)}{suffix}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    except OSError:
        return True
    return True


#: A partial file this old is a leftover whatever machine wrote it (no fill writes for a day
#: without touching its file's directory entry... but a foreign host's process cannot be asked).
STALE_PARTIAL_SECONDS = 24 * 3600


def remove_stale_partials(final: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files that killed runs left in ``final``'s directory.

    Any output's partial files are considered, not only ``final``'s: a run to another name in
    the same directory cleans up too. A file is removed when this machine wrote it and its
    process no longer runs, or when it is older than :data:`STALE_PARTIAL_SECONDS` (then
    another machine sharing the disk wrote it and is long gone). A run writing right now keeps
    its file.

    Args:
        final: The output path whose directory to clean.

    Returns:
        The paths removed.
    """
    path = Path(os.fspath(final)).expanduser().absolute()
    if not path.parent.is_dir():
        return []
    removed = []
    host = _host_tag()
    now = time.time()
    for tmp in path.parent.glob(f".*{_PARTIAL_TAG}*"):
        rest = tmp.name.split(_PARTIAL_TAG, 1)[1]
        parts = rest.split("-")
        if len(parts) < 3 or not parts[1].isdigit():
            continue
        try:
            old = now - tmp.stat().st_mtime > STALE_PARTIAL_SECONDS
        except OSError:
            continue
        mine_and_dead = parts[0] == host and not _pid_alive(int(parts[1]))
        if not (mine_and_dead or old):
            continue
        _unlink_quietly(tmp)
        if not tmp.exists():
            logger.info("removed %s, left by an interrupted run", tmp)
            removed.append(tmp)
    return removed


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Make a rename durable; best effort (not every platform can open directories)."""
    try:
        _fsync_path(path)
    except OSError:
        pass


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as err:
        logger.warning("could not remove temporary file %s: %s", path, err)


#: Bytes read at a time when a finished file is read back.
_VERIFY_CHUNK_BYTES = 32 * 2**20


def verify_raster_file(path: str | os.PathLike[str], profile: Mapping[str, Any]) -> None:
    """Read a just-written raster back, all of it, strip by strip.

    GDAL does not always report a failed write: on a full disk libtiff prints a message and
    ``close()`` returns normally, leaving a truncated file. Reading every block back (memory
    bounded by ``_VERIFY_CHUNK_BYTES``) catches that before the file gets its final name.

    Args:
        path: The finished file.
        profile: The profile it was written with (size, band count and type are checked).

    Raises:
        OutputError: If the file cannot be opened or read, or does not have the written shape.
    """
    name = os.fspath(path)
    try:
        with rasterio.open(name) as src:
            want = (int(profile["width"]), int(profile["height"]), int(profile["count"]))
            got = (src.width, src.height, src.count)
            if got != want:
                raise ValueError(f"it has {got[0]}x{got[1]} px and {got[2]} band(s), not "
                                 f"{want[0]}x{want[1]} and {want[2]}")
            block_h = max(1, src.block_shapes[0][0])
            row_bytes = src.width * src.count * np.dtype(src.dtypes[0]).itemsize
            rows = max(block_h, (_VERIFY_CHUNK_BYTES // max(row_bytes, 1)) // block_h * block_h)
            for r0 in range(0, src.height, rows):
                src.read(window=Window(0, r0, src.width, min(rows, src.height - r0)))
    except (rasterio.errors.RasterioError, OSError, ValueError) as err:
        raise _verify_failed(path, err) from err


def _free_bytes(directory: Path) -> int | None:
    try:
        st = os.statvfs(directory)
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def _verify_failed(path: str | os.PathLike[str], err: BaseException) -> OutputError:
    """The error for a written file that does not read back (most often a full disk)."""
    return _write_failed(path, err, what="the file could not be read back")


def _is_gdal_error(err: BaseException) -> bool:
    """Tell whether an exception is rasterio's or GDAL's own (``RasterioIOError``, ``CPLE_*``)."""
    return type(err).__module__.startswith("rasterio")


#: Free bytes below which a failed write is taken for a full disk.
_NEARLY_FULL = 4 * 2**20


def _write_failed(path: str | os.PathLike[str], err: BaseException, *, what: str = "") -> OutputError:
    """One-line error for a failed write; a full disk (or nearly full) is named as such.

    GDAL often reports a full disk only indirectly ("IO error writing tag data", or a file
    that will not open afterwards), so little free space left counts as a full disk too.
    """
    free = _free_bytes(Path(os.fspath(path)).parent)
    if _is_disk_full(err) or (free is not None and free < _NEARLY_FULL):
        return OutputError(_disk_full_message(path))
    text = " ".join(str(err).split()) or type(err).__name__
    cause = err.__cause__ or err.__context__
    if "See previous exception" in text and cause is not None:
        text = " ".join(str(cause).split()) or text
    return OutputError(
        f"Writing {os.fspath(path)} failed: {what + ' ' if what else ''}({text}); check the disk "
        "and the path, and run again. No file was written."
    )


def _commit(tmp: Path, final: Path, *, overwrite: bool) -> None:
    """Move a finished temporary file onto its final name."""
    if overwrite:
        os.replace(tmp, final)
        return
    try:
        # A hard link fails if the target appeared meanwhile: no-clobber and atomic.
        os.link(tmp, final)
    except FileExistsError as err:
        raise OutputError(
            f"{final} already exists (it appeared while geonp was writing); pass --overwrite "
            "to replace it."
        ) from err
    except OSError:
        if final.exists():
            raise OutputError(f"{final} already exists; pass --overwrite to replace it.") from None
        os.replace(tmp, final)
        return
    tmp.unlink()


#: The AtomicRasterWriters open in each thread, outermost first (nested writers commit together).
_OPEN_WRITERS = threading.local()


def _open_writers() -> list[AtomicRasterWriter]:
    stack = getattr(_OPEN_WRITERS, "stack", None)
    if stack is None:
        stack = _OPEN_WRITERS.stack = []
    return stack


class AtomicRasterWriter:
    r"""Write a raster to a temporary file and move it onto its final path when complete.

    On entering, a hidden file ``.<name>.geonp-partial-<host>-<pid>-<random>.tif`` is created
    in the output's directory and its rasterio writer is returned (temporary files that killed
    runs of this machine left for the same output are deleted first). On a clean exit the
    writer is closed, converted to COG if asked, read back in full (GDAL can silently truncate
    a file on a full disk), flushed to disk and moved onto the final path. On any exception,
    KeyboardInterrupt included, the temporary file is deleted and the exception propagates; a
    full disk becomes :class:`~geonp.errors.OutputError`. Either way no partial output
    remains. A ``.aux.xml`` sidecar GDAL writes for metadata the TIFF cannot hold is moved
    along with the raster.

    Writers nested in one thread form one transaction: an inner writer that finishes while an
    outer one is still open keeps its finished temporary file until the outer one finishes,
    then both are moved into place (inner ones first); if the outer one fails, neither
    appears. So a filled raster and its std raster appear together or not at all.

    Example:
        >>> with AtomicRasterWriter("filled.tif", profile, overwrite=False) as dst, \
        ...         AtomicRasterWriter("filled_std.tif", std_profile, overwrite=False) as dstd:
        ...     dst.write(data)
        ...     dstd.write(std)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        profile: Mapping[str, Any],
        *,
        overwrite: bool,
        cog: bool = False,
        creation_options: Mapping[str, str] | None = None,
        driver: str | None = None,
        overview_resampling: str | None = None,
    ) -> None:
        """Prepare the writer (nothing is created until the context is entered).

        Args:
            path: Final output path.
            profile: rasterio profile (see :func:`output_profile`).
            overwrite: Whether an existing file at ``path`` may be replaced.
            cog: Convert to a Cloud Optimized GeoTIFF before moving into place.
            creation_options: Parsed ``--co`` options for the COG conversion (only with
                ``cog=True``) or the conversion to another driver.
            driver: GDAL driver of the final file; default from the path's extension
                (:func:`output_driver`). Other drivers than GTiff are written as a GeoTIFF
                and converted when complete.
            overview_resampling: COG overview resampling (``"RMS"`` for std rasters).
        """
        self.path = Path(os.fspath(path)).expanduser().absolute()
        self.profile = dict(profile)
        self.overwrite = overwrite
        self.cog = cog
        self.creation_options = dict(creation_options or {})
        self.driver = "COG" if cog else (driver or output_driver(self.path))
        self.overview_resampling = overview_resampling
        self.temp_path: Path | None = None
        self._dst: DatasetWriter | None = None
        self._extra_temps: list[Path] = []
        self._ready: Path | None = None
        self._pending: list[AtomicRasterWriter] = []

    def __enter__(self) -> DatasetWriter:
        """Create the temporary file and return its open writer."""
        if not self.overwrite and self.path.exists():
            raise OutputError(f"{self.path} already exists; pass --overwrite to replace it.")
        if not self.path.parent.is_dir():
            raise OutputError(
                f"Output directory {self.path.parent} does not exist; create it first."
            )
        remove_stale_partials(self.path)
        self.temp_path = _partial_path(self.path, ".tif")
        try:
            self._dst = rasterio.open(self.temp_path, "w", **self.profile)
        except Exception as err:
            self._cleanup()
            if _is_disk_full(err):
                raise OutputError(_disk_full_message(self.path)) from err
            raise
        _open_writers().append(self)
        return self._dst

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        """Commit the file (with the nested writers' files) on success; delete them on failure."""
        stack = _open_writers()
        if self in stack:
            stack.remove(self)
        outer = stack[-1] if stack else None
        dst, self._dst = self._dst, None
        if exc is not None:
            # Measured before the partial file is removed: afterwards the disk has room again.
            free = _free_bytes(self.path.parent)
            if dst is not None:
                try:
                    dst.close()
                except Exception as close_err:  # the original error matters more
                    logger.debug("closing %s after an error failed: %s", self.temp_path, close_err)
            self._cleanup()
            write_error = _is_gdal_error(exc) and (
                "write failed" in str(exc).lower()
                or (self.temp_path is not None and self.temp_path.name in str(exc)))
            if _is_disk_full(exc) or (write_error and free is not None and free < _NEARLY_FULL):
                raise OutputError(_disk_full_message(self.path)) from exc
            if write_error:
                raise _write_failed(self.path, exc) from exc  # GDAL failed writing this file
            return False
        try:
            if dst is not None:
                dst.close()
            self._prepare()
            if outer is not None:
                outer._pending.append(self)  # committed (or deleted) with the outer writer
                return False
            self._commit_all()
        except BaseException as err:
            self._cleanup()
            if isinstance(err, OutputError) or not isinstance(err, Exception):
                raise
            raise _write_failed(self.path, err) from err
        return False

    def _prepare(self) -> None:
        """Close-time work short of the rename: COG conversion, read-back check, fsync."""
        assert self.temp_path is not None, "AtomicRasterWriter used outside a with block"
        ready = self.temp_path
        if self.cog or self.driver not in _DIRECT_DRIVERS:
            suffix = ".tif" if self.cog else (self.path.suffix or _suffix_for(self.driver))
            converted = _partial_path(self.path, suffix)
            self._extra_temps.append(converted)
            if self.cog:
                finalize_cog(self.temp_path, converted, self.creation_options,
                             resampling=self.overview_resampling)
            else:
                convert_raster(self.temp_path, converted, self.driver, self.creation_options)
            _unlink_quietly(self.temp_path)
            _unlink_quietly(_aux_path(self.temp_path))
            ready = converted
        try:
            verify_raster_file(ready, self.profile)
        except OutputError as err:  # name the output the user asked for, not the partial file
            raise _verify_failed(self.path, err.__cause__ or err) from err
        _fsync_path(ready)
        self._ready = ready

    def _writers(self) -> list[AtomicRasterWriter]:
        """This writer's nested writers (depth first), then itself: the commit order."""
        out: list[AtomicRasterWriter] = []
        for inner in self._pending:
            out.extend(inner._writers())
        out.append(self)
        return out

    def _commit_all(self) -> None:
        writers = self._writers()
        if len(writers) > 1:
            for w in writers:  # no-clobber check before moving anything
                if not w.overwrite and w.path.exists():
                    raise OutputError(f"{w.path} already exists (it appeared while geonp was "
                                      "writing); pass --overwrite to replace it.")
        done: list[AtomicRasterWriter] = []
        try:
            for w in writers:
                w._move_into_place()
                done.append(w)
        except BaseException:
            for w in done:  # best effort: take back the new files that did not replace any
                if not w.overwrite:
                    _unlink_quietly(w.path)
            raise
        for parent in {w.path.parent for w in writers}:
            _fsync_dir(parent)

    def _move_into_place(self) -> None:
        assert self._ready is not None, "AtomicRasterWriter committed before it was prepared"
        _commit(self._ready, self.path, overwrite=self.overwrite)
        aux = _aux_path(self._ready)
        final_aux = _aux_path(self.path)
        if aux.exists():
            os.replace(aux, final_aux)
        elif final_aux.exists():
            # Left by the file just replaced: it would now describe the wrong raster.
            _unlink_quietly(final_aux)

    def _cleanup(self) -> None:
        for inner in self._pending:
            inner._cleanup()
        self._pending = []
        for path in [self.temp_path, *self._extra_temps]:
            if path is not None:
                _unlink_quietly(path)
                _unlink_quietly(_aux_path(path))


def _aux_path(path: Path) -> Path:
    return path.with_name(path.name + ".aux.xml")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write bytes to a file atomically (temporary file in the same directory, then replace).

    Args:
        path: Final path; an existing file is replaced.
        data: The content.

    Raises:
        OutputError: If the disk is full (no file is left behind).
    """
    final = Path(os.fspath(path)).expanduser().absolute()
    tmp = _partial_path(final, ".tmp")
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException as err:
        _unlink_quietly(tmp)
        if _is_disk_full(err):
            raise OutputError(_disk_full_message(final)) from err
        raise
    _fsync_dir(final.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 text to a file atomically (see :func:`atomic_write_bytes`).

    Args:
        path: Final path; an existing file is replaced.
        text: The content.

    Raises:
        OutputError: If the disk is full (no file is left behind).
    """
    atomic_write_bytes(path, text.encode("utf-8"))


# --------------------------------------------------------------------------------------------
# Metadata

#: Band tags that describe the old pixel values and would be wrong after filling.
_STALE_TAG_PREFIXES = ("STATISTICS_",)
#: Colour interpretations not copied: alpha would hide the filled pixels, palette needs a
#: colour table that a filled band no longer matches.
_SKIPPED_COLORINTERP = frozenset({ColorInterp.alpha, ColorInterp.palette})


def copy_metadata(src: DatasetReader, dst: DatasetWriter, *, bands: Sequence[int]) -> None:
    """Copy descriptive metadata from the input to an output of the selected bands.

    Copies dataset tags, ground control points and RPCs (a raster georeferenced by GCPs has
    no CRS or transform of its own), and per band: description, tags (except
    ``STATISTICS_*``, which the fill makes stale), scale, offset, unit and colour
    interpretation (except alpha and palette). Output band ``i`` (1-based) receives the
    metadata of source band ``bands[i-1]``. A source without any georeferencing is logged as
    a warning: geonp fills it in pixel units, and the output has none either.

    Args:
        src: The open input.
        dst: The open output (mode "w"), with ``len(bands)`` bands, or one more: an alpha band
            written after them (its colour interpretation is set to alpha).
        bands: 1-based source band indexes, in output order.
    """
    dst.update_tags(**src.tags())
    gcps, gcp_crs = src.gcps
    if gcps:
        dst.gcps = (gcps, gcp_crs)
    if src.rpcs is not None:
        dst.rpcs = src.rpcs
    if src.crs is None and not gcps and src.rpcs is None:
        logger.warning(
            "%s has no CRS; it is filled in pixel units and the output has no CRS either "
            "(assign one with gdal_edit.py -a_srs EPSG:<code>)", src.name
        )
    for out_band, band in enumerate(bands, start=1):
        description = src.descriptions[band - 1]
        if description:
            dst.set_band_description(out_band, description)
        tags = {
            k: v for k, v in src.tags(band).items() if not k.startswith(_STALE_TAG_PREFIXES)
        }
        if tags:
            dst.update_tags(out_band, **tags)
    extra = dst.count - len(bands)  # an alpha band geonp writes after the data bands
    dst.scales = tuple(src.scales[b - 1] for b in bands) + (1.0,) * extra
    dst.offsets = tuple(src.offsets[b - 1] for b in bands) + (0.0,) * extra
    units = tuple(src.units[b - 1] or "" for b in bands) + ("",) * extra
    if any(units):
        dst.units = units
    interp = [src.colorinterp[b - 1] for b in bands] + list(dst.colorinterp[len(bands):])
    if extra:
        interp[-1] = ColorInterp.alpha
    if not any(ci in _SKIPPED_COLORINTERP for ci in interp[:len(bands)]) and interp != list(dst.colorinterp):
        try:
            dst.colorinterp = interp
        except (rasterio.errors.RasterioError, ValueError) as err:
            logger.debug("colour interpretation %s not copied: %s", interp, err)
