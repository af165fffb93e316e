"""Find the acquisition date of a raster: from the user, its tags, or its file name.

Multi-date filling weighs other dates of the same place by how far apart in time they are, so
every raster involved needs the day it was acquired. :func:`raster_date` looks in this order and
takes the first date found:

1. the user's override (``--date`` / ``--reference-date``);
2. acquisition tags of the file (``ACQUISITION_DATE``, ``DATE_ACQUIRED``, ``SENSING_TIME``,
   ``DATATAKE_1_DATATAKE_SENSING_START``, ``datetime``..., case-insensitive), dataset tags before
   band tags;
3. a Landsat or Sentinel-2 product or scene ID in the file name or its folders' names (these IDs
   name the acquisition day by definition);
4. the TIFF tag ``TIFFTAG_DATETIME``. The TIFF standard defines it as the time the *image was
   created*, which many tools set to the processing time, so a product ID outranks it; geonp's
   own data scripts set it to the acquisition date;
5. a single unambiguous ``YYYYMMDD`` or ``YYYY-MM-DD`` in the file or folder name (1972-2100).
"""

from __future__ import annotations

import datetime
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath

from geonp.errors import ConfigError, InputRasterError
from geonp.io.raster import RasterInfo, open_raster, raster_info

logger = logging.getLogger(__name__)

__all__ = ["date_from_name", "date_from_tags", "find_raster_date", "parse_date", "raster_date"]

#: Years a loose ``YYYYMMDD`` in a name may have (Landsat 1 launched in 1972).
_LOOSE_YEARS = (1972, 2100)
#: How many parent folders of a file are searched for a product ID (a Sentinel-2 band file sits
#: five levels under its ``.SAFE``) and for a loose date, nearest first.
_PRODUCT_LEVELS = 6
_LOOSE_LEVELS = 2

_DAY_OF_YEAR = re.compile(r"^(\d{4})-?(\d{3})$")
_YMD_DASHED = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_YMD_PLAIN = re.compile(r"^(\d{4})(\d{2})(\d{2})$")


def _ymd(year: str | int, month: str | int, day: str | int) -> datetime.date | None:
    try:
        return datetime.date(int(year), int(month), int(day))
    except ValueError:
        return None


def _year_doy(year: str | int, doy: str | int) -> datetime.date | None:
    y, d = int(year), int(doy)
    if not 1 <= y <= 9999 or not 1 <= d <= (366 if _is_leap(y) else 365):
        return None
    return datetime.date(y, 1, 1) + datetime.timedelta(days=d - 1)


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def parse_date(text: str | datetime.date, *, option: str = "--date") -> datetime.date:
    """Parse a date the user typed: ``YYYY-MM-DD``, ``YYYYMMDD`` or ``YYYY-DDD`` (day of year).

    ``YYYYDDD`` (seven digits, as in Landsat scene IDs) is read as a day of the year too.

    Args:
        text: The text (surrounding spaces are ignored), or a date (returned as a date).
        option: The option the text came from, for messages.

    Returns:
        The date.

    Raises:
        ConfigError: If the text is none of the accepted forms or not a real day.
    """
    if isinstance(text, datetime.datetime):
        return text.date()
    if isinstance(text, datetime.date):
        return text
    s = str(text).strip()
    found: datetime.date | None = None
    if m := _YMD_DASHED.match(s) or _YMD_PLAIN.match(s):
        found = _ymd(*m.groups())
    elif m := _DAY_OF_YEAR.match(s):
        found = _year_doy(*m.groups())
    if found is None:
        raise ConfigError(
            f"{option} {str(text)!r} is not a date; write it as YYYY-MM-DD (2012-04-06), "
            "YYYYMMDD (20120406) or YYYY-DDD with the day of the year (2012-097)."
        )
    return found


