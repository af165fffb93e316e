"""Shared helpers of the hardening tests: run the CLI and check that nothing was lost."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result
from geonp_cli.main import cli

from tests.conftest import smooth_field, write_raster


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def checksums(paths: Sequence[Path]) -> dict[str, str]:
    """SHA-256 of every file under the given files/directories."""
    out: dict[str, str] = {}
    for p in paths:
        p = Path(p)
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else []
        for f in files:
            out[str(f)] = sha256(f)
    return out


def listing(directory: Path) -> list[str]:
    """Every name in a directory, hidden ones (partial files) included."""
    return sorted(p.name for p in Path(directory).iterdir()) if Path(directory).is_dir() else []


def scene(path: Path, *, size: int = 32, dtype: str = "float32", nodata: float | None = -9999.0,
          gap: bool = True, crs: str | None = "EPSG:32621", seed: int = 0) -> Path:
    """A smooth single-band raster with a rectangular gap (nodata)."""
    arr = smooth_field((size, size), seed=seed)
    if np.dtype(dtype).kind in "ui":
        arr = np.clip(arr, 1, np.iinfo(dtype).max)
    arr = arr.astype(dtype)
    if gap:
        arr[size // 4: size // 2, size // 4: size // 2] = nodata
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_raster(path, arr, nodata=nodata, crs=crs)


def invoke(args: Sequence[object], *, verbose: bool = False) -> Result:
    argv = (["-v"] if verbose else []) + [str(a) for a in args]
    return CliRunner().invoke(cli, argv)


def assert_refused(res: Result, words: Sequence[str], *, code: int = 1) -> str:
    """Exit code, a one-line error naming ``words``, and no traceback; returns the error line."""
    assert res.exit_code == code, (res.exit_code, res.output)
    assert "Traceback" not in res.output, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, res.output
    line = errors[0]
    for word in words:
        assert word.lower() in line.lower(), (word, line)
    if code == 1:  # a geonp error: nothing but the error line (GDAL may add its own stderr lines)
        after = res.output.split(line, 1)[1]
        assert after.strip() == "", res.output
    return line


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@contextlib.contextmanager
def readonly_dir(path: Path) -> Iterator[Path]:
    """A directory this process cannot write to (a read-only tmpfs when running as root)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"running as root (permissions do not apply) and mount is not permitted: "
                    f"{done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


@contextlib.contextmanager
def small_disk(path: Path, size: str = "200k") -> Iterator[Path]:
    """A size-limited tmpfs at ``path`` (skips when mounting is not permitted)."""
    path.mkdir(parents=True, exist_ok=True)
    if not shutil.which("mount"):
        pytest.skip("no mount command: a size-limited file system cannot be made here")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mount is not permitted here ({done.stderr.strip()}); "
                    "test_injected_write_error covers the same path")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


def fill_to(path: Path, free_bytes: int) -> None:
    """Fill the file system of ``path`` until about ``free_bytes`` are left."""
    st = os.statvfs(path)
    avail = st.f_bavail * st.f_frsize
    if avail > free_bytes:
        (path / "filler").write_bytes(b"\0" * (avail - free_bytes))


#: A ``geonp`` run in a child process that stops at a chosen point of writing its outputs, writes
#: MARKER and waits there for the test's signal: kills land exactly where the test says, not
#: where a sleep happens to end. argv: MARKER POINT geonp-args...
#:   block:   the third block has been written into the partial file (mid-write)
#:   closing: every block is written; the writers are about to close and check their files
#:   prepared: OUTPUT has been closed, read back and flushed, not yet moved into place
#:   renamed: the std raster has been moved into place, OUTPUT not yet (AtomicGroup's window)
PAUSED_RUN = r"""
import signal, sys
from pathlib import Path

import rasterio.io
from geonp.io import atomic

marker, point, argv = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]


def pause():
    marker.write_text(point)
    while True:
        signal.pause()  # the test's SIGKILL, or SIGTERM/SIGHUP turned into KeyboardInterrupt


if point == "block":
    write, written = rasterio.io.DatasetWriter.write, []

    def counted(self, *args, **kwargs):
        write(self, *args, **kwargs)
        written.append(1)
        if len(written) == 3:
            pause()

    rasterio.io.DatasetWriter.write = counted
elif point == "closing":
    exit_ = atomic.AtomicRasterWriter.__exit__

    def closing(self, *exc):
        if exc[0] is None and self.path.name.endswith("_std.tif"):
            pause()
        return exit_(self, *exc)

    atomic.AtomicRasterWriter.__exit__ = closing
elif point == "prepared":
    prepare = atomic.AtomicRasterWriter._prepare

    def prepared(self):
        prepare(self)
        if not self.path.name.endswith("_std.tif"):
            pause()

    atomic.AtomicRasterWriter._prepare = prepared
elif point == "renamed":
    move = atomic.AtomicRasterWriter._move_into_place

    def moved(self):
        move(self)
        if self.path.name.endswith("_std.tif"):
            pause()

    atomic.AtomicRasterWriter._move_into_place = moved
else:
    raise SystemExit(f"unknown point {point}")

from geonp_cli.main import cli

cli(argv)
"""


def start_paused_run(args: Sequence[object], marker: Path, point: str) -> subprocess.Popen:
    """Start ``geonp ARGS`` in a child that stops at ``point`` (see :data:`PAUSED_RUN`)."""
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", PAUSED_RUN, str(marker), point, *(str(a) for a in args)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_marker(proc: subprocess.Popen, marker: Path, timeout: float = 120.0) -> None:
    """Block until the child has reached its point (or fail with its output if it ended)."""
    import time

    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the run ended (exit {proc.returncode}) before its pause point: {err[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the run did not reach its pause point in time")
        time.sleep(0.01)  # polling for the marker; the kill itself waits for no clock
