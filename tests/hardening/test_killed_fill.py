"""A ``geonp fill`` killed with SIGKILL leaves no file at OUTPUT or its std path; a rerun completes.

The kills land at set points of the write (``tests/hardening/_helpers.PAUSED_RUN``), not after
sleeps.

A fill's worker processes end with it: killed while they are busy, they do not run on as orphans.

(``geonp batch`` has the same test in tests/test_cli_batch.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import rasterio

from geonp.data.gap_shapes import cloud_mask
from tests.conftest import smooth_field, write_raster
from tests.hardening._helpers import (
    assert_refused,
    checksums,
    invoke,
    listing,
    start_paused_run,
    wait_for_marker,
)
from tests.hardening._stuck import assert_ended, start_stuck_run, wait_until_busy

SIZE = 192  # several blocks of 64 px: the third block is written well before the end
OPTS = ["--block-size", "64", "--device", "cpu"]


def _read(path: Path) -> np.ndarray:
    with rasterio.open(path) as src:
        return src.read()


def _partials(directory: Path) -> list[Path]:
    return sorted(directory.glob(".*geonp-partial*"))


def _kill_at(args: list, marker: Path, point: str, *, paused: Callable[[], None] | None = None) -> None:
    """Run ``geonp ARGS`` until it reaches ``point``, call ``paused()`` there, then SIGKILL it."""
    proc = start_paused_run(args, marker, point)

    def reached() -> None:
        wait_for_marker(proc, marker)
        if paused is not None:
            paused()

    _sigkill(proc, reached)


def _sigkill(proc, before: Callable[[], None]) -> None:
    """Call ``before()``, then SIGKILL ``proc`` (killed anyway if ``before`` fails)."""
    try:
        before()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


#: Where the killed runs stop: mid-write, before the writers close, after OUTPUT is checked.
KILL_POINTS = ("block", "closing", "prepared")


def test_killed_fill_leaves_no_output_and_rerun_completes(tmp_path, tiny_model):
    arr = smooth_field((SIZE, SIZE)).astype("float32")
    arr[cloud_mask((SIZE, SIZE), coverage=0.3, rng=1)] = -9999
    src = write_raster(tmp_path / "scene.tif", arr, nodata=-9999)
    digest = checksums([src])
    ref_dir, out_dir = tmp_path / "ref", tmp_path / "out"
    ref_dir.mkdir()
    out_dir.mkdir()

    res = invoke(["-q", "fill", src, ref_dir / "filled.tif", "--model", tiny_model, *OPTS])
    assert res.exit_code == 0, res.output

    out, std = out_dir / "filled.tif", out_dir / "filled_std.tif"
    args = ["-q", "fill", src, out, "--model", tiny_model, *OPTS]
    killed_while_writing = 0
    for point in KILL_POINTS:

        def writing(point: str = point) -> None:
            assert _partials(out_dir), point  # the kill lands while the outputs are written

        _kill_at(args, tmp_path / f"{point}.reached", point, paused=writing)
        assert not out.exists() and not std.exists(), point
        killed_while_writing += 1
        assert {p.name for p in out_dir.iterdir()} <= {p.name for p in _partials(out_dir)}
    assert killed_while_writing == len(KILL_POINTS)

    # the rerun removes what the killed runs left, and gives what an uninterrupted run gives
    res = invoke(["-q", "fill", src, out, "--model", tiny_model, *OPTS])
    assert res.exit_code == 0, res.output
    assert listing(out_dir) == ["filled.tif", "filled_std.tif"]
    np.testing.assert_array_equal(_read(out), _read(ref_dir / "filled.tif"))
    np.testing.assert_array_equal(_read(std), _read(ref_dir / "filled_std.tif"))
    assert checksums([src]) == digest


def test_the_workers_of_a_killed_fill_end_with_it(tmp_path, tiny_model):
    """SIGKILL while both worker processes are busy on a block: they end too; a rerun cleans up."""
    arr = smooth_field((SIZE, SIZE)).astype("float32")
    arr[cloud_mask((SIZE, SIZE), coverage=0.3, rng=1)] = -9999
    src = write_raster(tmp_path / "scene.tif", arr, nodata=-9999)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "filled.tif"
    proc, busy = start_stuck_run(tmp_path, ["-q", "fill", src, out, "--model", tiny_model, *OPTS, "--workers", "2"])
    processes = []

    def busy_workers() -> None:
        processes.extend(wait_until_busy(proc, busy, 2))
        workers = [p for p in processes if str(p.pid) in {n.name for n in busy.iterdir()}]
        assert len(workers) == 2

    _sigkill(proc, busy_workers)
    assert_ended(processes)  # by pid: the busy workers (and multiprocessing's helper) are gone
    assert [p.name for p in out_dir.iterdir()] != [] and not out.exists()
    assert {p.name for p in out_dir.iterdir()} == {p.name for p in _partials(out_dir)}

    res = invoke(["-q", "fill", src, out, "--model", tiny_model, *OPTS])  # removes the killed run's files
    assert res.exit_code == 0, res.output
    assert listing(out_dir) == ["filled.tif", "filled_std.tif"]


def _run_id(path: Path) -> str:
    with rasterio.open(path) as src:
        return src.tags()["GEONP_RUN_ID"]


def test_a_kill_between_the_two_renames_leaves_a_leftover_the_next_run_names(tmp_path, tiny_model):
    """The std raster is moved into place first, OUTPUT last: a kill between leaves a known leftover."""
    arr = smooth_field((64, 64)).astype("float32")
    arr[cloud_mask((64, 64), coverage=0.3, rng=2)] = -9999
    src = write_raster(tmp_path / "scene.tif", arr, nodata=-9999)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out, std = out_dir / "filled.tif", out_dir / "filled_std.tif"
    args = ["-q", "fill", src, out, "--model", tiny_model, *OPTS]

    def finals() -> list[str]:
        return [n for n in listing(out_dir) if "geonp-partial" not in n]

    # a first run killed between the renames: the std raster alone, never OUTPUT alone
    _kill_at(args, tmp_path / "first.reached", "renamed")
    assert finals() == ["filled_std.tif"]
    line = assert_refused(invoke(args), ["filled_std.tif", "already exists", "interrupted run",
                                         "filled.tif is missing", "--overwrite"])
    assert "Traceback" not in line and finals() == ["filled_std.tif"]
    res = invoke([*args, "--overwrite"])  # --overwrite replaces the leftover
    assert res.exit_code == 0, res.output
    assert listing(out_dir) == ["filled.tif", "filled_std.tif"]  # the killed run's partials removed
    first_id = _run_id(out)
    assert _run_id(std) == first_id
    filled, filled_std = _read(out), _read(std)

    # an --overwrite run killed between the renames: its std raster beside the earlier OUTPUT
    _kill_at([*args, "--overwrite"], tmp_path / "second.reached", "renamed")
    assert finals() == ["filled.tif", "filled_std.tif"]
    assert _run_id(out) == first_id and _run_id(std) != first_id
    assert_refused(invoke(args), ["filled_std.tif", "interrupted run", "GEONP_RUN_ID", "--overwrite"])
    res = invoke([*args, "--overwrite"])
    assert res.exit_code == 0, res.output
    assert listing(out_dir) == ["filled.tif", "filled_std.tif"] and _run_id(out) == _run_id(std) != first_id
    np.testing.assert_array_equal(_read(out), filled)
    np.testing.assert_array_equal(_read(std), filled_std)


def test_stale_partials_of_live_processes_are_kept(tmp_path):
    """Only files of dead writers are removed: a run writing the same output keeps its file."""
    from geonp.io.partials import host_tag, remove_stale_partials

    final = tmp_path / "out.tif"
    host = host_tag()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = tmp_path / f".out.tif.geonp-partial-{host}-{os.getpid()}-aaaaaaaaaaaa.tif"
    gone = tmp_path / f".out.tif.geonp-partial-{host}-{dead.pid}-bbbbbbbbbbbb.tif"
    other_host = tmp_path / f".out.tif.geonp-partial-ffffff-{dead.pid}-cccccccccccc.tif"
    other_name = tmp_path / f".other.tif.geonp-partial-{host}-{dead.pid}-dddddddddddd.tif"
    for p in (mine, gone, other_host, other_name):
        p.write_bytes(b"partial")
    if host == "ffffff":  # pragma: no cover - one machine in 16 million
        pytest.skip("this host's tag collides with the test's foreign tag")
    # Dead writers of this host are cleaned up whatever output they wrote; another host's file
    # is kept until it is a day old.
    assert sorted(remove_stale_partials(final)) == sorted([gone, other_name])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (mine, other_host))
    day_old = time.time() - 25 * 3600
    os.utime(other_host, (day_old, day_old))
    assert remove_stale_partials(final) == [other_host]
    assert [p.name for p in tmp_path.iterdir()] == [mine.name]
