import datetime
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin

from geonp.errors import ConfigError, InputRasterError
from geonp.io.dates import date_from_name, date_from_tags, parse_date, raster_date
from geonp.io.raster import open_raster, raster_info

D = datetime.date
LSTS = Path(__file__).resolve().parents[1] / "data" / "lsts"


def _write(path, *, tags=None, band_tags=None):
    with rasterio.open(path, "w", driver="GTiff", width=4, height=3, count=1, dtype="int16",
                       crs="EPSG:32613", transform=from_origin(336375, 4462425, 30, 30)) as dst:
        dst.write(np.arange(12, dtype="int16").reshape(1, 3, 4))
        if tags:
            dst.update_tags(**tags)
        if band_tags:
            dst.update_tags(1, **band_tags)
    return path


@pytest.mark.parametrize("text, expected", [
    ("2012-04-06", D(2012, 4, 6)),
    ("20120406", D(2012, 4, 6)),
    ("2012-097", D(2012, 4, 6)),
    ("2012097", D(2012, 4, 6)),
    (" 2013-05-27 ", D(2013, 5, 27)),
    ("2012-366", D(2012, 12, 31)),
    (D(2010, 1, 2), D(2010, 1, 2)),
    (datetime.datetime(2010, 1, 2, 13, 5), D(2010, 1, 2)),
])
def test_parse_date_accepts_the_three_forms(text, expected):
    assert parse_date(text) == expected


@pytest.mark.parametrize("text", ["2012-13-01", "2012-02-30", "2013-366", "2012-000", "06/04/2012",
                                  "yesterday", "", "2012-4-6"])
def test_parse_date_rejects_bad_text_in_one_line(text):
    with pytest.raises(ConfigError) as err:
        parse_date(text, option="--reference-date")
    msg = str(err.value)
    assert msg.startswith(f"--reference-date {text!r} is not a date; write it as YYYY-MM-DD")
    assert "YYYYMMDD" in msg and "YYYY-DDD" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("name, expected", [
    # Landsat Collection 2 product ID: the 4th field (acquired), not the 5th (processed).
    ("LC08_L1TP_035032_20130407_20200912_02_T1_B4.TIF", D(2013, 4, 7)),
    ("LC08_L2SP_035032_20130407_20200912_02_T1_SR_B4.TIF", D(2013, 4, 7)),
    ("le07_l2sp_035032_20120406_20200908_02_t1_qa_pixel.tif", D(2012, 4, 6)),
    ("LC08_CU_003008_20130407_20190403_C01_V01_SRB4.tif", D(2013, 4, 7)),
    # Old-style scene IDs: year + day of year.
    ("LE70350322012097EDC00", D(2012, 4, 6)),
    ("LE70350322012097EDC00_b3.tif", D(2012, 4, 6)),
    ("LT50350322008110PAC01.tif", D(2008, 4, 19)),
    ("LC80350322013097LGN01_B4.TIF", D(2013, 4, 7)),
    ("LE70350322012366EDC00.tif", D(2012, 12, 31)),
    # Sentinel-2 product names and tile files.
    ("S2A_MSIL2A_20200101T103321_N0213_R108_T32TQM_20200101T121503.SAFE", D(2020, 1, 1)),
    ("S2B_MSIL1C_20191230T103329_N0208_R108_T32TQM_20191230T123456.zip", D(2019, 12, 30)),
    ("T32TQM_20200101T103321_B04_10m.jp2", D(2020, 1, 1)),
    ("T32TQM_20200101T103321_SCL_20m.tif", D(2020, 1, 1)),
    ("HLS.S30.T32TQM.2020001T103321.v2.0.B04.tif", D(2020, 1, 1)),
    # Loose dates.
    ("scene_20120406.tif", D(2012, 4, 6)),
    ("field-2012-04-06-red.tif", D(2012, 4, 6)),
    ("a_20120406_b_20120406.tif", D(2012, 4, 6)),
])
def test_date_from_name_forms(name, expected):
    assert date_from_name(name) == expected


@pytest.mark.parametrize("name", [
    "scene.tif",
    "scene_20120406_20120407.tif",  # two dates: ambiguous
    "scene_19500101.tif",  # before Landsat
    "scene_21010101.tif",  # after 2100
    "scene_20121340.tif",  # not a day
    "tile_123201204061.tif",  # part of a longer number
    "LE70350322012367EDC00.tif",  # day 367
])
def test_date_from_name_none(name):
    assert date_from_name(name) is None


def test_date_from_name_looks_in_parent_folders_nearest_first():
    safe = ("S2A_MSIL2A_20200101T103321_N0213_R108_T32TQM_20200101T121503.SAFE/GRANULE/"
            "L2A_T32TQM_A023/IMG_DATA/R10m/B04.jp2")
    assert date_from_name(safe) == D(2020, 1, 1)
    assert date_from_name("/archive/2019-06-01/LE70350322012097EDC00/red.tif") == D(2012, 4, 6)
    assert date_from_name("/archive/2019-06-01/red.tif") == D(2019, 6, 1)
    # The file's own name wins over its folder's...
    assert date_from_name("/archive/20190601/scene_20120406.tif") == D(2012, 4, 6)
    # ...but a product ID in a folder outranks a loose date in the file's name.
    assert date_from_name("/a/LE70350322012097EDC00/scene_20190601.tif") == D(2012, 4, 6)
    # Loose dates are looked for two folders up at most.
    assert date_from_name("/a/20190601/b/c/scene.tif") is None


