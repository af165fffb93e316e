"""SIGTERM and SIGHUP stop ``geonp fill`` like Ctrl-C: no file is left, not even a hidden one."""

from __future__ import annotations

import signal

import pytest

from geonp.data.gap_shapes import cloud_mask
from tests.conftest import smooth_field, write_raster
from tests.hardening._helpers import checksums, start_paused_run, wait_for_marker

SIZE = 192  # several blocks of 64 px


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_signal_mid_run_leaves_no_file(tmp_path, tiny_model, sig) -> None:
    arr = smooth_field((SIZE, SIZE)).astype("float32")
    arr[cloud_mask((SIZE, SIZE), coverage=0.3, rng=1)] = -9999
    src = write_raster(tmp_path / "scene.tif", arr, nodata=-9999)
    digest = checksums([src])
    out_dir = tmp_path / "out"
    out_dir.mkdir()
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
