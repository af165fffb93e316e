"""Output drivers, and creation options checked by GDAL before any work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
import rasterio.errors

from geonp.errors import ConfigError
from geonp.io.atomic import (
    AtomicRasterWriter,
)
from geonp.io.formats import OutputSpec, check_creation_options, output_driver
from geonp.io.profiles import output_profile
from tests.io.output_helpers import src_profile


@pytest.mark.parametrize(
    ("options", "kw", "pattern"),
    [
        ({"COLOR": "RED"}, {}, (r"Unknown creation option COLOR: .*GDAL says driver GTiff does not support "
                               r"creation option COLOR")),
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
    what = args.pop("what", "OUTPUT")
    with pytest.raises(ConfigError, match=pattern) as info:
        check_creation_options(options, OutputSpec(**args), what=what)
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
    check_creation_options(options, OutputSpec(**({"dtype": "uint16", "count": 3, "nodata": 0} | kw)))  # no error


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
