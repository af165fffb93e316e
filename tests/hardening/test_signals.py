"""SIGTERM and SIGHUP stop ``geonp fill`` like Ctrl-C: no file is left, not even a hidden one.

With worker processes (``geonp fill --workers 2``) and on Dask (``geonp batch``) too: the run
stops while its workers are busy, within seconds, its workers end with it, and its last line
says that no partial output was left only when none was (``tests/hardening/_stuck.py`` keeps
the workers busy). A killed fill's workers are tested in ``test_killed_fill.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from geonp_cli.main import interrupted_message

from geonp.data.gap_shapes import cloud_mask
from tests.conftest import smooth_field, write_raster
from tests.hardening._helpers import checksums, listing, start_paused_run, wait_for_marker
from tests.hardening._stuck import assert_ended, start_stuck_run, wait_until_busy

SIZE = 192  # several blocks of 64 px


def _cloudy_scene(tmp_path):
    """A cloudy raster to fill, its checksum and an empty output folder."""
    arr = smooth_field((SIZE, SIZE)).astype("float32")
    arr[cloud_mask((SIZE, SIZE), coverage=0.3, rng=1)] = -9999
    src = write_raster(tmp_path / "scene.tif", arr, nodata=-9999)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    return src, checksums([src]), out_dir


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_signal_mid_run_leaves_no_file(tmp_path, tiny_model, sig) -> None:
    src, digest, out_dir = _cloudy_scene(tmp_path)
    args = ["fill", src, out_dir / "filled.tif", "--model", tiny_model, "--block-size", "64",
            "--device", "cpu"]
    marker = tmp_path / "reached"
    proc = start_paused_run(args, marker, "block")  # stopped mid-write, partial files on disk
    try:
        wait_for_marker(proc, marker)
        assert list(out_dir.glob(".*geonp-partial*")), "the signal must land while writing"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert f"Interrupted ({sig.name}); no partial output was left." in err
    assert "Traceback" not in err
    assert list(out_dir.iterdir()) == []
    assert checksums([src]) == digest


# --------------------------------------------------------------------------------------------
# Runs with worker processes: the signal lands while the workers are busy.

def stop(proc: subprocess.Popen, sig: signal.Signals, *, group: bool = False) -> str:
    """Send ``sig`` (to the process group, as a terminal's Ctrl-C, with ``group``); returns stderr."""
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=60)  # a hang guard, not a timing: an exit is expected in seconds
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"no exit within 60 s of {sig.name}")
    return err


def assert_interrupted(proc: subprocess.Popen, err: str, sig: signal.Signals, name: str) -> None:
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert err.strip().splitlines()[-1] == f"Interrupted ({name}); no partial output was left.", err
    assert "Traceback" not in err, err


# SIGTERM on a fill is checked by test_signal_mid_run_leaves_no_file too: its busy-worker case runs with -m slow
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.slow),
                                 pytest.param(signal.SIGINT, id="SIGINT")])
def test_a_signal_stops_a_fill_whose_workers_are_busy(tmp_path, tiny_model, sig) -> None:
    """The fill stops at once, not after the blocks its workers are on; its workers end with it."""
    src, digest, out_dir = _cloudy_scene(tmp_path)
    proc, busy = start_stuck_run(tmp_path, ["fill", src, out_dir / "filled.tif", "--model", tiny_model,
                                            "--block-size", "64", "--device", "cpu", "--workers", "2"])
    try:
        processes = wait_until_busy(proc, busy, 2)
        workers = [p for p in processes if int(p.pid) in {int(n.name) for n in busy.iterdir()}]
        assert len(workers) == 2 and list(out_dir.glob(".*geonp-partial*")), "the signal must land mid-fill"
        err = stop(proc, sig, group=sig == signal.SIGINT)  # SIGINT as Ctrl-C: the workers get it too
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert_interrupted(proc, err, sig, "Ctrl-C" if sig == signal.SIGINT else sig.name)
    assert list(out_dir.iterdir()) == []
    assert_ended(processes)
    assert checksums([src]) == digest