# Product and scene IDs. Each pattern's groups give (year, month, day) or (year, day of year).
_NAME_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Landsat Collection 1/2 product ID LXSS_LLLL_PPPRRR_YYYYMMDD_yyyymmdd_CC_TX: the 4th field
    # is the acquisition date, the 5th the processing date (also ARD tiles LC08_CU_hhhvvv_...).
    (re.compile(r"(?<![A-Z0-9])L[CTEOM]0\d_[A-Z0-9]{2,4}_\d{6}_(\d{4})(\d{2})(\d{2})_\d{8}",
                re.IGNORECASE), "ymd"),
    # Landsat pre-collection scene ID LXSPPPRRRYYYYDDDGSIVV (sensor, path, row, year, day).
    (re.compile(r"(?<![A-Z0-9])L[CTEOM]\d\d{6}(\d{4})(\d{3})[A-Z]{3}\d{2}(?![A-Z0-9])",
                re.IGNORECASE), "doy"),
    # Sentinel-2 product name S2A_MSIL2A_YYYYMMDDTHHMMSS_Nxxxx_Rxxx_Txxxxx_...
    (re.compile(r"(?<![A-Z0-9])S2[A-D]_MSIL[12][AC]_(\d{4})(\d{2})(\d{2})T\d{6}",
                re.IGNORECASE), "ymd"),
    # Sentinel-2 tile file TxxXXX_YYYYMMDDTHHMMSS_B04_10m.jp2 (inside the SAFE's IMG_DATA).
    (re.compile(r"(?<![A-Z0-9])T\d{2}[A-Z]{3}_(\d{4})(\d{2})(\d{2})T\d{6}", re.IGNORECASE),
     "ymd"),
    # Harmonized Landsat Sentinel-2: HLS.S30.T32TQM.2020001T103321.v2.0...
    (re.compile(r"(?<![A-Z0-9])HLS\.[LS]30\.T\d{2}[A-Z]{3}\.(\d{4})(\d{3})T\d{6}",
                re.IGNORECASE), "doy"),
)
_LOOSE_PATTERNS = (
    re.compile(r"(?<!\d)(\d{4})(\d{2})(\d{2})(?!\d)"),
    re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)"),
)


def _name_parts(name: str | os.PathLike[str], levels: int) -> list[str]:
    """The file's base name, then the names of up to ``levels`` parent folders, nearest first."""
    path = PurePath(os.fspath(name))
    parts = [path.name]
    parts += [p.name for p in list(path.parents)[:levels] if p.name]
    return parts


def _product_date(part: str) -> datetime.date | None:
    for pattern, how in _NAME_PATTERNS:
        for m in pattern.finditer(part):
            found = _ymd(*m.groups()) if how == "ymd" else _year_doy(*m.groups())
            if found is not None:
                return found
    return None


def _loose_date(part: str) -> datetime.date | None:
    found = set()
    for pattern in _LOOSE_PATTERNS:
        for m in pattern.finditer(part):
            day = _ymd(*m.groups())
            if day is not None and _LOOSE_YEARS[0] <= day.year <= _LOOSE_YEARS[1]:
                found.add(day)
    return found.pop() if len(found) == 1 else None


def _product_date_from_name(name: str | os.PathLike[str]) -> datetime.date | None:
    for part in _name_parts(name, _PRODUCT_LEVELS):
        if (found := _product_date(part)) is not None:
            return found
    return None


def _loose_date_from_name(name: str | os.PathLike[str]) -> datetime.date | None:
    for part in _name_parts(name, _LOOSE_LEVELS):
        if (found := _loose_date(part)) is not None:
            return found
    return None


def date_from_name(name: str | os.PathLike[str]) -> datetime.date | None:
    """Read an acquisition date from a file name or the names of its folders.

    Recognised, in this order: Landsat Collection product IDs
    (``LC08_L1TP_035032_20130407_20200912_02_T1``: the 4th field, not the 5th processing date),
    Landsat scene IDs (``LE70350322012097EDC00``: year 2012, day 097), Sentinel-2 product names
    (``S2A_MSIL2A_20200101T103321_...``), Sentinel-2 tile files (``T32TQM_20200101T103321_B04``),
    HLS names (``HLS.S30.T32TQM.2020001T103321...``); failing those, a single unambiguous
    ``YYYYMMDD`` or ``YYYY-MM-DD`` between 1972 and 2100. The base name is searched first, then
    the parent folders, nearest first (up to six for product IDs, two for loose dates). A product
    ID in a folder's name outranks a loose date in the file's name.

    Args:
        name: The file's path or name.

    Returns:
        The date, or None when the name holds none (or two different loose dates).
    """
    return _product_date_from_name(name) or _loose_date_from_name(name)


