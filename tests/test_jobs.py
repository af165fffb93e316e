"""``geonp.fill_many`` on a real ``distributed.LocalCluster`` (2 worker processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
from affine import Affine

import geonp
from geonp.batch import jobs
from geonp.batch import run as batch_run
from geonp.batch.manifest import MANIFEST_NAME
from geonp.config import FillConfig
from geonp.errors import ConfigError, OutputError
from geonp.filling.raster import fill_raster

distributed = pytest.importorskip("distributed")

TRANSFORM = Affine(30.0, 0.0, 300000.0, 0.0, -30.0, 5000020.0)


def write_scene(path: Path, seed: int, *, size: int = 48, bands: int = 1, dtype: str = "float32") -> Path:
    """A smooth field with ~20 % gaps (a block and scattered pixels): NaN, or -9999 for integers."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    arr = np.stack([np.sin(xx / 7 + b + seed) + np.cos(yy / 9) + 0.1 * rng.normal(size=(size, size))
                    for b in range(bands)])
    gap = rng.random((size, size)) < 0.1
    gap[10:20, 12:30] = True
    nodata: float = float("nan")
    if np.issubdtype(np.dtype(dtype), np.integer):
        arr, nodata = np.rint(arr * 1000), -9999
    arr[:, gap] = nodata
    path.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(path, "w", driver="GTiff", width=size, height=size, count=bands, dtype=dtype,
                       crs="EPSG:32621", transform=TRANSFORM, nodata=nodata) as dst:
        dst.write(arr.astype(dtype))
    return path


def read(path: Path) -> np.ndarray:
    with rasterio.open(path) as src:
        return src.read()


def assert_same_raster(a: Path, b: Path) -> None:
    np.testing.assert_array_equal(read(a), read(b))


