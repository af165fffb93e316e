"""Read other dates of the same place (references) on the target raster's grid.

A reference is another acquisition that shows what lies under the target's clouds. It may come
on the target's grid (the usual case for a co-registered time series) or on any other grid or
CRS; then each window is warped onto the target's grid on the fly, like masks are
(:mod:`geonp.io.reproject`). Each reference keeps its own gaps: its nodata, NaN, alpha band or
internal mask, and optionally a quality band (``--reference-qa``) whose gap classes are decoded
on the quality band's own grid. :func:`open_references` checks every reference up front so that a
bad one fails before any fill work, with a one-line message saying what to do.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import rasterio.errors
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.io import DatasetReader
from rasterio.warp import transform_bounds
from rasterio.windows import Window

from geonp.errors import ConfigError, InputRasterError
from geonp.io.dates import raster_date
from geonp.io.masks import check_plain_mask, read_mask_file, valid_mask
from geonp.io.qa import decode_gaps, resolve_classes
from geonp.io.raster import (
    RasterInfo,
    check_nodata_in_range,
    open_raster,
    raster_info,
)
from geonp.io.reproject import same_grid, source_window, warp_array
from geonp.io.windows import read_band_masks, read_window

__all__ = ["RESAMPLING_METHODS", "ReferenceFile", "open_references", "read_references"]

#: Resampling methods a reference's values may be warped with (GDAL names).
RESAMPLING_METHODS = ("nearest", "bilinear", "cubic", "cubic_spline", "lanczos", "average")


@dataclass(frozen=True)
class ReferenceFile:
    """One reference raster as the fill reads it (a :class:`geonp.Reference` file, checked), window by window.

    Plain fields only (no open dataset), so it pickles to worker processes whole.

    Attributes:
        path: The reference's path.
        date: Its acquisition date.
        bands: 1-based bands of the reference that match the target's bands, in the same order.
        nodata: The nodata value in force for it (the override, else the file's tag), or None.
        qa: Path of a quality band or gap mask for it, or None.
        qa_kind: How to read ``qa`` (a :data:`geonp.io.qa.QA_KINDS` name); None reads it as a
            plain mask (non-zero = gap).
        qa_classes: The ``qa_kind`` classes counted as gaps (resolved).
        resampling: GDAL resampling for values when the reference is on another grid.
    """

    path: str
    date: datetime.date
    bands: tuple[int, ...]
    nodata: float | None
    qa: str | None = None
    qa_kind: str | None = None
    qa_classes: tuple[str, ...] = field(default_factory=tuple)
    resampling: str = "bilinear"

    def read(self, like: RasterInfo, window: Window) -> tuple[np.ndarray, np.ndarray]:
        """Read the reference on the target's grid for one window of the target.

        On the target's grid the pixels are read directly (bit for bit, as float64). On another
        grid the values are warped with :attr:`resampling` (invalid pixels take no part), and a
        pixel is observed only where every reference pixel covering it is valid (the maximum of
        the warped gap mask), so a gap never shrinks; outside the reference nothing is observed.
        A QA file on the reference's own grid is decoded before warping, so cloud values never
        blend into the warped values; a QA file on any other grid is applied after warping.

        Args:
            like: The target raster.
            window: Window of the target's grid; may hang over its edge.

        Returns:
            ``(values, observed)``: float64 ``[len(bands), h, w]`` in the reference's units (NaN
            where not observed on other grids) and bool of the same shape, True = observed.

        Raises:
            InputRasterError: If the reference or its QA cannot be read or warped.
        """
        with open_raster(self.path, role="Reference") as src:
            info = raster_info(src)
            if same_grid(src, like):
                values = read_window(src, window, self.bands)
                internal = read_band_masks(src, window, self.bands) if info.has_internal_mask \
                    else None
                observed = valid_mask(values, nodata=self.nodata, internal_valid=internal,
                                      source_dtype=info.dtype)
                qa_on_ref_grid = False
            else:
                qa_on_ref_grid = self.qa is not None and self._qa_on_grid_of(info)
                values, observed = self._warp(src, info, like, window, qa_on_ref_grid)
        if self.qa is not None and not qa_on_ref_grid:
            is_gap = read_mask_file(self.qa, like=like, window=window, qa_kind=self.qa_kind,
                                    qa_classes=self.qa_classes or None)
            observed &= ~is_gap[None]
        return values, observed

    def _qa_on_grid_of(self, info: RasterInfo) -> bool:
        assert self.qa is not None, "_qa_on_grid_of needs a QA file"
        if self.qa.lower().endswith((".geojson", ".json")):
            return False
        with open_raster(self.qa, role="Reference QA") as qa_src:
            return same_grid(qa_src, info)

    def _warp(
        self,
        src: DatasetReader,
        info: RasterInfo,
        like: RasterInfo,
        window: Window,
        with_qa: bool,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Warp values and validity of the reference (and its same-grid QA) onto ``window``."""
        h, w = round(window.height), round(window.width)
        n = len(self.bands)
        values = np.full((n, h, w), np.nan)
        observed = np.zeros((n, h, w), dtype=bool)
        src_win = source_window(src, like, window)
        if src_win is None:
            return values, observed
        raw = read_window(src, src_win, self.bands)
        internal = read_band_masks(src, src_win, self.bands) if info.has_internal_mask else None
        ok = valid_mask(raw, nodata=self.nodata, internal_valid=internal, source_dtype=info.dtype)
        if with_qa:
            assert self.qa is not None, "with_qa needs a QA file"
            with open_raster(self.qa, role="Reference QA") as qa_src:
                qa_values = read_window(qa_src, src_win, [1])[0]
                qa_nodata = qa_src.nodata
            qa_ok = valid_mask(qa_values, nodata=qa_nodata)
            if self.qa_kind is None:
                check_plain_mask(qa_values[qa_ok], self.qa)
                gap = qa_ok & (qa_values != 0)
            else:
                gap = qa_ok & decode_gaps(qa_values, kind=self.qa_kind,
                                          classes=self.qa_classes or None)
            ok &= ~gap[None]
        tf = src.window_transform(src_win)
        try:
            warped = warp_array(np.where(ok, raw, np.nan), crs=src.crs, transform=tf, like=like,
                                window=window, resampling=Resampling[self.resampling],
                                nodata=float("nan"))
            gaps = warp_array((~ok).astype(np.uint8), crs=src.crs, transform=tf, like=like,
                              window=window, resampling=Resampling.max, nodata=255)
        except (rasterio.errors.RasterioError, OSError, ValueError) as err:
            raise InputRasterError(
                f"Reference {self.path} cannot be warped onto the grid of {like.path} "
                f"({' '.join(str(err).split())}); warp it with gdalwarp first."
            ) from err
        observed = (gaps == 0) & np.isfinite(warped)
        values = np.where(observed, warped, np.nan)
        return values, observed


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _bounds_in(info: RasterInfo, crs: str | None) -> tuple[float, float, float, float]:
    t = info.transform
    xs = [t.c, t.c + t.a * info.width]
    ys = [t.f, t.f + t.e * info.height]
    box = (min(xs), min(ys), max(xs), max(ys))
    if crs is not None and info.crs is not None and CRS.from_wkt(info.crs) != CRS.from_wkt(crs):
        box = transform_bounds(CRS.from_wkt(info.crs), CRS.from_wkt(crs), *box, densify_pts=21)
    return box


