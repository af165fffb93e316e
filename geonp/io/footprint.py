"""The data footprint of a raster: which gaps geonp may fill, and which are the scene's collar.

A satellite scene is delivered on a rectangular grid, but its data cover only part of it: the
swath of a Landsat scene is a tilted rectangle, a Sentinel-2 tile is cut by the edge of the
orbit's swath. Outside that footprint is a *collar* of nodata that is not a gap: there is no
ground truth to recover, and a filled collar would invent land where the sensor saw nothing.

The rule (the one documented in the README's "What geonp guarantees"):

1. A pixel *has data* when any selected band is observed there by the raster itself (not NaN
   or Inf, not the nodata value, not masked by the internal mask or alpha band). Gaps from
   ``--mask`` or ``--qa`` (clouds) do not remove data: a cloud lies inside the footprint.
2. The footprint is the convex hull of the pixel centres that have data. Scene footprints are
   convex (a swath cut by a tile is the intersection of two convex shapes, and a crop of it is
   too), so every cloud, stripe or dropped pixel that has data on both sides is inside, also
   where it touches the footprint's edge, while the collar outside the straight scene edge is
   not.
3. One exception for crops: an edge of the hull that runs from one side of the raster to
   another (it cuts off a corner of the grid) and along which less than half of the pixels
   just inside have data is not a scene edge but a cloud over the corner; the corner beyond it
   is inside the footprint too.

The hull is computed from one pass over the raster in strips, on a read decimated so that at
most ``max_pixels`` pixels are examined (exact for rasters up to 4 Mpx); with decimation the
hull is that of a subset of the data pixels, so it can only be smaller, never reach into the
collar. A raster with several separate data areas (a mosaic) needs ``--footprint FILE`` or
``--fill-outside``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import rasterio
import rasterio.errors
from rasterio.enums import Resampling
from rasterio.io import DatasetReader
from rasterio.windows import Window

from geonp.errors import InputRasterError
from geonp.io.masks import valid_mask
from geonp.io.raster import RasterInfo, read_window

logger = logging.getLogger(__name__)

__all__ = ["Footprint", "compute_footprint", "footprint_everywhere", "load_footprint"]

#: Pixels examined at most when computing a footprint (the read is decimated beyond that).
DEFAULT_MAX_PIXELS = 4 * 2**20
#: Rows of the (decimated) raster read at a time.
_STRIP_ROWS = 512
#: Share of data pixels along a corner-cutting hull edge below which it is a cloud, not an edge.
_BRIDGE_SUPPORT = 0.5


@dataclass(frozen=True)
class Footprint:
    """Where a raster's gaps may be filled.

    Build one with :func:`compute_footprint`, :func:`load_footprint` or
    :func:`footprint_everywhere`; ask it with :meth:`fillable`.

    Attributes:
        width: Columns of the raster's grid.
        height: Rows of the raster's grid.
        kind: ``"everywhere"``, ``"hull"`` (computed) or ``"file"`` (``--footprint FILE``).
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

    def fillable(self, window: Window) -> np.ndarray:
        """Tell which pixels of a window lie inside the footprint.

        Args:
            window: A window of the raster's grid with integer offsets and size; it may hang
                over the raster's edge (pixels outside the raster are never fillable).

        Returns:
            Boolean array ``[window.height, window.width]``, True = inside the footprint.
        """
        r0, c0 = int(round(window.row_off)), int(round(window.col_off))
        h, w = int(round(window.height)), int(round(window.width))
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
        y = rows[:, None] + 0.5
        x = cols[None, :] + 0.5
        for a, b, c in self.half_planes:
            inside &= a * x + b * y + c <= 1e-6 * (abs(a) + abs(b) + abs(c) + 1.0)
        return inside

    def describe(self) -> str:
        """One phrase for logs and dry runs."""
        if self.kind == "everywhere":
            return "everywhere (--fill-outside)"
        if self.kind == "file":
            return f"from {self.source}"
        return f"convex hull of the data ({100 * self.data_fraction:.1f} % of the grid has data)"


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
) -> Footprint:
    """Compute the data footprint of a whole raster (see the module docstring for the rule).

    Args:
        src: The open input raster.
        info: Its description (:func:`geonp.io.raster.raster_info`).
        bands: 1-based bands that count: a pixel has data when any of them is observed.
        nodata: The nodata value in force (the user's ``--nodata`` or the tag), or None.
        max_pixels: Examine at most this many pixels; larger rasters are read decimated.

    Returns:
        The footprint. A raster without any data pixel gets an empty footprint.
    """
    step = max(1, math.ceil(math.sqrt(info.width * info.height / max(1, max_pixels))))
    has = _has_data(src, info=info, bands=bands, nodata=nodata, step=step)
    dec_h, dec_w = has.shape
    sy, sx = info.height / dec_h, info.width / dec_w
    rows = np.flatnonzero(has.any(axis=1))
    if rows.size == 0:
        empty = np.array([[0.0, 0.0, 1.0]])  # 0*x + 0*y + 1 <= 0 never holds
        return Footprint(info.width, info.height, "hull", empty, data_fraction=0.0)
    first = has[rows].argmax(axis=1)
    last = dec_w - 1 - has[rows, ::-1].argmax(axis=1)
    # Centres of the full-resolution pixels the (nearest-neighbour) decimated read sampled,
    # x = column + 0.5, y = row + 0.5: real data pixels, so the hull never reaches the collar.
    ys = np.floor((np.concatenate([rows, rows]) + 0.5) * sy) + 0.5
    xs = np.floor((np.concatenate([first, last]) + 0.5) * sx) + 0.5
    points = np.unique(np.stack([xs, ys], axis=1), axis=0)
    planes = _hull_half_planes(points)
    planes = _drop_corner_bridges(planes, points, has, sx=sx, sy=sy, width=info.width,
                                  height=info.height)
    fraction = float(has.mean())
    logger.info("footprint of %s: hull with %d edges, %.1f %% of the grid has data (step %d)",
                info.path, len(planes), 100 * fraction, step)
    return Footprint(info.width, info.height, "hull", planes, data_fraction=fraction)


