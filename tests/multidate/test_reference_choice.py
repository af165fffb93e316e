"""References chosen by what they observe: ``choose_references``, a cube's ``neighbours="auto"``."""

import numpy as np
import pytest
import rioxarray  # noqa: F401 - the .rio accessor
import xarray as xr

import geonp
from geonp.errors import ConfigError
from geonp.filling import cube as cube_module
from geonp.filling.cube import cube_neighbours
from geonp.io import reference_choice
from geonp.io.reference_choice import CoverageRule, choose_references, coverage_rule

from ..conftest import smooth_field


def _masks(*rows):
    """bool ``[1, n]`` masks from strings of ``1``/``0`` (one row of pixels each)."""
    return [np.array([[c == "1" for c in r]]) for r in rows]


# --- the rule on hand-made masks -------------------------------------------------------------

def test_a_gap_seen_by_the_nearest_only_adds_the_next_until_views():
    (gap,) = _masks("1100")
    # the nearest sees both gap pixels, the next only the first, the third only the second
    near, first, second = _masks("1111", "1011", "0111")
    assert choose_references(gap, [near, first, second], views=1, cap=4) == [0]
    assert choose_references(gap, [near, first, second], views=2, cap=4) == [0, 1, 2]
    # three views: every candidate adds to a pixel still short, but none is left for the fourth view
    assert choose_references(gap, [near, first, second], views=3, cap=4) == [0, 1, 2]


def test_a_candidate_that_sees_nothing_of_the_under_seen_gap_is_skipped():
    (gap,) = _masks("1100")
    cloudy, clear_elsewhere, sees_both, sees_first, sees_second = _masks(
        "0000", "0011", "1100", "1000", "0100")
    # a date under cloud and one clear only off the gap add nothing: the next nearest stand in
    assert choose_references(gap, [cloudy, clear_elsewhere, sees_both], views=1, cap=4) == [2]
    # once the first pixel has its two views, a date seeing only it is skipped
    candidates = [sees_both, sees_first, sees_first, sees_second]
    assert choose_references(gap, candidates, views=2, cap=4) == [0, 1, 3]
    # a gap no candidate sees: nothing is added, whatever the candidates see elsewhere
    assert choose_references(gap, [cloudy, clear_elsewhere], views=2, cap=4) == []


def test_no_more_references_than_cap():
    (gap,) = _masks("1111")
    one_each = _masks("1000", "0100", "0010", "0001")
    assert choose_references(gap, one_each, views=1, cap=4) == [0, 1, 2, 3]
    assert choose_references(gap, one_each, views=1, cap=2) == [0, 1]
    assert choose_references(gap, one_each * 3, views=3, cap=5) == [0, 1, 2, 3, 4]


def test_a_date_without_gaps_gets_no_reference():
    (gap,) = _masks("0000")
    assert choose_references(gap, _masks("1111", "1111"), views=2, cap=4) == []
    assert choose_references(gap, [], views=2, cap=4) == []


def test_bad_settings_are_refused():
    (gap,) = _masks("1100")
    with pytest.raises(ConfigError, match="views=0 must be an integer >= 1"):
        choose_references(gap, _masks("1111"), views=0, cap=4)
    with pytest.raises(ConfigError, match="cap=0 must be an integer >= 1"):
        CoverageRule(2, 0)
    with pytest.raises(ConfigError, match="candidate 0's clear mask is"):
        choose_references(gap, [np.ones((2, 4), bool)])
    assert coverage_rule("auto") == CoverageRule(reference_choice.AUTO_VIEWS, reference_choice.AUTO_CAP)
    assert coverage_rule(CoverageRule(3, 6)) == CoverageRule(3, 6)
    assert coverage_rule(2) is None and coverage_rule(0) is None
    for bad in ("four", True, 2.0, -1):
        with pytest.raises(ConfigError, match="give a number of dates"):
            coverage_rule(bad)


# --- the rule on a cube's dates (cube_neighbours) --------------------------------------------

TIMES5 = np.datetime64("2020-03-01", "ns") + np.arange(5) * np.timedelta64(16, "D")


