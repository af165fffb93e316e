"""``geonp fill`` options: -q prints only errors, dates and overlaps are checked before any work, and
pixels with no context within --search-radius are counted with their reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli

import geonp
from geonp.config import FillConfig
from geonp.errors import ConfigError
from tests.conftest import smooth_field, write_raster


def _raster(tmp_path: Path, size: int = 32, radius: float = 6.0) -> Path:
    values = smooth_field((size, size)).astype(np.float32)
    rr, cc = np.mgrid[:size, :size]
    values[(rr - size / 2) ** 2 + (cc - size / 2) ** 2 <= radius**2] = np.nan
    return write_raster(tmp_path / "in.tif", values, nodata=np.nan)


def _fill(tmp_path: Path, *args: str) -> object:
    src = _raster(tmp_path)
    return CliRunner().invoke(cli, [*args[:1], "fill", str(src), str(tmp_path / "out.tif"), *args[1:],
                                    "--device", "cpu"])


def test_q_prints_nothing_when_the_fill_succeeds(tmp_path, tiny_model):
    res = _fill(tmp_path, "-q", "--model", str(tiny_model))
    assert res.exit_code == 0, res.output
    assert res.output == ""  # it printed "Filled 113 of 113 missing pixels ..."
    assert (tmp_path / "out.tif").is_file() and (tmp_path / "out_std.tif").is_file()
    res = _fill(tmp_path, "-v", "--model", str(tiny_model), "--overwrite")  # without -q: the summary
    assert res.exit_code == 0, res.output
    assert "Filled 113 of 113 missing pixels (all bands)" in res.output


def test_q_still_prints_an_error(tmp_path, tiny_model):
    res = _fill(tmp_path, "-q", "--model", str(tiny_model), "--date", "yesterday")
    assert res.exit_code == 1
    assert res.output == ("Error: --date 'yesterday' is not a date; write it as YYYY-MM-DD (2012-04-06), "
                          "YYYYMMDD (20120406) or YYYY-DDD with the day of the year (2012-097).\n")


@pytest.mark.parametrize(("args", "words"), [
    (["--date", "yesterday"], "--date 'yesterday' is not a date; write it as YYYY-MM-DD (2012-04-06)"),
    (["--date", "2021-02-30"], "--date '2021-02-30' is not a date"),
    (["--reference", "{tmp}/in.tif", "--reference-date", "2021-06-01", "--reference-date", "today"],
     "--reference-date 'today' is not a date; write it as YYYY-MM-DD"),
])
def test_a_date_that_is_not_a_date_is_refused_before_any_work(tmp_path, args, words):
    # --date yesterday was accepted (a fill without references never read it)
    res = _fill(tmp_path, "-v", *(a.format(tmp=tmp_path) for a in args))
    assert res.exit_code == 1
    lines = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1 and lines[0].startswith(f"Error: {words}"), res.output
    assert "Usage:" not in res.output and not (tmp_path / "out.tif").exists()


def test_a_date_in_an_accepted_form_is_taken(tmp_path, tiny_model):
    res = _fill(tmp_path, "-q", "--model", str(tiny_model), "--date", "2021-097")
    assert res.exit_code == 0 and res.output == ""


@pytest.mark.parametrize(("args", "words"), [
    (["--overlap", "1000"], ("--overlap 1000 is more than half of the 48-px tiles (model tiny's core size); "
                             "give --overlap 24 or less, or a larger --tile-size")),
    (["--overlap", "9", "--tile-size", "16"], ("--overlap 9 is more than half of the 16-px tiles (--tile-size); "
                                               "give --overlap 8 or less, or a larger --tile-size")),
])
def test_an_overlap_over_half_the_tile_is_refused(tmp_path, tiny_model, args, words):
    res = _fill(tmp_path, "-q", "--model", str(tiny_model), *args)
    assert res.exit_code == 1
    assert res.output == f"Error: {words}\n"
    assert not (tmp_path / "out.tif").exists()


def test_fill_config_and_fill_array_check_the_overlap(tiny_model):
    assert FillConfig(overlap=24, tile_size=48).overlap == 24  # half a tile: 2 tiles per axis at most
    with pytest.raises(ConfigError, match=r"^--overlap 25 is more than half of the 48-px tiles \(--tile-size\)"):
        FillConfig(overlap=25, tile_size=48)
    values = smooth_field((32, 32))
    valid = np.ones(values.shape, bool)
    valid[10:14, 10:14] = False
    with pytest.raises(ConfigError, match=r"^--overlap 1000 is more than half of the 48-px tiles \(model tiny's"):
        geonp.fill_array(values, valid, model=str(tiny_model), overlap=1000, device="cpu")
    filled, _ = geonp.fill_array(values, valid, model=str(tiny_model), overlap=24, device="cpu")
    assert np.isfinite(filled).all()


def test_pixels_without_context_are_counted_with_their_reason(tmp_path, tiny_model):
    # a 320-px hole and --search-radius 5: its middle has no observed pixel within reach of its tiles
    src = _raster(tmp_path, size=400, radius=160.0)
    out = tmp_path / "out.tif"
    res = CliRunner().invoke(cli, ["fill", str(src), str(out), "--model", str(tiny_model), "--search-radius", "5",
                                   "--device", "cpu"])
    assert res.exit_code == 0, res.output
    with rasterio.open(out) as dst:
        filled, tags = dst.read(1), dst.tags()
    with rasterio.open(src) as s:
        missing = int(np.isnan(s.read(1)).sum())
    unfilled = int(np.isnan(filled).sum())
    assert 0 < unfilled < missing
    assert tags["GEONP_MISSING_PIXELS"] == str(missing)
    assert tags["GEONP_FILLED_PIXELS"] == str(missing - unfilled)
    assert tags["GEONP_NO_CONTEXT_PIXELS"] == str(unfilled)
    assert tags["GEONP_BEYOND_MAX_DISTANCE_PIXELS"] == "0" and tags["GEONP_OUTSIDE_FOOTPRINT_PIXELS"].startswith("0 ")
    reason = f"{unfilled} with no observed pixel within --search-radius (a larger --search-radius fills them)"
    assert f"Warning: {unfilled} missing pixels left as nodata: {reason}" in res.output
    report = geonp.fill_raster(src, geonp.Outputs(tmp_path / "api.tif"), model=str(tiny_model), search_radius=5,
                               device="cpu")
    assert report.missing_pixels == missing and report.filled_pixels == missing - unfilled
    assert report.no_context_pixels == unfilled == (report.missing_pixels - report.filled_pixels
                                                    - report.outside_pixels - report.beyond_pixels)
    assert report.left_unfilled() == [reason]
