"""Real scenes through ``geonp fill``: collar, QA bands, alpha, unfilled pixels, formats (issue 13)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli
from rasterio.enums import ColorInterp
from rasterio.transform import from_origin

from tests.conftest import smooth_field, write_raster
from tests.io.test_footprint import COLLAR_WINDOW, SCENE, crop_scene, needs_scene

X0, Y0 = 500000.0, 7000000.0


def run(*args: object) -> object:
    res = CliRunner().invoke(cli, [*[str(a) for a in args]])
    return res


def read(path: Path) -> np.ndarray:
    with rasterio.open(path) as src:
        return src.read()


@needs_scene
def test_collar_of_a_real_scene_stays_nodata_and_the_cloud_is_filled(tmp_path, tiny_model) -> None:
    cloud = (slice(150, 190), slice(40, 90))
    src = crop_scene(tmp_path / "crop.tif", cloud=cloud)  # 0 = collar (untagged) and the cloud
    with rasterio.open(SCENE) as scene:
        collar = (scene.read(window=COLLAR_WINDOW) == 0).all(axis=0)
    out = tmp_path / "filled.tif"
    res = run("fill", src, out, "--nodata", 0, "--model", tiny_model, "--device", "cpu")
    assert res.exit_code == 0, res.output
    filled, std = read(out), read(tmp_path / "filled_std.tif")
    assert (filled[:, collar] == 0).all(), "the collar must stay nodata"
    assert np.isnan(std[:, collar]).all(), "the std is nodata on the collar too"
    assert (filled[:, cloud[0], cloud[1]] > 0).all() and (std[:, cloud[0], cloud[1]] > 0).all()
    assert f"{3 * int(collar.sum())} outside the data footprint" in res.output
    with rasterio.open(out) as dst:
        assert dst.nodata == 0
    # --fill-outside fills the collar as well
    out2 = tmp_path / "all.tif"
    res = run("fill", src, out2, "--nodata", 0, "--model", tiny_model, "--device", "cpu", "--fill-outside")
    assert res.exit_code == 0, res.output
    assert (read(out2)[:, collar] > 0).all()


def _scene(tmp_path: Path, *, size: int = 60, nodata: float | None = None, dtype: str = "uint16") -> Path:
    arr = np.stack([smooth_field((size, size), seed=s) for s in range(2)]).astype(dtype)
    return write_raster(tmp_path / "in.tif", arr, nodata=nodata)


def test_landsat_qa_pixel_band_drives_the_gaps(tmp_path, tiny_model) -> None:
    src = _scene(tmp_path)
    qa = np.full((60, 60), 21824, "uint16")  # clear
    qa[10:20, 10:20] = 22280  # cloud
    qa[30:35, 40:50] = 23888  # shadow
    qa[50:55, 0:5] = 21952  # water: not a gap by default
    write_raster(tmp_path / "qa.tif", qa)
    out = tmp_path / "out.tif"
    res = run("fill", src, out, "--qa", tmp_path / "qa.tif", "--qa-kind", "landsat-c2", "--model", tiny_model,
              "--device", "cpu")
    assert res.exit_code == 0, res.output
    std = read(tmp_path / "out_std.tif")
    gaps = std[0] > 0
    expect = np.zeros((60, 60), bool)
    expect[10:20, 10:20] = expect[30:35, 40:50] = True
    np.testing.assert_array_equal(gaps, expect)
    np.testing.assert_array_equal(read(out)[:, ~expect], read(src)[:, ~expect])  # bit for bit
    # Only clouds: the shadow stays observed.
    res = run("fill", src, tmp_path / "c.tif", "--qa", tmp_path / "qa.tif", "--qa-kind", "landsat-c2",
              "--qa-classes", "cloud", "--model", tiny_model, "--device", "cpu")
    assert res.exit_code == 0, res.output
    assert int((read(tmp_path / "c_std.tif")[0] > 0).sum()) == 100


def test_sentinel2_scl_at_20m_on_a_10m_grid(tmp_path, tiny_model) -> None:
    arr = np.stack([smooth_field((60, 60), seed=3)]).astype("uint16")
    src = tmp_path / "b04.tif"
    with rasterio.open(src, "w", driver="GTiff", width=60, height=60, count=1, dtype="uint16",
                       crs="EPSG:32633", transform=from_origin(X0, Y0, 10, 10)) as dst:
        dst.write(arr)
    scl = np.full((30, 30), 4, "uint8")
    scl[5:10, 5:10] = 9  # cloud (high probability): 10 m rows/cols 10..19
    scl[20, 20] = 3  # one 20 m shadow pixel: 10 m rows/cols 40..41
    with rasterio.open(tmp_path / "scl.tif", "w", driver="GTiff", width=30, height=30, count=1, dtype="uint8",
                       crs="EPSG:32633", transform=from_origin(X0, Y0, 20, 20)) as dst:
        dst.write(scl[None])
    res = run("fill", src, tmp_path / "out.tif", "--qa", tmp_path / "scl.tif", "--qa-kind", "sentinel2-scl",
              "--model", tiny_model, "--device", "cpu")
    assert res.exit_code == 0, res.output
    gaps = read(tmp_path / "out_std.tif")[0] > 0
    expect = np.zeros((60, 60), bool)
    expect[10:20, 10:20] = expect[40:42, 40:42] = True
    np.testing.assert_array_equal(gaps, expect)


def test_rgba_output_shows_filled_pixels_as_valid(tmp_path, tiny_model) -> None:
    rgb = np.stack([smooth_field((48, 48), seed=s) / 40 for s in range(3)]).astype("uint8")
    alpha = np.full((48, 48), 255, "uint8")
    alpha[10:20, 10:20] = 0  # transparent = gap
    path = tmp_path / "rgba.tif"
    with rasterio.open(path, "w", driver="GTiff", width=48, height=48, count=4, dtype="uint8",
                       crs="EPSG:32621", transform=from_origin(X0, Y0, 30, 30), photometric="RGB",
                       alpha="YES") as dst:
        dst.write(np.concatenate([rgb, alpha[None]]))
    with rasterio.open(path) as check:
        assert check.colorinterp[3] == ColorInterp.alpha and not check.dataset_mask()[15, 15]
    out = tmp_path / "out.tif"
    res = run("fill", path, out, "--model", tiny_model, "--device", "cpu")
    assert res.exit_code == 0, res.output
    with rasterio.open(out) as dst:
        assert dst.count == 4 and dst.colorinterp[3] == ColorInterp.alpha
        assert (dst.dataset_mask() == 255).all(), "filled pixels must be valid for GDAL/QGIS"
        assert (dst.read(4) == 255).all()
        data = dst.read([1, 2, 3])
    np.testing.assert_array_equal(data[:, alpha == 255], rgb[:, alpha == 255])
    assert read(tmp_path / "out_std.tif").shape[0] == 3  # the alpha band was not filled as data


@pytest.mark.parametrize("how", ["internal-mask", "mask-no-tag"])
def test_pixels_left_by_max_distance_read_as_nodata(tmp_path, tiny_model, how) -> None:
    arr = np.stack([smooth_field((64, 64), seed=1)]).astype("uint16")
    gap = np.zeros((64, 64), bool)
    gap[10:50, 10:50] = True  # a big gap: its centre is beyond --max-distance 5
    src = tmp_path / "in.tif"
    with rasterio.open(src, "w", driver="GTiff", width=64, height=64, count=1, dtype="uint16",
                       crs="EPSG:32621", transform=from_origin(X0, Y0, 30, 30)) as dst:
        dst.write(arr)
        if how == "internal-mask":
            dst.write_mask(np.where(gap, 0, 255).astype("uint8"))
    extra = []
    if how == "mask-no-tag":
        write_raster(tmp_path / "mask.tif", gap.astype("uint8"))
        extra = ["--mask", tmp_path / "mask.tif"]
    out = tmp_path / "out.tif"
    res = run("fill", src, out, "--model", tiny_model, "--device", "cpu", "--max-distance", 5, *extra)
    assert res.exit_code == 0, res.output
    std = read(tmp_path / "out_std.tif")[0]
    with rasterio.open(out) as dst:
        valid = dst.dataset_mask() > 0
    far = gap & np.isnan(std)
    assert far[30, 30] and far.sum() > 100
    np.testing.assert_array_equal(valid, ~far)  # unfilled read as missing, filled as valid


def test_prediction_never_equals_nodata(tmp_path, tiny_model) -> None:
    arr = np.full((1, 40, 40), 100, "uint8")  # a flat field at the nodata value's neighbours
    arr[0, ::2] = 99
    arr[0, 1::2] = 101
    arr[0, 15:25, 15:25] = 100
    src = write_raster(tmp_path / "in.tif", arr, nodata=100)
    out = tmp_path / "out.tif"
    res = run("fill", src, out, "--model", tiny_model, "--device", "cpu")
    assert res.exit_code == 0, res.output
    filled, std = read(out)[0], read(tmp_path / "out_std.tif")[0]
    assert (std[15:25, 15:25] > 0).all()  # all filled ...
    assert not (filled[15:25, 15:25] == 100).any()  # ... and none reads as nodata
    assert np.isin(filled[15:25, 15:25], [99, 101]).mean() > 0.5  # the mean is ~100: moved one step


def test_output_format_follows_the_extension(tmp_path, tiny_model) -> None:
    arr = (np.stack([smooth_field((32, 32), seed=2)]) / 40).astype("uint8")
    arr[0, 5:10, 5:10] = 0
    src = write_raster(tmp_path / "in.tif", arr, nodata=0)
    res = run("fill", src, tmp_path / "x.png", "--uncertainty", tmp_path / "x_std.tif", "--model", tiny_model,
              "--device", "cpu")
    assert res.exit_code == 0, res.output
    with rasterio.open(tmp_path / "x.png") as dst:
        assert dst.driver == "PNG" and (dst.read(1)[5:10, 5:10] > 0).all()
    res = CliRunner().invoke(cli, ["fill", str(src), str(tmp_path / "y.png"), "--model", str(tiny_model)])
    assert res.exit_code == 0, res.output  # the float32 std cannot be a PNG: it is a GeoTIFF beside it
    with rasterio.open(tmp_path / "y_std.tif") as std:
        assert std.driver == "GTiff" and std.dtypes[0] == "float32"


def test_std_keeps_scale_units_and_cog_overviews_are_rms(tmp_path, tiny_model) -> None:
    arr = np.stack([smooth_field((64, 64), seed=4)]).astype("uint16")
    arr[0, 20:40, 20:40] = 0
    src = write_raster(tmp_path / "in.tif", arr, nodata=0)
    with rasterio.open(src, "r+") as dst:
        dst.scales, dst.offsets, dst.units = (2.75e-5,), (-0.2,), ("reflectance",)
    out = tmp_path / "out.tif"
    res = run("fill", src, out, "--model", tiny_model, "--device", "cpu", "--cog")
    assert res.exit_code == 0, res.output
    with rasterio.open(tmp_path / "out_std.tif") as std:
        assert std.scales == (2.75e-5,) and std.offsets == (0.0,) and std.units == ("reflectance",)
        assert std.overviews(1) == [2], "a small COG gets overviews too"
        full, level = std.read(1), std.read(1, out_shape=(32, 32))
        assert (np.nan_to_num(level) >= 0).all()
        block = full[20:40, 20:40].reshape(10, 2, 10, 2)
        rms = np.sqrt((block.astype("float64") ** 2).mean(axis=(1, 3)))
        np.testing.assert_allclose(level[10:20, 10:20], rms, rtol=1e-4)


def test_jpeg_co_refused_before_work_and_std_co_fixes_it(tmp_path, tiny_model) -> None:
    arr = (np.stack([smooth_field((32, 32), seed=2)]) / 40).astype("uint8")
    arr[0, 5:10, 5:10] = 0
    src = write_raster(tmp_path / "in.tif", arr, nodata=0)
    res = CliRunner().invoke(cli, ["fill", str(src), str(tmp_path / "o.tif"), "--model", str(tiny_model),
                                   "--co", "COMPRESS=JPEG"])
    assert res.exit_code == 1
    assert "float32 std raster" in res.output and "--std-co COMPRESS=DEFLATE" in res.output
    assert list(tmp_path.iterdir()) == [src]
    res = run("fill", src, tmp_path / "o.tif", "--model", tiny_model, "--device", "cpu", "--co", "COMPRESS=JPEG",
              "--std-co", "COMPRESS=DEFLATE")
    assert res.exit_code == 0, res.output
    with rasterio.open(tmp_path / "o.tif") as a, rasterio.open(tmp_path / "o_std.tif") as b:
        assert a.compression.name == "jpeg" and b.compression.name == "deflate"


def test_no_gap_hint_and_model_tag_without_local_path(tmp_path, tiny_model) -> None:
    arr = np.full((2, 40, 40), 900, "uint16")
    arr[:, :12] = 0  # 30 % untagged zeros
    src = write_raster(tmp_path / "in.tif", arr)
    res = CliRunner().invoke(cli, ["fill", str(src), str(tmp_path / "o.tif"), "--model", str(tiny_model)])
    assert res.exit_code == 0
    assert "has no missing pixel" in res.output
    assert "Hint: 30 % of the pixels are 0 in every band and the file has no nodata tag" in res.output
    assert "--nodata 0" in res.output
    with rasterio.open(tmp_path / "o.tif") as dst:
        tags = dst.tags()
    assert tags["GEONP_MODEL"] == "tiny" and "GEONP_MODEL_PATH" not in tags
    assert str(tmp_path) not in " ".join(tags.values())


@needs_scene
def test_qa_fill_class_keeps_an_untagged_collar_out(tmp_path, tiny_model) -> None:
    """No --nodata: the QA band's fill bit marks the collar, which then stays unfilled (masked)."""
    src = crop_scene(tmp_path / "crop.tif")
    with rasterio.open(src) as s:
        collar = (s.read() == 0).all(axis=0)
        profile = s.profile
    qa = np.full(collar.shape, 21824, "uint16")
    qa[collar] = 1  # fill
    qa[150:190, 40:90] = 22280  # a cloud inside the footprint
    profile.update(count=1, dtype="uint16", nodata=None)
    with rasterio.open(tmp_path / "qa.tif", "w", **profile) as dst:
        dst.write(qa[None])
    out = tmp_path / "out.tif"
    res = run("fill", src, out, "--qa", tmp_path / "qa.tif", "--qa-kind", "landsat-c2", "--model", tiny_model,
              "--device", "cpu")
    assert res.exit_code == 0, res.output
    std = read(tmp_path / "out_std.tif")
    assert (std[:, 150:190, 40:90] > 0).all() and np.isnan(std[:, collar]).all()
    with rasterio.open(out) as dst:
        valid = dst.dataset_mask() > 0
    assert not valid[collar].any() and valid[~collar].all()


