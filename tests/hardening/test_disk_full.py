"""A full disk (or any write error) gives a clear one-line error and leaves no partial output.

GDAL does not always report a failed write: on a full disk libtiff prints a message and the
dataset closes "successfully" with a truncated file. AtomicRasterWriter reads every file back
before moving it into place, so that case is caught as well.
"""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest
import rasterio
import rasterio.errors
import rasterio.io

from tests.conftest import smooth_field, write_raster
from tests.hardening._helpers import assert_refused, checksums, fill_to, invoke, listing, small_disk


def _noisy_scene(path: Path) -> Path:
    """64x64 float32 that compresses badly (so the outputs need ~30 kB), with a gap."""
    rng = np.random.default_rng(0)
    arr = (smooth_field((64, 64)) + 100 * rng.normal(size=(64, 64))).astype("float32")
    arr[10:20, 10:20] = -9999
    return write_raster(path, arr, nodata=-9999)


@pytest.mark.parametrize("room", ["none", "half_output", "output_and_half_std"])
@pytest.mark.parametrize("cog", [False, True], ids=["gtiff", "cog"])
def test_disk_full_gives_clear_error_and_no_partial_file(tmp_path, tiny_model, room, cog):
    src = _noisy_scene(tmp_path / "scene.tif")
    digest = checksums([src, tiny_model])
    extra = ["--cog"] if cog else []
    # how much the two outputs need, measured on a disk with room
    sized = tmp_path / "sized"
    sized.mkdir()
    assert invoke(["-q", "fill", src, sized / "filled.tif", "--model", tiny_model, *extra]).exit_code == 0
    need_out, need_std = ((sized / n).stat().st_size for n in ("filled.tif", "filled_std.tif"))
    free = {"none": 0, "half_output": need_out // 2, "output_and_half_std": need_out + need_std // 2}[room]
    with small_disk(tmp_path / "disk", "200k") as disk:
        fill_to(disk, free)
        args = ["fill", src, disk / "filled.tif", "--model", tiny_model, *extra]
        res = invoke(args)
        assert_refused(res, ["No space left on device", "free space or write elsewhere", "No file was written"])
        assert listing(disk) == ["filler"]
        # once there is room again, the same command completes
        (disk / "filler").unlink()
        res = invoke(args)
        assert res.exit_code == 0, res.output
        assert listing(disk) == ["filled.tif", "filled_std.tif"]
        with rasterio.open(disk / "filled.tif") as out:
            assert (out.read(1)[10:20, 10:20] != -9999).all()
    assert checksums([src, tiny_model]) == digest


def test_injected_write_error_mid_fill(tmp_path, tiny_model, monkeypatch):
    """A write that fails on the third block (ENOSPC from the OS, as GDAL reports it)."""
    src = _noisy_scene(tmp_path / "scene.tif")
    digest = checksums([src])
    out = tmp_path / "out"
    out.mkdir()
    real_write = rasterio.io.DatasetWriter.write
    calls = {"n": 0}

    def failing_write(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise rasterio.errors.RasterioIOError(
                f"{self.name}: Write error: No space left on device") from OSError(errno.ENOSPC, "No space")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(rasterio.io.DatasetWriter, "write", failing_write)
    res = invoke(["fill", src, out / "filled.tif", "--model", tiny_model, "--block-size", "32",
                  "--tile-size", "16"])
    assert calls["n"] >= 3
    assert_refused(res, ["No space left on device", "filled.tif", "No file was written"])
    assert listing(out) == []
    assert checksums([src]) == digest


def test_silently_truncated_file_is_caught_before_commit(tmp_path, tiny_model, monkeypatch):
    """GDAL closes without error but the file on disk is short (what a full disk does)."""
    src = _noisy_scene(tmp_path / "scene.tif")
    out = tmp_path / "out"
    out.mkdir()
    real_close = rasterio.io.DatasetWriter.close

    def short_close(self):
        name = self.name
        real_close(self)
        if "filled_std.tif" in name:  # the second of the two outputs
            path = Path(name)
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    monkeypatch.setattr(rasterio.io.DatasetWriter, "close", short_close)
    res = invoke(["fill", src, out / "filled.tif", "--model", tiny_model])
    line = assert_refused(res, ["filled_std.tif", "No file was written"])
    assert "could not be read back" in line or "No space left" in line
    assert listing(out) == [], "OUTPUT must not appear without its std raster"


def test_std_failure_takes_back_the_filled_raster(tmp_path, tiny_model, monkeypatch):
    """The two outputs are one transaction: a failure moving the std leaves neither."""
    from geonp.io import atomic

    src = _noisy_scene(tmp_path / "scene.tif")
    out = tmp_path / "out"
    out.mkdir()
    real_fsync = atomic.fsync_path

    def fsync(path):
        if "filled_std.tif" in Path(path).name:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(path)

    monkeypatch.setattr(atomic, "fsync_path", fsync)
    res = invoke(["fill", src, out / "filled.tif", "--model", tiny_model])
    assert_refused(res, ["No space left on device"])
    assert listing(out) == []
