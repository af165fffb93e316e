import datetime
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import rasterio
from affine import Affine

from geonp.errors import ConfigError, InputRasterError
from geonp.io.timeseries import (
    DatedRaster,
    group_by_grid,
    nearest,
    nearest_dates,
    neighbours_by_grid,
    scan_series,
    sees_ground,
)

D = datetime.date
LSTS = Path(__file__).resolve().parents[1] / "data" / "lsts"
SCENES = ["LE70350322012129EDC00", "LE70350322012145EDC00", "LE70350322012161EDC00",
          "LE70350322012337EDC00", "LE70350322013131EDC00", "LE70350322013147EDC00"]
DATES = [D(2012, 5, 8), D(2012, 5, 24), D(2012, 6, 9), D(2012, 12, 2), D(2013, 5, 11),
         D(2013, 5, 27)]


def _write(path, *, tags=None, shift=0):
    with rasterio.open(path, "w", driver="GTiff", width=4, height=3, count=1, dtype="int16",
                       crs="EPSG:32613", transform=Affine(30, 0, 336375 + 30 * shift, 0, -30, 4462425)) as dst:
        dst.write(np.ones((1, 3, 4), np.int16))
        if tags:
            dst.update_tags(**tags)
    return path


def test_scan_vendored_folder_in_date_order_with_fmask_attached():
    series = scan_series(LSTS)
    assert [r.date for r in series] == DATES
    assert [Path(r.path).name for r in series] == [f"{s}.tif" for s in SCENES]
    assert [Path(r.qa).name for r in series] == [f"{s}_fmask.tif" for s in SCENES]
    assert all(isinstance(r, DatedRaster) for r in series)


def test_scan_attaches_each_qa_suffix_and_keeps_same_dates(tmp_path):
    _write(tmp_path / "b_20200105.tif")
    _write(tmp_path / "b_20200105_SCL.tif")
    _write(tmp_path / "a_20200105.tif")
    _write(tmp_path / "a_20200105_qa.tif")
    _write(tmp_path / "c_20191231.tif")
    _write(tmp_path / "c_20191231_QA_PIXEL.tif")
    _write(tmp_path / "d.tif", tags={"TIFFTAG_DATETIME": "2020:01:01 00:00:00"})
    _write(tmp_path / "notes.txt")  # not matched by the pattern
    series = scan_series(tmp_path)
    assert [(Path(r.path).name, r.date, r.qa and Path(r.qa).name) for r in series] == [
        ("c_20191231.tif", D(2019, 12, 31), "c_20191231_QA_PIXEL.tif"),
        ("d.tif", D(2020, 1, 1), None),
        ("a_20200105.tif", D(2020, 1, 5), "a_20200105_qa.tif"),
        ("b_20200105.tif", D(2020, 1, 5), "b_20200105_SCL.tif"),
    ]


def test_scan_custom_pattern_and_suffixes(tmp_path):
    _write(tmp_path / "x_20200105.TIF")
    _write(tmp_path / "x_20200105_cloud.TIF")
    series = scan_series(tmp_path, pattern="*.TIF", qa_suffixes=("_cloud",))
    assert [(Path(r.path).name, Path(r.qa).name) for r in series] == [
        ("x_20200105.TIF", "x_20200105_cloud.TIF")]


def test_scan_skips_an_orphan_qa_with_a_warning(tmp_path, caplog):
    _write(tmp_path / "x_20200105.tif")
    _write(tmp_path / "y_20200105_fmask.tif")
    with caplog.at_level(logging.WARNING, logger="geonp.io.timeseries"):
        series = scan_series(tmp_path)
    assert [Path(r.path).name for r in series] == ["x_20200105.tif"]
    assert "y_20200105_fmask.tif has no raster y_20200105.tif beside it" in caplog.text


def test_scan_raster_without_date_is_a_one_line_error(tmp_path):
    _write(tmp_path / "x_20200105.tif")
    _write(tmp_path / "undated.tif")
    with pytest.raises(InputRasterError) as err:
        scan_series(tmp_path)
    msg = str(err.value)
    assert msg.startswith(f"Raster {tmp_path / 'undated.tif'} has no acquisition date in its tags "
                          "or name; put the date in its name")
    assert "\n" not in msg


def test_scan_missing_folder(tmp_path):
    with pytest.raises(InputRasterError, match=r"^Time-series folder .*nope does not exist"):
        scan_series(tmp_path / "nope")


