"""Metadata copied from the input to the outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
import rasterio.errors
from rasterio.enums import ColorInterp

from geonp.io.atomic import (
    AtomicRasterWriter,
)
from geonp.io.metadata import copy_metadata
from geonp.io.profiles import output_profile
from tests.io.output_helpers import TRANSFORM, listing

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
