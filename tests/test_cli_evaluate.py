import json
import shutil

import numpy as np
import pytest
import rasterio
from affine import Affine
from click.testing import CliRunner
from geonp_cli.main import cli

from geonp.data.synthetic import gp_grid_field
from geonp.evaluation.metrics import METRICS

HEADER = ("method", "mask", "band", "RMSE", "MAE", "R2", "NLL", "CRPS", "cov90", "cov95", "cal.err", "seconds")


@pytest.fixture(scope="module")
def clean_tif(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "clean.tif"
    arr = (2000 + 150 * gp_grid_field((32, 32), kernel="rbf", lengthscale=6.0, rng=4)).astype("uint16")
    with rasterio.open(path, "w", driver="GTiff", width=32, height=32, count=1, dtype="uint16",
                       crs="EPSG:32621", transform=Affine(30, 0, 0, 0, -30, 0), nodata=0) as dst:
        dst.write(arr[None])
    return path


@pytest.fixture
def runner():
    return CliRunner()


def test_evaluate_prints_table_and_writes_json_and_plot(runner, clean_tif, tiny_model, tmp_path):
    out, png = tmp_path / "s.json", tmp_path / "s.png"
    result = runner.invoke(cli, ["-q", "evaluate", str(clean_tif), "--model", str(tiny_model), "--mask-kind", "random",
                                 "--mask-kind", "stripe", "--seed", "3", "--device", "cpu", "--json", str(out),
                                 "--plot", str(png)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == list(HEADER)
    body = [ln.split() for ln in lines[2:] if ln.startswith(("geonp:", "fillnodata"))]
    assert len(body) == 2 * 2 * 2  # 2 methods x 2 masks x (band 1 + all)
    assert {row[0] for row in body} == {"geonp:tiny", "fillnodata"}
    assert {row[1] for row in body} == {"random", "stripe"}
    assert any(ln.startswith("Scored 2 method(s) on 2 mask(s) of clean.tif") for ln in lines)
    data = json.loads(out.read_text())
    assert {"rows", "masks", "methods", "metrics", "calibration_curves", "seed", "window", "bands"} <= set(data)
    assert data["seed"] == 3 and data["window"] == [0, 0, 32, 32]
    for row in data["rows"]:
        assert {"method", "mask", "band", "n", "unfilled", "seconds", *METRICS} == set(row)
    fill_rows = [r for r in data["rows"] if r["method"] == "fillnodata"]
    assert all(r["nll"] is None and r["rmse"] > 0 for r in fill_rows)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_evaluate_mask_file_only_with_kriging(runner, clean_tif, tiny_model, tmp_path):
    pytest.importorskip("pykrige")
    mask = tmp_path / "gaps.tif"
    gap = np.zeros((1, 32, 32), "uint8")
    gap[0, 8:20, 4:24] = 1
    with rasterio.open(clean_tif) as src:
        profile = src.profile | {"dtype": "uint8", "nodata": None}
    with rasterio.open(mask, "w", **profile) as dst:
        dst.write(gap)
    out = tmp_path / "k.json"
    result = runner.invoke(cli, ["-q", "evaluate", str(clean_tif), "--mask", str(mask), "--model", str(tiny_model),
                                 "--no-fillnodata", "--kriging", "--device", "cpu", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert [m["name"] for m in data["masks"]] == ["file"] and data["masks"][0]["hidden_pixels"] == 240
    assert data["methods"] == ["geonp:tiny", "kriging"]
    assert all(r["n"] == 240 for r in data["rows"])


def test_evaluate_unknown_model_is_a_clean_error(runner, clean_tif):
    result = runner.invoke(cli, ["evaluate", str(clean_tif), "--model", "no_such_model"])
    assert result.exit_code != 0
    assert "unknown model 'no_such_model'" in result.output and "geonp models" in result.output
    assert "Traceback" not in result.output


def test_evaluate_calibrate_reports_and_writes(runner, clean_tif, tiny_model, tmp_path):
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model, model_dir)
    result = runner.invoke(cli, ["-q", "evaluate", str(clean_tif), "--model", str(model_dir), "--mask-kind", "random",
                                 "--calibrate", "--no-fillnodata", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "geonp:tiny+cal" in result.output
    assert "Calibrated geonp:tiny: std scale [" in result.output and "config.json" in result.output
    cal = json.loads((model_dir / "config.json").read_text())["calibration"]
    assert len(cal["std_scale"]) == 1 and cal["std_scale"][0] > 0


@pytest.mark.parametrize(
    "args,hint",
    [
        (["--window", "0", "0", "64", "64"], "does not lie inside"),
        (["--mask-kind", "clouds"], "Invalid value for '--mask-kind'"),
        (["--coverage", "1.5"], "Invalid value for '--coverage'"),
        (["-b", "2"], "out of range"),
    ],
)
def test_evaluate_errors_are_one_line_hints(runner, clean_tif, args, hint):
    result = runner.invoke(cli, ["evaluate", str(clean_tif), "--no-fillnodata", "--kriging", *args])
    assert result.exit_code != 0
    assert hint in result.output
    assert "Traceback" not in result.output


def test_evaluate_help_has_example(runner):
    result = runner.invoke(cli, ["evaluate", "--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.output and "geonp evaluate sample_data/landsat8_clean.tif" in result.output
    assert "--mask-kind" in result.output and "--calibrate" in result.output


def test_evaluate_draws_scores_each_draw(runner, clean_tif, tmp_path):
    out = tmp_path / "d.json"
    result = runner.invoke(cli, ["-q", "evaluate", str(clean_tif), "--model", "default", "--mask-kind", "random",
                                 "--draws", "2", "--no-fillnodata", "--device", "cpu", "--json", str(out)])
    assert result.exit_code == 0, result.output
    masks = {ln.split()[1] for ln in result.output.splitlines() if ln.startswith("geonp:")}
    assert masks == {"random", "random#2"}
    assert [m["name"] for m in json.loads(out.read_text())["masks"]] == ["random", "random#2"]
    bad = runner.invoke(cli, ["-q", "evaluate", str(clean_tif), "--draws", "0"])
    assert bad.exit_code != 0 and "--draws" in bad.output
