"""Quicklook: colour interpretation decides the RGB bands, gaps are magenta, the colour bar has a unit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli
from PIL import Image
from rasterio.enums import ColorInterp

from geonp.io.quicklook import GAP_RGB, _display, rgb_bands, std_label
from tests.conftest import smooth_field, write_raster


def test_rgb_bands_follow_colour_interpretation_then_descriptions() -> None:
    assert rgb_bands([1, 2, 3], ["blue", "green", "red"], [None] * 3) == [3, 2, 1]
    assert rgb_bands([1, 2, 3], ["red", "green", "blue"], [None] * 3) == [1, 2, 3]
    assert rgb_bands([1, 2, 3], ["gray", "undefined", "undefined"],
                     ["B2 (blue)", "B3 (green)", "B4 (red)"]) == [3, 2, 1]
    assert rgb_bands([1, 2, 3], ["gray", "undefined", "undefined"], [None] * 3) == [1, 2, 3]
    assert rgb_bands([2], ["gray", "undefined"], [None, None]) == [2]


def test_gaps_are_magenta_and_label_has_unit() -> None:
    arr = np.ones((3, 2, 2))
    valid = np.ones((3, 2, 2), bool)
    valid[:, 0, 0] = False
    img = _display(arr, valid, np.zeros(3), np.full(3, 2.0))
    np.testing.assert_allclose(img[0, 0], GAP_RGB)
    np.testing.assert_allclose(img[1, 1], [0.5, 0.5, 0.5])
    assert std_label("reflectance") == "predictive std (reflectance)"
    assert "stored units" in std_label(None)


def test_fill_quicklook_shows_gaps_in_magenta(tmp_path: Path, tiny_model) -> None:
    arr = np.stack([smooth_field((48, 48), seed=s) for s in range(3)]).astype("float32")
    arr[:, 10:20, 10:20] = -9999
    src = write_raster(tmp_path / "in.tif", arr, nodata=-9999)
    with rasterio.open(src, "r+") as dst:
        dst.colorinterp = [ColorInterp.blue, ColorInterp.green, ColorInterp.red]
    png = tmp_path / "q.png"
    res = CliRunner().invoke(cli, ["-q", "fill", str(src), str(tmp_path / "out.tif"), "--model", str(tiny_model),
                                   "--device", "cpu", "--quicklook", str(png)])
    assert res.exit_code == 0, res.output
    pixels = np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3)
    magenta = (pixels[:, 0] > 250) & (pixels[:, 1] < 5) & (pixels[:, 2] > 250)
    assert magenta.sum() > 50  # the 10x10 gap, scaled into the first panel


def _magenta(png: Path) -> int:
    pixels = np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3)
    return int(((pixels[:, 0] > 250) & (pixels[:, 1] < 5) & (pixels[:, 2] > 250)).sum())


def test_pixels_the_output_masks_are_shown_as_unfilled(tmp_path: Path) -> None:
    """The filled panel uses fill's rule for a missing pixel: the internal mask counts too."""
    from geonp.io.quicklook import write_quicklook

    arr = np.stack([smooth_field((48, 48), seed=s) for s in range(3)]).astype("float32")
    std = np.zeros_like(arr)
    std[:, 10:20, 10:20] = 1.0
    gappy = arr.copy()
    gappy[:, 10:20, 10:20] = -9999
    src = write_raster(tmp_path / "in.tif", gappy, nodata=-9999)
    sd = write_raster(tmp_path / "std.tif", std)
    plain = write_raster(tmp_path / "plain.tif", arr, nodata=-9999)
    masked = write_raster(tmp_path / "masked.tif", arr, nodata=-9999)
    with rasterio.Env(GDAL_TIFF_INTERNAL_MASK=True), rasterio.open(masked, "r+") as dst:
        mask = np.full((48, 48), 255, "uint8")
        mask[30:40, 30:40] = 0  # left unfilled: masked, although its values look valid
        dst.write_mask(mask)
    for name, filled in (("plain.png", plain), ("masked.png", masked)):
        write_quicklook(tmp_path / name, src, filled, sd, bands=[1, 2, 3], nodata=-9999)
    extra = _magenta(tmp_path / "masked.png") - _magenta(tmp_path / "plain.png")
    # the 10x10 masked block, drawn at the panel's scale (about 8 screen px per raster px)
    assert extra > 2000, extra
