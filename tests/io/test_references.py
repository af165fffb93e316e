import datetime
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
from affine import Affine
from rasterio.warp import Resampling, calculate_default_transform, reproject
from rasterio.windows import Window

from geonp.errors import ConfigError, InputRasterError
from geonp.io.observed import read_observed
from geonp.io.raster import open_raster, raster_info
from geonp.io.references import ReferenceFile, open_references, read_references

LSTS = Path(__file__).resolve().parents[1] / "data" / "lsts"
TARGET = LSTS / "LE70350322012145EDC00.tif"  # cloudy: the date to fill
CLEAR = LSTS / "LE70350322012161EDC00.tif"  # clear: a reference
FULL = Window(0, 0, 61, 61)
OVERHANG = Window(-6, -4, 70, 72)


def _info(path):
    with open_raster(path) as src:
        return raster_info(src)


def _read_observed(path, window, nodata=-9999.0):
    with open_raster(path) as src:
        return read_observed(src, window, [1, 2, 3], info=raster_info(src), nodata=nodata)


def _warp_to(src_path, dst_path, crs, *, resampling=Resampling.bilinear, crop=None, date=None):
    """Reproject a vendored date to another CRS (optionally only a column range of it)."""
    with rasterio.open(src_path) as src:
        data, transform, width = src.read(), src.transform, src.width
        if crop is not None:
            data = data[:, :, crop[0]:crop[1]]
            transform = transform * Affine.translation(crop[0], 0)
            width = crop[1] - crop[0]
        left, top = transform * (0, 0)
        right, bottom = transform * (width, src.height)
        tf, w, h = calculate_default_transform(src.crs, crs, width, src.height,
                                               left, bottom, right, top)
        out = np.full((3, h, w), -9999, np.int16)
        reproject(data, out, src_transform=transform, src_crs=src.crs, dst_transform=tf,
                  dst_crs=crs, resampling=resampling, src_nodata=-9999, dst_nodata=-9999)
        tags = dict(src.tags()) if date is None else {"TIFFTAG_DATETIME": date}
    with rasterio.open(dst_path, "w", driver="GTiff", width=w, height=h, count=3, dtype="int16",
                       crs=crs, transform=tf, nodata=-9999) as dst:
        dst.write(out)
        dst.update_tags(**tags)
    return dst_path


def _interior(mask, margin=3):
    out = mask.copy()
    out[:, :margin] = out[:, -margin:] = False
    out[:, :, :margin] = out[:, :, -margin:] = False
    return out


def test_same_grid_reads_exactly_what_the_file_reads():
    like = _info(TARGET)
    (ref,) = open_references([CLEAR], like=like, bands=[1, 2, 3])
    assert ref == ReferenceFile(path=str(CLEAR), date=datetime.date(2012, 6, 9), bands=(1, 2, 3),
                            nodata=-9999.0)
    for window in (FULL, OVERHANG, Window(50, 50, 20, 20)):
        values, observed = ref.read(like, window)
        expected, expected_valid = _read_observed(CLEAR, window)
        assert values.dtype == np.float64 and observed.dtype == bool
        np.testing.assert_array_equal(values, expected)
        np.testing.assert_array_equal(observed, expected_valid)
    values, observed = ref.read(like, OVERHANG)
    assert not observed[:, :4].any() and not observed[:, :, :6].any()  # outside the raster
    with rasterio.open(CLEAR) as src:
        raw = src.read().astype(np.float64)
    np.testing.assert_array_equal(values[:, 4:65, 6:67], raw)
    assert observed.sum() == (raw[:, :, :] != -9999).sum() == 9066


def test_band_subset_and_order_follow_the_target_bands():
    like = _info(TARGET)
    (ref,) = open_references([CLEAR], like=like, bands=[3, 1])
    values, _ = ref.read(like, FULL)
    with rasterio.open(CLEAR) as src:
        np.testing.assert_array_equal(values, src.read([3, 1]).astype(np.float64))