def _clear5(**gaps):
    """bool ``[5, 1, 4]`` clear masks: every date clear but the ``d<i>="0011"`` ones given."""
    clear = np.ones((5, 1, 4), bool)
    for name, row in gaps.items():
        clear[int(name[1:])] = _masks(row)[0]
    return clear


def test_at_the_ends_of_the_series_every_reference_is_on_one_side():
    # dates 0, 2 and 4 have a gap on their first two pixels; every other date sees it
    clear = _clear5(d0="0011", d2="0011", d4="0011")
    rule = CoverageRule(views=2, cap=4)
    plan = cube_neighbours(TIMES5, rule, clear=clear)
    assert plan[2] == [(1, -16.0), (3, 16.0)]  # the middle: one on each side
    # the first date: its nearest later dates; date 2 shares its gap (sees nothing of it): skipped
    assert plan[0] == [(1, 16.0), (3, 48.0)]
    assert plan[4] == [(3, -16.0), (1, -48.0)]  # the last: the nearest earlier, date 2 skipped
    assert plan[1] == plan[3] == []  # no gap, no reference
    # the same choice as choose_references on the candidates in nearest_dates' order
    assert choose_references(~clear[0], [clear[j] for j in (1, 2, 3, 4)], 2, 4) == [0, 2]


def test_max_days_bounds_the_candidates_even_when_views_are_short():
    clear = _clear5(d0="0011", d1="0111")  # date 1 sees only the second pixel of date 0's gap
    rule = CoverageRule(views=2, cap=4)
    assert cube_neighbours(TIMES5, rule, clear=clear)[0] == [(1, 16.0), (2, 32.0), (3, 48.0)]
    assert cube_neighbours(TIMES5, rule, clear=clear, max_days=40)[0] == [(1, 16.0), (2, 32.0)]
    assert cube_neighbours(TIMES5, rule, clear=clear, max_days=10)[0] == []
    with pytest.raises(ConfigError, match="give clear="):
        cube_neighbours(TIMES5, "auto")
    # a count keeps today's rule: that many nearest dates, gaps or not
    assert cube_neighbours(TIMES5, 2, clear=clear)[0] == [(1, 16.0), (2, 32.0)]


def test_a_coarse_mask_holds_the_fraction_clear_of_each_cell():
    """A cell below 1 is a gap of its date; a candidate sees a cell above 0 (a clear pixel)."""
    clear = np.array([[[1.0, 0.0]], [[0.25, 0.0]], [[0.0, 1.0]], [[1.0, 1.0]]])
    plan = cube_neighbours(TIMES5[:4], CoverageRule(views=1, cap=4), clear=clear)
    assert plan[0] == [(2, 32.0)]  # date 1 sees nothing of cell 1 (skipped); date 2 does
    assert plan[1] == [(0, -16.0), (2, 16.0)]  # date 0 sees cell 0 only, date 2 cell 1
    assert plan[2] == [(1, -16.0)]  # a quarter of cell 0 clear: date 1 sees it
    assert plan[3] == []


# --- a real fill: fill_cube chooses as the rule does ----------------------------------------

H = W = 24
NODATA = -9999
TIMES4 = np.array(["2020-03-01", "2020-03-17", "2020-04-02", "2020-04-18"], dtype="datetime64[ns]")
BASE = (1400.0, 2800.0, 1300.0)  # red, NIR, SWIR1 x 10,000, the multidate model's units


def _cube():
    """4 dates, 3 bands: date 1 with a nodata hole on rows 4-11, date 2 a masked cloud on 4-7."""
    base = np.stack([smooth_field((H, W), seed=b, scale=300, offset=BASE[b]) for b in range(3)])
    vals = np.stack([base * (1 + 0.04 * t) + 25 * t for t in range(len(TIMES4))]).astype(np.int16)
    vals[1, :, 4:12, 4:12] = NODATA
    clouds = np.zeros((len(TIMES4), H, W), bool)
    clouds[2, 4:8, 4:12] = True
    cube = xr.DataArray(vals, dims=("time", "band", "y", "x"),
                        coords={"time": TIMES4, "band": ["red", "nir", "swir1"],
                                "y": 4_400_000.0 - 30 * np.arange(H),
                                "x": 500_000.0 + 30 * np.arange(W)})
    cube = cube.rio.write_crs("EPSG:32613").rio.write_nodata(NODATA)
    return cube, xr.DataArray(clouds, dims=("time", "y", "x"), coords={"time": TIMES4})


