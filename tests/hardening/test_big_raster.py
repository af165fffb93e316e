"""``geonp fill`` on a 16384 x 16384 raster keeps its peak memory under 3 GB (SPEC §3).

Slow (the raster alone is written block by block; the fill takes long on a CPU): run on purpose,

    python -m pytest -m slow tests/hardening/test_big_raster.py -s

``GEONP_BIG_SIZE`` changes the edge (e.g. 4096 for a quicker look), ``GEONP_BIG_MODEL`` the model
(default: the tiny test model; ``default`` for the built-in one), ``GEONP_BIG_DEVICE`` the device.
The raster is never held in memory, neither here nor (that is the point) in geonp.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin
from rasterio.windows import Window

from geonp.data.gap_shapes import cloud_mask

SIZE = int(os.environ.get("GEONP_BIG_SIZE", "16384"))
BLOCK = 512
NODATA = 0
LIMIT_BYTES = 3 * 10**9


def _block_values(r0: int, c0: int, h: int, w: int) -> np.ndarray:
    """A smooth reflectance-like field, computed from global pixel coordinates (no seams)."""
    r, c = np.mgrid[r0:r0 + h, c0:c0 + w].astype(np.float32)
    field = (np.sin(0.011 * r + 0.007 * c) + np.sin(0.003 * r - 0.013 * c + 1.0)
             + 0.5 * np.sin(0.05 * r + 0.04 * c + 2.0))
    return (5000 + 1000 * field).astype(np.uint16)  # always >= 2500: never the nodata value


def _write_big_raster(path, size: int) -> int:
    """uint16, tiled 512x512, DEFLATE; ~2 % gaps as small cloud blobs; returns the gap count."""
    profile = {"driver": "GTiff", "width": size, "height": size, "count": 1, "dtype": "uint16",
               "nodata": NODATA, "crs": "EPSG:32633", "transform": from_origin(300000, 6000000, 10, 10),
               "tiled": True, "blockxsize": BLOCK, "blockysize": BLOCK, "compress": "deflate", "predictor": 2,
               "bigtiff": "IF_SAFER"}
    gaps = 0
    with rasterio.open(path, "w", **profile) as dst:
        for i, r0 in enumerate(range(0, size, BLOCK)):
            for j, c0 in enumerate(range(0, size, BLOCK)):
                h, w = min(BLOCK, size - r0), min(BLOCK, size - c0)
                values = _block_values(r0, c0, h, w)
                hole = cloud_mask((h, w), coverage=0.02, rng=i * 1000 + j, shadow=False)
                values[hole] = NODATA
                gaps += int(hole.sum())
                dst.write(values[None], window=Window(c0, r0, w, h))
    return gaps


@pytest.mark.slow
def test_fill_16k_raster_peak_memory_under_3gb(tmp_path, tiny_model):
    src = tmp_path / "big.tif"
    t0 = time.perf_counter()
    gaps = _write_big_raster(src, SIZE)
    write_s = time.perf_counter() - t0
    assert 0.015 < gaps / SIZE**2 < 0.025

    out = tmp_path / "big_filled.tif"
    model = os.environ.get("GEONP_BIG_MODEL", str(tiny_model))
    device = os.environ.get("GEONP_BIG_DEVICE", "auto")
    cmd = [sys.executable, "-c", "from geonp_cli.main import cli; cli()", "-q", "fill", str(src), str(out),
           "--model", model, "--device", device]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage: ru_maxrss in KiB on Linux
    output = proc.stdout.read().decode(errors="replace")
    proc.stdout.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    fill_s = time.perf_counter() - t0
    peak = usage.ru_maxrss * 1024
    sys.stderr.write(f"\n{SIZE}x{SIZE}: wrote input in {write_s:.0f} s; fill took {fill_s:.0f} s, "
                     f"peak RSS {peak / 2**30:.2f} GiB\n{output}\n")
    assert proc.returncode == 0, output
    assert peak < LIMIT_BYTES, f"peak RSS {peak / 2**30:.2f} GiB"

    # spot checks (windows only: this process must not hold the raster either)
    std = tmp_path / "big_filled_std.tif"
    with rasterio.open(src) as a, rasterio.open(out) as b, rasterio.open(std) as s:
        assert (b.width, b.height, b.dtypes[0], b.nodata) == (SIZE, SIZE, "uint16", NODATA)
        assert (s.width, s.height, s.dtypes[0]) == (SIZE, SIZE, "float32")
        rng = np.random.default_rng(0)
        for _ in range(8):
            r0, c0 = (int(x) for x in rng.integers(0, SIZE - 256, 2))
            win = Window(c0, r0, 256, 256)
            raw, got, sd = a.read(1, window=win), b.read(1, window=win), s.read(1, window=win)
            gap = raw == NODATA
            np.testing.assert_array_equal(got[~gap], raw[~gap])
            assert (got[gap] != NODATA).all()
            assert (sd[~gap] == 0).all() and (sd[gap] > 0).all()
