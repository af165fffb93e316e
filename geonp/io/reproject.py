"""Bring a mask or footprint raster on any grid onto the input's grid, one window at a time.

Masks often come on another grid: a Sentinel-2 scene classification at 20 m for 10 m bands, a
QA band at 60 m, a cloud mask in another UTM zone. GDAL's warper resamples them onto the
input's grid through a :class:`rasterio.vrt.WarpedVRT`; for gaps the maximum of the covering
pixels is used, so a target pixel is a gap wherever any mask pixel that covers it says gap,
and a gap edge never moves inwards. :func:`warp_array` is the one warping step, shared with the
reference rasters of multi-date filling (:mod:`geonp.io.references`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import rasterio
import rasterio.errors
from affine import Affine
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.io import DatasetReader, MemoryFile
from rasterio.vrt import WarpedVRT
from rasterio.warp import transform_bounds
from rasterio.windows import Window
from rasterio.windows import from_bounds as window_from_bounds
from rasterio.windows import transform as window_transform

from geonp.errors import InputRasterError
from geonp.io.raster import RasterInfo, open_raster
from geonp.io.windows import read_window

__all__ = [
    "bounds_overlap",
    "check_overlap",
    "grid_bounds",
    "read_gaps_on_grid",
    "read_on_grid",
    "same_grid",
    "source_window",
    "warp_array",
]


def same_grid(src: DatasetReader, like: RasterInfo) -> bool:
    """Tell whether ``src`` has exactly the grid (size, transform, CRS) of ``like``."""
    same = (
        src.width == like.width
        and src.height == like.height
        and src.transform.almost_equals(like.transform)
    )
    if same and src.crs and like.crs:  # a mask without CRS on the same pixel grid is fine
        same = src.crs == CRS.from_wkt(like.crs)
    return same


def _check_crs(src: DatasetReader, like: RasterInfo, name: str, role: str) -> None:
    if not src.crs or not like.crs:
        raise InputRasterError(
            f"{role} {name} is on another grid than the input {like.path} and "
            f"{'it' if not src.crs else 'the input'} has no CRS, so it cannot be resampled; "
            "give both a CRS (gdal_edit.py -a_srs) or resample the mask with gdalwarp."
        )


def grid_bounds(info: RasterInfo) -> tuple[float, float, float, float]:
    """The input grid's ``(left, bottom, right, top)`` in its own CRS."""
    t = info.transform
    xs = [t.c, t.c + t.a * info.width, t.c + t.b * info.height, t.c + t.a * info.width + t.b * info.height]
    ys = [t.f, t.f + t.d * info.width, t.f + t.e * info.height, t.f + t.d * info.width + t.e * info.height]
    return min(xs), min(ys), max(xs), max(ys)


def check_overlap(src: DatasetReader, like: RasterInfo, name: str, role: str) -> None:
    """Refuse a raster on another grid that does not overlap the input anywhere.

    Such a mask or QA band would mark no pixel, and the fill would go on as if it had not been
    given; it is almost always the wrong file (another scene, another tile).

    Args:
        src: The raster (another grid than ``like``, both with a CRS).
        like: The input raster.
        name: Its path, for messages.
        role: What it is, for messages (``"Mask"``, ``"Footprint"``).

    Raises:
        InputRasterError: If it does not overlap, or its bounds cannot be reprojected.
    """
    box = grid_bounds(like)
    try:
        theirs = tuple(src.bounds)
        if src.crs != CRS.from_wkt(like.crs):
            theirs = transform_bounds(src.crs, CRS.from_wkt(like.crs), *theirs, densify_pts=21)
    except (rasterio.errors.RasterioError, ValueError) as err:
        raise InputRasterError(
            f"{role} {name} cannot be reprojected to the CRS of the input {like.path} "
            f"({' '.join(str(err).split())}); warp it with gdalwarp first."
        ) from err
    if not all(np.isfinite(theirs)) or bounds_overlap(theirs, box):
        return
    raise InputRasterError(
        f"{role} {name} does not overlap the input {like.path} ({role.lower()} bounds "
        f"{', '.join(f'{v:.6g}' for v in theirs)}; input bounds "
        f"{', '.join(f'{v:.6g}' for v in box)} in the input's CRS); give a {role.lower()} of the "
        "same place."
    )


def bounds_overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two ``(left, bottom, right, top)`` boxes share an area (not just an edge)."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _window_ints(window: Window) -> tuple[int, int, int, int]:
    return (
        round(window.row_off),
        round(window.col_off),
        round(window.height),
        round(window.width),
    )


def source_window(src: DatasetReader, like: RasterInfo, window: Window) -> Window | None:
    """The window of ``src`` that covers ``window`` of the input grid (with a 2-pixel margin).

    Args:
        src: A raster on another grid (with a CRS).
        like: The input raster (with a CRS).
        window: Window of the input grid; may hang over its edge.

    Returns:
        The covering window clipped to ``src``, or None when ``src`` does not reach it.
    """
    r0, c0, h, w = _window_ints(window)
    dst_tf = window_transform(Window(c0, r0, w, h), like.transform)
    left, top = dst_tf * (0, 0)
    right, bottom = dst_tf * (w, h)
    bounds = (min(left, right), min(top, bottom), max(left, right), max(top, bottom))
    if src.crs != CRS.from_wkt(like.crs):
        bounds = transform_bounds(CRS.from_wkt(like.crs), src.crs, *bounds, densify_pts=21)
    win = window_from_bounds(*bounds, transform=src.transform)
    col0 = max(0, int(np.floor(win.col_off)) - 2)
    row0 = max(0, int(np.floor(win.row_off)) - 2)
    col1 = min(src.width, int(np.ceil(win.col_off + win.width)) + 2)
    row1 = min(src.height, int(np.ceil(win.row_off + win.height)) + 2)
    if col1 <= col0 or row1 <= row0:
        return None
    return Window(col0, row0, col1 - col0, row1 - row0)


