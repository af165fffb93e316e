"""Output profiles, --co parsing and COG conversion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
import rasterio.errors

from geonp.errors import ConfigError
from geonp.io.profiles import cog_options, finalize_cog, output_profile, parse_creation_options
from tests.io.output_helpers import TRANSFORM, src_profile, write_tif

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

def test_finalize_cog_writes_cog(tmp_path: Path) -> None:
    plain = write_tif(tmp_path / "plain.tif", np.ones((1, 32, 32), dtype="uint8"))
    finalize_cog(plain, tmp_path / "cog.tif", {})
    with rasterio.open(tmp_path / "cog.tif") as src:
        assert src.tags(ns="IMAGE_STRUCTURE").get("LAYOUT") == "COG"
        assert src.compression.name == "deflate"
    assert plain.exists()
