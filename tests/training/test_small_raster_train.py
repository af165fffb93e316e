"""``geonp train`` on a small raster: the validation split adapts; a failed run leaves no directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner
from geonp_cli.main import cli

from geonp.data.datasets import split_columns

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "landsat8_clean.tif"


def test_split_widens_a_too_narrow_validation_region() -> None:
    small = split_columns(256, val_fraction=0.15, test_fraction=0.0, min_val_columns=64)
    assert small.train == (0, 192) and small.val == (192, 256) and small.test is None
    big = split_columns(2041, val_fraction=0.15, test_fraction=0.2, min_val_columns=64)
    assert big.val == (1327, 1633) and big.test == (1633, 2041)  # unchanged where it fits
    tiny = split_columns(100, val_fraction=0.15, test_fraction=0.0, min_val_columns=64)
    assert tiny.val == (85, 100)  # no room for two patches: left as asked
    assert split_columns(256, val_fraction=0.15, test_fraction=0.0).val == (218, 256)  # default: as asked


def test_train_on_the_small_sample_works(tmp_path: Path) -> None:
    out = tmp_path / "m"
    res = CliRunner().invoke(cli, ["-q", "train", str(SAMPLE), "-o", str(out), "--steps", "2", "--dim", "8",
                                   "--depth", "1", "--heads", "2", "--ff-dim", "8", "--val-every", "2", "--no-calibrate",
                                   "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()


def test_failed_train_leaves_no_empty_directory(tmp_path: Path) -> None:
    import rasterio

    path = tmp_path / "zeros.tif"
    with rasterio.open(path, "w", driver="GTiff", width=128, height=128, count=1, dtype="uint16",
                       crs="EPSG:32621", transform=rasterio.transform.from_origin(0, 0, 30, 30), nodata=0) as dst:
        dst.write(np.zeros((1, 128, 128), "uint16"))
    out = tmp_path / "m"
    res = CliRunner().invoke(cli, ["train", str(path), "-o", str(out), "--steps", "2", "--device", "cpu"])
    assert res.exit_code == 1
    assert "found only 0" in res.output and "check --nodata" in res.output
    assert not out.exists()
