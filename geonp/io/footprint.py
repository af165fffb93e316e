"""The data footprint of a raster: which gaps geonp may fill, and which are the scene's collar.

A satellite scene is delivered on a rectangular grid, but its data cover only part of it: the
swath of a Landsat scene is a tilted rectangle, a Sentinel-2 tile is cut by the edge of the
orbit's swath. Outside that footprint is a *collar* of nodata that is not a gap: there is no
ground truth to recover, and a filled collar would invent land where the sensor saw nothing.

The footprint comes from evidence, never from a guess; the first that applies decides:

1. ``--footprint FILE``: the user's footprint (kind ``"file"``).
2. Pixels that a reference date observes are inside (added by
   :meth:`geonp.io.gap_sources.GapSources.fillable`; the references are read there).
3. A collar recognised by its shape (kind ``"hull"``): nodata connected to the raster's border
   whose boundary with data is a long straight edge, as a Landsat swath edge or a Sentinel-2
   orbit edge is. A pixel *has data* when any band is observed by the raster itself and a QA
   band, when given, does not flag it as fill (``--mask``/``--qa`` clouds do not remove data: a
   cloud lies inside the footprint). The convex hull of the pixels that have data is split by its
   vertices on the raster's border into chains; only the straight stretches of a chain with data
   right along them (:mod:`geonp.io.hull`) bound the footprint. A cloud over a corner or along a
   side of a crop has no such edge, so it is inside and filled. A QA band's fill class alone
   does not put a pixel outside: Landsat 7's scan-line stripes are fill too, and are gaps.

Without evidence a gap is a gap and is filled. ``--fill-outside`` fills everything (kind
``"everywhere"``).

The hull is computed from one pass over the raster in strips, on a read decimated so that at
most ``max_pixels`` pixels are examined (exact for rasters up to 4 Mpx). A raster with several
separate data areas (a mosaic) needs ``--footprint FILE`` or ``--fill-outside``.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
import rasterio.errors
from rasterio.enums import Resampling
from rasterio.io import DatasetReader
from rasterio.windows import Window

from geonp.errors import InputRasterError
from geonp.io.hull import footprint_half_planes
from geonp.io.masks import valid_mask
from geonp.io.raster import RasterInfo
from geonp.io.windows import read_window

logger = logging.getLogger(__name__)

__all__ = [
    "Footprint",
    "compute_footprint",
    "footprint_everywhere",
    "footprint_of_array",
    "load_footprint",
]

#: Pixels examined at most when computing a footprint (the read is decimated beyond that).
DEFAULT_MAX_PIXELS = 4 * 2**20
#: Rows of the (decimated) raster read at a time.
_STRIP_ROWS = 512


@dataclass(frozen=True, eq=False)
class Footprint:
    """Where a raster's gaps may be filled.

    Build one with :func:`compute_footprint`, :func:`load_footprint` or
    :func:`footprint_everywhere`; ask it with :meth:`fillable`.

    Attributes:
        width: Columns of the raster's grid.
        height: Rows of the raster's grid.
        kind: ``"everywhere"``, ``"hull"`` (a straight collar edge) or ``"file"``
            (``--footprint FILE``).
        half_planes: For ``"hull"``: ``[n, 3]`` rows ``(a, b, c)``; a pixel centre ``(x, y)``
            (column + 0.5, row + 0.5) is inside when ``a*x + b*y + c <= tol`` for every row.
        source: For ``"file"``: the footprint file's path.
        like: For ``"file"``: the grid it is resampled onto.
        data_fraction: Share of the raster's pixels that have data (for reports).
    """

    width: int
    height: int
    kind: str = "everywhere"
    half_planes: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    source: str | None = None
    like: RasterInfo | None = None
    data_fraction: float = 1.0

    def __eq__(self, other: object) -> bool:
        """Equal when they describe the same footprint (jobs compare them to reuse a runner)."""
        if not isinstance(other, Footprint):
            return NotImplemented
        mine = (self.width, self.height, self.kind, self.source, self.data_fraction)
        theirs = (other.width, other.height, other.kind, other.source, other.data_fraction)
        return mine == theirs and np.array_equal(self.half_planes, other.half_planes)

    __hash__ = None  # type: ignore[assignment]

    def fillable(self, window: Window, observed_by: Sequence[np.ndarray] = ()) -> np.ndarray:
        """Tell which pixels of a window lie inside the footprint.

        Args:
            window: A window of the raster's grid with integer offsets and size; it may hang
                over the raster's edge (pixels outside the raster are never fillable).
            observed_by: Other dates' observed flags ``[bands, h, w]`` on the window: a pixel
                one of them observes is inside the scene, where the footprint is only the
                collar's shape (kind ``"hull"``; ``--footprint FILE`` decides alone).

        Returns:
            Boolean array ``[window.height, window.width]``, True = inside the footprint.
        """
        r0, c0 = round(float(window.row_off)), round(float(window.col_off))
        h, w = round(float(window.height)), round(float(window.width))
        rows = np.arange(r0, r0 + h)
        cols = np.arange(c0, c0 + w)
        inside = ((rows >= 0) & (rows < self.height))[:, None] & (
            (cols >= 0) & (cols < self.width)
        )[None, :]
        if self.kind == "everywhere":
            return inside
        if self.kind == "file":
            assert self.source is not None and self.like is not None, "file footprint incomplete"
            return inside & _read_footprint_file(self.source, self.like, window)
        if not inside.size:
            return inside
        y = rows[:, None] + 0.5
        x = cols[None, :] + 0.5
        on_grid = inside.copy()
        # A half-plane that holds (or fails) the window's four corner pixels holds (or fails) all of
        # them: most windows of a large raster are wholly inside or outside, decided at no cost.
        corners = np.array([[cols[0], cols[-1], cols[0], cols[-1]], [rows[0], rows[0], rows[-1], rows[-1]]]) + 0.5
        for a, b, c in self.half_planes:
            holds = a * corners[0] + b * corners[1] + c <= 1e-6 * (abs(a) + abs(b) + abs(c) + 1.0)
            if not holds.any():
                inside[:] = False
                break
            if not holds.all():
                inside &= a * x + b * y + c <= 1e-6 * (abs(a) + abs(b) + abs(c) + 1.0)
        for ok in observed_by:
            inside |= on_grid & ok.any(axis=0)
        return inside

    def describe(self) -> str:
        """One phrase for logs and dry runs."""
        if self.kind == "everywhere":
            return "everywhere (--fill-outside)"
        if self.kind == "file":
            return f"from {self.source}"
        if not len(self.half_planes) or self.data_fraction == 1.0:
            return "the whole grid (no collar edge found)"
        return (f"inside the straight edges of the data's collar ({100 * self.data_fraction:.1f} % "
                "of the grid has data)")

    @property
    def evidence(self) -> str:
        """Why pixels outside this footprint are outside, for summaries and tags."""
        return {"file": "--footprint", "hull": "beyond a straight collar edge",
                "everywhere": "none"}[self.kind]


def footprint_everywhere(width: int, height: int) -> Footprint:
    """A footprint that covers the whole grid (``--fill-outside``).

    Args:
        width: Columns.
        height: Rows.

    Returns:
        The footprint.
    """
    return Footprint(width=int(width), height=int(height))


def compute_footprint(
    src: DatasetReader,
    *,
    info: RasterInfo,
    bands: Sequence[int],
    nodata: float | None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    no_data: Callable[[Window], np.ndarray] | None = None,
) -> Footprint:
    """Compute the data footprint of a whole raster (see the module docstring for the rule).

    Args:
        src: The open input raster.
        info: Its description (:func:`geonp.io.raster.raster_info`).
        bands: 1-based bands that count: a pixel has data when any of them is observed.
        nodata: The nodata value in force (the user's ``--nodata`` or the tag), or None.
        max_pixels: Examine at most this many pixels; larger rasters are read decimated.
        no_data: Optional ``window -> bool [h, w]``: pixels another source says have no data (the
            QA band's fill class), though the raster holds values there.

    Returns:
        The footprint. A raster without any data pixel gets an empty footprint.
    """
    step = max(1, math.ceil(math.sqrt(info.width * info.height / max(1, max_pixels))))
    has = _has_data(src, info=info, bands=bands, nodata=nodata, step=step)
    dec_h, dec_w = has.shape
    sy, sx = info.height / dec_h, info.width / dec_w
    if no_data is not None:
        _remove_no_data(has, no_data, info=info, sy=sy, sx=sx)
    # The full-resolution pixels the (nearest-neighbour) decimated read sampled.
    full_rows = np.floor((np.arange(dec_h) + 0.5) * sy).astype(int)
    full_cols = np.floor((np.arange(dec_w) + 0.5) * sx).astype(int)
    fp = _hull_footprint(
        has, full_rows, full_cols, width=info.width, height=info.height, sx=sx, sy=sy
    )
    logger.info(
        "footprint of %s: hull with %d edges, %.1f %% of the grid has data (step %d)",
        info.path,
        len(fp.half_planes),
        100 * fp.data_fraction,
        step,
    )
    return fp


def footprint_of_array(has_data: Any, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Footprint:
    """Compute the data footprint of an in-memory or Dask ``[h, w]`` "has data" array.

    The same rule as :func:`compute_footprint`; a Dask array is read strided (every
    ``step``-th row and column, at most ``max_pixels``), which only computes that subset.

    Args:
        has_data: Bool ``[h, w]``: True where any band is observed (numpy or dask).
        max_pixels: Examine at most this many pixels.

    Returns:
        The footprint.
    """
    h, w = (int(n) for n in has_data.shape)
    step = max(1, math.ceil(math.sqrt(h * w / max(1, max_pixels))))
    sub = has_data[::step, ::step]
    has = np.asarray(sub.compute() if hasattr(sub, "compute") else sub, dtype=bool)
    full_rows, full_cols = np.arange(0, h, step), np.arange(0, w, step)
    return _hull_footprint(
        has, full_rows, full_cols, width=w, height=h, sx=float(step), sy=float(step)
    )


def _hull_footprint(
    has: np.ndarray,
    full_rows: np.ndarray,
    full_cols: np.ndarray,
    *,
    width: int,
    height: int,
    sx: float,
    sy: float,
) -> Footprint:
    """The footprint of sampled "has data" flags; ``full_rows/cols`` are the sampled pixels."""
    dec_w = has.shape[1]
    rows = np.flatnonzero(has.any(axis=1))
    if rows.size == 0:
        empty = np.array([[0.0, 0.0, 1.0]])  # 0*x + 0*y + 1 <= 0 never holds
        return Footprint(width, height, "hull", empty, data_fraction=0.0)
    first = has[rows].argmax(axis=1)
    last = dec_w - 1 - has[rows, ::-1].argmax(axis=1)
    # Pixel centres (x = column + 0.5, y = row + 0.5) of real data pixels, so the hull never
    # reaches into the collar.
    ys = full_rows[np.concatenate([rows, rows])] + 0.5
    xs = full_cols[np.concatenate([first, last])] + 0.5
    points = np.unique(np.stack([xs, ys], axis=1), axis=0)
    planes = footprint_half_planes(points, has, sx=sx, sy=sy, width=width, height=height)
    return Footprint(width, height, "hull", planes, data_fraction=float(has.mean()))


def _has_data(
    src: DatasetReader, *, info: RasterInfo, bands: Sequence[int], nodata: float | None, step: int
) -> np.ndarray:
    """Read ``[h/step, w/step]``: True where any band is observed by the raster itself."""
    band_list = [int(b) for b in bands]
    if step == 1:
        out = np.zeros((info.height, info.width), dtype=bool)
        for r0 in range(0, info.height, _STRIP_ROWS):
            h = min(_STRIP_ROWS, info.height - r0)
            win = Window(0, r0, info.width, h)
            arr = read_window(src, win, band_list)
            internal = None
            if info.has_internal_mask:
                internal = np.stack([src.read_masks(b, window=win) != 0 for b in band_list])
            ok = valid_mask(arr, nodata=nodata, internal_valid=internal, source_dtype=info.dtype)
            out[r0 : r0 + h] = ok.any(axis=0)
        return out
    dec_h, dec_w = max(1, info.height // step), max(1, info.width // step)
    out = np.zeros((dec_h, dec_w), dtype=bool)
    try:
        for b in band_list:  # one band at a time: memory of one decimated band
            arr = src.read(b, out_shape=(dec_h, dec_w), resampling=Resampling.nearest).astype(
                np.float64
            )
            internal = None
            if info.has_internal_mask:
                internal = (
                    src.read_masks(b, out_shape=(dec_h, dec_w), resampling=Resampling.nearest) != 0
                )
            out |= valid_mask(arr, nodata=nodata, internal_valid=internal, source_dtype=info.dtype)
    except (rasterio.errors.RasterioError, OSError) as err:
        raise InputRasterError(
            f"Raster {info.path} cannot be read to find its data footprint ({err}); check the "
            "file, or give the footprint with --footprint FILE."
        ) from err
    return out


def _remove_no_data(
    has: np.ndarray,
    no_data: Callable[[Window], np.ndarray],
    *,
    info: RasterInfo,
    sy: float,
    sx: float,
) -> None:
    """Clear ``has`` where ``no_data`` says so, reading it in full-resolution strips."""
    dec_h, dec_w = has.shape
    rows = np.floor((np.arange(dec_h) + 0.5) * sy).astype(int)  # the pixels the read sampled
    cols = np.floor((np.arange(dec_w) + 0.5) * sx).astype(int)
    for r0 in range(0, info.height, _STRIP_ROWS):
        h = min(_STRIP_ROWS, info.height - r0)
        pick = np.flatnonzero((rows >= r0) & (rows < r0 + h))
        if pick.size == 0:
            continue
        strip = no_data(Window(0, r0, info.width, h))
        has[pick] &= ~strip[rows[pick] - r0][:, cols]


# --------------------------------------------------------------------------------------------
# --footprint FILE

_VECTOR_SUFFIXES = (".geojson", ".json")


def load_footprint(path: str | os.PathLike[str], *, like: RasterInfo) -> Footprint:
    """Use a footprint the user gives (``--footprint FILE``).

    A raster (non-zero = inside; its nodata = outside) on any grid is resampled onto the
    input's grid with nearest neighbour; a GeoJSON file (polygons, in its ``crs`` member's CRS
    or WGS 84 as RFC 7946 says) is rasterised: a pixel is inside when its centre is.

    Args:
        path: The footprint file.
        like: The input raster.

    Returns:
        The footprint.

    Raises:
        InputRasterError: If the file cannot be read or holds no polygon.
    """
    name = os.fspath(path)
    if not Path(name).exists():
        raise InputRasterError(f"Footprint {name} does not exist; check the path.")
    # Read a 1-pixel window now so that a bad file fails before any work.
    _read_footprint_file(name, like, Window(0, 0, 1, 1))
    return Footprint(like.width, like.height, "file", source=name, like=like)


def _read_footprint_file(name: str, like: RasterInfo, window: Window) -> np.ndarray:
    if name.lower().endswith(_VECTOR_SUFFIXES):
        from geonp.io.vector import rasterize_geojson

        return rasterize_geojson(name, like=like, window=window, role="Footprint")
    from geonp.io.reproject import read_on_grid

    values, valid = read_on_grid(
        name, like=like, window=window, resampling="nearest", role="Footprint"
    )
    return valid & (values != 0)