def test_ctrl_c_stops_a_batch_whose_files_are_being_filled(tmp_path, tiny_model) -> None:
    """Ctrl-C while Dask workers write two files: no file is left, the workers end, the message is true."""
    src_dir, out_dir = tmp_path / "in", tmp_path / "out"
    src_dir.mkdir()
    for i in range(3):
        arr = smooth_field((64, 64), seed=i).astype("float32")
        arr[cloud_mask((64, 64), coverage=0.3, rng=i)] = -9999
        write_raster(src_dir / f"scene{i}.tif", arr, nodata=-9999)
    digest = checksums([src_dir])
    proc, busy = start_stuck_run(tmp_path, ["batch", src_dir, out_dir, "--model", tiny_model, "--device", "cpu",
                                            "--workers", "2", "--dashboard-address", ":0"])
    try:
        processes = wait_until_busy(proc, busy, 2)
        assert len(list(out_dir.glob(".*geonp-partial*"))) == 4, "the signal must land while two files are written"
        err = stop(proc, signal.SIGINT, group=True)  # as a terminal's Ctrl-C: every process of the group gets it
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert_interrupted(proc, err, signal.SIGINT, "Ctrl-C")
    assert listing(out_dir) == ["geonp_batch.json"]  # the manifest, from which a rerun resumes
    files = json.loads((out_dir / "geonp_batch.json").read_text())["files"]
    assert len(files) == 3 and not [f for f in files if f["status"] == "done"]
    assert_ended(processes)
    assert checksums([src_dir]) == digest


# --------------------------------------------------------------------------------------------
# The message says what is on disk after the cleanup, never more.

def test_an_interrupt_carries_what_the_writers_left(tmp_path) -> None:
    from affine import Affine

    from geonp.io.atomic import AtomicGroup

    profile = {"driver": "GTiff", "width": 16, "height": 16, "count": 1, "dtype": "float32",
               "crs": "EPSG:32621", "transform": Affine(30.0, 0.0, 300000.0, 0.0, -30.0, 5000000.0)}
    with pytest.raises(KeyboardInterrupt) as info, AtomicGroup() as group, \
            group.writer(tmp_path / "filled.tif", profile, overwrite=False, primary=True) as dst, \
            group.writer(tmp_path / "filled_std.tif", profile, overwrite=False) as dstd:
        dst.write(np.ones((1, 16, 16), "float32"))
        dstd.write(np.ones((1, 16, 16), "float32"))
        assert len(listing(tmp_path)) == 2  # the two partial files
        raise KeyboardInterrupt
    assert listing(tmp_path) == []
    # the files this process named that are still on disk (none here; other tests' are elsewhere)
    assert [p for p in info.value.partials_left if p.parent == tmp_path] == []
    assert interrupted_message("SIGTERM", KeyboardInterrupt()) == "Interrupted (SIGTERM)."  # no writer saw it


def test_an_interrupted_batch_names_the_partial_files_that_remain(tmp_path) -> None:
    from geonp.batch.run import left_by_interrupt
    from geonp.io.partials import host_tag, own_partials

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        host = host_tag()
        stuck = tmp_path / f".a.tif.geonp-partial-{host}-{live.pid}-aaaaaaaaaaaa.tif"  # a worker that runs on
        killed = tmp_path / f".b.tif.geonp-partial-{host}-{dead.pid}-bbbbbbbbbbbb.tif"  # a killed worker's
        other = tmp_path / f".c.tif.geonp-partial-{host}-{live.pid}-cccccccccccc.tif"  # another run's, there before
        for path in (stuck, killed, other):
            path.write_bytes(b"partial")
        interrupt = KeyboardInterrupt()
        left_by_interrupt(interrupt, [tmp_path / "a.tif"], {other})
        assert listing(tmp_path) == [stuck.name, other.name]  # the killed worker's file is removed
        assert set(interrupt.partials_left) - set(own_partials()) == {stuck}
    finally:
        live.kill()
        live.wait()
    interrupt.partials_left = (stuck,)
    assert interrupted_message("Ctrl-C", interrupt) == (
        f"Interrupted (Ctrl-C); 1 partial file(s) remain: {stuck}; the next geonp run that writes in "
        f"{tmp_path} removes them.")
    interrupt.partials_left = ()
    assert interrupted_message("Ctrl-C", interrupt) == "Interrupted (Ctrl-C); no partial output was left."


def test_an_own_dask_worker_does_not_report_the_scheduler_closing_first(caplog) -> None:
    """geonp's own workers drop the heartbeat error of a cluster closing (a traceback printed after
    "Interrupted" when the scheduler closed before a worker noticed); other worker errors stay."""
    import logging

    from geonp.filling import interrupts

    log = logging.getLogger("distributed.worker")
    try:
        interrupts.own_dask_worker()
        with caplog.at_level(logging.ERROR, logger="distributed.worker"):
            log.error("Failed to communicate with scheduler during heartbeat.")
            log.error("Compute Failed")
        assert [r.getMessage() for r in caplog.records] == ["Compute Failed"]
    finally:
        log.removeFilter(interrupts._SCHEDULER_GONE_FIRST)
        signal.signal(signal.SIGINT, signal.default_int_handler)