def test_shifted_grid_same_crs_is_exact(tmp_path):
    """A reference on a larger grid whose pixels line up with the target's reads exactly."""
    with rasterio.open(CLEAR) as src:
        data, profile = src.read(), dict(src.profile)
    big = np.full((3, 80, 75), -9999, np.int16)
    big[:, 5:66, 7:68] = data
    profile.update(width=75, height=80, transform=src.transform * Affine.translation(-7, -5))
    path = tmp_path / "shifted.tif"
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(big)
        dst.update_tags(TIFFTAG_DATETIME="2012:06:09 00:00:00")
    like = _info(TARGET)
    for resampling in ("bilinear", "nearest", "cubic"):
        (ref,) = open_references([path], like=like, bands=[1, 2, 3], resampling=resampling)
        values, observed = ref.read(like, OVERHANG)
        expected, expected_valid = _read_observed(CLEAR, OVERHANG)
        np.testing.assert_array_equal(observed, expected_valid)
        np.testing.assert_array_equal(values[observed], expected[observed])
        assert np.isnan(values[~observed]).all()


@pytest.mark.parametrize("crs", ["EPSG:32612", "EPSG:3857"])
def test_other_crs_agrees_with_the_same_grid_read(tmp_path, crs):
    """Warp a real date to another CRS and back: interior pixels agree within interpolation error."""
    like = _info(TARGET)
    expected, expected_valid = _read_observed(CLEAR, FULL)
    path = _warp_to(CLEAR, tmp_path / "other.tif", crs)
    (ref,) = open_references([path], like=like, bands=[1, 2, 3])
    assert ref.date == datetime.date(2012, 6, 9)
    values, observed = ref.read(like, FULL)
    both = _interior(observed & expected_valid)
    assert both.sum() > 0.7 * _interior(expected_valid).sum()
    # A warped pixel is observed only where the reference has data: (almost) never in a stripe.
    assert (observed & ~expected_valid).sum() <= 0.01 * observed.sum()
    assert np.isnan(values[~observed]).all()
    for b in range(3):
        err = np.abs(values[b] - expected[b])[both[b]]
        spread = expected[b][expected_valid[b]].std()
        corr = np.corrcoef(values[b][both[b]], expected[b][both[b]])[0, 1]
        # Bilinear there and back smooths each pixel with its neighbours. Measured on this scene:
        # median error 0.06-0.08 std of the band, 90th percentile 0.20-0.28 std, r >= 0.98.
        assert np.median(err) < 0.12 * spread, (b, np.median(err), spread)
        assert np.percentile(err, 90) < 0.4 * spread, (b, np.percentile(err, 90), spread)
        assert corr > 0.97, (b, corr)


def test_other_crs_nearest_both_ways_is_nearly_exact(tmp_path):
    like = _info(TARGET)
    expected, expected_valid = _read_observed(CLEAR, FULL)
    path = _warp_to(CLEAR, tmp_path / "other.tif", "EPSG:32612", resampling=Resampling.nearest)
    (ref,) = open_references([path], like=like, bands=[1, 2, 3], resampling="nearest")
    values, observed = ref.read(like, FULL)
    both = _interior(observed & expected_valid)
    assert (values[both] == expected[both]).mean() > 0.95


def test_partial_coverage_is_not_observed_outside(tmp_path):
    like = _info(TARGET)
    path = _warp_to(CLEAR, tmp_path / "left.tif", "EPSG:32612", crop=(0, 30))
    (ref,) = open_references([path], like=like, bands=[1, 2, 3])
    values, observed = ref.read(like, OVERHANG)  # columns 0..69 of the window = target -6..63
    assert not observed[:, :, 6 + 31:].any()
    assert np.isnan(values[:, :, 6 + 31:]).all()
    assert observed[:, :, 6:6 + 28].sum() > 0.6 * 3 * 61 * 28
    # A window wholly outside the reference: nothing observed.
    values, observed = ref.read(like, Window(40, 0, 21, 61))
    assert not observed.any() and np.isnan(values).all()


