"""Scan a folder of dated rasters (a time series) and pick the dates nearest to one of them.

An archive of one place usually holds one raster per acquisition, often with a quality band
beside it (``scene.tif`` and ``scene_fmask.tif``). :func:`scan_series` lists the dated rasters
in time order with their quality bands attached; :func:`nearest` picks the references of a date
(``geonp batch --neighbours K``) by the rule every multi-date fill shares,
:func:`nearest_dates` (a data cube's fill uses it too); :func:`group_by_grid` splits a folder into rasters that share
one grid, since neighbours are taken among rasters of the same grid; :func:`neighbours_by_grid`
does both for a whole folder, passing over dates that see no ground (:func:`sees_ground`).
:func:`choose_references` picks references by what they observe rather than by a fixed count
(a data cube's ``neighbours="auto"``, :class:`CoverageRule`).
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rasterio.crs import CRS

from geonp.errors import ConfigError, InputRasterError
from geonp.io.dates import find_raster_date
from geonp.io.raster import RasterInfo, open_raster, raster_info
from geonp.io.reference_choice import CoverageRule, choose_references

logger = logging.getLogger(__name__)

__all__ = [
    "DatedRaster", "grid_key", "group_by_grid", "nearest", "nearest_dates",
    "neighbours_by_grid", "scan_series", "sees_ground",
]

#: Rows read at a time when looking for a date's first clear pixel (:func:`sees_ground`).
_STRIP_ROWS = 256
#: ``--neighbours auto`` judges what dates see on a grid of at most this many cells a side.
_AUTO_CELLS = 256

#: Stem endings that mark a quality band of the raster with the rest of the stem.
QA_SUFFIXES = ("_fmask", "_qa", "_QA_PIXEL", "_SCL")


@dataclass(frozen=True)
class DatedRaster:
    """One raster of a time series.

    Attributes:
        path: The raster's path.
        date: Its acquisition date.
        qa: Path of its quality band (same stem plus a QA suffix), or None.
    """

    path: str
    date: datetime.date
    qa: str | None = None


def _qa_base(stem: str, suffixes: Sequence[str]) -> str | None:
    """The stem without its QA suffix (matched ignoring case, longest first), or None."""
    for suffix in sorted(suffixes, key=len, reverse=True):
        if len(stem) > len(suffix) and stem.lower().endswith(suffix.lower()):
            return stem[: -len(suffix)]
    return None


def scan_series(
    folder: str | os.PathLike[str],
    *,
    pattern: str = "*.tif",
    qa_suffixes: Sequence[str] = QA_SUFFIXES,
) -> list[DatedRaster]:
    """List the dated rasters of a folder (not its subfolders), in time order.

    A raster whose stem ends with a QA suffix (``scene_fmask.tif``) is the quality band of the
    raster with the rest of the stem (``scene.tif``), not a date of its own; one without such a
    raster is skipped with a warning in the log. Dates come from each raster's tags or name
    (:func:`geonp.io.dates.raster_date`). Two rasters of the same date are both kept.

    Args:
        folder: The folder.
        pattern: Glob pattern of the raster files.
        qa_suffixes: Stem endings that mark quality bands (case is ignored).

    Returns:
        The rasters, sorted by date, then by path.

    Raises:
        InputRasterError: If the folder does not exist, or a raster cannot be opened or has no
            date.
    """
    root = Path(os.fspath(folder))
    if not root.is_dir():
        raise InputRasterError(f"Time-series folder {root} does not exist or is not a folder; "
                               "check the path.")
    files = sorted(p for p in root.glob(pattern) if p.is_file())
    qa_of: dict[str, Path] = {}
    rasters = []
    for p in files:
        base = _qa_base(p.stem, qa_suffixes)
        if base is None:
            rasters.append(p)
        else:
            qa_of[base] = p
    stems = {p.stem for p in rasters}
    for base, p in qa_of.items():
        if base not in stems:
            logger.warning("Quality band %s has no raster %s%s beside it; skipped.",
                           p, base, p.suffix)
    out = []
    for p in rasters:
        with open_raster(p, role="Raster") as src:
            day = find_raster_date(raster_info(src))
        if day is None:
            raise InputRasterError(
                f"Raster {p} has no acquisition date in its tags or name; put the date in its "
                "name (scene_20120406.tif) or tag it (gdal_edit.py -mo "
                "TIFFTAG_DATETIME='2012:04:06 00:00:00'), or move it out of the folder."
            )
        qa = qa_of.get(p.stem)
        out.append(DatedRaster(path=str(p), date=day, qa=None if qa is None else str(qa)))
    return sorted(out, key=lambda r: (r.date, r.path))


def nearest_dates(
    dates: Sequence[datetime.date], target: datetime.date, k: int, *, max_days: float | None = None,
    before_only: bool = False, usable: Sequence[bool] | None = None,
) -> list[int]:
    """Pick the ``k`` dates nearest in time to ``target``: the one rule of every multi-date fill.

    ``geonp batch --neighbours K`` (:func:`nearest`) and a data cube's fill
    (:func:`geonp.filling.cube.fill_cube`) both choose a date's references with it.

    Args:
        dates: The candidate dates (``datetime.date`` or ``datetime.datetime``, all one kind;
            the target itself left out by the caller).
        target: The date to find references for.
        k: How many to pick (fewer come back when fewer candidates qualify).
        max_days: Pick only dates at most this many days from ``target`` (None: any).
        before_only: Pick only dates strictly before ``target``.
        usable: Per date, whether it sees any ground (a clear pixel); dates that do not (a date
            wholly under cloud, or all nodata) are passed over for the next nearest, since they
            would give nothing. None: every date is usable.

    Returns:
        Indices into ``dates``, nearest first; at equal distance the earlier date first, then
        the lower index.

    Raises:
        ConfigError: If ``k`` or ``max_days`` is negative.
    """
    if k < 0:
        raise ConfigError(f"--neighbours {k} is negative; give the number of dates to use (>= 0).")
    if max_days is not None and not max_days >= 0:
        raise ConfigError(f"--max-days {max_days} is negative; give the largest gap in days (>= 0) or none.")
    reach = None if max_days is None else datetime.timedelta(days=float(max_days))
    picked = [
        i for i, d in enumerate(dates)
        if (not before_only or d < target) and (reach is None or abs(d - target) <= reach)
        and (usable is None or usable[i])
    ]
    picked.sort(key=lambda i: (abs(dates[i] - target), dates[i], i))
    return picked[:k]


def nearest(
    series: Sequence[DatedRaster], target: DatedRaster, k: int, *, before_only: bool = False,
    max_days: float | None = None, usable: Collection[str] | None = None,
) -> list[DatedRaster]:
    """Pick the ``k`` other dates of a series nearest in time to ``target`` (:func:`nearest_dates`).

    Args:
        series: The series (``target`` may be in it; it is never picked).
        target: The raster to find references for.
        k: How many to pick (fewer come back when the series is shorter).
        before_only: Pick only rasters acquired strictly before ``target`` (as when filling
            with the previous dates).
        max_days: Pick only rasters at most this many days from ``target`` (None: any).
        usable: Paths of the rasters that see ground (:func:`sees_ground`); the others are passed
            over. None: all are usable.

    Returns:
        The picked rasters, nearest first; at equal distance the earlier one first, then by path.

    Raises:
        ConfigError: If ``k`` or ``max_days`` is negative.
    """
    others = sorted((r for r in series if os.path.abspath(r.path) != os.path.abspath(target.path)),
                    key=lambda r: r.path)
    picked = nearest_dates([r.date for r in others], target.date, k, max_days=max_days, before_only=before_only,
                           usable=None if usable is None else [r.path in usable for r in others])
    return [others[i] for i in picked]


def sees_ground(raster: DatedRaster, qa_kind: str | None = None) -> bool:
    """Whether a date has at least one clear pixel: observed in its file and not a QA gap.

    Read in strips of rows (:func:`clear_strips`), stopping at the first clear pixel, so a usable
    date costs one strip; a date wholly under cloud is read once in full (its QA band too), which
    is small beside a fill.

    Raises:
        InputRasterError: If the raster or its QA band cannot be read.
    """
    return any(clear.any() for clear in clear_strips(raster, qa_kind))


def clear_strips(raster: DatedRaster, qa_kind: str | None = None, rows: int = _STRIP_ROWS) -> Iterator[np.ndarray]:
    """Where a raster is clear, ``rows`` rows at a time: bool ``[rows, width]`` strips, top down.

    The fill's rule: observed in some band (nodata, NaN, internal masks) and, with ``qa_kind``,
    not one of the QA band's default gap classes (read only for strips with an observed pixel).

    Raises:
        InputRasterError: If the raster or its QA band cannot be read.
    """
    from rasterio.windows import Window

    from geonp.io.masks import read_mask_file
    from geonp.io.observed import read_observed

    with open_raster(raster.path, role="Raster") as src:
        info = raster_info(src)
        bands = list(range(1, info.count + 1))
        for row in range(0, info.height, rows):
            window = Window(0, row, info.width, min(rows, info.height - row))
            _, ok = read_observed(src, window, bands, info=info, nodata=info.nodata)
            clear = np.asarray(ok.any(axis=0))
            if clear.any() and raster.qa is not None and qa_kind is not None:
                clear &= ~read_mask_file(raster.qa, like=info, window=window, qa_kind=qa_kind)
            yield clear


def grid_key(info: RasterInfo) -> tuple[object, ...]:
    """A hashable description of a raster's grid (size, transform, CRS); equal keys, same grid."""
    crs = CRS.from_wkt(info.crs).to_string() if info.crs else None
    transform = tuple(round(v, 9) for v in info.transform[:6])
    return (info.width, info.height, transform, crs)