def _has_data(src: DatasetReader, *, info: RasterInfo, bands: Sequence[int], nodata: float | None,
              step: int) -> np.ndarray:
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
            out[r0:r0 + h] = ok.any(axis=0)
        return out
    dec_h, dec_w = max(1, info.height // step), max(1, info.width // step)
    try:
        arr = src.read(band_list, out_shape=(len(band_list), dec_h, dec_w),
                       resampling=Resampling.nearest).astype(np.float64)
        internal = None
        if info.has_internal_mask:
            internal = np.stack([src.read_masks(b, out_shape=(dec_h, dec_w),
                                                resampling=Resampling.nearest) != 0
                                 for b in band_list])
    except (rasterio.errors.RasterioError, OSError) as err:
        raise InputRasterError(
            f"Raster {info.path} cannot be read to find its data footprint ({err}); check the "
            "file, or give the footprint with --footprint FILE."
        ) from err
    ok = valid_mask(arr, nodata=nodata, internal_valid=internal, source_dtype=info.dtype)
    return ok.any(axis=0)


def _hull_half_planes(points: np.ndarray) -> np.ndarray:
    """Half-planes ``a*x + b*y + c <= 0`` of the convex hull of 2D points (any count >= 1)."""
    from scipy.spatial import ConvexHull, QhullError

    if len(points) >= 3:
        try:
            hull = ConvexHull(points)
            return np.asarray(hull.equations, dtype=np.float64)
        except QhullError:
            pass  # collinear points: fall back to their bounding box
    (x0, y0), (x1, y1) = points.min(axis=0), points.max(axis=0)
    return np.array([[-1.0, 0.0, x0], [1.0, 0.0, -x1], [0.0, -1.0, y0], [0.0, 1.0, -y1]])


def _edge_ends(plane: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The two extreme hull points lying on one half-plane's line."""
    a, b, c = plane
    scale = abs(a) + abs(b)
    on = np.abs(points @ np.array([a, b]) + c) <= 1e-6 * (scale + abs(c) + 1.0)
    pts = points[on]
    if len(pts) < 2:
        return None
    direction = np.array([-b, a])
    t = pts @ direction
    return pts[t.argmin()], pts[t.argmax()]


def _side(p: np.ndarray, width: int, height: int) -> set[str]:
    """Which raster sides a pixel centre lies on (within one pixel)."""
    x, y = p
    sides = set()
    if x < 1.0:
        sides.add("left")
    if x > width - 1.0:
        sides.add("right")
    if y < 1.0:
        sides.add("top")
    if y > height - 1.0:
        sides.add("bottom")
    return sides


def _drop_corner_bridges(planes: np.ndarray, points: np.ndarray, has: np.ndarray, *, sx: float,
                         sy: float, width: int, height: int) -> np.ndarray:
    """Remove hull edges that cut a corner off the grid across a gap (rule 3 of the module)."""
    keep = []
    dec_h, dec_w = has.shape
    for plane in planes:
        ends = _edge_ends(plane, points)
        if ends is None:
            keep.append(plane)
            continue
        p, q = ends
        sp, sq = _side(p, width, height), _side(q, width, height)
        if not sp or not sq or sp & sq:
            keep.append(plane)  # not border to border, or runs along one side of the grid
            continue
        # Sample the pixels one pixel inside the edge, at one-pixel spacing along it.
        a, b, _ = plane
        normal = np.array([a, b]) / math.hypot(a, b)  # points out of the hull
        n = max(2, int(math.hypot(*(q - p))))
        t = np.linspace(0.0, 1.0, n)[:, None]
        inner = p + t * (q - p) - 1.5 * normal * max(sx, sy)
        cols = np.clip((inner[:, 0] / sx).astype(int), 0, dec_w - 1)
        rows = np.clip((inner[:, 1] / sy).astype(int), 0, dec_h - 1)
        support = float(has[rows, cols].mean())
        if support >= _BRIDGE_SUPPORT:
            keep.append(plane)
        else:
            logger.info("footprint: hull edge %s-%s crosses a gap over a corner of the grid "
                        "(%.0f %% data); the corner counts as inside", p, q, 100 * support)
    return np.array(keep, dtype=np.float64).reshape(-1, 3)


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

    values, valid = read_on_grid(name, like=like, window=window, resampling="nearest",
                                 role="Footprint")
    return valid & (values != 0)


def geojson_crs(doc: dict) -> str:
    """The CRS a GeoJSON document declares (old ``crs`` member), else WGS 84 (RFC 7946)."""
    crs = doc.get("crs") if isinstance(doc, dict) else None
    if isinstance(crs, dict):
        name = (crs.get("properties") or {}).get("name")
        if isinstance(name, str) and name:
            return name
    return "EPSG:4326"


def load_geojson(name: str, *, role: str) -> tuple[list[dict], str]:
    """Read the geometries of a GeoJSON file and its CRS."""
    try:
        doc = json.loads(Path(name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputRasterError(f"{role} {name} is not a readable GeoJSON file ({err}); check it.") from err
    geoms: list[dict] = []
    kind = doc.get("type") if isinstance(doc, dict) else None
    if kind == "FeatureCollection":
        geoms = [f.get("geometry") for f in doc.get("features", []) if isinstance(f, dict)]
    elif kind == "Feature":
        geoms = [doc.get("geometry")]
    elif kind in ("Polygon", "MultiPolygon", "GeometryCollection"):
        geoms = [doc]
    geoms = [g for g in geoms if isinstance(g, dict) and g.get("type") in
             ("Polygon", "MultiPolygon", "GeometryCollection")]
    if not geoms:
        raise InputRasterError(
            f"{role} {name} holds no Polygon or MultiPolygon; give polygons (GeoJSON)."
        )
    return geoms, geojson_crs(doc)
