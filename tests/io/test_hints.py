"""The no-gap hint: untagged zeros suggest --nodata 0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio

from geonp.io.hints import untagged_nodata_hint
from tests.conftest import write_raster


def test_untagged_zeros_suggest_nodata_zero(tmp_path: Path) -> None:
    arr = np.full((2, 40, 40), 700, "uint16")
    arr[:, :12, :] = 0  # 30 % zeros, untagged
    with rasterio.open(write_raster(tmp_path / "a.tif", arr)) as src:
        hint = untagged_nodata_hint(src, [1, 2])
    assert hint == ("30 % of the pixels are 0 in every band and the file has no nodata tag; if 0 means "
                    "no data, run again with --nodata 0")


def test_no_hint_for_tagged_or_clean_rasters(tmp_path: Path) -> None:
    arr = np.full((1, 20, 20), 700, "uint16")
    with rasterio.open(write_raster(tmp_path / "clean.tif", arr)) as src:
        assert untagged_nodata_hint(src, [1]) is None
    arr[0, :5] = 0
    with rasterio.open(write_raster(tmp_path / "tagged.tif", arr, nodata=0)) as src:
        assert untagged_nodata_hint(src, [1]) is None