def group_by_grid(series: Sequence[DatedRaster]) -> list[list[DatedRaster]]:
    """Split a series into groups of rasters on one grid (size, transform and CRS).

    ``geonp batch --neighbours K`` takes the references of a raster among the rasters of its
    group only, so that every reference is read directly, without warping.

    Args:
        series: The series.

    Returns:
        The groups, each in the series' order, ordered by their first raster.

    Raises:
        InputRasterError: If a raster cannot be opened.
    """
    groups: dict[tuple[object, ...], list[DatedRaster]] = {}
    for r in series:
        with open_raster(r.path, role="Raster") as src:
            key = grid_key(raster_info(src))
        groups.setdefault(key, []).append(r)
    return list(groups.values())


def clear_fraction(raster: DatedRaster, step: int, qa_kind: str | None = None) -> np.ndarray:
    """The fraction of each ``step`` x ``step`` cell of a raster that is clear (:func:`clear_strips`).

    Cells cut by the raster's edge count their pixels inside it.

    Raises:
        InputRasterError: If the raster or its QA band cannot be read.
    """
    cells = []
    for clear in clear_strips(raster, qa_kind, rows=-(-_STRIP_ROWS // step) * step):  # whole cells per strip
        h, w = clear.shape
        padded = np.full((-(-h // step) * step, -(-w // step) * step), np.nan)
        padded[:h, :w] = clear
        cells.append(np.nanmean(padded.reshape(padded.shape[0] // step, step, -1, step), axis=(1, 3)))
    return np.concatenate(cells)


def neighbours_by_grid(
    series: Sequence[DatedRaster], k: int | CoverageRule, *, before_only: bool = False,
    max_days: float | None = None, qa_kind: str | None = None,
) -> list[tuple[DatedRaster, list[DatedRaster]]]:
    """Pair every raster of a series with its ``k`` nearest dates on the same grid.

    This is ``geonp batch --neighbours K``: each raster is filled with the ``k`` rasters of its
    grid group nearest to it in time as references (:func:`nearest`, :func:`group_by_grid`),
    passing over dates that see no ground (:func:`sees_ground`, or no cell of the clear fractions below). With a
    :class:`~geonp.io.reference_choice.CoverageRule` (``--neighbours auto``), the nearest dates
    are added until every gap of the raster is seen clear by ``views`` of them, at most ``cap``
    (:func:`~geonp.io.reference_choice.choose_references`, as a cube's ``neighbours="auto"``),
    judged on a grid of cells of at most :data:`_AUTO_CELLS` a side (a cell with a gap is a gap,
    one with a clear pixel is seen).

    Args:
        series: The series (from :func:`scan_series`).
        k: References per raster, or the coverage rule.
        before_only: Use only earlier dates.
        max_days: Use only dates at most this many days away (None: any).
        qa_kind: How the QA bands are read when deciding whether a date sees ground.

    Returns:
        ``(raster, references)`` pairs in the series' order; ``references`` may be shorter than
        ``k`` (or empty) when the group is small.

    Raises:
        ConfigError: If ``k`` or ``max_days`` is negative.
        InputRasterError: If a raster cannot be opened.
    """
    rule, count = (k, 0) if isinstance(k, CoverageRule) else (None, k)
    if count < 0:
        raise ConfigError(f"--neighbours {k} is negative; give the number of dates to use (>= 0).")
    nearest_dates([], datetime.date.min, 0, max_days=max_days)  # refuse a negative max_days before reading files
    picked: dict[str, list[DatedRaster]] = {}
    groups = group_by_grid(series)
    seen: dict[str, np.ndarray] = {}  # the coverage rule's clear fraction per cell, each date read once
    if rule is not None:
        for group in groups:
            with open_raster(group[0].path, role="Raster") as src:
                step = -(-max(src.width, src.height) // _AUTO_CELLS)
            seen.update({r.path: clear_fraction(r, step, qa_kind) for r in group})
        usable: set[str] | None = {path for path, fraction in seen.items() if (fraction > 0).any()}
    else:
        usable = {r.path for r in series if sees_ground(r, qa_kind)} if k else None
    for r in series:
        if usable is not None and r.path not in usable:
            logger.info("%s sees no ground (all nodata or QA gaps): not a reference of other dates", r.path)
    for group in groups:
        if rule is not None:
            count = len(group)  # every candidate, nearest first
        for r in group:
            refs = nearest(group, r, count, before_only=before_only, max_days=max_days, usable=usable)
            if rule is not None:
                chosen = choose_references(seen[r.path] < 1, [seen[c.path] > 0 for c in refs], rule.views, rule.cap)
                refs = [refs[i] for i in chosen]
            picked[r.path] = refs
    return [(r, picked[r.path]) for r in series]
