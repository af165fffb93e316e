"""``geonp batch`` (and ``geonp fill --scheduler``) end to end, on real Dask clusters."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import rasterio
from affine import Affine
from click.testing import CliRunner
from geonp_cli.main import cli

import geonp
from tests.hardening._stuck import assert_ended, start_stuck_run, wait_until_busy

distributed = pytest.importorskip("distributed")

TRANSFORM = Affine(30.0, 0.0, 300000.0, 0.0, -30.0, 5000020.0)


def write_scene(path: Path, seed: int, *, size: int = 48, bands: int = 1) -> Path:
    """A smooth float32 field with ~20 % NaN gaps (a block and scattered pixels)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    arr = np.stack([np.sin(xx / 7 + b + seed) + np.cos(yy / 9) + 0.1 * rng.normal(size=(size, size))
                    for b in range(bands)]).astype("float32")
    gap = rng.random((size, size)) < 0.1
    gap[10:20, 12:30] = True
    arr[:, gap] = np.nan
    path.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(path, "w", driver="GTiff", width=size, height=size, count=bands, dtype="float32",
                       crs="EPSG:32621", transform=TRANSFORM, nodata=float("nan")) as dst:
        dst.write(arr)
    return path


def read(path: Path) -> np.ndarray:
    with rasterio.open(path) as src:
        return src.read()


@pytest.fixture(autouse=True)
def _quiet_dask(monkeypatch: pytest.MonkeyPatch) -> None:
    # the command sets this for itself and its workers; keep it out of the test process
    monkeypatch.setenv("DASK_LOGGING__DISTRIBUTED", "warning")


def test_batch_summary_manifest_exit_code_and_rerun(tmp_path, tiny_model, cluster):
    src, out = tmp_path / "in", tmp_path / "out"
    for i in range(3):
        write_scene(src / f"s{i}.tif", i)
    bad = write_scene(src / "truncated.tif", 9)
    bad.write_bytes(bad.read_bytes()[:3000])
    (src / "readme.tif").write_text("not a raster")
    args = ["batch", str(src), str(out), "--model", str(tiny_model), "--device", "cpu"]

    # a local cluster of its own (the default)
    res = CliRunner().invoke(cli, args + ["--workers", "2", "--dashboard-address", ":0"])
    assert res.exit_code == 1, res.output
    table = res.stdout
    assert "5 file(s): 3 done, 0 skipped, 2 failed" in table
    lines = {line.split()[1]: line for line in table.splitlines()[1:-1]}
    assert lines["truncated.tif"].startswith("failed") and "truncated or corrupt" in lines["truncated.tif"]
    assert lines["readme.tif"].startswith("failed") and "not a raster" in lines["readme.tif"]
    assert all(lines[f"s{i}.tif"].startswith("done") for i in range(3))
    assert "Traceback" not in res.output
    manifest = json.loads((out / "geonp_batch.json").read_text())
    assert {f["name"]: f["status"] for f in manifest["files"]} == {
        "s0.tif": "done", "s1.tif": "done", "s2.tif": "done", "truncated.tif": "failed", "readme.tif": "failed"}
    for i in range(3):
        filled, std = read(out / f"s{i}.tif"), read(out / f"s{i}_std.tif")
        gaps = np.isnan(read(src / f"s{i}.tif"))
        assert np.isfinite(filled).all() and (std[gaps] > 0).all() and (std[~gaps] == 0).all()

    # rerun on an existing cluster: the done files are skipped, the bad ones fail again
    res = CliRunner().invoke(cli, ["-q"] + args + ["--scheduler", cluster.scheduler_address])
    assert res.exit_code == 1
    assert "0 done, 3 skipped, 2 failed" in res.stdout and "s0.tif" not in res.stdout  # -q: failures only
    bad.unlink()
    (src / "readme.tif").unlink()
    res = CliRunner().invoke(cli, ["-q"] + args + ["--scheduler", cluster.scheduler_address])
    assert res.exit_code == 0 and res.stdout == ""
    assert json.loads((out / "geonp_batch.json").read_text())["counts"] == {"done": 0, "skipped": 3, "failed": 0}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pattern", "*.png"], "add --recursive"),
        (["--co", "COMPRES=ZSTD"], "Unknown creation option"),
        (["--model", "no-such-model"], "unknown model"),
        (["--scheduler", "tcp://127.0.0.1:1", "--workers", "0"], "Invalid value for '--workers'"),
    ],
)
def test_batch_errors_are_one_line(tmp_path, tiny_model, extra, message):
    write_scene(tmp_path / "in" / "a.tif", 1)
    args = ["batch", str(tmp_path / "in"), str(tmp_path / "out"), "--model", str(tiny_model)]
    res = CliRunner().invoke(cli, args + extra)
    assert res.exit_code != 0 and message in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(cli, ["batch", str(tmp_path / "missing"), str(tmp_path / "out")])
    assert res.exit_code == 1 and "INPUT_DIR" in res.output and "does not exist" in res.output


def test_batch_help_has_examples():
    res = CliRunner().invoke(cli, ["batch", "--help"])
    assert res.exit_code == 0
    for text in ("Example", "--scheduler", "--no-skip-existing", "--threads-per-worker", "--recursive"):
        assert text in res.output