def _series(*days):
    return [DatedRaster(path=f"/s/{d.isoformat()}.tif", date=d) for d in days]


def test_nearest_picks_the_closest_other_dates():
    series = scan_series(LSTS)
    by_name = {Path(r.path).stem: r for r in series}
    target = by_name["LE70350322012145EDC00"]
    # 2012-05-08 and 2012-06-09 are both 16 days away: the earlier first.
    assert [r.date for r in nearest(series, target, 2)] == [D(2012, 5, 8), D(2012, 6, 9)]
    assert [r.date for r in nearest(series, target, 3)] == [D(2012, 5, 8), D(2012, 6, 9),
                                                            D(2012, 12, 2)]
    assert [r.date for r in nearest(series, target, 2, before_only=True)] == [D(2012, 5, 8)]
    last = by_name["LE70350322013147EDC00"]
    assert [r.date for r in nearest(series, last, 2, before_only=True)] == [D(2013, 5, 11),
                                                                             D(2012, 12, 2)]
    assert target not in nearest(series, target, 10)
    assert len(nearest(series, target, 10)) == 5
    assert nearest(series, target, 0) == []


def test_nearest_ties_and_same_day():
    series = _series(D(2020, 1, 1), D(2020, 1, 11), D(2020, 1, 21), D(2020, 1, 21))
    series[3] = DatedRaster(path="/s/other_2020-01-21.tif", date=D(2020, 1, 21))
    target = series[2]
    picked = nearest(series, target, 2)
    assert [r.path for r in picked] == ["/s/other_2020-01-21.tif", "/s/2020-01-11.tif"]
    assert [r.path for r in nearest(series, target, 2, before_only=True)] == [
        "/s/2020-01-11.tif", "/s/2020-01-01.tif"]
    # The target need not be in the series.
    outside = DatedRaster(path="/x.tif", date=D(2020, 1, 6))
    assert [r.date for r in nearest(series, outside, 2)] == [D(2020, 1, 1), D(2020, 1, 11)]


def test_nearest_negative_k():
    with pytest.raises(ConfigError, match=r"^--neighbours -1 is negative"):
        nearest(_series(D(2020, 1, 1)), _series(D(2020, 1, 2))[0], -1)


def test_group_by_grid(tmp_path):
    for s in SCENES[:3]:
        shutil.copy(LSTS / f"{s}.tif", tmp_path / f"{s}.tif")
    _write(tmp_path / "small_20120601.tif")
    _write(tmp_path / "shifted_20120601.tif", shift=1)
    _write(tmp_path / "small_20120701.tif")
    groups = group_by_grid(scan_series(tmp_path))
    names = [[Path(r.path).name for r in g] for g in groups]
    # Groups keep the series' (date) order and come in the order of their first raster.
    assert names == [
        [f"{s}.tif" for s in SCENES[:3]],
        ["shifted_20120601.tif"],
        ["small_20120601.tif", "small_20120701.tif"],
    ]


def test_neighbours_by_grid_stays_within_a_grid(tmp_path):
    for s in SCENES[:3]:
        shutil.copy(LSTS / f"{s}.tif", tmp_path / f"{s}.tif")
    _write(tmp_path / "small_20120520.tif")
    _write(tmp_path / "small_20120701.tif")
    pairs = neighbours_by_grid(scan_series(tmp_path), 2)
    got = [(Path(r.path).stem, [Path(n.path).stem for n in refs]) for r, refs in pairs]
    assert got == [
        ("LE70350322012129EDC00", ["LE70350322012145EDC00", "LE70350322012161EDC00"]),
        ("small_20120520", ["small_20120701"]),
        ("LE70350322012145EDC00", ["LE70350322012129EDC00", "LE70350322012161EDC00"]),
        ("LE70350322012161EDC00", ["LE70350322012145EDC00", "LE70350322012129EDC00"]),
        ("small_20120701", ["small_20120520"]),
    ]
    before = neighbours_by_grid(scan_series(tmp_path), 2, before_only=True)
    assert [len(refs) for _, refs in before] == [0, 0, 1, 2, 1]


