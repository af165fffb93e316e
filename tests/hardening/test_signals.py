"""SIGTERM and SIGHUP stop ``geonp fill`` like Ctrl-C: no file is left, not even a hidden one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from geonp.data.gaps import cloud_mask
from tests.conftest import smooth_field, write_raster
from tests.hardening._helpers import checksums

SIZE = 192  # a few seconds of filling with the tiny model on one core


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_signal_mid_run_leaves_no_file(tmp_path, tiny_model, sig) -> None:
    arr = smooth_field((SIZE, SIZE)).astype("float32")
    arr[cloud_mask((SIZE, SIZE), coverage=0.3, rng=1)] = -9999
    src = write_raster(tmp_path / "scene.tif", arr, nodata=-9999)
    digest = checksums([src])
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    cmd = [sys.executable, "-c", "from geonp_cli.main import cli; cli()", "fill", str(src),
           str(out_dir / "filled.tif"), "--model", str(tiny_model), "--block-size", "64", "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and not list(out_dir.glob(".*geonp-partial*")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, "the fill finished before the signal; raise SIZE"
        time.sleep(0.3)
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
