"""Rasterise GeoJSON polygons (vector masks and footprints) onto windows of the input's grid."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rasterio.crs import CRS
from rasterio.errors import CRSError
from rasterio.features import bounds as features_bounds
from rasterio.features import geometry_mask
from rasterio.warp import transform_geom
from rasterio.windows import Window
from rasterio.windows import transform as window_transform

from geonp.errors import InputRasterError
from geonp.io.raster import RasterInfo

__all__ = ["geojson_crs", "load_geojson", "rasterize_geojson"]

#: The CRS of GeoJSON without a ``crs`` member (RFC 7946: longitude/latitude on WGS 84).
WGS84 = "EPSG:4326"


@functools.lru_cache(maxsize=8)
def _geometries(name: str, like_crs: str | None, role: str) -> tuple[dict, ...]:
    """The file's polygons in the input's CRS (cached: read once per run)."""
    geoms, crs_name = load_geojson(name, role=role)
    if like_crs is None:
        return tuple(geoms)  # pixel-unit rasters: take the coordinates as they are
    if crs_name == WGS84:
        _check_lon_lat(geoms, name, role)
    try:
        src_crs = CRS.from_user_input(crs_name)
        dst_crs = CRS.from_wkt(like_crs)
        if src_crs == dst_crs:
            return tuple(geoms)
        return tuple(transform_geom(src_crs, dst_crs, g) for g in geoms)
    except (CRSError, ValueError) as err:
        raise InputRasterError(
            f"{role} {name}: its CRS {crs_name!r} cannot be used ({' '.join(str(err).split())}); "
            "write it in WGS 84 (EPSG:4326) as GeoJSON requires."
        ) from err


def _check_lon_lat(geoms: list[dict], name: str, role: str) -> None:
    """Refuse coordinates that cannot be longitude/latitude in a file that declares no CRS."""
    left, bottom, right, top = _bounds(geoms)
    if -180 <= left <= right <= 180 and -90 <= bottom <= top <= 90:
        return
    raise InputRasterError(
        f"{role} {name} names no other CRS, so it is read as GeoJSON is defined (RFC 7946): "
        f"longitude/latitude in WGS 84; but its coordinates span x {left:.6g}..{right:.6g}, "
        f"y {bottom:.6g}..{top:.6g}, which are not degrees. Reproject it to WGS 84 (ogr2ogr "
        f"-t_srs EPSG:4326 lonlat.geojson {name}) or name its CRS in a crs member: "
        '"crs": {"type": "name", "properties": {"name": "EPSG:32633"}} with your EPSG code.'
    )


def _bounds(geoms: Sequence[dict]) -> tuple[float, float, float, float]:
    """``(left, bottom, right, top)`` of all the geometries' coordinates."""
    boxes = np.array([features_bounds(g) for g in geoms], dtype=float)
    return (float(boxes[:, 0].min()), float(boxes[:, 1].min()),
            float(boxes[:, 2].max()), float(boxes[:, 3].max()))


@functools.lru_cache(maxsize=8)
def _geometry_bounds(name: str, like_crs: str | None, role: str) -> tuple[float, float, float, float]:
    return _bounds(_geometries(name, like_crs, role))


def _check_overlap(name: str, like: RasterInfo, role: str) -> None:
    """Refuse polygons that all miss the input raster (the wrong file, or the wrong place)."""
    from geonp.io.reproject import bounds_overlap, grid_bounds

    theirs, box = _geometry_bounds(name, like.crs, role), grid_bounds(like)
    if bounds_overlap(theirs, box):
        return
    where = "in the input's CRS" if like.crs is not None else "in pixels"
    raise InputRasterError(
        f"{role} {name} does not overlap the input {like.path}: its polygons span "
        f"{', '.join(f'{v:.6g}' for v in theirs)} and the input "
        f"{', '.join(f'{v:.6g}' for v in box)} (left, bottom, right, top {where}); give "
        f"polygons of the same place."
    )


def rasterize_geojson(
    name: str, *, like: RasterInfo, window: Window, role: str = "Mask"
) -> np.ndarray:
    """Rasterise a GeoJSON file's polygons onto one window of the input's grid.

    A pixel is inside when its centre lies in a polygon (GDAL's default rule).

    Args:
        name: Path of the GeoJSON file (WGS 84 unless it declares a ``crs``).
        like: The input raster.
        window: Window of the input grid.
        role: What the file is, for messages.

    Returns:
        Boolean ``[h, w]``, True inside the polygons.
    """
    geoms = _geometries(name, like.crs, role)
    _check_overlap(name, like, role)
    r0, c0 = round(float(window.row_off)), round(float(window.col_off))
    h, w = round(float(window.height)), round(float(window.width))
    tf = window_transform(Window(c0, r0, w, h), like.transform)
    outside = geometry_mask(geoms, out_shape=(h, w), transform=tf, all_touched=False)
    return ~outside


def geojson_crs(doc: dict) -> str:
    """The CRS a GeoJSON document declares (old ``crs`` member), else WGS 84 (RFC 7946)."""
    crs = doc.get("crs") if isinstance(doc, dict) else None
    if isinstance(crs, dict):
        name = (crs.get("properties") or {}).get("name")
        if isinstance(name, str) and name:
            return name
    return WGS84


def load_geojson(name: str, *, role: str) -> tuple[list[dict], str]:
    """Read the geometries of a GeoJSON file and its CRS."""
    try:
        doc = json.loads(Path(name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputRasterError(
            f"{role} {name} is not a readable GeoJSON file ({err}); check it."
        ) from err
    found: list[object] = []  # what the document names as geometries, checked below
    kind = doc.get("type") if isinstance(doc, dict) else None
    if kind == "FeatureCollection":
        found = [f.get("geometry") for f in doc.get("features", []) if isinstance(f, dict)]
    elif kind == "Feature":
        found = [doc.get("geometry")]
    elif kind in ("Polygon", "MultiPolygon", "GeometryCollection"):
        found = [doc]
    geoms: list[dict] = [
        g
        for g in found
        if isinstance(g, dict)
        and g.get("type") in ("Polygon", "MultiPolygon", "GeometryCollection")
    ]
    if not geoms:
        raise InputRasterError(
            f"{role} {name} holds no Polygon or MultiPolygon; give polygons (GeoJSON)."
        )
    return geoms, geojson_crs(doc)
