"""Output profiles and creation options: GeoTIFF defaults, ``--co`` parsing, COG conversion.

An output takes only its grid from the source; its compression and block layout come from
geonp's defaults and the user's ``--co`` options. A COG (or another format) is written as a
GeoTIFF first and converted when complete (:func:`finalize_cog`, :func:`convert_raster`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import rasterio
import rasterio.errors
import rasterio.shutil

from geonp.errors import ConfigError, OutputError
from geonp.io.raster import check_nodata_in_range
from geonp.io.write_errors import disk_full_message, is_disk_full

logger = logging.getLogger(__name__)

__all__ = [
    "cog_options",
    "convert_raster",
    "finalize_cog",
    "output_profile",
    "overview_count",
    "parse_creation_options",
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
        if is_disk_full(err):
            raise OutputError(disk_full_message(final_path)) from err
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
        if is_disk_full(err):
            raise OutputError(disk_full_message(final_path)) from err
        raise


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
