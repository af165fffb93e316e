"""A handful of observed pixels never gives a near-zero std (issue 25, red-team item 2).

A band fitted on its own pixels (any band count the model's statistics do not fit, e.g. one band
for the 3-band default model) used to take the std of those pixels alone as its scale: one pixel,
or a few equal ones, gave 1e-6 of the mean, and every std of the fill was 0.006-0.01 DN, up to
75 px from the pixel. The fit now takes the model's training spread as a prior for such bands.
The model's own statistics are taken only for a raster in their units (a 3-band reflectance
raster was filled 8-20 reflectance units off).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli

from geonp.filling.arrays import fill_array
from geonp.filling.plan import normalizer_for
from geonp.filling.survey import GapReader, sample_for_stats
from geonp.io.raster import open_raster, raster_info
from geonp.model_files.registry import load_model
from geonp.tasks.normalize import (
    DEFAULT_PRIOR_STD,
    PRIOR_PIXELS,
    Normalizer,
    prior_std,
    same_units,
)
from tests.conftest import write_raster

VALUE = 8000.0  # a Landsat-like uint16 digital number
SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "landsat8_cloudy.tif"


@pytest.fixture(scope="module")
def default_model():
    return load_model("default")


def _pixels(shape, points):
    values = np.zeros((1, *shape))
    observed = np.zeros(shape, bool)
    for r, c in points:
        values[0, r, c] = VALUE
        observed[r, c] = True
    return values, observed


def test_fit_takes_the_prior_std_for_equal_pixels_and_its_own_std_otherwise():
    one = Normalizer.fit(np.full((1, 1), VALUE), prior_std=450.0)
    assert one.std[0] == pytest.approx(450.0 * math.sqrt(PRIOR_PIXELS / (1 + PRIOR_PIXELS)), rel=1e-12)
    assert Normalizer.fit(np.full((1, 1), VALUE)).std[0] == pytest.approx(1e-6 * VALUE + 1e-12)  # no prior: ~0
    # two equal pixels: the floor falls as 1 / sqrt(n + k)
    two = Normalizer.fit(np.full((1, 2), VALUE), prior_std=450.0)
    assert two.std[0] == pytest.approx(450.0 * math.sqrt(16 / 18), rel=1e-12)
    # many pixels with a real spread: the prior changes nothing, bit for bit
    rng = np.random.default_rng(0)
    many = rng.normal(VALUE, 300.0, (1, 65536))
    assert Normalizer.fit(many, prior_std=450.0) == Normalizer.fit(many)
    # pixels that differ, in units far from the prior's (reflectance): their own spread, not 450
    assert Normalizer.fit(np.array([[0.05, 0.07]]), prior_std=450.0).std[0] == pytest.approx(0.01)


def test_the_prior_std_does_not_depend_on_where_zero_is():
    # it was 0.06 x |mean|: 1e-12 for a pixel at 0, 58 for the same pixel at 1,000
    stds = [Normalizer.fit(np.full((1, 3), v), prior_std=450.0).std[0] for v in (0.0, 1000.0, -5.0, VALUE)]
    assert stds == pytest.approx([450.0 * math.sqrt(16 / 19)] * 4, rel=1e-9)


def test_prior_std_is_the_median_training_std(default_model):
    stats = default_model.normalizer
    assert prior_std(stats) == pytest.approx(sorted(stats["std"])[1], rel=1e-12)
    assert 450 < prior_std(stats) < 451  # the green band's 450.7 DN
    assert prior_std(None) == DEFAULT_PRIOR_STD == 1.0
    assert prior_std({"mean": [0.0], "std": [3.0]}) == 3.0


def test_prior_std_is_checked():
    with pytest.raises(ValueError, match="prior std must be a finite number > 0"):
        Normalizer.fit(np.ones((1, 4)), prior_std=float("nan"))
    with pytest.raises(ValueError, match="prior std must be a finite number > 0"):
        Normalizer.fit(np.ones((1, 4)), prior_std=0.0)
    with pytest.raises(ValueError, match="its weight > 0"):
        Normalizer.fit(np.ones((1, 4)), prior_std=450.0, prior_pixels=0)


def test_one_pixel_at_zero_fills_with_the_std_of_the_same_pixel_shifted(default_model):
    # a float32 raster with one observed pixel at 0.0 was filled with std ~1e-12 (the prior was a
    # fraction of the mean), and at 1,000 with std ~77: the std depended on where the units put 0
    values = np.full((1, 64, 64), np.nan, np.float32)
    values[0, 30, 30] = 0.0
    observed = np.isfinite(values[0])
    gap = ~observed
    means, stds = [], []
    for shift in (0.0, 1000.0, -273.15):
        mean, std = fill_array(values + np.float32(shift), observed, model=default_model, fill_outside=True,
                               device="cpu")
        means.append(mean[0][gap] - shift)
        stds.append(std[0][gap])
    for i in (1, 2):  # the same fill, shifted
        np.testing.assert_allclose(stds[i], stds[0], rtol=1e-5)
        np.testing.assert_allclose(means[i], means[0], atol=1e-3)
    assert stds[0].min() > 250.0, stds[0].min()  # of the order of the model's 450-DN training spread


@pytest.mark.parametrize(
    ("shape", "points"),
    [
        pytest.param((64, 64), [(30, 30)], id="one-pixel-64"),
        pytest.param((64, 64), [(30, 30), (31, 30)], id="two-equal-pixels-64"),
        pytest.param((150, 150), [(75, 75), (20, 20), (120, 40)], id="three-equal-pixels-150"),
        pytest.param((150, 150), [(0, 0)], id="one-corner-pixel-150"),
    ],
)
def test_a_handful_of_pixels_gives_a_std_of_the_bands_spread(default_model, shape, points):
    values, observed = _pixels(shape, points)
    mean, std = fill_array(values, observed, model=default_model, fill_outside=True, device="cpu")
    gap = ~observed
    assert np.isfinite(mean[0][gap]).all()
    # it was 0.006-0.012 DN everywhere here; the band's natural spread is 100s of DN
    assert std[0][gap].min() > 250.0, std[0][gap].min()
    assert std[0][gap].max() < 1500.0, std[0][gap].max()
    # the same pixels in 3 bands use the model's stored training statistics: the 1-band fill,
    # normalised by its own pixels and the prior, is as unsure (median within 15 %)
    _, std3 = fill_array(np.repeat(values, 3, axis=0), observed, model=default_model, fill_outside=True,
                         device="cpu")
    ratio = np.median(std[0][gap]) / np.median(std3[:, gap])
    assert 0.85 < ratio < 1.15, ratio
    assert (std[0][observed] == 0).all()


def test_cli_fill_outside_from_one_pixel_writes_an_honest_std(tmp_path):
    values, _ = _pixels((150, 150), [(75, 75)])
    src = write_raster(tmp_path / "one.tif", values.astype(np.uint16), nodata=0)
    out = tmp_path / "filled.tif"
    res = CliRunner().invoke(cli, ["-q", "fill", str(src), str(out), "--fill-outside", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    with rasterio.open(tmp_path / "filled_std.tif") as s:
        std = s.read(1)
    with rasterio.open(out) as s:
        filled = s.read(1)
    assert std[75, 75] == 0.0 and filled[75, 75] == VALUE
    gap = np.ones(std.shape, bool)
    gap[75, 75] = False
    assert np.isfinite(std[gap]).all()
    assert std[gap].min() > 250.0, std[gap].min()  # was 0.006-0.01 DN, up to 75 px away
    assert (filled[gap] > 0).all()


def test_a_raster_with_many_observed_pixels_keeps_its_own_normaliser():
    # the path of the sample raster's single band (-b 1): the prior must change nothing, so the
    # fill of an ordinary raster stays bit for bit what it was (checked on all 3 sample bands)
    loaded = load_model("default")
    with open_raster(SAMPLE) as src:
        info = raster_info(src)
        for bands in ([1], [2], [3], [1, 2]):
            values, valid = sample_for_stats(GapReader(src, info, bands, 0.0, lambda win: None))
            norm = normalizer_for(loaded, len(bands), lambda v=values, ok=valid: (v, ok))
            assert norm == Normalizer.fit(values, valid)
            assert min(norm.std) > 100.0  # its own spread, far above the prior's floor
        # all 3 bands: Landsat digital numbers, the units of the model's statistics, which it keeps
        values, valid = sample_for_stats(GapReader(src, info, [1, 2, 3], 0.0, lambda win: None))
        norm = normalizer_for(loaded, 3, lambda: (values, valid))
        assert norm == Normalizer.from_dict(loaded.normalizer)


def test_same_units_compares_band_magnitudes():
    landsat = Normalizer(mean=(7885.6, 7405.5, 6976.9), std=(341.8, 450.7, 807.3))
    assert same_units(landsat, Normalizer(mean=(9000.0, 8000.0, 7000.0), std=(50.0, 60.0, 80.0)))  # calm water
    assert same_units(landsat, Normalizer(mean=(8000.0,) * 3, std=(480.0,) * 3))  # one pixel, with the prior
    assert not same_units(landsat, Normalizer(mean=(0.05, 0.06, 0.04), std=(0.02, 0.02, 0.03)))  # reflectance
    assert not same_units(landsat, Normalizer(mean=(300.0,) * 3, std=(5.0,) * 3))  # Kelvin
    with pytest.raises(ValueError, match="3 and 1 bands"):
        same_units(landsat, Normalizer(mean=(1.0,), std=(1.0,)))


def test_a_three_band_raster_in_reflectance_is_filled_as_well_as_in_digital_numbers(default_model):
    # The default model's stored statistics are Landsat digital numbers (mean ~7,900, std 340-810).
    # Applied to the same crop in surface reflectance (DN * 2.75e-5 - 0.2) they put every tile's
    # std floor at ~17 reflectance units: the fill came out 8.5-20 where the truth is -0.03-0.02.
    with rasterio.open(SAMPLE.with_name("landsat8_clean.tif")) as src:
        dn = src.read(window=rasterio.windows.Window(64, 64, 128, 128)).astype(np.float64)
    rr, cc = np.mgrid[:128, :128]
    hole = (rr - 64) ** 2 + (cc - 64) ** 2 <= 20**2
    observed = np.broadcast_to(~hole, dn.shape)
    reflectance = dn * 2.75e-5 - 0.2
    mean_dn, std_dn = fill_array(dn, observed, model=default_model, device="cpu")
    mean_r, std_r = fill_array(reflectance, observed, model=default_model, device="cpu")
    rmse_dn = np.sqrt(np.mean((mean_dn[:, hole] - dn[:, hole]) ** 2))
    rmse_r = np.sqrt(np.mean((mean_r[:, hole] - reflectance[:, hole]) ** 2)) / 2.75e-5  # in DN
    assert rmse_r < 1.2 * rmse_dn, (rmse_r, rmse_dn)
    assert np.abs(mean_r[:, hole] - reflectance[:, hole]).max() < 0.1  # was 8-20 reflectance units off
    z = (mean_r[:, hole] - reflectance[:, hole]) / std_r[:, hole]
    assert np.mean(np.abs(z) <= 1.96) > 0.9
    assert 0.5 < np.median(std_r[:, hole]) / 2.75e-5 / np.median(std_dn[:, hole]) < 2.0
