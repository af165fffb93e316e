"""``geonp fill --dry-run``'s time estimate against the real ``geonp fill``, on four kinds of gap.

Clouds, SLC-off stripes and 90 % dropped pixels hide pixels of a crop of the shared Landsat 8
scene (3 bands); the fourth raster is huge and sparse: one data block of that crop (a cloud in
it) in the middle of a grid of nodata, tiled and compressed. Each case runs ``geonp -q fill
--dry-run`` and then the real ``geonp -q fill`` as whole processes (the commands users run),
and the script prints the estimate, the real seconds and their ratio, in wall seconds and in CPU
seconds (all processes: on a shared machine the wall seconds of the real fill grow with the load,
and its two worker processes may not get two cores).

    python benchmarks/dry_run.py                       # 512² crops, a 16000² sparse raster
    python benchmarks/dry_run.py --size 1024 --sparse 30000 --kinds cloud,sparse
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rasterio
from rasterio.windows import Window

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fill import SCENE, crop_window, gap_mask, write_crop

KINDS = ("cloud", "stripe", "random", "sparse")


def write_sparse(path: Path, size: int, data: int) -> None:
    """A ``size``² raster of nodata with one ``data``² crop of the scene (a cloud in it) in the middle."""
    with rasterio.open(SCENE) as src:
        arr = src.read(window=crop_window(src, data))
        crs = src.crs
    arr[:, gap_mask("cloud", data, 0.3, seed=1)] = 0
    profile = {"driver": "GTiff", "width": size, "height": size, "count": arr.shape[0], "dtype": arr.dtype.name,
               "nodata": 0, "tiled": True, "blockxsize": 256, "blockysize": 256, "compress": "deflate",
               "crs": crs, "transform": rasterio.transform.from_origin(500000, 7000000, 30, 30)}
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(arr, window=Window(size // 2, size // 2, data, data))


def geonp(*args: str) -> tuple[float, float, str]:
    """Run ``geonp -q ARGS`` in a fresh process: its wall and CPU seconds (workers too) and standard output."""
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "geonp_cli", "-q", *args], check=True, capture_output=True,
                         text=True).stdout
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=512, help="edge of the crops (px)")
    parser.add_argument("--sparse", type=int, default=16000, help="edge of the sparse raster (px)")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--model", default="default")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="geonp-dry-run-"))
    print(f"host: {os.cpu_count()} CPU(s); {args.model} model; crops {args.size}² x 3 bands of {SCENE.name}; "
          f"sparse {args.sparse}² with one {args.size}² data block")
    print(f"{'case':<8}{'gap px':>10}{'dry run s':>10}{'estimate s':>11}{'real s':>8}{'real/est':>9}"
          f"{'est. CPU s':>11}{'real CPU s':>11}{'real/est':>9}")
    for kind in args.kinds.split(","):
        src = tmp / f"{kind}.tif"
        if kind == "sparse":
            write_sparse(src, args.sparse, args.size)
        else:
            write_crop(src, args.size, gap_mask(kind, args.size, 0.3, seed=1))
        common = [str(src), str(tmp / f"{kind}_out.tif"), "--model", args.model, "--overwrite"]
        dry_s, _, plan = geonp("fill", *common, "--dry-run")
        est, est_cpu = (float(re.search(rf"{key}: ([\d.]+)", plan).group(1))
                        for key in ("estimated_seconds", "estimated_cpu_seconds"))
        gaps = int(re.search(r"gap_pixels: (\d+)", plan).group(1))
        real_s, real_cpu, _ = geonp("fill", *common)
        print(f"{kind:<8}{gaps:>10}{dry_s:>10.1f}{est:>11.1f}{real_s:>8.1f}{real_s / est:>9.2f}{est_cpu:>11.1f}"
              f"{real_cpu:>11.1f}{real_cpu / est_cpu:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