@needs_scene
def test_api_fill_keeps_the_collar_too_and_agrees_with_the_cli(tmp_path, tiny_model) -> None:
    import rioxarray

    import geonp

    cloud = (slice(150, 190), slice(40, 90))
    src = crop_scene(tmp_path / "crop.tif", cloud=cloud, nodata=0)
    with rasterio.open(SCENE) as scene:
        collar = (scene.read(window=COLLAR_WINDOW) == 0).all(axis=0)
    geonp.fill_raster(src, tmp_path / "cli.tif", model=str(tiny_model), device="cpu")
    for chunks in (None, {"x": 128, "y": 128}):
        ds = geonp.fill(rioxarray.open_rasterio(src, chunks=chunks), model=str(tiny_model), device="cpu")
        filled, std = ds.filled.values, ds.uncertainty.values
        assert (filled[:, collar] == 0).all() and np.isnan(std[:, collar]).all()
        assert (std[:, cloud[0], cloud[1]] > 0).all()
        np.testing.assert_array_equal(filled, read(tmp_path / "cli.tif"))


def test_netcdf_output_one_band_and_refusal_for_several(tmp_path, tiny_model) -> None:
    arr = np.stack([smooth_field((32, 32), seed=s) for s in range(2)]).astype("uint16")
    arr[:, 5:10, 5:10] = 0
    src = write_raster(tmp_path / "in.tif", arr, nodata=0)
    res = CliRunner().invoke(cli, ["fill", str(src), str(tmp_path / "x.nc"), "--model", str(tiny_model)])
    assert res.exit_code == 1
    assert "geonp cannot write the uint16 OUTPUT as netCDF" in res.output and "use one band with -b" in res.output
    assert not list(tmp_path.glob("x*"))
    res = run("fill", src, tmp_path / "y.nc", "-b", 2, "--model", tiny_model, "--device", "cpu")
    assert res.exit_code == 0, res.output
    with rasterio.open(tmp_path / "y.nc") as a, rasterio.open(tmp_path / "y_std.nc") as b:
        assert a.driver == b.driver == "netCDF" and a.count == b.count == 1
        assert (a.read(1)[5:10, 5:10] > 0).all() and (b.read(1)[5:10, 5:10] > 0).all()