def test_fmask_gaps_of_a_reference_are_not_observed():
    like = _info(CLEAR)
    cloudy = TARGET
    fmask = LSTS / "LE70350322012145EDC00_fmask.tif"
    (ref,) = open_references([cloudy], like=like, bands=[1, 2, 3], qa=[fmask], qa_kind="fmask")
    assert ref.qa == str(fmask) and ref.qa_classes == ("fill", "shadow", "cloud")
    values, observed = ref.read(like, FULL)
    with rasterio.open(fmask) as src:
        classes = src.read(1)
    with rasterio.open(cloudy) as src:
        raw = src.read()
    expected = (raw != -9999) & ~np.isin(classes, [2, 4, 255])[None]
    np.testing.assert_array_equal(observed, expected)
    assert observed[0].sum() == 51 + 189  # clear and snow pixels
    np.testing.assert_array_equal(values, raw.astype(np.float64))
    # Snow counts as a gap when named.
    (ref,) = open_references([cloudy], like=like, bands=[1, 2, 3], qa=[fmask], qa_kind="fmask",
                             qa_classes="cloud,shadow,snow,fill")
    assert ref.read(like, FULL)[1][0].sum() == 51


def test_fmask_on_the_reference_grid_is_applied_before_warping(tmp_path):
    """A reference and its QA on another grid: QA gaps are decoded there, then warped (max)."""
    cloudy = _warp_to(TARGET, tmp_path / "cloudy.tif", "EPSG:32612", resampling=Resampling.nearest)
    qa = tmp_path / "cloudy_fmask.tif"
    with rasterio.open(LSTS / "LE70350322012145EDC00_fmask.tif") as src, \
            rasterio.open(cloudy) as ref_src:
        classes = np.full((ref_src.height, ref_src.width), 255, np.uint8)
        reproject(src.read(1), classes, src_transform=src.transform, src_crs=src.crs,
                  dst_transform=ref_src.transform, dst_crs=ref_src.crs,
                  resampling=Resampling.nearest)
        profile = dict(ref_src.profile, count=1, dtype="uint8", nodata=None)
    with rasterio.open(qa, "w", **profile) as dst:
        dst.write(classes, 1)
    like = _info(CLEAR)
    (ref,) = open_references([cloudy], like=like, bands=[1, 2, 3], qa=[qa], qa_kind="fmask")
    values, observed = ref.read(like, FULL)
    (plain,) = open_references([cloudy], like=like, bands=[1, 2, 3])
    _, observed_plain = plain.read(like, FULL)
    with rasterio.open(LSTS / "LE70350322012145EDC00_fmask.tif") as src:
        gap = np.isin(src.read(1), [2, 4, 255])
    assert observed_plain.sum() > 7000
    # Nearly every pixel the target-grid Fmask calls cloud/shadow/fill is not observed.
    assert (observed[0] & gap).sum() <= 10
    assert 0 < observed.sum() < 0.2 * observed_plain.sum()
    assert np.isnan(values[~observed]).all()


def test_plain_mask_as_reference_qa(tmp_path):
    like = _info(TARGET)
    mask = np.zeros((61, 61), np.uint8)
    mask[10:20, 5:40] = 1
    path = tmp_path / "mask.tif"
    with rasterio.open(CLEAR) as src:
        profile = dict(src.profile, count=1, dtype="uint8", nodata=None)
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(mask, 1)
    (ref,) = open_references([CLEAR], like=like, bands=[1, 2, 3], qa=[path])
    _, observed = ref.read(like, FULL)
    _, expected = _read_observed(CLEAR, FULL)
    np.testing.assert_array_equal(observed, expected & (mask == 0)[None])


def test_reference_pickles_and_reads_after_unpickling():
    like = _info(TARGET)
    (ref,) = open_references([CLEAR], like=like, bands=[1, 2, 3], dates=["2012-161"],
                             nodata=0)
    copy = pickle.loads(pickle.dumps(ref))
    assert copy == ref and copy.date == datetime.date(2012, 6, 9) and copy.nodata == 0.0
    values, observed = copy.read(like, FULL)
    # nodata 0 instead of the file's -9999: stripe pixels count as observed now.
    assert observed.all() and (values == -9999).any()


