from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import rasterio
import rasterio.errors
from affine import Affine
from rasterio.enums import ColorInterp

from geonp.errors import ConfigError, OutputError
from geonp.io.atomic import (
    AtomicRasterWriter,
    atomic_write_bytes,
    atomic_write_file,
    atomic_write_text,
)
from geonp.io.formats import check_creation_options, output_driver
from geonp.io.metadata import copy_metadata
from geonp.io.paths import check_output_path
from geonp.io.profiles import cog_options, finalize_cog, output_profile, parse_creation_options

TRANSFORM = Affine(30.0, 0.0, 300000.0, 0.0, -30.0, 5000020.0)


def src_profile(width: int = 20, height: int = 10) -> dict:
    return {
        "driver": "GTiff", "width": width, "height": height, "count": 1, "dtype": "uint8",
        "crs": rasterio.crs.CRS.from_epsg(32621), "transform": TRANSFORM,
        "compress": "jpeg", "photometric": "ycbcr", "blockxsize": 16, "blockysize": 16,
        "tiled": True,
    }


def write_tif(path: Path, data: np.ndarray, **kwargs) -> Path:
    profile = {
        "driver": "GTiff", "width": data.shape[2], "height": data.shape[1],
        "count": data.shape[0], "dtype": data.dtype.name, "crs": "EPSG:32621",
        "transform": TRANSFORM,
    }
    profile.update(kwargs)
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
    return path


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ------------------------------------------------------------------------------ check_output_path