def test_killed_run_resumes_to_the_same_outputs(tmp_path, tiny_model, cluster, monkeypatch):
    src, out, clean = tmp_path / "in", tmp_path / "out", tmp_path / "clean"
    names = [f"small{i}.tif" for i in range(4)] + ["zbig0.tif", "zbig1.tif"]
    for i, name in enumerate(names):
        write_scene(src / name, i, size=256 if name.startswith("zbig") else 48)
    geonp.fill_many(src, clean, model=str(tiny_model), device="cpu",
                    cluster=geonp.Cluster(scheduler=cluster.scheduler_address))

    # the "zbig" files never end (tests/hardening/_stuck.py): once both workers are in one, the four
    # small files, taken first, are done, and the kill lands mid-file, whatever the machine's speed
    monkeypatch.setenv("GEONP_TEST_STUCK_FILES", "zbig")
    proc, busy = start_stuck_run(tmp_path, ["-q", "batch", src, out, "--model", tiny_model, "--device", "cpu",
                                            "--workers", "2"])
    children = wait_until_busy(proc, busy, 2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert_ended(children)  # the Dask workers do not outlive the killed batch
    complete = [n for n in names if (out / n).exists() and (out / n.replace(".tif", "_std.tif")).exists()]
    assert complete == names[:4]

    res = CliRunner().invoke(cli, ["batch", str(src), str(out), "--model", str(tiny_model), "--device", "cpu",
                                   "--scheduler", cluster.scheduler_address])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "geonp_batch.json").read_text())
    status = {f["name"]: f["status"] for f in report["files"]}
    assert "skipped" in status.values() and all(status[n] in ("skipped", "done") for n in complete)
    assert all(status[n] == "done" for n in names if n not in complete)
    for name in names:
        for part in (name, name.replace(".tif", "_std.tif")):
            np.testing.assert_array_equal(read(out / part), read(clean / part))
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean.iterdir())


def test_fill_scheduler_cli_equals_one_process(tmp_path, tiny_model, cluster):
    scene = write_scene(tmp_path / "scene.tif", 7, size=64, bands=2)
    opts = ["--model", str(tiny_model), "--device", "cpu", "--tile-size", "16", "--overlap", "4",
            "--block-size", "32", "--search-radius", "24"]
    res = CliRunner().invoke(cli, ["-q", "fill", str(scene), str(tmp_path / "spread.tif"),
                                   "--scheduler", cluster.scheduler_address] + opts)
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["-q", "fill", str(scene), str(tmp_path / "local.tif")] + opts)
    assert res.exit_code == 0, res.output
    for a, b in (("spread.tif", "local.tif"), ("spread_std.tif", "local_std.tif")):
        # workers run torch with 1 thread, this process with 2: float32 sums may differ in the last bit
        # (of terms of order 1: atol for values near 0)
        np.testing.assert_allclose(read(tmp_path / a), read(tmp_path / b), rtol=1e-6, atol=1e-6)
    assert np.isfinite(read(tmp_path / "spread.tif")).all()


def cli_run(*args: str) -> subprocess.CompletedProcess:
    """``geonp ARGS`` in a new process (no pytest catching its warnings)."""
    cmd = [sys.executable, "-c", "from geonp_cli.main import cli; cli()", *args]
    env = {k: v for k, v in os.environ.items() if k != "DASK_LOGGING__DISTRIBUTED"}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_batch_shows_the_dashboard_only_with_v(tmp_path, tiny_model, cluster):
    src, out = tmp_path / "in", tmp_path / "out"
    write_scene(src / "a.tif", 1)
    args = ["batch", str(src), str(out), "--model", str(tiny_model), "--device", "cpu"]
    with socket.socket() as busy:  # the dashboard's port taken: Dask warned that it moved elsewhere
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = cli_run(*args, "--workers", "1", "--dashboard-address", f":{port}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "1 file(s): 1 done, 0 skipped, 0 failed" in res.stdout
    assert "dashboard" not in res.stderr.lower() and str(port) not in res.stderr and "8787" not in res.stderr
    opts = args[3:]
    res = cli_run("-v", "batch", str(src), str(tmp_path / "out_v"), *opts, "--scheduler", cluster.scheduler_address)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"Dask scheduler {cluster.scheduler_address} with 2 worker(s); dashboard: " in res.stderr


def test_batch_rerun_with_other_options_is_refused_unless_asked_to_refill(tmp_path, tiny_model, cluster):
    src, out = tmp_path / "in", tmp_path / "out"
    write_scene(src / "a.tif", 1)
    args = ["batch", str(src), str(out), "--model", str(tiny_model), "--device", "cpu",
            "--scheduler", cluster.scheduler_address]
    assert CliRunner().invoke(cli, ["-q", *args]).exit_code == 0
    first = read(out / "a.tif")
    assert np.isfinite(first).all()
    res = CliRunner().invoke(cli, [*args, "--max-distance", "3"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert res.stderr == (f"Error: OUTPUT_DIR {out} holds 1 file(s) filled with other options (max_distance was None, "
                          "now 3.0); give another OUTPUT_DIR, or refill them with --no-skip-existing or --overwrite "
                          "(Files(skip_existing=False) or overwrite=True)\n")
    np.testing.assert_array_equal(read(out / "a.tif"), first)
    res = CliRunner().invoke(cli, ["-q", *args, "--max-distance", "3", "--overwrite"])  # asked to refill
    assert res.exit_code == 0, res.output
    assert np.isnan(read(out / "a.tif")).any()  # the gap's centre is over 3 px from data: left unfilled now
    res = CliRunner().invoke(cli, ["-q", *args, "--max-distance", "3"])  # the same options again: skipped
    assert res.exit_code == 0 and json.loads((out / "geonp_batch.json").read_text())["counts"]["skipped"] == 1
