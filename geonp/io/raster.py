"""Open input rasters and describe them.

:func:`open_raster` checks that a file is a raster whose pixels can be read; :func:`raster_info`
describes it without its pixels. Windows of it are read by :mod:`geonp.io.windows`.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
import rasterio.errors
from affine import Affine
from rasterio.enums import MaskFlags
from rasterio.io import DatasetReader
from rasterio.windows import Window

from geonp.errors import ConfigError, InputRasterError, one_line
from geonp.io.alpha import tagged_alpha
from geonp.io.remote import is_virtual, remote_failure
from geonp.io.validity import refuse_complex

logger = logging.getLogger(__name__)

__all__ = ["RasterInfo", "alpha_band_is_mask", "cap_gdal_cache", "check_nodata_in_range", "gdal_cache_bytes",
           "gdal_cache_env", "has_internal_mask", "open_raster", "raster_info", "select_bands", "set_gdal_cache"]


#: GDAL's block cache (MiB) where geonp reads and writes rasters. GDAL's default, 5 % of the
#: machine's memory, lets a process grow by every block it has visited, and geonp visits each once.
GDAL_CACHE_MB = 128
#: GDAL's block cache (MiB) of a fill's worker processes, which only read: each block once, with
#: its halo. At 128 MB a (spawned) worker of an 8192² fill peaked at 775 MB against 590 at 2048²,
#: at 32 at 712 against 588 (``python benchmarks/fill.py --skip-crop``). The main process writes
#: and keeps :data:`GDAL_CACHE_MB`: a striped output's partial strips wait there for their row.
WORKER_GDAL_CACHE_MB = 32
_GDAL_CACHE_BYTES = GDAL_CACHE_MB * 2**20  # rasterio and set_gdal_config take bytes


def gdal_cache_env() -> rasterio.Env:
    """A ``rasterio.Env`` with GDAL's block cache at :data:`GDAL_CACHE_MB`.

    rasterio hands ``GDAL_CACHEMAX`` to GDAL in bytes: ``rasterio.Env(GDAL_CACHEMAX=128)`` is a
    cache of 128 bytes.
    """
    return rasterio.Env(GDAL_CACHEMAX=_GDAL_CACHE_BYTES)


@functools.cache
def cap_gdal_cache() -> bool:
    """Hold this process's GDAL block cache to :data:`GDAL_CACHE_MB`, unless its environment sets ``GDAL_CACHEMAX``.

    For Dask workers filling a cube read from files: each chunk is read once (a Dask key), so
    the cache keeps nothing of use; at GDAL's default it held about 300 MB of each worker of a
    2048² x 12-date cube. Runs once per process.

    Returns:
        Whether the cache was capped.
    """
    if "GDAL_CACHEMAX" in os.environ:
        return False
    set_gdal_cache(GDAL_CACHE_MB)
    return True


def set_gdal_cache(mib: int) -> None:
    """Set this process's GDAL block cache to ``mib`` MiB (rasterio takes bytes), also after GDAL started.

    Inside a ``rasterio.Env`` through its options, which every ``rasterio.open`` applies again (a
    fill's forked workers run in their parent's: GDAL's option alone held until their first open).
    """
    if rasterio.env.hasenv():
        rasterio.env.setenv(GDAL_CACHEMAX=mib * 2**20)  # sets GDAL's option as well
    else:
        rasterio.env.set_gdal_config("GDAL_CACHEMAX", mib * 2**20)


def gdal_cache_bytes() -> tuple[int, int] | None:
    """GDAL's block cache in this process, ``(in use, limit)`` in bytes; None where its library is not found.

    Read from the libgdal that rasterio loaded (found in ``/proc/self/maps``: Linux), since
    rasterio reports only the ``GDAL_CACHEMAX`` option it was given, not what GDAL made of it.
    """
    import ctypes

    try:
        with open("/proc/self/maps") as maps:
            libs = {line.split()[-1] for line in maps if "libgdal" in line.rsplit("/", 1)[-1]}
    except OSError:
        return None
    if not libs:
        return None
    gdal = ctypes.CDLL(min(libs))
    gdal.GDALGetCacheUsed64.restype = gdal.GDALGetCacheMax64.restype = ctypes.c_int64
    return gdal.GDALGetCacheUsed64(), gdal.GDALGetCacheMax64()


#: File name endings that promise a GeoTIFF, and the GDAL drivers that keep that promise.
_TIFF_SUFFIXES = (".tif", ".tiff")
_TIFF_DRIVERS = frozenset({"GTiff", "COG", "LIBERTIFF"})


def open_raster(path: str | os.PathLike[str], *, role: str = "Input raster") -> DatasetReader:
    """Open a raster read-only and check that its pixels can actually be read.

    GDAL opens many damaged GeoTIFFs without complaint and only fails when a block is read,
    which would be halfway through a long fill. So besides opening, this reads the first and the
    last block of every band, so that a truncated file fails here with a clear message.

    A file named ``.tif``/``.tiff`` must really be a GeoTIFF: a JPEG or PNG renamed to ``.tif``
    is refused, since it is almost always a mistake (and such files carry no georeferencing).

    Args:
        path: Path of the raster (any format GDAL reads; ``/vsi...`` paths are passed through).
        role: What the file is, as error messages name it (``"Input raster"``, ``"Mask"``).

    Returns:
        The open dataset. The caller closes it (use it as a context manager).

    Raises:
        InputRasterError: If the path does not exist, is a directory, an empty or unreadable
            file, is not a raster GDAL can read, is named ``.tif`` but holds another format, holds
            complex pixels, or its pixels cannot be read (truncated or corrupt file).
    """
    name = os.fspath(path)
    if not is_virtual(name):
        _check_file(name, role)
    src = _open_dataset(name, role)
    try:
        if src.count == 0 or src.width == 0 or src.height == 0:
            raise InputRasterError(
                f"{role} {name} has no pixels ({src.count} bands, {src.width}x"
                f"{src.height}); it may be a vector or container file. Give a raster file."
            )
        refuse_complex(src.dtypes[0], f"{role} {name}")
        suffix = Path(name).suffix.lower()
        if suffix in _TIFF_SUFFIXES and src.driver not in _TIFF_DRIVERS:
            raise InputRasterError(
                f"{role} {name} is named {suffix} but is not a GeoTIFF: GDAL reads it as "
                f"{_driver_name(src.driver)} (driver {src.driver}), so it was probably renamed; "
                f"convert it with `gdal_translate -of GTiff {name} converted.tif`."
            )
        _probe_blocks(src)
    except InputRasterError:
        src.close()
        raise
    except (rasterio.errors.RasterioError, OSError, ValueError) as err:
        src.close()
        remote = remote_failure(name, one_line(err, causes=True), role=role)
        if remote is not None:
            raise remote from err
        raise InputRasterError(
            f"{role} {name} is truncated or corrupt: reading its pixels failed "
            f"({one_line(err, causes=True)}); re-download or re-create it."
        ) from err
    return src


def _check_file(name: str, role: str) -> None:
    """Refuse a local path that is missing, a directory, empty or unreadable."""
    p = Path(name)
    if not p.exists():
        raise InputRasterError(f"{role} {name} does not exist; check the path.")
    if p.is_dir():
        raise InputRasterError(
            f"{role} {name} is a directory, not a raster file; give the path of a "
            "GeoTIFF (use `geonp batch` to process a directory)."
        )
    if p.stat().st_size == 0:
        raise InputRasterError(
            f"{role} {name} is an empty file (0 bytes); re-download or re-create it."
        )
    if not os.access(p, os.R_OK):
        raise InputRasterError(
            f"{role} {name} is not readable (permission denied); fix its permissions "
            f"(chmod u+r {name})."
        )


def _open_dataset(name: str, role: str) -> DatasetReader:
    """Open ``name`` with GDAL, turning its refusal into an InputRasterError that says why."""
    try:
        src = rasterio.open(name, "r")
    except rasterio.errors.RasterioIOError as err:
        text = one_line(err, causes=True)
        remote = remote_failure(name, text, role=role)
        if remote is not None:
            raise remote from err
        if "not recognized as" in text or "not a supported file format" in text:
            raise InputRasterError(
                f"{role} {name} is not a raster GDAL can read ({text}); give a GeoTIFF "
                "or another GDAL raster format."
            ) from err
        raise InputRasterError(
            f"{role} {name} is truncated or corrupt: GDAL cannot open it ({text}); "
            "re-download or re-create it."
        ) from err
    except (rasterio.errors.RasterioError, OSError, ValueError) as err:
        raise InputRasterError(
            f"{role} {name} cannot be opened ({one_line(err, causes=True)}); check that it is a "
            "valid raster."
        ) from err
    return src


def _driver_name(driver: str) -> str:
    """A reader-friendly name of a GDAL driver's format (``"a JPEG image"``)."""
    names = {"JPEG": "a JPEG image", "PNG": "a PNG image", "GIF": "a GIF image",
             "BMP": "a BMP image", "WEBP": "a WebP image", "JP2OpenJPEG": "a JPEG 2000 image"}
    return names.get(driver, f"a {driver} file")


def _probe_blocks(src: DatasetReader) -> None:
    """Read a corner of the first and of the last block of every band (raises if unreadable).

    At most 256x256 pixels per corner come back, so a raster stored as one huge strip costs a
    decode but no large array.
    """
    block_h, block_w = src.block_shapes[0]
    block_h = max(1, min(block_h, src.height, _PROBE))
    block_w = max(1, min(block_w, src.width, _PROBE))
    first = Window(0, 0, block_w, block_h)
    last = Window(src.width - block_w, src.height - block_h, block_w, block_h)
    for window in (first, last):
        src.read(window=window)


_PROBE = 256


@dataclass(frozen=True)
class RasterInfo:
    """What geonp needs to know about a raster, without its pixels.

    Attributes:
        path: The dataset's name as GDAL knows it.
        width: Number of columns.
        height: Number of rows.
        count: Number of bands.
        dtype: Numpy name of the data type shared by all bands (e.g. ``"uint16"``).
        nodata: The nodata value tagged on the file, or None.
        crs: The coordinate reference system as WKT, or None when the file has none.
        transform: Affine transform from pixel (col, row) to CRS coordinates.
        profile: The rasterio profile (driver, dtype, size, CRS, transform, creation options).
        descriptions: Per-band descriptions (None where unset), one per band.
        tags: Dataset tags of the default metadata domain.
        band_tags: Per-band tags of the default metadata domain, one dict per band.
        has_internal_mask: True when some band's validity comes from a GDAL mask band
            (per-dataset mask) or an alpha band rather than from the nodata value. A band
            tagged alpha that holds data (:mod:`geonp.io.alpha`) masks nothing.
    """

    path: str
    width: int
    height: int
    count: int
    dtype: str
    nodata: float | None
    crs: str | None
    transform: Affine
    profile: dict[str, Any]
    descriptions: tuple[str | None, ...]
    tags: dict[str, str]
    band_tags: tuple[dict[str, str], ...]
    has_internal_mask: bool


def has_internal_mask(flags: Sequence[MaskFlags], *, alpha_is_mask: bool = True) -> bool:
    """Tell whether a band's validity comes from a GDAL mask band or an alpha band.

    Args:
        flags: The band's GDAL mask flags (``src.mask_flag_enums[i]``).
        alpha_is_mask: Whether the raster's alpha band is a mask
            (:func:`geonp.io.alpha.tagged_alpha`); when it holds data, the mask GDAL derives
            from it does not count.
    """
    if MaskFlags.alpha in flags:  # GDAL sets per_dataset too for an alpha band's mask
        return alpha_is_mask
    return MaskFlags.per_dataset in flags


def alpha_band_is_mask(src: DatasetReader) -> bool:
    """False when GDAL masks bands with an alpha band that holds data (:mod:`geonp.io.alpha`)."""
    if not any(MaskFlags.alpha in f for f in src.mask_flag_enums):
        return True  # no mask from an alpha band: nothing to sample
    alpha = tagged_alpha(src)
    return alpha is None or alpha.is_mask


def raster_info(src: DatasetReader) -> RasterInfo:
    """Describe an open raster.

    Args:
        src: An open dataset (see :func:`open_raster`).

    Returns:
        The raster's grid, type, nodata, CRS and metadata.
    """
    return RasterInfo(
        path=str(src.name),
        width=int(src.width),
        height=int(src.height),
        count=int(src.count),
        dtype=str(src.dtypes[0]),
        nodata=None if src.nodata is None else float(src.nodata),
        crs=src.crs.to_wkt() if src.crs else None,
        transform=src.transform,
        profile=dict(src.profile),
        descriptions=tuple(src.descriptions),
        tags=dict(src.tags()),
        band_tags=tuple(dict(src.tags(b)) for b in range(1, src.count + 1)),
        has_internal_mask=_has_any_internal_mask(src),
    )


def _has_any_internal_mask(src: DatasetReader) -> bool:
    """Whether some band's validity comes from a mask band or an alpha band that is a mask."""
    alpha_is_mask = alpha_band_is_mask(src)
    return any(has_internal_mask(f, alpha_is_mask=alpha_is_mask) for f in src.mask_flag_enums)


def select_bands(info: RasterInfo, bands: Sequence[int] | None) -> list[int]:
    """Turn the user's ``--band`` choice into a list of 1-based band indexes.

    Args:
        info: The raster the bands belong to.
        bands: 1-based band indexes in the order wanted, or None for all bands.

    Returns:
        The 1-based band indexes.

    Raises:
        ConfigError: If a band is out of range, repeated, or the list is empty.
    """
    if bands is None:
        return list(range(1, info.count + 1))
    chosen = [int(b) for b in bands]
    if not chosen:
        raise ConfigError(
            f"No band selected for {info.path}; pass --band 1..{info.count} or omit --band "
            "to use all bands."
        )
    for b in chosen:
        if b < 1 or b > info.count:
            raise ConfigError(
                f"--band {b} is out of range: {info.path} has {info.count} band"
                f"{'s' if info.count != 1 else ''} (1..{info.count}); pick bands in that range."
            )
    dupes = sorted({b for b in chosen if chosen.count(b) > 1})
    if dupes:
        raise ConfigError(
            f"--band {dupes[0]} is given more than once ({chosen}); give each band once."
        )
    return chosen


def check_nodata_in_range(nodata: float, dtype: str) -> None:
    """Check that a nodata value can be stored in a data type.

    A nodata value the type cannot hold (``-1`` for uint8) would never match a pixel, so every
    gap would silently count as data.

    Args:
        nodata: The nodata value.
        dtype: Numpy name of the raster's data type.

    Raises:
        ConfigError: If the value is outside the type's range or not an integer for an integer
            type.
    """
    kind = np.dtype(dtype)
    value = float(nodata)
    if np.issubdtype(kind, np.integer):
        info = np.iinfo(kind)
        if math.isnan(value) or math.isinf(value) or value != math.floor(value):
            raise ConfigError(
                f"nodata {nodata!r} cannot be stored in a {dtype} raster: it needs a whole "
                f"number in {info.min}..{info.max}; pass a value in that range with --nodata."
            )
        if not info.min <= int(value) <= info.max:
            raise ConfigError(
                f"nodata {nodata!r} is out of range for a {dtype} raster (valid range "
                f"{info.min}..{info.max}); pass a value in that range with --nodata."
            )
    elif np.issubdtype(kind, np.floating):
        finfo = np.finfo(kind)
        if math.isfinite(value) and abs(value) > float(finfo.max):
            raise ConfigError(
                f"nodata {nodata!r} is out of range for a {dtype} raster (valid range "
                f"{float(finfo.min):.8g}..{float(finfo.max):.8g}, or nan); pass a value in "
                "that range with --nodata."
            )
