"""A date with no clear pixel at all is filled from its references by ``geonp fill``, not refused."""

from __future__ import annotations

import numpy as np
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli

from tests.conftest import smooth_field, write_raster


def test_a_date_under_full_cloud_is_filled_from_its_reference(tmp_path):
    clear = np.stack([smooth_field((64, 64), seed=b, scale=300, offset=o)
                      for b, o in enumerate((1400, 2800, 1300))]).astype("int16")
    ref = write_raster(tmp_path / "ref.tif", clear, nodata=-9999, tags={"ACQUISITION_DATE": "2020-03-01"})
    target = write_raster(tmp_path / "target.tif", np.full_like(clear, -9999), nodata=-9999,
                          tags={"ACQUISITION_DATE": "2020-03-17"})
    out = tmp_path / "filled.tif"
    res = CliRunner().invoke(cli, ["-q", "fill", str(target), str(out), "--reference", str(ref)])
    assert res.exit_code == 0, res.output
    with rasterio.open(out) as src:
        filled = src.read().astype(float)
    assert (filled != -9999).all()
    assert np.abs(filled - clear).mean() < 0.05 * clear.std()
    # without a reference there is still nothing to fill from
    res = CliRunner().invoke(cli, ["-q", "fill", str(target), str(tmp_path / "alone.tif")])
    assert res.exit_code != 0 and "has no observed pixel" in res.output
