"""A disk that fills up while blocks are being written: the message names the disk and OUTPUT."""

from __future__ import annotations

import numpy as np

from tests.conftest import smooth_field, write_raster
from tests.hardening._helpers import assert_refused, invoke, listing, small_disk


def test_disk_full_mid_run_names_output_not_the_partial_file(tmp_path, tiny_model) -> None:
    rng = np.random.default_rng(0)
    arr = (smooth_field((300, 300)) + 100 * rng.normal(size=(300, 300))).astype("float32")
    arr[10:20, 10:20] = -9999
    src = write_raster(tmp_path / "scene.tif", arr, nodata=-9999)
    with small_disk(tmp_path / "disk", "300k") as disk:
        res = invoke(["fill", src, disk / "filled.tif", "--model", tiny_model, "--block-size", "64",
                      "--co", "COMPRESS=NONE"])
        line = assert_refused(res, ["No space left on device while writing", "free space or write elsewhere"])
        assert f"{disk / 'filled.tif'};" in line and "partial" not in line
        assert "See previous exception" not in line
        assert listing(disk) == []