def test_output_equal_to_input_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "in.tif"
    src.write_bytes(b"x")
    for spelling in (src, tmp_path / "sub" / ".." / "in.tif"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(OutputError, match="is the input") as info:
            check_output_path(spelling, inputs=[tmp_path / "other.tif", src], overwrite=True)
        assert "write to another path (geonp never modifies its input)" in str(info.value)
    link = tmp_path / "link.tif"
    os.link(src, link)
    with pytest.raises(OutputError, match="is the input"):
        check_output_path(link, inputs=[src], overwrite=True)
    assert src.read_bytes() == b"x"


def test_output_parent_missing(tmp_path: Path) -> None:
    out = tmp_path / "no" / "such" / "out.tif"
    with pytest.raises(OutputError, match="does not exist; create it first") as info:
        check_output_path(out, inputs=[], overwrite=False)
    assert str(tmp_path / "no" / "such") in str(info.value)


def test_output_exists_needs_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    out.write_bytes(b"old")
    with pytest.raises(OutputError) as info:
        check_output_path(out, inputs=[tmp_path / "in.tif"], overwrite=False)
    assert str(info.value) == f"{out} already exists; pass --overwrite to replace it."
    assert check_output_path(out, inputs=[tmp_path / "in.tif"], overwrite=True) == out
    assert out.read_bytes() == b"old"


def test_output_is_directory(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="is a directory; give a file path"):
        check_output_path(tmp_path, inputs=[], overwrite=True)


def test_output_new_file_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_output_path("new.tif", inputs=["in.tif"], overwrite=False) == tmp_path / "new.tif"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write anywhere")
def test_output_parent_not_writable(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(OutputError, match="is not writable"):
            check_output_path(locked / "out.tif", inputs=[], overwrite=False)
    finally:
        locked.chmod(0o700)


def test_output_parent_not_writable_via_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("geonp.io.paths.os.access", lambda path, mode: False)
    with pytest.raises(OutputError, match=r"is not writable; choose another directory"):
        check_output_path(tmp_path / "out.tif", inputs=[], overwrite=False)


# ------------------------------------------------------------------------- creation options


def test_parse_creation_options_good() -> None:
    opts = parse_creation_options(
        ["compress=zstd", "ZSTD_LEVEL=9", "TILED=yes", "BLOCKXSIZE=512", "BIGTIFF=if_safer",
         "NUM_THREADS=ALL_CPUS"]
    )
    assert opts == {
        "COMPRESS": "ZSTD", "ZSTD_LEVEL": "9", "TILED": "YES", "BLOCKXSIZE": "512",
        "BIGTIFF": "IF_SAFER", "NUM_THREADS": "ALL_CPUS",
    }
    assert parse_creation_options([]) == {}


@pytest.mark.parametrize(
    ("item", "pattern"),
    [
        ("COMPRESS", r"'COMPRESS' is not KEY=VALUE; write it like --co COMPRESS=ZSTD"),
        ("=LZW", "is not KEY=VALUE"),
        ("COMPRESS=", "is not KEY=VALUE"),
    ],
)
def test_parse_creation_options_bad(item: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        parse_creation_options(["TILED=YES", item])


@pytest.mark.parametrize(
    ("options", "kw", "pattern"),
    [
        ({"COLOR": "RED"}, {}, r"Unknown creation option COLOR: .*GDAL says driver GTiff does not support "
                               r"creation option COLOR"),
        ({"COMPRESS": "RAR"}, {}, r"'RAR' is an unexpected value for COMPRESS"),
        ({"BLOCKXSIZE": "100"}, {}, r"GDAL says"),
        ({"COMPRESS": "JPEG"}, {"dtype": "float32", "what": "std raster"},
         r"JPEG compression holds only 8-bit values, not float32 .*--std-co COMPRESS=DEFLATE"),
        ({"TILING_SCHEME": "GoogleMapsCompatible"}, {}, r"applies only to COG output; add --cog"),
        ({}, {"dtype": "float32", "driver": "PNG", "what": "std raster"},
         r"PNG driver doesn't support data type Float32.*--uncertainty NAME_std.tif"),
    ],
)
def test_check_creation_options_refused_by_gdal(options, kw, pattern) -> None:
    args = {"dtype": "uint16", "count": 3, "nodata": 0} | kw
    with pytest.raises(ConfigError, match=pattern) as info:
        check_creation_options(options, **args)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("options", "kw"),
    [
        ({"COPY_SRC_OVERVIEWS": "YES", "DISCARD_LSB": "2", "COMPRESS": "ZSTD"}, {}),
        ({"TILING_SCHEME": "GoogleMapsCompatible", "ADD_ALPHA": "NO"}, {"cog": True, "crs": "EPSG:32621"}),
        ({"COMPRESS": "JPEG"}, {"dtype": "uint8"}),
        ({"ZLEVEL": "9"}, {"driver": "PNG"}),
    ],
)
def test_check_creation_options_accepted_by_gdal(options, kw) -> None:
    check_creation_options(options, **({"dtype": "uint16", "count": 3, "nodata": 0} | kw))  # no error


def test_output_driver_from_extension_and_format() -> None:
    assert [output_driver(p) for p in ("a.tif", "a.TIFF", "a", "a.png", "a.nc")] == [
        "GTiff", "GTiff", "GTiff", "PNG", "netCDF"]
    assert output_driver("a.dat", "cog") == "COG"
    with pytest.raises(ConfigError, match=r"Cannot tell the format of a\.abc .*-f/--format"):
        output_driver("a.abc")
    with pytest.raises(ConfigError, match="-f/--format NOPE is not a GDAL raster driver"):
        output_driver("a.tif", "NOPE")


def test_png_output_is_a_png_and_small_cog_std_has_rms_overviews(tmp_path: Path) -> None:
    prof = output_profile(src_profile(64, 64), count=1, dtype="uint8", nodata=0, creation_options={},
                          cog=False)
    with AtomicRasterWriter(tmp_path / "x.png", prof, overwrite=False) as dst:
        dst.write(np.full((1, 64, 64), 7, "uint8"))
    with rasterio.open(tmp_path / "x.png") as src:
        assert src.driver == "PNG" and int(src.read(1)[0, 0]) == 7
    std = np.zeros((1, 256, 256), "float32")
    std[0, ::2, ::2] = 4.0  # RMS over 2x2 = 2.0; a cubic or average overview gives other values
    sprof = output_profile(src_profile(256, 256), count=1, dtype="float32", nodata=float("nan"),
                           creation_options={}, cog=True)
    with AtomicRasterWriter(tmp_path / "s.tif", sprof, overwrite=False, cog=True,
                            overview_resampling="RMS") as dst:
        dst.write(std)
    with rasterio.open(tmp_path / "s.tif") as src:
        assert src.overviews(1) == [2, 4, 8]
        level = src.read(1, out_shape=(128, 128))
        np.testing.assert_allclose(level, 2.0, rtol=1e-6)


# ------------------------------------------------------------------------------ output_profile


def test_output_profile_defaults_small_raster() -> None:
    prof = output_profile(src_profile(20, 10), count=3, dtype="float32", nodata=-9999.0,
                          creation_options={}, cog=False)
    assert prof["driver"] == "GTiff"
    assert (prof["width"], prof["height"], prof["count"]) == (20, 10, 3)
    assert prof["dtype"] == "float32" and prof["nodata"] == -9999.0
    assert prof["transform"] == TRANSFORM and prof["crs"].to_epsg() == 32621
    assert prof["compress"] == "deflate" and prof["predictor"] == "3"
    assert "tiled" not in prof and "blockxsize" not in prof
    assert "photometric" not in prof  # the source's JPEG/YCbCr layout is not inherited


def test_output_profile_tiles_big_raster_and_int_predictor(tmp_path: Path) -> None:
    prof = output_profile(src_profile(300, 260), count=1, dtype="uint16", nodata=0,
                          creation_options={}, cog=False)
    assert prof["tiled"] is True and prof["blockxsize"] == prof["blockysize"] == 256
    assert prof["predictor"] == "2"
    path = tmp_path / "p.tif"
    with rasterio.open(path, "w", **prof) as dst:
        dst.write(np.ones((1, 260, 300), dtype="uint16"))
    with rasterio.open(path) as src:
        assert src.block_shapes == [(256, 256)]
        assert src.compression.name == "deflate"
        assert src.nodata == 0 and src.crs.to_epsg() == 32621 and src.transform == TRANSFORM


def test_output_profile_user_options_override() -> None:
    prof = output_profile(src_profile(300, 300), count=1, dtype="float32", nodata=None,
                          creation_options={"COMPRESS": "LZW", "BLOCKXSIZE": "512"}, cog=False)
    assert prof["compress"] == "LZW" and "predictor" not in prof
    assert prof["blockxsize"] == "512" and prof["blockysize"] == 256
    untiled = output_profile(src_profile(300, 300), count=1, dtype="float32", nodata=None,
                             creation_options={"TILED": "NO"}, cog=False)
    assert untiled["tiled"] == "NO" and "blockxsize" not in untiled


def test_output_profile_errors() -> None:
    with pytest.raises(ConfigError, match=r"OVERVIEWS applies only to COG output; add --cog"):
        output_profile(src_profile(), count=1, dtype="float32", nodata=None,
                       creation_options={"OVERVIEWS": "NONE"}, cog=False)
    with pytest.raises(ConfigError, match=r"PREDICTOR=3 .* needs a float output, but it is int16"):
        output_profile(src_profile(), count=1, dtype="int16", nodata=None,
                       creation_options={"PREDICTOR": "3"}, cog=False)
    with pytest.raises(ConfigError, match=r"valid range 0\.\.255"):
        output_profile(src_profile(), count=1, dtype="uint8", nodata=-1,
                       creation_options={}, cog=False)


def test_cog_profile_and_options() -> None:
    prof = output_profile(src_profile(), count=1, dtype="float32", nodata=None,
                          creation_options={"COMPRESS": "ZSTD"}, cog=True)
    assert prof["driver"] == "GTiff" and prof["tiled"] is True and prof["compress"] == "deflate"
    assert cog_options({}) == {"COMPRESS": "DEFLATE", "PREDICTOR": "YES", "BIGTIFF": "IF_SAFER"}
    assert cog_options({"COMPRESS": "ZSTD", "ZSTD_LEVEL": "9", "PREDICTOR": "3", "TILED": "YES",
                        "BLOCKXSIZE": "256"}) == {
        "COMPRESS": "ZSTD", "LEVEL": "9", "PREDICTOR": "FLOATING_POINT", "BLOCKSIZE": "256",
        "BIGTIFF": "IF_SAFER",
    }


# --------------------------------------------------------------------------- AtomicRasterWriter


def small_profile(**kw) -> dict:
    prof = output_profile(src_profile(20, 10), count=1, dtype="float32", nodata=-9999.0,
                          creation_options={}, cog=False)
    prof.update(kw)
    return prof


def test_atomic_writer_success_leaves_only_final(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    data = np.arange(200, dtype="float32").reshape(1, 10, 20)
    with AtomicRasterWriter(out, small_profile(), overwrite=False) as dst:
        writer = dst
        assert dst.name != str(out)
        temp_name = Path(dst.name).name
        assert temp_name.startswith(".out.tif.geonp-partial-") and temp_name.endswith(".tif")
        assert not out.exists()
        dst.write(data)
    assert writer.closed
    assert listing(tmp_path) == ["out.tif"]
    with rasterio.open(out) as src:
        np.testing.assert_array_equal(src.read(), data)
        assert src.nodata == -9999.0


def test_atomic_writer_exception_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    with pytest.raises(RuntimeError, match="model crashed"):
        with AtomicRasterWriter(out, small_profile(), overwrite=False) as dst:
            dst.write(np.ones((1, 10, 20), dtype="float32"))
            raise RuntimeError("model crashed")
    assert listing(tmp_path) == []


def test_atomic_writer_keyboard_interrupt_keeps_old_file(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    out.write_bytes(b"previous result")
    with pytest.raises(KeyboardInterrupt):
        with AtomicRasterWriter(out, small_profile(), overwrite=True) as dst:
            dst.write(np.ones((1, 10, 20), dtype="float32"))
            raise KeyboardInterrupt
    assert listing(tmp_path) == ["out.tif"]
    assert out.read_bytes() == b"previous result"


def test_atomic_writer_refuses_existing_without_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    out.write_bytes(b"keep me")
    with pytest.raises(OutputError, match="already exists; pass --overwrite to replace it"):
        with AtomicRasterWriter(out, small_profile(), overwrite=False):
            pytest.fail("must not enter")
    assert out.read_bytes() == b"keep me"
    assert listing(tmp_path) == ["out.tif"]


def test_atomic_writer_refuses_file_appearing_during_write(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    with pytest.raises(OutputError, match="appeared while geonp was writing"):
        with AtomicRasterWriter(out, small_profile(), overwrite=False) as dst:
            dst.write(np.ones((1, 10, 20), dtype="float32"))
            out.write_bytes(b"someone else")
    assert out.read_bytes() == b"someone else"
    assert listing(tmp_path) == ["out.tif"]


def test_atomic_writer_overwrite_replaces_and_drops_stale_aux(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    out.write_bytes(b"old")
    (tmp_path / "out.tif.aux.xml").write_text("<PAMDataset/>")
    with AtomicRasterWriter(out, small_profile(), overwrite=True) as dst:
        dst.write(np.full((1, 10, 20), 3.0, dtype="float32"))
    assert listing(tmp_path) == ["out.tif"]
    with rasterio.open(out) as src:
        assert float(src.read(1)[0, 0]) == 3.0


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        rasterio.errors.RasterioIOError("out.tif: Free disk space available is 0 bytes"),
    ],
)
def test_atomic_writer_disk_full(tmp_path: Path, error: Exception) -> None:
    out = tmp_path / "out.tif"
    with pytest.raises(OutputError) as info:
        with AtomicRasterWriter(out, small_profile(), overwrite=False) as dst:
            dst.write(np.ones((1, 10, 20), dtype="float32"))
            raise error
    assert str(info.value) == (
        f"No space left on device while writing {out}; free space or write elsewhere. "
        "No file was written."
    )
    assert info.value.__cause__ is error
    assert listing(tmp_path) == []


def test_atomic_writer_cog(tmp_path: Path) -> None:
    out = tmp_path / "out.tif"
    data = np.random.default_rng(0).random((2, 600, 700)).astype("float32")
    prof = output_profile(src_profile(700, 600), count=2, dtype="float32", nodata=None,
                          creation_options={}, cog=True)
    with AtomicRasterWriter(out, prof, overwrite=False, cog=True,
                            creation_options={"COMPRESS": "ZSTD", "BLOCKXSIZE": "256"}) as dst:
        dst.write(data)
    assert listing(tmp_path) == ["out.tif"]
    with rasterio.open(out) as src:
        assert src.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") == "COG"
        assert src.compression.name == "zstd"
        assert src.block_shapes[0] == (256, 256)
        assert src.overviews(1)  # COG adds overviews for rasters over 512 px
        np.testing.assert_array_equal(src.read(), data)


def test_finalize_cog_writes_cog(tmp_path: Path) -> None:
    plain = write_tif(tmp_path / "plain.tif", np.ones((1, 32, 32), dtype="uint8"))
    finalize_cog(plain, tmp_path / "cog.tif", {})
    with rasterio.open(tmp_path / "cog.tif") as src:
        assert src.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") == "COG"
        assert src.compression.name == "deflate"
    assert plain.exists()


# ------------------------------------------------------------------------------- atomic bytes


def test_atomic_write_text_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    atomic_write_text(path, '{"a": 1}')
    assert path.read_text() == '{"a": 1}'
    atomic_write_bytes(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert listing(tmp_path) == ["manifest.json"]


def test_atomic_write_bytes_disk_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "report.json"
    path.write_text("old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("geonp.io.atomic.os.fsync", full)
    with pytest.raises(OutputError, match="No space left on device while writing .*report.json"):
        atomic_write_text(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert listing(tmp_path) == ["report.json"]


def test_atomic_write_file_goes_through_a_writer_and_leaves_nothing_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    seen: list[Path] = []

    def write(tmp: Path) -> None:
        seen.append(tmp)
        tmp.write_bytes(b"weights")

    atomic_write_file(path, write)
    assert path.read_bytes() == b"weights"
    assert seen[0].parent == tmp_path and seen[0].name.startswith(".model.safetensors.geonp-partial-")
    assert listing(tmp_path) == ["model.safetensors"]

    def broken(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("writer failed")

    with pytest.raises(RuntimeError, match="writer failed"):
        atomic_write_file(path, broken)
    assert path.read_bytes() == b"weights"
    assert listing(tmp_path) == ["model.safetensors"]


# ------------------------------------------------------------------------------- copy_metadata


def test_copy_metadata(tmp_path: Path) -> None:
    src_path = tmp_path / "src.tif"
    with rasterio.open(
        src_path, "w", driver="GTiff", width=4, height=4, count=3, dtype="uint16",
        crs="EPSG:32621", transform=TRANSFORM, nodata=0, photometric="RGB",
    ) as dst:
        dst.write(np.ones((3, 4, 4), dtype="uint16"))
        dst.update_tags(SENSOR="ETM+", ACQUIRED="2011-03-06")
        for i, name in enumerate(["red", "green", "blue"], start=1):
            dst.set_band_description(i, name)
        dst.update_tags(1, WAVELENGTH="0.66", STATISTICS_MEAN="1.0")
        dst.update_tags(3, WAVELENGTH="0.48")
        dst.scales = (0.0001, 0.0002, 0.0003)
        dst.offsets = (-0.1, 0.0, 0.1)
        dst.units = ("reflectance", "reflectance", "K")
    out = tmp_path / "out.tif"
    with rasterio.open(src_path) as src:
        assert src.colorinterp == (ColorInterp.red, ColorInterp.green, ColorInterp.blue)
        prof = output_profile(src.profile, count=2, dtype="uint16", nodata=0,
                              creation_options={}, cog=False)
        with AtomicRasterWriter(out, prof, overwrite=False) as dst:
            dst.write(np.ones((2, 4, 4), dtype="uint16"))
            copy_metadata(src, dst, bands=[3, 1])
    with rasterio.open(out) as res:
        assert res.tags()["SENSOR"] == "ETM+" and res.tags()["ACQUIRED"] == "2011-03-06"
        assert res.descriptions == ("blue", "red")
        assert res.tags(1) == {"WAVELENGTH": "0.48"}
        assert res.tags(2) == {"WAVELENGTH": "0.66"}  # STATISTICS_* is stale after a fill
        assert res.scales == pytest.approx((0.0003, 0.0001))
        assert res.offsets == pytest.approx((0.1, -0.1))
        assert res.units == ("K", "reflectance")
        assert res.colorinterp == (ColorInterp.blue, ColorInterp.red)
    assert listing(tmp_path) == ["out.tif", "src.tif"]


def test_copy_metadata_skips_alpha(tmp_path: Path) -> None:
    src_path = tmp_path / "src.tif"
    with rasterio.open(
        src_path, "w", driver="GTiff", width=4, height=4, count=2, dtype="uint8",
        crs="EPSG:32621", transform=TRANSFORM,
    ) as dst:
        dst.write(np.full((2, 4, 4), 255, dtype="uint8"))
        dst.colorinterp = [ColorInterp.gray, ColorInterp.alpha]
    out = tmp_path / "out.tif"
    with rasterio.open(src_path) as src:
        prof = output_profile(src.profile, count=2, dtype="uint8", nodata=None,
                              creation_options={}, cog=False)
        with AtomicRasterWriter(out, prof, overwrite=False) as dst:
            dst.write(np.ones((2, 4, 4), dtype="uint8"))
            copy_metadata(src, dst, bands=[1, 2])
    with rasterio.open(out) as res:
        assert ColorInterp.alpha not in res.colorinterp
        assert res.read_masks(1).all()  # the filled pixels are not hidden by an alpha band