def _check_reference(
    src: DatasetReader, info: RasterInfo, like: RasterInfo, bands: Sequence[int], name: str
) -> None:
    need = max(bands)
    if info.count < need:
        listed = ",".join(str(b) for b in bands)
        raise InputRasterError(
            f"Reference {name} has {info.count} band{'s' if info.count != 1 else ''}; filling "
            f"bands {listed} of the input needs {need}. Give references with the same bands as "
            "the input."
        )
    if same_grid(src, like):
        return
    if info.crs is None or like.crs is None:
        which = "it" if info.crs is None else f"the input {like.path}"
        raise InputRasterError(
            f"Reference {name} is on another grid than the input {like.path} and {which} has no "
            "CRS, so it cannot be reprojected; set the CRS (gdal_edit.py -a_srs EPSG:...) or "
            "warp the reference onto the input's grid with gdalwarp."
        )
    try:
        ref_box = _bounds_in(info, like.crs)
    except (rasterio.errors.RasterioError, ValueError) as err:
        raise InputRasterError(
            f"Reference {name} cannot be reprojected to the CRS of {like.path} "
            f"({' '.join(str(err).split())}); warp it with gdalwarp first."
        ) from err
    box = _bounds_in(like, None)
    if ref_box[0] >= box[2] or ref_box[2] <= box[0] or ref_box[1] >= box[3] or ref_box[3] <= box[1]:
        raise InputRasterError(
            f"Reference {name} does not overlap the input {like.path} (reference bounds "
            f"{', '.join(f'{v:.6g}' for v in ref_box)}; input bounds "
            f"{', '.join(f'{v:.6g}' for v in box)} in the input's CRS); give references of the "
            "same place."
        )


