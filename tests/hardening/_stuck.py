"""Runs whose workers are stuck in a step that never ends, for the signal and kill tests.

A block of a slow model on a large raster keeps a worker busy for minutes; a signal or a kill
that lands then is the case that matters. These runs put a step that never ends in place of the
fill of a block (worker processes of ``geonp fill``) or of a file (Dask workers of ``geonp
batch``), and say when their workers are in it, so the tests signal at that point, not after a
sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

#: A module the child runs put in place of a step of the fill: the step announces itself (a file
#: named by its pid in $GEONP_TEST_BUSY) and never ends, as a block of a slow model on a large
#: raster. The workers import it by name, so it lives on PYTHONPATH, not in the child's -c code.
STUCK_MODULE = r'''
import os
import time
from pathlib import Path


def busy() -> None:
    Path(os.environ["GEONP_TEST_BUSY"], str(os.getpid())).write_text("busy")
    while True:
        time.sleep(0.05)


def run_block(job, block):
    busy()


def fill_one(task):
    import geonp.filling.engine
    from geonp.batch import run

    # $GEONP_TEST_STUCK_FILES: only the files whose name starts with it are stuck; the others fill
    if Path(task.input).name.startswith(os.environ.get("GEONP_TEST_STUCK_FILES", "")):
        geonp.filling.engine.BlockRunner.__call__ = lambda self, block, progress=None: busy()
    return run.fill_one(task)
'''

#: ``geonp ARGS`` with the stuck step in place: blocks of a fill's worker processes, or the files
#: of a batch's Dask workers.
STUCK_RUN = r'''
import sys

import stuck
from geonp.batch import run
from geonp.filling import engine

engine.run_block = stuck.run_block
run.fill_one = stuck.fill_one

from geonp_cli.main import cli

cli(sys.argv[1:])
'''


def start_stuck_run(tmp_path, args) -> tuple[subprocess.Popen, Path]:
    """Start ``geonp ARGS`` in its own session, with steps that never end; returns it and its busy folder."""
    (tmp_path / "stuck.py").write_text(STUCK_MODULE)
    busy = tmp_path / "busy"
    busy.mkdir()
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "GEONP_TEST_BUSY": str(busy),
           "DASK_LOGGING__DISTRIBUTED": "error",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root), os.environ.get("PYTHONPATH", "")])}
    # Ctrl-C as a terminal delivers it: a test run started in the background (``pytest &``) ignores
    # SIGINT, and a child inherits that, so its Ctrl-C would never arrive
    proc = subprocess.Popen([sys.executable, "-c", STUCK_RUN, *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509
    return proc, busy


def wait_until_busy(proc: subprocess.Popen, busy: Path, count: int) -> list[psutil.Process]:
    """Wait until ``count`` processes are in a stuck step; returns every process below ``proc``."""
    deadline = time.monotonic() + 180  # spawning workers that import torch is slow on a busy machine
    while len(list(busy.iterdir())) < count:
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the run ended (exit {proc.returncode}) before its workers were busy: {err[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail("the workers did not start in time")
        time.sleep(0.05)
    return psutil.Process(proc.pid).children(recursive=True)


def assert_ended(processes: list[psutil.Process]) -> None:
    """Every process (by pid and start time) has ended; the survivors are killed."""
    _, alive = psutil.wait_procs(processes, timeout=10)
    for p in alive:
        p.kill()
    assert [p.pid for p in alive] == [], "processes of the run outlived it"