#: Tags that hold the acquisition date or time (compared lower case).
_ACQUISITION_TAGS = (
    "acquisition_date",
    "acquisitiondate",
    "date_acquired",
    "acquisition_datetime",
    "acquisition_time",
    "acquisition_start_time",
    "sensing_time",
    "sensing_date",
    "sensing_start",
    "datatake_1_datatake_sensing_start",
    "product_start_time",
    "start_datetime",
    "datetime",
    "image_date",
    "rangebeginningdate",
)
_TAG_VALUE = re.compile(r"^\s*(\d{4})[-:/.]?(\d{2})[-:/.]?(\d{2})(?!\d)")


def _tag_value_date(value: object) -> datetime.date | None:
    m = _TAG_VALUE.match(str(value))
    return _ymd(*m.groups()) if m else None


def _lookup(tags: Mapping[str, str], keys: Iterable[str]) -> datetime.date | None:
    lowered = {str(k).lower(): v for k, v in tags.items()}
    for key in keys:
        if key in lowered and (found := _tag_value_date(lowered[key])) is not None:
            return found
    return None


_TIFF_DATETIME_TAGS = ("tifftag_datetime",)


def _tag_date(
    tags: Mapping[str, str], band_tags: Sequence[Mapping[str, str]], keys: Iterable[str]
) -> datetime.date | None:
    """The first date one of ``keys`` gives, in the dataset tags first, then each band's."""
    for where in (tags, *band_tags):
        if (found := _lookup(where, keys)) is not None:
            return found
    return None


def date_from_tags(
    tags: Mapping[str, str], band_tags: Sequence[Mapping[str, str]] = ()
) -> datetime.date | None:
    """Read an acquisition date from a raster's metadata tags.

    Acquisition tags (``ACQUISITION_DATE``, ``DATE_ACQUIRED``, ``SENSING_TIME``,
    ``DATATAKE_1_DATATAKE_SENSING_START``, ``datetime``..., any case) are looked up first, in the
    dataset tags and then in each band's tags; ``TIFFTAG_DATETIME`` (``YYYY:MM:DD HH:MM:SS``) only
    when none is present, since it may be a processing time. Values may be dates or date-times
    (``2012-04-06``, ``2012-04-06T17:30:12Z``, ``2012:04:06 17:30:12``, ``20120406``).

    Args:
        tags: Dataset tags (default domain).
        band_tags: Tags of each band.

    Returns:
        The date, or None when no tag holds one.
    """
    return _tag_date(tags, band_tags, _ACQUISITION_TAGS) or _tag_date(tags, band_tags, _TIFF_DATETIME_TAGS)


def raster_date(
    path: str | os.PathLike[str] | RasterInfo,
    *,
    override: str | datetime.date | None = None,
    role: str = "Input raster",
    option: str = "--date",
) -> datetime.date:
    """Find a raster's acquisition date (the order is in the module docstring).

    Args:
        path: The raster's path, or its :class:`~geonp.io.raster.RasterInfo` (not reopened).
        override: The user's date (text as :func:`parse_date` reads it, or a date); wins.
        role: What the file is, for messages (``"Input raster"``, ``"Reference"``).
        option: The option that gives the date by hand, for messages.

    Returns:
        The acquisition date.

    Raises:
        ConfigError: If ``override`` is not a date.
        InputRasterError: If the raster cannot be opened or holds no date.
    """
    if override is not None:
        return parse_date(override, option=option)
    if isinstance(path, RasterInfo):
        info = path
    else:
        with open_raster(path, role=role) as src:
            info = raster_info(src)
    found = find_raster_date(info)
    if found is None:
        raise InputRasterError(
            f"{role} {info.path} has no acquisition date in its tags or name; give one with "
            f"{option} YYYY-MM-DD."
        )
    return found


def find_raster_date(info: RasterInfo) -> datetime.date | None:
    """Look for a raster's acquisition date in its tags and name (order in the module docstring).

    Args:
        info: The raster.

    Returns:
        The date, or None when neither the tags nor the name hold one.
    """
    name = info.path
    steps = (
        ("acquisition tag", lambda: _tag_date(info.tags, info.band_tags, _ACQUISITION_TAGS)),
        ("product ID in the name", lambda: _product_date_from_name(name)),
        ("TIFFTAG_DATETIME", lambda: _tag_date(info.tags, info.band_tags, _TIFF_DATETIME_TAGS)),
        ("date in the name", lambda: _loose_date_from_name(name)),
    )
    for source, find in steps:
        found = find()
        if found is not None:
            logger.debug("%s: date %s from its %s", name, found, source)
            return found
    return None