# --------------------------------------------------------------------------------------------
# geonp train: a signal stops it within seconds, with one line; its data worker ends with it;
# its last checkpoint stays (and a folder it made but saved nothing in goes).

TRAIN_ARGS = ["--dim", "8", "--depth", "1", "--heads", "2", "--ff-dim", "8", "--device", "cpu",
              "--patch-size", "24", "--core-size", "12", "--max-context", "32", "--n-far", "8",
              "--search-radius", "32", "--batch-size", "4", "--nodata", "0", "--no-calibrate",
              "--steps", "100000"]
#: The last line of an interrupted run: signal, step reached, checkpoint step and folder (if one was saved).
STOPPED = re.compile(r"Interrupted \((Ctrl-C|SIGTERM)\); training stopped (?:at step (\d+) of 100000|before its "
                     r"first step)(?:; its last checkpoint \(step (\d+)\) is in (.+): rerun with --resume to "
                     r"continue|(?:, before its first checkpoint)?: nothing was saved)\.")


#: ``geonp ARGS`` with Ctrl-C on: a test run started in the background (``pytest &``) ignores SIGINT,
#: and a child inherits that, so its Ctrl-C would never arrive.
TRAIN_RUN = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from geonp_cli.main import cli
cli(sys.argv[1:])
"""


def _start_train(tmp_path, *args):
    """``geonp -q train`` in its own session, once its data worker runs; returns it and its children."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("geonp train starts a data worker only with two or more cores")
    arr = np.stack([smooth_field((64, 128), seed=s) for s in (3, 4)]).astype("uint16")
    src = write_raster(tmp_path / "scene.tif", arr)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", TRAIN_RUN, "-q", "train", str(src), *map(str, args), *TRAIN_ARGS],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # Ctrl-C reaches the group, as from a terminal
    return proc, psutil.Process(proc.pid)


def _wait_for(proc, ready) -> None:
    deadline = time.monotonic() + 180  # importing torch on a busy machine is slow
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) too soon: {proc.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("the run did not get there in time")
        time.sleep(0.05)


# Ctrl-C on a train is checked by test_ctrl_c_before_the_first_checkpoint_leaves_no_folder too: its
# checkpoint-and-resume case runs with -m slow
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, id="SIGTERM"),
                                 pytest.param(signal.SIGINT, id="SIGINT", marks=pytest.mark.slow)])
def test_a_signal_stops_a_train_and_keeps_its_last_checkpoint(tmp_path, sig) -> None:
    from geonp.model_files.train_state import training_state_step

    out = tmp_path / "m"
    proc, main = _start_train(tmp_path, "-o", out, "--val-every", "2")
    try:
        _wait_for(proc, lambda: training_state_step(out) is not None and main.children())
        workers = main.children(recursive=True)
        err = stop(proc, sig, group=sig == signal.SIGINT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    found = STOPPED.fullmatch(err.strip())
    assert found, err
    assert found[1] == ("Ctrl-C" if sig == signal.SIGINT else "SIGTERM") and found[4] == str(out)
    assert int(found[3]) == training_state_step(out) <= int(found[2])
    assert_ended(workers)
    resumed = subprocess.run([sys.executable, "-m", "geonp_cli", "-q", "train", str(tmp_path / "scene.tif"), "-o",
                              str(out), "--resume", *TRAIN_ARGS[:-1], str(int(found[3]) + 2), "--val-every", "2"],
                             capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300,
                             check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(f"Trained 2 steps (resumed at step {found[3]} of {int(found[3]) + 2})")


def test_ctrl_c_before_the_first_checkpoint_leaves_no_folder(tmp_path) -> None:
    out = tmp_path / "m"
    proc, main = _start_train(tmp_path, "-o", out, "--val-every", "100000")
    try:
        _wait_for(proc, main.children)  # the data worker: the folder is made, training has begun
        workers = main.children(recursive=True)
        assert out.is_dir()
        err = stop(proc, signal.SIGINT, group=True)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, err)
    found = STOPPED.fullmatch(err.strip())
    assert found and found[3] is None, err
    assert not out.exists()
    assert_ended(workers)


def test_a_killed_train_leaves_no_data_worker(tmp_path) -> None:
    proc, main = _start_train(tmp_path, "-o", tmp_path / "m", "--val-every", "100000")
    try:
        _wait_for(proc, main.children)
        workers = main.children(recursive=True)
        proc.kill()  # SIGKILL: no cleanup runs in the trainer
        proc.wait()  # not communicate(): an orphaned worker would hold the pipes open
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert_ended(workers)
