"""The data footprint: the collar of a real scene stays outside, clouds inside are fillable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.windows import Window

from geonp.io.footprint import compute_footprint, footprint_everywhere, load_footprint
from geonp.io.raster import open_raster, raster_info
from tests.shared_data import needs, shared_raster

SCENE = shared_raster("landsat8_224078_20200518_b234.tif")
needs_scene = needs(SCENE)

#: A 256x256 window at the scene's collar: the footprint's edge crosses its top-right corner.
COLLAR_WINDOW = Window(1200, 300, 256, 256)


def crop_scene(path: Path, window: Window = COLLAR_WINDOW, *, cloud: tuple[slice, slice] | None = None,
               nodata: float | None = None) -> Path:
    """Write a crop of the real scene (0 = outside the footprint, untagged) as a GeoTIFF."""
    with rasterio.open(SCENE) as src:
        arr = src.read(window=window)
        profile = src.profile
        profile.update(width=int(window.width), height=int(window.height),
                       transform=src.window_transform(window), nodata=nodata, compress="deflate")
    if cloud is not None:
        arr[:, cloud[0], cloud[1]] = 0
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(arr)
    return path


def footprint_of(path: Path, *, nodata: float | None = 0, **kw):
    with open_raster(path) as src:
        info = raster_info(src)
        return compute_footprint(src, info=info, bands=range(1, info.count + 1), nodata=nodata, **kw), info


@needs_scene
def test_collar_outside_cloud_inside_on_real_scene_crop(tmp_path: Path) -> None:
    path = crop_scene(tmp_path / "crop.tif", cloud=(slice(150, 190), slice(40, 90)))
    fp, _info = footprint_of(path)
    with rasterio.open(path) as src:
        collar_or_cloud = (src.read() == 0).all(axis=0)
    cloud = np.zeros_like(collar_or_cloud)
    cloud[150:190, 40:90] = True
    collar = collar_or_cloud & ~cloud
    inside = fp.fillable(Window(0, 0, 256, 256))
    assert 0.25 < collar.mean() < 0.40  # a real collar, about a third of the crop
    assert not (inside & collar).any(), "collar pixels counted as fillable"
    assert inside[cloud].all(), "the cloud inside the footprint must be fillable"
    assert inside[~collar_or_cloud].all(), "every data pixel lies inside the footprint"


@needs_scene
def test_cloud_touching_the_footprint_edge_is_inside(tmp_path: Path) -> None:
    from scipy import ndimage

    with rasterio.open(SCENE) as src:
        collar = (src.read(window=COLLAR_WINDOW) == 0).all(axis=0)
    # A cloud hugging the scene edge: data pixels within 15 px of the collar, rows 60..100.
    dist = ndimage.distance_transform_edt(~collar)
    cloud = (dist > 0) & (dist <= 15)
    cloud[:60], cloud[100:] = False, False
    path = tmp_path / "crop.tif"
    crop_scene(path)
    with rasterio.open(path, "r+") as dst:
        arr = dst.read()
        arr[:, cloud] = 0
        dst.write(arr)
    fp, _ = footprint_of(path)
    inside = fp.fillable(Window(0, 0, 256, 256))
    assert cloud.sum() > 500
    # The cloud erases the scene edge there; the hull still follows the edge on both sides.
    assert inside[cloud & (dist >= 3)].all()
    assert not (inside & collar).any()


@needs_scene
def test_whole_scene_collar_and_decimated_read_stay_outside() -> None:
    with rasterio.open(SCENE) as src:
        collar = (src.read() == 0).all(axis=0)
    for max_pixels in (4 * 2**20, 300_000):  # exact, then decimated (7x)
        fp, info = footprint_of(SCENE, max_pixels=max_pixels)
        inside = fp.fillable(Window(0, 0, info.width, info.height))
        assert not (inside & collar).any()
        assert (~inside & ~collar).sum() <= 0.01 * (~collar).sum()
    assert abs(fp.data_fraction - float((~collar).mean())) < 0.005


def test_clouds_at_the_grid_corners_of_a_crop_are_inside(tmp_path: Path) -> None:
    arr = np.full((1, 64, 64), 500, dtype="uint16")
    arr[0, :20, :25] = 0  # a cloud over the top-left corner of the grid
    arr[0, 50:, 40:] = 0  # and one over the bottom-right corner
    arr[0, 30:34, 30:34] = 0
    path = tmp_path / "crop.tif"
    with rasterio.open(path, "w", driver="GTiff", width=64, height=64, count=1, dtype="uint16",
                       crs="EPSG:32621", transform=rasterio.transform.from_origin(0, 0, 30, 30)) as dst:
        dst.write(arr)
    fp, _ = footprint_of(path)
    assert fp.fillable(Window(0, 0, 64, 64)).all()


def test_straight_collar_corner_stays_outside(tmp_path: Path) -> None:
    rows, cols = np.mgrid[0:64, 0:64]
    collar = cols - rows > 30  # a straight scene edge across the top-right corner
    arr = np.where(collar, 0, 800).astype("uint16")[None]
    path = tmp_path / "edge.tif"
    with rasterio.open(path, "w", driver="GTiff", width=64, height=64, count=1, dtype="uint16",
                       crs="EPSG:32621", transform=rasterio.transform.from_origin(0, 0, 30, 30)) as dst:
        dst.write(arr)
    fp, _ = footprint_of(path)
    inside = fp.fillable(Window(0, 0, 64, 64))
    np.testing.assert_array_equal(inside, ~collar)
    # Windows hanging over the edge: nothing outside the grid is fillable.
    part = fp.fillable(Window(-4, -4, 10, 10))
    assert not part[:4].any() and not part[:, :4].any()
    np.testing.assert_array_equal(part[4:, 4:], ~collar[:6, :6])


def test_no_data_at_all_gives_an_empty_footprint(tmp_path: Path) -> None:
    path = tmp_path / "empty.tif"
    with rasterio.open(path, "w", driver="GTiff", width=8, height=8, count=1, dtype="uint8",
                       crs="EPSG:32621", transform=rasterio.transform.from_origin(0, 0, 30, 30)) as dst:
        dst.write(np.zeros((1, 8, 8), "uint8"))
    fp, _ = footprint_of(path)
    assert not fp.fillable(Window(0, 0, 8, 8)).any()
    assert fp.data_fraction == 0.0


def test_everywhere_and_footprint_files(tmp_path: Path) -> None:
    image = tmp_path / "img.tif"
    tf = rasterio.transform.from_origin(500000, 7000000, 30, 30)
    with rasterio.open(image, "w", driver="GTiff", width=16, height=16, count=1, dtype="float32",
                       crs="EPSG:32621", transform=tf) as dst:
        dst.write(np.ones((1, 16, 16), "float32"))
    with open_raster(image) as src:
        info = raster_info(src)
    assert footprint_everywhere(16, 16).fillable(Window(0, 0, 16, 16)).all()
    # A raster footprint at 60 m: the left half inside.
    fp_tif = tmp_path / "fp.tif"
    with rasterio.open(fp_tif, "w", driver="GTiff", width=8, height=8, count=1, dtype="uint8",
                       crs="EPSG:32621", transform=rasterio.transform.from_origin(500000, 7000000, 60, 60)) as dst:
        dst.write(np.repeat(np.array([[1, 1, 1, 1, 0, 0, 0, 0]], "uint8"), 8, axis=0)[None])
    inside = load_footprint(fp_tif, like=info).fillable(Window(0, 0, 16, 16))
    assert inside[:, :8].all() and not inside[:, 8:].any()
    # A GeoJSON polygon in the raster's CRS covering rows 0..7 (the top half).
    poly = {"type": "Polygon", "coordinates": [[[500000, 7000000], [500480, 7000000], [500480, 6999760],
                                                [500000, 6999760], [500000, 7000000]]]}
    doc = {"type": "FeatureCollection", "crs": {"type": "name", "properties": {"name": "EPSG:32621"}},
           "features": [{"type": "Feature", "properties": {}, "geometry": poly}]}
    gj = tmp_path / "fp.geojson"
    gj.write_text(json.dumps(doc))
    inside = load_footprint(gj, like=info).fillable(Window(0, 0, 16, 16))
    assert inside[:8].all() and not inside[8:].any()


def _write_u16(path: Path, arr: np.ndarray) -> Path:
    with rasterio.open(path, "w", driver="GTiff", width=arr.shape[1], height=arr.shape[0], count=1,
                       dtype="uint16", crs="EPSG:32621", transform=rasterio.transform.from_origin(0, 0, 30, 30)) as dst:
        dst.write(arr[None].astype("uint16"))
    return path


@pytest.mark.parametrize("seed", range(12))
def test_simulated_clouds_in_crops_are_always_inside(tmp_path: Path, seed: int) -> None:
    from geonp.data.gap_shapes import cloud_mask

    gap = cloud_mask((96, 96), coverage=0.3, rng=seed)  # blobs that often touch edges and corners
    path = _write_u16(tmp_path / "c.tif", np.where(gap, 0, 700))
    fp, _ = footprint_of(path)
    assert fp.fillable(Window(0, 0, 96, 96))[gap].all()


@pytest.mark.parametrize("angle", [10, 35, 60, 80, 100, 145, 170, 250, 300])
def test_straight_collars_at_any_angle_stay_outside(tmp_path: Path, angle: int) -> None:
    rows, cols = np.mgrid[0:96, 0:96] + 0.5
    theta = np.deg2rad(angle)
    # A scene edge 30 px from the grid's centre; the collar lies beyond it.
    collar = (cols - 48) * np.cos(theta) + (rows - 48) * np.sin(theta) > 30
    path = _write_u16(tmp_path / "e.tif", np.where(collar, 0, 700))
    fp, _ = footprint_of(path)
    inside = fp.fillable(Window(0, 0, 96, 96))
    assert not (inside & collar).any()
    assert inside[~collar].all()


@pytest.mark.parametrize("seed", range(4))
def test_monotone_chain_hull_equals_qhull(seed: int) -> None:
    """The footprint's own hull gives Qhull's vertices in Qhull's (counterclockwise) order."""
    from geonp.io.hull import _hull_vertices, _qhull_vertices

    rng = np.random.default_rng(seed)
    for trial in range(300):
        pts = rng.integers(0, int(rng.integers(1, 40)), size=(int(rng.integers(1, 80)), 2)) + 0.5
        if trial % 4 == 0:
            pts[:, 1] = 2 * pts[:, 0] + 1  # on one line: no hull
        pts = np.unique(pts, axis=0)
        ours, qhull = _hull_vertices(pts), _qhull_vertices(pts)
        assert (ours is None) == (qhull is None), pts
        if ours is not None:
            start = int(np.flatnonzero((qhull == ours[0]).all(axis=1))[0])
            np.testing.assert_array_equal(np.roll(qhull, -start, axis=0), ours)