def _warp(
    src: DatasetReader,
    like: RasterInfo,
    window: Window,
    decode: Callable[[np.ndarray, np.ndarray], np.ndarray],
    resampling: Resampling,
) -> np.ndarray:
    """Decode the covering source window to uint8 and warp it onto ``window`` of ``like``.

    Returns ``[h, w]`` uint8 with 255 where the source does not cover the target.
    """
    _, _, h, w = _window_ints(window)
    out = np.full((h, w), 255, dtype=np.uint8)
    src_win = source_window(src, like, window)
    if src_win is None:
        return out
    values = src.read(1, window=src_win).astype(np.float64)
    valid = src.read_masks(1, window=src_win) != 0
    decoded = decode(values, valid).astype(np.uint8)
    out[:] = warp_array(decoded[None], crs=src.crs, transform=src.window_transform(src_win),
                        like=like, window=window, resampling=resampling, nodata=255)[0]
    return out


def warp_array(
    arr: np.ndarray,
    *,
    crs: CRS,
    transform: Affine,
    like: RasterInfo,
    window: Window,
    resampling: Resampling,
    nodata: float,
) -> np.ndarray:
    """Warp an in-memory array of another grid onto one window of ``like``'s grid.

    Args:
        arr: Pixels ``[n, h, w]`` on the grid given by ``crs`` and ``transform``.
        crs: The array's CRS.
        transform: The array's affine transform.
        like: The input raster (with a CRS).
        window: Window of the input grid; may hang over its edge.
        resampling: GDAL resampling method.
        nodata: Value of ``arr`` that is not data (excluded from resampling; NaN works for
            floats). It is also what the result holds where the array does not reach.

    Returns:
        Array ``[n, window.height, window.width]`` of ``arr``'s dtype.
    """
    r0, c0, h, w = _window_ints(window)
    profile = {
        "driver": "GTiff",
        "width": int(arr.shape[2]),
        "height": int(arr.shape[1]),
        "count": int(arr.shape[0]),
        "dtype": str(arr.dtype),
        "crs": crs,
        "transform": transform,
        "nodata": nodata,
    }
    with MemoryFile() as mem:
        with mem.open(**profile) as tmp:
            tmp.write(arr)
        dst_tf = window_transform(Window(c0, r0, w, h), like.transform)
        with mem.open() as tmp, WarpedVRT(
            tmp,
            crs=CRS.from_wkt(like.crs),
            transform=dst_tf,
            width=w,
            height=h,
            resampling=resampling,
            nodata=nodata,
        ) as vrt:
            return vrt.read()


def read_on_grid(
    path: str | os.PathLike[str],
    *,
    like: RasterInfo,
    window: Window,
    resampling: str = "nearest",
    role: str = "Mask",
) -> tuple[np.ndarray, np.ndarray]:
    """Read band 1 of a raster on ``like``'s grid for one window (nearest neighbour).

    Args:
        path: The raster (any grid; same-grid files are read directly).
        like: The input raster.
        window: Window of the input grid; may hang over its edge.
        resampling: GDAL resampling name for other grids.
        role: What the file is, for messages.

    Returns:
        ``(values float64, valid bool)``, each ``[h, w]``; invalid where the file has no data or
        does not reach.
    """
    name = os.fspath(path)
    with open_raster(name, role=role) as src:
        if same_grid(src, like):
            values = read_window(src, window, [1])[0]
            return values, np.isfinite(values) & _not_nodata(values, src.nodata)
        _check_crs(src, like, name, role)
        check_overlap(src, like, name, role)
        # Values pass through unchanged as uint8 classes 0/1 are all footprints need.
        warped = _warp(
            src,
            like,
            window,
            lambda v, ok: np.where(
                ok & np.isfinite(v) & (v != 0) & _not_nodata(v, src.nodata), 1, 0
            ),
            Resampling[resampling],
        )
    return warped.astype(np.float64), warped != 255


def read_gaps_on_grid(
    path: str | os.PathLike[str],
    *,
    like: RasterInfo,
    window: Window,
    decode: Callable[[np.ndarray, np.ndarray], np.ndarray],
    role: str = "Mask",
) -> np.ndarray | None:
    """Read a gap mask on another grid onto one window of ``like`` (max of covering pixels).

    Args:
        path: The mask raster.
        like: The input raster.
        window: Window of the input grid.
        decode: ``(values, valid) -> is_gap`` on the mask's own grid.
        role: What the file is, for messages.

    Returns:
        Boolean ``[h, w]``, True = gap; or None when the mask is on the input's grid (the
        caller reads it directly, exactly).
    """
    name = os.fspath(path)
    with open_raster(name, role=role) as src:
        if same_grid(src, like):
            return None
        _check_crs(src, like, name, role)
        check_overlap(src, like, name, role)
        try:
            warped = _warp(src, like, window, decode, Resampling.max)
        except InputRasterError:
            raise
        except (rasterio.errors.RasterioError, OSError, ValueError) as err:
            raise InputRasterError(
                f"{role} {name} cannot be resampled onto the input's grid "
                f"({err}); resample it with gdalwarp first."
            ) from err
    return warped == 1


def _not_nodata(values: np.ndarray, nodata: float | None) -> np.ndarray:
    if nodata is None or np.isnan(nodata):
        return np.ones(values.shape, dtype=bool)
    return values != nodata
