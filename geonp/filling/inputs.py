"""The typed inputs of a fill: gaps, outputs and references.

Where a file's gaps are (:class:`Gaps`, defined beside the gap sources it makes in
:mod:`geonp.io.gap_sources`), what a file fill writes (:class:`Outputs`) and another date
of the same place (:class:`Reference`).

A fill function takes each concept as one value: ``fill_raster(input, Outputs(...), gaps=Gaps(...),
references=[Reference(...)])``. Plain values stay accepted where they are unambiguous: an output
path for ``Outputs(path)``, a reference's path, and the ``(values, valid, days)`` /
``(DataArray, days)`` pairs of the in-memory fills, each read once by :meth:`Reference.of`.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geonp.errors import ConfigError
from geonp.io.gap_sources import Gaps

__all__ = ["Gaps", "Outputs", "Reference"]

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Outputs:
    """What a file fill writes: the filled raster, its std raster and an optional quicklook.

    Attributes:
        path: the filled raster (same grid, bands, dtype, nodata and metadata as the input).
        uncertainty: the std raster (default ``<path stem>_std.tif``).
        quicklook: a PNG with input, prediction and std side by side.
        format: GDAL driver of ``path`` (default: from its extension).
        dry_run: write nothing; only plan (tiles, context sizes, memory and time estimates).
    """

    path: PathLike
    uncertainty: PathLike | None = None
    quicklook: PathLike | None = None
    format: str | None = None
    dry_run: bool = False

    @classmethod
    def of(cls, output: PathLike | Outputs) -> Outputs:
        """``output`` itself, or ``Outputs(output)`` for a path."""
        if isinstance(output, Outputs):
            return output
        if isinstance(output, str | os.PathLike):
            return cls(output)
        raise ConfigError(f"the output must be a path or a geonp.Outputs, got {type(output).__name__}")


@dataclass(frozen=True)
class Reference:
    """Another date of the same place, read as context of a multi-date fill.

    One type for files, numpy arrays and xarray DataArrays.

    Attributes:
        source: a raster file (any grid or CRS: reprojected on the fly), a numpy array of the
            filled array's shape, or a DataArray on the filled array's grid.
        days: the date offset from the filled date (negative = before it); arrays and DataArrays
            need it, a file's comes from its date.
        date: a file's acquisition date (``YYYY-MM-DD``) where its tags and name lack it.
        qa: a file's quality band (read with :attr:`Gaps.qa_kind`).
        valid: an array's observed mask (None: NaN/Inf and ``nodata`` are missing).
    """

    source: Any
    days: float | None = None
    date: str | None = None
    qa: PathLike | None = None
    valid: Any = None

    @property
    def is_file(self) -> bool:
        """True for a raster file (a path), False for in-memory data."""
        return isinstance(self.source, str | os.PathLike)

    @classmethod
    def of(cls, item: Any, index: int = 1) -> Reference:
        """One reference from a :class:`Reference`, a path, ``(values, valid, days)`` or ``(data, days)``."""
        if isinstance(item, Reference):
            ref = item
        elif isinstance(item, str | os.PathLike):
            ref = cls(item)
        elif isinstance(item, tuple | list) and len(item) == 3:
            ref = cls(item[0], days=item[2], valid=item[1])
        elif isinstance(item, tuple | list) and len(item) == 2:
            ref = cls(item[0], days=item[1])
        elif hasattr(item, "shape"):  # an array alone: check() asks for its date offset
            ref = cls(item)
        else:
            raise ConfigError(f"reference {index} must be a geonp.Reference, a path, a (values, valid, days) "
                              "triple or a (DataArray, days) pair")
        ref.check(index)
        return ref

    @classmethod
    def from_options(cls, paths: Sequence[PathLike], dates: Sequence[str | None] | None = None,
                     qa: Sequence[PathLike | None] | None = None) -> tuple[Reference, ...]:
        """File references from parallel lists, as ``--reference/--reference-date/--reference-qa`` give them."""
        if not paths:
            if dates or qa:
                raise ConfigError("--reference-date/--reference-qa describe references; give --reference FILE too")
            return ()
        if dates is not None and len(dates) != len(paths):
            raise ConfigError(f"{len(dates)} --reference-date given for {len(paths)} --reference; give one date "
                              "per reference, in the same order (or none to read them from the files).")
        if qa is not None and len(qa) != len(paths):
            raise ConfigError(f"{len(qa)} --reference-qa given for {len(paths)} --reference; give one QA file per "
                              "reference, in the same order.")
        return as_references([cls(p, date=None if dates is None else dates[i], qa=None if qa is None else qa[i])
                              for i, p in enumerate(paths)])

    def check(self, index: int) -> None:
        """Refuse fields that do not fit the source's kind, and a bad date offset."""
        if self.is_file:
            if self.days is not None:
                raise ConfigError(f"reference {index} ({Path(self.source).name}): a file's date offset comes from "
                                  "its date; give date='YYYY-MM-DD' instead of days")
            if self.valid is not None:
                raise ConfigError(f"reference {index} ({Path(self.source).name}): a file's gaps come from its "
                                  "nodata and qa; valid is for arrays")
            return
        if self.date is not None or self.qa is not None:
            raise ConfigError(f"reference {index}: date and qa describe a file; an array takes days (its date "
                              "offset) and valid (its observed mask)")
        days = self.days
        if (days is None or isinstance(days, bool) or not isinstance(days, numbers.Real)
                or not math.isfinite(float(days))):
            raise ConfigError(f"reference {index} has days={days!r}; give its date offset from the array's "
                              "date as a number of days (negative = before it)")


def check_file_fill(input: Any, gaps: Any) -> None:
    """Refuse a ``fill_raster`` input that is not a path, and gaps that are not a :class:`Gaps`."""
    if not isinstance(input, str | os.PathLike):
        raise ConfigError(f"fill_raster reads a raster file: give its path (got {type(input).__name__}); "
                          "geonp.fill_array fills numpy arrays, geonp.fill xarray DataArrays")
    if gaps is not None and not isinstance(gaps, Gaps):
        raise ConfigError(f"gaps= must be a geonp.Gaps, got {type(gaps).__name__}; e.g. gaps=geonp.Gaps(mask=...)")


def as_references(items: Sequence[Any]) -> tuple[Reference, ...]:
    """Every reference as a checked :class:`Reference`."""
    if isinstance(items, str | os.PathLike | Reference):
        items = [items]
    return tuple(Reference.of(item, i) for i, item in enumerate(items, 1))



#: Keywords that moved into a type, and where they went (a hint for calls written for older geonp).
MOVED_KEYWORDS = {
    **{name: "geonp.Gaps" for name in ("mask", "mask_values", "mask_bits", "qa", "qa_kind", "qa_classes", "footprint")},
    **{name: "geonp.Outputs" for name in ("uncertainty", "quicklook", "format", "dry_run")},
    **{name: "geonp.Reference" for name in ("reference_dates", "reference_qa")},
}


def refuse_moved(options: dict[str, Any], moved: dict[str, str], function: str) -> None:
    """A one-line ConfigError for a keyword that is now a field of one of the typed inputs.

    ``moved`` maps a keyword to its type's name, or to ``"type:field"`` where the field is named
    otherwise.
    """
    for name in options:
        if name in moved:
            kind, _, field = moved[name].partition(":")
            raise ConfigError(f"{function}() takes {name}= inside a {kind} now: give {kind}({field or name}=...) "
                              f"(help({kind}) lists its fields)")