def _one_line_error(exc, call):
    with pytest.raises(exc) as err:
        call()
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_no_overlap_is_a_one_line_error(tmp_path):
    path = tmp_path / "far.tif"
    with rasterio.open(CLEAR) as src:
        profile = dict(src.profile, transform=src.transform * Affine.translation(1000, 0))
        data = src.read()
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
    msg = _one_line_error(InputRasterError, lambda: open_references(
        [path], like=_info(TARGET), bands=[1, 2, 3], dates=["2012-06-09"]))
    assert msg.startswith(f"Reference {path} does not overlap the input {TARGET}")
    assert msg.endswith("give references of the same place.")
    # Another CRS far away: bounds are compared in the target's CRS.
    far = tmp_path / "far_other_crs.tif"
    with rasterio.open(far, "w", driver="GTiff", width=10, height=10, count=3, dtype="int16",
                       crs="EPSG:32632", transform=Affine(30, 0, 500000, 0, -30, 5000000)) as dst:
        dst.write(np.ones((3, 10, 10), np.int16))
    msg = _one_line_error(InputRasterError, lambda: open_references(
        [far], like=_info(TARGET), bands=[1], dates=["2012-06-09"]))
    assert msg.startswith(f"Reference {far} does not overlap the input")


def test_fewer_bands_is_a_one_line_error(tmp_path):
    path = tmp_path / "two.tif"
    with rasterio.open(CLEAR) as src:
        profile = dict(src.profile, count=2)
        data = src.read([1, 2])
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
    msg = _one_line_error(InputRasterError, lambda: open_references(
        [path], like=_info(TARGET), bands=[1, 2, 3], dates=["2012-06-09"]))
    assert msg == (f"Reference {path} has 2 bands; filling bands 1,2,3 of the input needs 3. "
                   "Give references with the same bands as the input.")
    assert open_references([path], like=_info(TARGET), bands=[2], dates=["2012-06-09"])[0].bands == (2,)


def test_no_date_is_a_one_line_error(tmp_path):
    path = tmp_path / "clear.tif"
    with rasterio.open(CLEAR) as src:
        profile, data = dict(src.profile), src.read()
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
    msg = _one_line_error(InputRasterError, lambda: open_references(
        [path], like=_info(TARGET), bands=[1, 2, 3]))
    assert msg == (f"Reference {path} has no acquisition date in its tags or name; give one with "
                   "--reference-date YYYY-MM-DD.")
    refs = open_references([path], like=_info(TARGET), bands=[1, 2, 3], dates=["20120609"])
    assert refs[0].date == datetime.date(2012, 6, 9)
    msg = _one_line_error(ConfigError, lambda: open_references(
        [path], like=_info(TARGET), bands=[1, 2, 3], dates=["June"]))
    assert msg.startswith("--reference-date 'June' is not a date")


def test_the_target_itself_is_a_one_line_error(tmp_path):
    copy = tmp_path / "target.tif"
    shutil.copy(TARGET, copy)
    like = _info(copy)
    msg = _one_line_error(InputRasterError, lambda: open_references(
        [tmp_path / "." / "target.tif"], like=like, bands=[1, 2, 3]))
    assert msg.startswith(f"Reference {tmp_path / '.' / 'target.tif'} is the input raster itself")


def test_list_lengths_must_match_and_options_are_checked():
    like = _info(TARGET)
    msg = _one_line_error(ConfigError, lambda: open_references(
        [CLEAR, LSTS / "LE70350322012129EDC00.tif"], like=like, bands=[1], qa=[None]))
    assert msg.startswith("1 --reference-qa given for 2 --reference;")
    msg = _one_line_error(ConfigError, lambda: open_references(
        [CLEAR], like=like, bands=[1], dates=["2012-06-09", "2012-06-10"]))
    assert msg.startswith("2 --reference-date given for 1 --reference;")
    msg = _one_line_error(ConfigError, lambda: open_references(
        [CLEAR], like=like, bands=[1], resampling="magic"))
    assert msg.startswith("Reference resampling 'magic' is unknown; use one of nearest, bilinear")
    msg = _one_line_error(ConfigError, lambda: open_references(
        [CLEAR], like=like, bands=[1], qa=[LSTS / "LE70350322012161EDC00_fmask.tif"],
        qa_kind="fmask", qa_classes="haze"))
    assert "haze" in msg