@pytest.mark.parametrize("tags, expected", [
    ({"TIFFTAG_DATETIME": "2012:04:06 17:30:12"}, D(2012, 4, 6)),
    ({"ACQUISITION_DATE": "2012-04-06"}, D(2012, 4, 6)),
    ({"date_acquired": "2012-04-06"}, D(2012, 4, 6)),
    ({"SENSING_TIME": "2020-01-01T10:33:21.024Z"}, D(2020, 1, 1)),
    ({"DATATAKE_1_DATATAKE_SENSING_START": "2020-01-01T10:33:21.024Z"}, D(2020, 1, 1)),
    ({"datetime": "2019-12-30T10:33:29Z"}, D(2019, 12, 30)),
    ({"Acquisition_Date": "20120406"}, D(2012, 4, 6)),
    # Acquisition tags win over TIFFTAG_DATETIME (often the processing time).
    ({"TIFFTAG_DATETIME": "2020:09:12 00:00:00", "DATE_ACQUIRED": "2013-04-07"}, D(2013, 4, 7)),
    # An unreadable acquisition tag falls through to the next tag.
    ({"ACQUISITION_DATE": "unknown", "TIFFTAG_DATETIME": "2012:04:06 00:00:00"}, D(2012, 4, 6)),
    ({"AREA_OR_POINT": "Area"}, None),
    ({}, None),
])
def test_date_from_tags(tags, expected):
    assert date_from_tags(tags) == expected


def test_date_from_tags_reads_band_tags_after_dataset_tags():
    assert date_from_tags({}, [{}, {"ACQUISITION_DATE": "2012-04-06"}]) == D(2012, 4, 6)
    assert date_from_tags({"DATE_ACQUIRED": "2013-04-07"},
                          [{"ACQUISITION_DATE": "2012-04-06"}]) == D(2013, 4, 7)
    # A band's acquisition tag outranks the dataset's TIFFTAG_DATETIME.
    assert date_from_tags({"TIFFTAG_DATETIME": "2020:09:12 00:00:00"},
                          [{"ACQUISITION_DATE": "2012-04-06"}]) == D(2012, 4, 6)


def test_raster_date_reads_real_tags(tmp_path):
    path = _write(tmp_path / "x.tif", tags={"TIFFTAG_DATETIME": "2012:04:06 10:00:00"})
    with rasterio.open(path) as src:
        assert src.tags()["TIFFTAG_DATETIME"] == "2012:04:06 10:00:00"
    assert raster_date(path) == D(2012, 4, 6)
    band = _write(tmp_path / "b.tif", band_tags={"SENSING_TIME": "2020-01-01T10:33:21Z"})
    assert raster_date(band) == D(2020, 1, 1)


def test_raster_date_precedence(tmp_path):
    product = "LC08_L1TP_035032_20130407_20200912_02_T1_B4.tif"
    folder = tmp_path / "20190601"
    folder.mkdir()
    # 1. the override wins over everything.
    path = _write(folder / product, tags={"DATE_ACQUIRED": "2013-04-08",
                                          "TIFFTAG_DATETIME": "2020:09:12 00:00:00"})
    assert raster_date(path, override="2011-01-02") == D(2011, 1, 2)
    assert raster_date(path, override=D(2011, 1, 3)) == D(2011, 1, 3)
    # 2. an acquisition tag wins over the name.
    assert raster_date(path) == D(2013, 4, 8)
    # 3. a product ID in the name wins over TIFFTAG_DATETIME (a processing time here).
    path = _write(folder / product, tags={"TIFFTAG_DATETIME": "2020:09:12 00:00:00"})
    assert raster_date(path) == D(2013, 4, 7)
    # 4. TIFFTAG_DATETIME wins over a loose date in the name or folder.
    path = _write(folder / "scene_20120406.tif", tags={"TIFFTAG_DATETIME": "2012:05:01 00:00:00"})
    assert raster_date(path) == D(2012, 5, 1)
    # 5. a loose date in the name, then in the folder.
    assert raster_date(_write(folder / "scene_20120406.tif")) == D(2012, 4, 6)
    assert raster_date(_write(folder / "scene.tif")) == D(2019, 6, 1)


def test_raster_date_accepts_raster_info(tmp_path):
    path = _write(tmp_path / "x.tif", tags={"ACQUISITION_DATE": "2012-04-06"})
    with open_raster(path) as src:
        info = raster_info(src)
    assert raster_date(info) == D(2012, 4, 6)


def test_raster_date_without_date_is_a_one_line_error(tmp_path):
    path = _write(tmp_path / "scene.tif")
    with pytest.raises(InputRasterError) as err:
        raster_date(path, role="Reference", option="--reference-date")
    msg = str(err.value)
    assert msg == (f"Reference {path} has no acquisition date in its tags or name; give one with "
                   "--reference-date YYYY-MM-DD.")
    with pytest.raises(InputRasterError, match=r"^Input raster .* give one with --date YYYY-MM-DD\.$"):
        raster_date(path)


def test_raster_date_bad_override_names_the_option(tmp_path):
    path = _write(tmp_path / "scene.tif")
    with pytest.raises(ConfigError, match=r"^--date '2012/04/06' is not a date"):
        raster_date(path, override="2012/04/06")


def test_raster_date_missing_file(tmp_path):
    with pytest.raises(InputRasterError, match=r"^Reference .*nope.tif does not exist"):
        raster_date(tmp_path / "nope.tif", role="Reference")


def test_vendored_lsts_dates_from_tags_and_names():
    path = LSTS / "LE70350322012129EDC00.tif"
    with open_raster(path) as src:
        info = raster_info(src)
    assert info.tags["TIFFTAG_DATETIME"] == "2012:05:08 00:00:00"
    assert date_from_tags(info.tags) == D(2012, 5, 8)
    assert date_from_name(path) == D(2012, 5, 8)
    assert raster_date(path) == D(2012, 5, 8)