@pytest.fixture
def scenes(tmp_path: Path) -> Path:
    """Three good rasters (one 2-band int16 in a subdirectory), one truncated, one not a raster."""
    src = tmp_path / "in"
    write_scene(src / "a.tif", 1)
    write_scene(src / "b.tif", 2)
    write_scene(src / "sub" / "c.tif", 3, bands=2, dtype="int16")
    corrupt = write_scene(src / "corrupt.tif", 4)
    data = corrupt.read_bytes()
    corrupt.write_bytes(data[: len(data) * 2 // 3])
    (src / "notes.tif").write_text("not a raster\n")
    return src


def run(src: Path, out: Path, model: Path, cluster, recursive=False, skip_existing=True, **kw):
    kw.setdefault("device", "cpu")
    return geonp.fill_many(src, out, model=str(model), cluster=geonp.Cluster(scheduler=cluster.scheduler_address),
                           files=geonp.Files(recursive=recursive, skip_existing=skip_existing), **kw)


def test_good_files_filled_bad_files_reported(scenes, tmp_path, tiny_model, cluster):
    out = tmp_path / "out"
    seen: list[tuple[int, int]] = []
    report = run(scenes, out, tiny_model, cluster, recursive=True, progress=lambda d, t: seen.append((d, t)))

    status = {r.name: r.status for r in report.records}
    assert status == {"a.tif": "done", "b.tif": "done", "sub/c.tif": "done",
                      "corrupt.tif": "failed", "notes.tif": "failed"}
    assert not report.ok and report.counts == {"done": 3, "skipped": 0, "failed": 2}
    reasons = {r.name: r.reason for r in report.failed}
    assert "truncated or corrupt" in reasons["corrupt.tif"]
    assert "not a raster" in reasons["notes.tif"]
    assert all("\n" not in r for r in reasons.values())
    assert seen[-1] == (5, 5) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    # outputs mirror the inputs and equal a plain in-process fill_raster
    ref = tmp_path / "ref"
    ref.mkdir()
    for name in ("a.tif", "b.tif", "sub/c.tif"):
        rec = next(r for r in report.records if r.name == name)
        assert rec.output == out / name and rec.uncertainty == out / name.replace(".tif", "_std.tif")
        assert rec.filled_pixels > 0 and rec.filled_pixels == rec.gap_pixels and rec.tiles > 0
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as the batch's Dask workers run torch: float32 sums in the same order
        try:
            r = fill_raster(scenes / name, ref / Path(name).name, model=str(tiny_model), device="cpu")
        finally:
            torch.set_num_threads(threads)
        assert_same_raster(rec.output, r.output)
        assert_same_raster(rec.uncertainty, r.uncertainty)
        with rasterio.open(scenes / name) as src, rasterio.open(rec.output) as dst:
            assert dst.dtypes == src.dtypes and dst.crs == src.crs and dst.transform == src.transform
            assert dst.nodata == src.nodata or (np.isnan(dst.nodata) and np.isnan(src.nodata))
    assert not (out / "corrupt.tif").exists() and not (out / "notes.tif").exists()
    assert not list(out.rglob(".*geonp-partial*"))
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    files = {f["name"]: f for f in manifest["files"]}
    assert {n: f["status"] for n, f in files.items()} == status
    assert files["notes.tif"]["reason"] == reasons["notes.tif"]
    assert manifest["counts"] == report.counts and manifest["ok"] is False
    assert report.to_dict()["counts"] == report.counts


def test_rerun_skips_completed_and_retries_failed(scenes, tmp_path, tiny_model, cluster):
    out = tmp_path / "out"
    run(scenes, out, tiny_model, cluster, recursive=True)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.tif")}
    again = run(scenes, out, tiny_model, cluster, recursive=True)
    assert {r.name: r.status for r in again.records} == {
        "a.tif": "skipped", "b.tif": "skipped", "sub/c.tif": "skipped",
        "corrupt.tif": "failed", "notes.tif": "failed"}
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.tif")} == before
    assert "skipped" in again.table() and "2 failed" in again.table()
    # forced: everything this batch wrote is filled again, without --overwrite
    forced = run(scenes, out, tiny_model, cluster, recursive=True, skip_existing=False)
    assert forced.counts == {"done": 3, "skipped": 0, "failed": 2}


def test_incomplete_or_stale_outputs_are_filled_again(scenes, tmp_path, tiny_model, cluster):
    out = tmp_path / "out"
    run(scenes, out, tiny_model, cluster)
    a_before = read(out / "a.tif")
    (out / "a_std.tif").unlink()                       # half of a's outputs gone
    (out / "b_std.tif").write_bytes(b"II*\x00junk")    # b's std unreadable
    write_scene(scenes / "corrupt.tif", 4)             # the corrupt file was repaired
    second = run(scenes, out, tiny_model, cluster)
    assert {r.name: r.status for r in second.records} == {
        "a.tif": "done", "b.tif": "done", "corrupt.tif": "done", "notes.tif": "failed"}
    np.testing.assert_array_equal(read(out / "a.tif"), a_before)
    # other fill options: the folder would mix two runs' outputs, so the run is refused before any work
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    with pytest.raises(ConfigError) as refused:
        run(scenes, out, tiny_model, cluster, max_context=64)
    assert str(refused.value) == (
        f"OUTPUT_DIR {out} holds 3 file(s) filled with other options (max_context was None, now 64); give "
        "another OUTPUT_DIR, or refill them with --no-skip-existing or --overwrite (Files(skip_existing=False) "
        "or overwrite=True)")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # the manifest too
    # asked to refill: every file is filled again with the new options
    third = run(scenes, out, tiny_model, cluster, max_context=64, skip_existing=False)
    assert third.counts == {"done": 3, "skipped": 0, "failed": 1}
    # the same effective options, a default spelled out, another device: still complete
    overlap = FillConfig().overlap
    fourth = run(scenes, out, tiny_model, cluster, max_context=64, overlap=overlap, device="auto")
    assert fourth.counts == {"done": 0, "skipped": 3, "failed": 1}


def test_outputs_not_written_by_the_batch_need_overwrite(tmp_path, tiny_model, cluster):
    src, out = tmp_path / "in", tmp_path / "out"
    write_scene(src / "a.tif", 1)
    write_scene(src / "b.tif", 2)
    out.mkdir()
    (out / "a.tif").write_bytes(b"precious")
    report = run(src, out, tiny_model, cluster)
    assert [r.status for r in report.records] == ["failed", "done"]
    assert "--overwrite" in report.records[0].reason
    assert (out / "a.tif").read_bytes() == b"precious"
    report = run(src, out, tiny_model, cluster, overwrite=True)
    assert [r.status for r in report.records] == ["done", "skipped"]
    assert read(out / "a.tif").shape == (1, 48, 48)


def test_output_name_clash_fails_that_file(tmp_path, tiny_model, cluster):
    src = tmp_path / "in"
    write_scene(src / "x.tif", 1)
    write_scene(src / "x_std.tif", 2)  # its output would be x.tif's std raster
    report = run(src, tmp_path / "out", tiny_model, cluster)
    assert [(r.name, r.status) for r in report.records] == [("x.tif", "done"), ("x_std.tif", "failed")]
    assert "x.tif" in report.records[1].reason
    assert read(tmp_path / "out" / "x_std.tif").dtype == np.float32


def test_model_loaded_once_per_worker(tmp_path, tiny_model, cluster):
    src = tmp_path / "in"
    for i in range(6):
        write_scene(src / f"s{i}.tif", i)
    report = run(src, tmp_path / "out", tiny_model, cluster)
    assert report.ok and report.counts["done"] == 6 and report.workers == 2

    def cache_info():
        from geonp.model_files.registry import cached_model

        info = cached_model.cache_info()
        return info.hits, info.misses

    with distributed.Client(cluster.scheduler_address) as client:
        infos = client.run(cache_info)
    assert all(misses <= 1 for _, misses in infos.values()), infos
    assert sum(hits + misses for hits, misses in infos.values()) >= 6


def test_fill_one_reports_unexpected_errors(monkeypatch, tmp_path):
    import geonp.filling.raster

    def boom(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(geonp.filling.raster, "fill_raster", boom)
    monkeypatch.setattr("geonp.model_files.registry.cached_model", lambda path, device: object())
    task = batch_run.FileTask("a.tif", str(tmp_path / "a.tif"), str(tmp_path / "o" / "a.tif"),
                                str(tmp_path / "o" / "a_std.tif"), "m", False, ())
    result = batch_run.fill_one(task)
    assert result["status"] == "failed" and result["reason"] == "RuntimeError: boom second line"


def test_scene_filled_through_the_cluster_equals_one_process(tmp_path, tiny_model, cluster):
    scene = write_scene(tmp_path / "scene.tif", 7, size=64, bands=2)
    kw = {"model": str(tiny_model), "device": "cpu", "tile_size": 16, "overlap": 4, "block_size": 32, "search_radius": 24}
    local = fill_raster(scene, tmp_path / "local.tif", **kw)
    spread = fill_raster(scene, tmp_path / "spread.tif", scheduler=cluster.scheduler_address, **kw)
    assert spread.filled_pixels == local.filled_pixels > 0
    # Workers run torch with 1 thread, this process with 2: float32 sums may differ in the last bit
    # (of terms of order 1: atol for values near 0).
    np.testing.assert_allclose(read(spread.output), read(local.output), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(read(spread.uncertainty), read(local.uncertainty), rtol=1e-6, atol=1e-6)


def test_errors_before_any_work(tmp_path, tiny_model, cluster):
    src = tmp_path / "in"
    write_scene(src / "a.tif", 1)
    with pytest.raises(ConfigError, match="does not exist"):
        geonp.fill_many(tmp_path / "nope", tmp_path / "out", model=str(tiny_model))
    with pytest.raises(ConfigError, match="--recursive"):
        geonp.fill_many(src, tmp_path / "out", files=geonp.Files(pattern="*.jp2"), model=str(tiny_model))
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="is INPUT_DIR"):
        geonp.fill_many(src, src, model=str(tiny_model))
    with pytest.raises(OutputError, match="mkdir -p"):
        geonp.fill_many(src, tmp_path / "a" / "b", model=str(tiny_model))
    with pytest.raises(ConfigError, match="tile_sise"):
        geonp.fill_many(src, tmp_path / "out", model=str(tiny_model), tile_sise=16)
    with pytest.raises(ConfigError, match="name or a model directory"):
        geonp.fill_many(src, tmp_path / "out", model=geonp.load_model(tiny_model))
    with pytest.raises(ConfigError, match="COMPRES"):
        geonp.fill_many(src, tmp_path / "out", model=str(tiny_model), creation_options=["COMPRES=ZSTD"])
    assert not list(tmp_path.rglob(MANIFEST_NAME))


def test_output_paths_and_inputs(tmp_path):
    assert jobs.output_paths(tmp_path, "d/x.tiff") == (tmp_path / "d/x.tiff", tmp_path / "d/x_std.tiff")
    assert jobs.output_paths(tmp_path, "x.vrt") == (tmp_path / "x.tif", tmp_path / "x_std.tif")
    for name in ("a.tif", "sub/b.tif", ".hidden.tif", "out/c.tif", "d.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    rel = lambda paths: [p.relative_to(tmp_path).as_posix() for p in paths]
    assert rel(jobs.find_inputs(tmp_path, "*.tif", recursive=False)) == ["a.tif"]
    assert rel(jobs.find_inputs(tmp_path, "*.tif", recursive=True, exclude=tmp_path / "out")) == [
        "a.tif", "sub/b.tif"]


def test_unreadable_manifest_is_ignored(tmp_path, tiny_model, cluster):
    src, out = tmp_path / "in", tmp_path / "out"
    write_scene(src / "a.tif", 1)
    out.mkdir()
    (out / MANIFEST_NAME).write_text("{not json")
    report = run(src, out, tiny_model, cluster)
    assert report.counts["done"] == 1
    assert json.loads((out / MANIFEST_NAME).read_text())["files"][0]["status"] == "done"
    assert os.path.getsize(out / "a.tif") > 0


def test_fill_many_works_at_a_script_top_level(tmp_path, tiny_model):
    """The README's snippet as a plain script: the local cluster's spawned workers do not run it again."""
    write_scene(tmp_path / "in" / "a.tif", 1)
    script = tmp_path / "fill_folder.py"
    script.write_text(
        "import geonp\n"
        f"report = geonp.fill_many('in', 'out', model={str(tiny_model)!r}, device='cpu',\n"
        "                          cluster=geonp.Cluster(workers=1, dashboard_address=None))\n"
        "print(report.counts, __spec__)\n")
    res = subprocess.run([sys.executable, script.name], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "DASK_LOGGING__DISTRIBUTED": "warning"}, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout == "{'done': 1, 'skipped': 0, 'failed': 0} None\n"  # __main__ as it was
    assert "bootstrapping phase" not in res.stderr
    filled = read(tmp_path / "out" / "a.tif")
    assert filled.shape == (1, 48, 48) and np.isfinite(filled).all()