def test_missing_or_broken_reference_is_a_one_line_error(tmp_path):
    like = _info(TARGET)
    msg = _one_line_error(InputRasterError, lambda: open_references(
        [tmp_path / "nope.tif"], like=like, bands=[1]))
    assert msg.startswith(f"Reference {tmp_path / 'nope.tif'} does not exist")
    bad = tmp_path / "bad.tif"
    bad.write_bytes(b"not a tiff at all")
    msg = _one_line_error(InputRasterError, lambda: open_references([bad], like=like, bands=[1]))
    assert msg.startswith(f"Reference {bad}")
    msg = _one_line_error(InputRasterError, lambda: open_references(
        [CLEAR], like=like, bands=[1], qa=[tmp_path / "nope_fmask.tif"], qa_kind="fmask"))
    assert msg.startswith(f"Reference QA {tmp_path / 'nope_fmask.tif'} does not exist")


def test_other_grid_without_crs_is_a_one_line_error(tmp_path):
    path = tmp_path / "nocrs.tif"
    with rasterio.open(CLEAR) as src:
        data = src.read()
        transform = src.transform * Affine.translation(3, 0)
    with rasterio.open(path, "w", driver="GTiff", width=61, height=61, count=3, dtype="int16",
                       transform=transform, nodata=-9999) as dst:
        dst.write(data)
    msg = _one_line_error(InputRasterError, lambda: open_references(
        [path], like=_info(TARGET), bands=[1], dates=["2012-06-09"]))
    assert msg.startswith(f"Reference {path} is on another grid than the input")
    assert "has no CRS" in msg


def test_read_references_stacks_in_order():
    like = _info(TARGET)
    paths = [CLEAR, LSTS / "LE70350322012129EDC00.tif"]
    refs = open_references(paths, like=like, bands=[1, 2])
    values, observed = read_references(refs, like, OVERHANG)
    assert values.shape == observed.shape == (2, 2, 72, 70)
    for i, ref in enumerate(refs):
        v, o = ref.read(like, OVERHANG)
        np.testing.assert_array_equal(values[i], v)
        np.testing.assert_array_equal(observed[i], o)
    assert [r.date for r in refs] == [datetime.date(2012, 6, 9), datetime.date(2012, 5, 8)]
    values, observed = read_references([], like, OVERHANG)
    assert values.shape == observed.shape == (0, 0, 72, 70)


def test_plain_mask_on_the_reference_grid_with_class_values_is_refused(tmp_path):
    ref_path = _warp_to(CLEAR, tmp_path / "other.tif", "EPSG:32612")
    with rasterio.open(ref_path) as src:
        profile = dict(src.profile, count=1, dtype="uint8", nodata=None)
        mask = np.zeros((src.height, src.width), np.uint8)
    mask[5:10, 5:10] = 4
    qa = tmp_path / "classes.tif"
    with rasterio.open(qa, "w", **profile) as dst:
        dst.write(mask, 1)
    (ref,) = open_references([ref_path], like=_info(TARGET), bands=[1], qa=[qa])
    msg = _one_line_error(InputRasterError, lambda: ref.read(_info(TARGET), FULL))
    assert msg.startswith(f"Mask {qa} holds values other than 0 and 1 (or 0 and 255): 4;")


def test_coarser_grid_nearest_gives_the_covering_coarse_pixel(tmp_path):
    """A 60 m reference (2x2 means of a real date) read onto the 30 m grid with nearest."""
    with rasterio.open(CLEAR) as src:
        data, profile = src.read().astype(np.float64), dict(src.profile)
    blocks = data[:, :60, :60].reshape(3, 30, 2, 30, 2)
    valid = (blocks != -9999).all(axis=(2, 4))
    coarse = np.where(valid, blocks.mean(axis=(2, 4)).round(), -9999).astype(np.int16)
    profile.update(width=30, height=30, transform=profile["transform"] * Affine.scale(2))
    path = tmp_path / "coarse_20120609.tif"
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(coarse)
    like = _info(TARGET)
    (ref,) = open_references([path], like=like, bands=[1, 2, 3], resampling="nearest")
    values, observed = ref.read(like, FULL)
    expected = np.repeat(np.repeat(coarse, 2, axis=1), 2, axis=2).astype(np.float64)
    expected_valid = np.repeat(np.repeat(valid, 2, axis=1), 2, axis=2)
    np.testing.assert_array_equal(observed[:, :60, :60], expected_valid)
    np.testing.assert_array_equal(values[:, :60, :60][expected_valid], expected[expected_valid])
    assert not observed[:, 60].any() and not observed[:, :, 60].any()  # beyond the coarse grid