class _Stop(BaseException):
    """Ends a fill once its plan is recorded (not an Exception: nothing on the way catches it)."""


def _recording(monkeypatch, stop=False):
    """Record fill_cube's plans and the masks it gave (with ``stop``, end the fill there)."""
    plans = []

    def record(*args, **kwargs):
        plans.append((cube_neighbours(*args, **kwargs), kwargs.get("clear")))
        if stop:
            raise _Stop
        return plans[-1][0]

    monkeypatch.setattr(cube_module, "cube_neighbours", record)
    return plans


def test_fill_cube_auto_takes_the_rules_references(monkeypatch):
    monkeypatch.setattr(reference_choice, "AUTO_VIEWS", 2)  # the plan below is worked out for these
    monkeypatch.setattr(reference_choice, "AUTO_CAP", 4)
    cube, clouds = _cube()
    plans = _recording(monkeypatch)
    ds = geonp.fill(cube, mask=clouds, neighbours="auto")
    (plan, clear), = plans
    # the masks: every band observed and not under the mask cube
    expected_clear = (cube.values != NODATA).all(axis=1) & ~clouds.values
    np.testing.assert_array_equal(clear, expected_clear)
    # date 1: dates 0 and 2 (equal distance: the earlier first) see rows 8-11 of its hole twice,
    # rows 4-7 once (date 2 is cloudy there): date 3 is added for them
    assert plan == [[], [(0, -16.0), (2, 16.0), (3, 32.0)], [(3, 16.0), (0, -32.0)], []]
    # date 2: date 1 (nearest, with date 3) sees nothing of its cloud: skipped, date 0 taken
    for i, refs in enumerate(plan):
        others = sorted((j for j in range(4) if j != i), key=lambda j: (abs(j - i), j))
        chosen = choose_references(~expected_clear[i], [expected_clear[j] for j in others], 2, 4)
        assert [j for j, _ in refs] == [others[c] for c in chosen]
    # and date 1 is filled as geonp.fill fills it with those references
    hidden = cube.where(~clouds, NODATA).astype(np.int16).rio.write_nodata(NODATA)
    alone = geonp.fill(hidden.isel(time=1).chunk(),
                       references=[(hidden.isel(time=j).chunk(), d) for j, d in plan[1]]).compute()
    np.testing.assert_array_equal(ds["filled"].isel(time=1).values, alone["filled"].values)
    np.testing.assert_array_equal(ds["uncertainty"].isel(time=1).values,
                                  alone["uncertainty"].values)
    assert (ds["filled"].values != NODATA).all()


def test_a_big_cube_is_looked_at_in_cells(monkeypatch):
    """Over AUTO_MASK_PIXELS, the masks are the fraction clear of n x n cells (edges padded)."""
    cube, clouds = _cube()
    crop = {"y": slice(0, 23), "x": slice(0, 23)}
    cube, clouds = cube.isel(crop), clouds.isel(crop)
    clouds[2, 7] = False  # date 2's cloud on rows 4-6: its cells of rows 6-7 half clear
    monkeypatch.setattr(reference_choice, "AUTO_MASK_PIXELS", 4 * 23 * 23 // 3)  # cells of 2 x 2 px
    plans = _recording(monkeypatch, stop=True)
    with pytest.raises(_Stop):
        geonp.fill(cube.chunk({"y": 8, "x": 8}), mask=clouds,
                   neighbours=CoverageRule(views=2, cap=3))
    (plan, clear), = plans
    fine = (cube.values != NODATA).all(axis=1) & ~clouds.values
    cells = [[[fine[t, r:r + 2, c:c + 2].mean() for c in range(0, 23, 2)] for r in range(0, 23, 2)]
             for t in range(4)]  # the last row and column of cells: 2 px, the corner 1
    np.testing.assert_array_equal(clear, cells)
    assert clear[2, 3, 2] == 0.5 and clear[2, 11, 11] == 1
    # date 1: date 0 sees its hole's cells, date 2 the half-clear ones and below, date 3 the rest
    assert plan == [[], [(0, -16.0), (2, 16.0), (3, 32.0)], [(3, 16.0), (0, -32.0)], []]