def test_dates_that_see_no_ground_are_passed_over_for_the_next_nearest(tmp_path):
    """A date wholly under cloud (or all nodata) gives a fill nothing: the next nearest date stands in."""
    for s in SCENES[:4]:
        shutil.copy(LSTS / f"{s}.tif", tmp_path / f"{s}.tif")
        shutil.copy(LSTS / f"{s}_fmask.tif", tmp_path / f"{s}_fmask.tif")
    # the second date: every pixel a cloud in its Fmask (4); the third: every pixel nodata
    with rasterio.open(tmp_path / f"{SCENES[1]}_fmask.tif", "r+") as dst:
        dst.write(np.full((dst.height, dst.width), 4, dst.dtypes[0]), 1)
    with rasterio.open(tmp_path / f"{SCENES[2]}.tif", "r+") as dst:
        dst.write(np.full((dst.count, dst.height, dst.width), dst.nodata, dst.dtypes[0]))
    series = scan_series(tmp_path)
    assert [sees_ground(r, "fmask") for r in series] == [True, False, False, True]
    assert sees_ground(series[1]) is True  # without reading its QA band, the cloudy date has pixels
    pairs = neighbours_by_grid(series, 1, qa_kind="fmask")
    assert [[Path(n.path).stem for n in refs] for _, refs in pairs] == [[SCENES[3]], [SCENES[0]], [SCENES[0]],
                                                                        [SCENES[0]]]
    # the rule itself: usable flags skip dates, nearest first among the rest
    dates = [D(2020, 1, 1), D(2020, 1, 11), D(2020, 1, 21)]
    assert nearest_dates(dates, D(2020, 1, 12), 2) == [1, 2]
    assert nearest_dates(dates, D(2020, 1, 12), 2, usable=[True, False, True]) == [2, 0]
    assert nearest_dates(dates, D(2020, 1, 12), 2, usable=[False, False, False]) == []


def test_neighbours_auto_adds_the_nearest_dates_that_see_the_gaps(tmp_path):
    """``--neighbours auto`` (a CoverageRule): the nearest dates are added until each gap is seen by
    ``views`` of them; a date that sees none of the gaps still short is skipped; ``cap`` bounds it."""
    from geonp.io.reference_choice import CoverageRule
    from geonp.io.timeseries import clear_fraction

    for s in SCENES[:4]:
        shutil.copy(LSTS / f"{s}.tif", tmp_path / f"{s}.tif")
        shutil.copy(LSTS / f"{s}_fmask.tif", tmp_path / f"{s}_fmask.tif")
    clouds = {SCENES[0]: (slice(None), slice(0, 30)),  # the target: the left half under cloud
              SCENES[1]: (slice(None), slice(0, 40)),  # nearest: cloudy there too, sees none of it
              SCENES[2]: (slice(None), slice(15, 61)),  # sees the gap's left part only
              SCENES[3]: (slice(0, 0), slice(0, 0))}  # clear: sees all of it
    for s, cloud in clouds.items():
        with rasterio.open(tmp_path / f"{s}_fmask.tif", "r+") as dst:
            fmask = np.zeros((dst.height, dst.width), dst.dtypes[0])
            fmask[cloud] = 4
            dst.write(fmask, 1)
        with rasterio.open(tmp_path / f"{s}.tif", "r+") as dst:  # every pixel observed, SLC-off stripes aside
            dst.write(np.full((dst.count, dst.height, dst.width), 500, dst.dtypes[0]))
    series = scan_series(tmp_path)
    fraction = clear_fraction(series[2], 4, "fmask")  # clear in columns 0-14, cloud from 15 on
    assert fraction.shape == (16, 16)  # 61 px in cells of 4: the last cells hold 1 px
    np.testing.assert_allclose(fraction[:, :3], 1.0)
    np.testing.assert_allclose(fraction[:, 3], 0.75)  # columns 12-15
    np.testing.assert_allclose(fraction[:, 4:], 0.0)
    np.testing.assert_allclose(clear_fraction(series[3], 4, "fmask"), 1.0)  # the cut cells too
    # the raster of the first date picks, nearest first, skipping the one that sees nothing

    def first_dates_refs(rule):
        return [Path(n.path).stem for n in neighbours_by_grid(series, rule, qa_kind="fmask")[0][1]]

    assert first_dates_refs(CoverageRule(1, 4)) == [SCENES[2], SCENES[3]]  # the third sees the gap's left part
    assert first_dates_refs(CoverageRule(2, 2)) == [SCENES[2], SCENES[3]]  # capped at 2
    assert first_dates_refs(CoverageRule(1, 1)) == [SCENES[2]]