def open_references(
    paths: Sequence[str | os.PathLike[str]],
    *,
    like: RasterInfo,
    bands: Sequence[int],
    dates: Sequence[str | datetime.date | None] | None = None,
    nodata: float | None = None,
    qa: Sequence[str | os.PathLike[str] | None] | None = None,
    qa_kind: str | None = None,
    qa_classes: str | Sequence[str] | None = None,
    resampling: str = "bilinear",
) -> list[ReferenceFile]:
    """Open and check reference rasters for a target, before any fill work.

    Args:
        paths: The references (``--reference``), any grid or CRS.
        like: The target raster.
        bands: 1-based target bands being filled; the reference's bands with the same indexes
            are used.
        dates: One date per reference (``--reference-date``; None items, or None for all, read
            the date from the file's tags or name).
        nodata: Nodata value for every reference, instead of each file's tag.
        qa: One quality band or gap mask per reference (None items for none), on any grid.
        qa_kind: How to read the QA files (:data:`geonp.io.qa.QA_KINDS`); None reads them as
            plain masks (non-zero = gap).
        qa_classes: Classes of ``qa_kind`` counted as gaps (default: the kind's defaults).
        resampling: Resampling for values of references on another grid
            (:data:`RESAMPLING_METHODS`).

    Returns:
        The references, in the order given.

    Raises:
        ConfigError: Lists of dates or QA files that do not match the references, an unknown
            resampling, QA kind or class, a nodata value a reference cannot hold, or no bands.
        InputRasterError: A reference that cannot be opened, is the target itself, has fewer
            bands than needed, cannot be reprojected, does not overlap the target, or has no date.
    """
    names = [os.fspath(p) for p in paths]
    _check_reference_options(names, bands=bands, dates=dates, qa=qa, qa_kind=qa_kind, qa_classes=qa_classes,
                             resampling=resampling)
    classes = resolve_classes(qa_kind, qa_classes) if qa_kind is not None else ()
    out = []
    for i, name in enumerate(names):
        if _same_file(name, like.path):
            raise InputRasterError(
                f"Reference {name} is the input raster itself; give other dates of the same "
                "place as references."
            )
        with open_raster(name, role="Reference") as src:
            info = raster_info(src)
            _check_reference(src, info, like, bands, name)
        if nodata is not None:
            check_nodata_in_range(nodata, info.dtype)
        qa_path = None if qa is None or qa[i] is None else os.fspath(qa[i])  # type: ignore[arg-type]
        _check_reference_qa(qa_path)
        day = raster_date(info, override=None if dates is None else dates[i], role="Reference",
                          option="--reference-date")
        out.append(ReferenceFile(
            path=name,
            date=day,
            bands=tuple(int(b) for b in bands),
            nodata=float(nodata) if nodata is not None else info.nodata,
            qa=qa_path,
            qa_kind=qa_kind,
            qa_classes=classes,
            resampling=resampling,
        ))
    return out


def _check_reference_options(
    names: Sequence[str],
    *,
    bands: Sequence[int],
    dates: Sequence[str | datetime.date | None] | None,
    qa: Sequence[str | os.PathLike[str] | None] | None,
    qa_kind: str | None,
    qa_classes: str | Sequence[str] | None,
    resampling: str,
) -> None:
    """Check the options of :func:`open_references` against each other (no file is opened).

    Raises:
        ConfigError: No bands, an unknown resampling, lists of dates or QA files that do not
            match the references, or QA classes without a QA kind.
    """
    if not bands:
        raise ConfigError("No band selected to fill; give at least one band.")
    if resampling not in RESAMPLING_METHODS:
        raise ConfigError(
            f"Reference resampling {resampling!r} is unknown; use one of "
            f"{', '.join(RESAMPLING_METHODS)}."
        )
    if dates is not None and len(dates) != len(names):
        raise ConfigError(
            f"{len(dates)} --reference-date given for {len(names)} --reference; give one date per "
            "reference, in the same order (or none to read them from the files)."
        )
    if qa is not None and len(qa) != len(names):
        raise ConfigError(
            f"{len(qa)} --reference-qa given for {len(names)} --reference; give one QA file per "
            "reference, in the same order."
        )
    if qa_classes is not None and qa_kind is None:
        raise ConfigError("QA classes need a QA kind to name them; give the kind too.")


def _check_reference_qa(qa_path: str | None) -> None:
    """Check that a reference's QA raster opens, or its vector QA file exists."""
    if qa_path is not None and not qa_path.lower().endswith((".geojson", ".json")):
        open_raster(qa_path, role="Reference QA").close()
    elif qa_path is not None and not Path(qa_path).is_file():
        raise InputRasterError(f"Reference QA {qa_path} does not exist; check the path.")


def read_references(
    references: Sequence[ReferenceFile], like: RasterInfo, window: Window
) -> tuple[np.ndarray, np.ndarray]:
    """Read several references for one window of the target, stacked.

    Args:
        references: The references (from :func:`open_references`), all with the same bands.
        like: The target raster.
        window: Window of the target's grid; may hang over its edge.

    Returns:
        ``(values, observed)``: float64 and bool arrays ``[R, bands, h, w]`` in the order of
        ``references`` (``R = 0`` gives empty arrays with ``bands = 0``).
    """
    h, w = round(window.height), round(window.width)
    if not references:
        return np.zeros((0, 0, h, w)), np.zeros((0, 0, h, w), dtype=bool)
    pairs = [ref.read(like, window) for ref in references]
    return np.stack([v for v, _ in pairs]), np.stack([o for _, o in pairs])
