"""Fill a 1024x1024 3-band Landsat crop with ~30 % cloud gaps: geonp against GDAL FillNodata.

Both methods fill the same hidden pixels of a crop of the shared Landsat 8 scene that the default
model never saw in training (the held-out test columns); the script prints, for geonp on the CPU
and (where present) on CUDA, whole-process seconds, seconds per megapixel of band-gaps, peak RSS
(this process and its worker processes), peak CUDA memory, a time breakdown by stage (read,
context, model, blend, cast, write; summed over worker processes) and RMSE, and GDAL FillNodata in
the same run; then geonp's peak memory on larger synthetic rasters with the same gap fraction (each
size in its own process) to show it does not grow with the raster.

    python benchmarks/fill.py                      # 1024x1024 crop + 2048² and 8192² memory runs
    python benchmarks/fill.py --sizes ""           # the comparison only
    python benchmarks/fill.py --sizes "" --devices cpu --workers 1   # one process, for profiling
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
from rasterio.windows import Window

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_children_mb() -> float:
    """The largest peak RSS of any finished child process (the fill's worker processes)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def crop_window(src: Any, size: int) -> Window:
    """The scene's ``size``-px crop used by the benchmarks: its rightmost columns, from row 640.

    The last 20 % of the columns (408) are the default model's held-out test region; the rest of
    a 1024-wide crop overlaps its training and validation columns.
    """
    return Window(src.width - size, min(640, src.height - size), size, size)


def make_crop(path: Path, size: int, coverage: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from geonp.data.gap_shapes import cloud_mask

    with rasterio.open(SCENE) as src:
        win = crop_window(src, size)
        arr = src.read(window=win)
        profile = src.profile | {"width": size, "height": size, "transform": src.window_transform(win), "nodata": 0}
    footprint = (arr > 0).all(0)
    gap = cloud_mask((size, size), coverage=coverage, rng=seed) & footprint
    cloudy = arr.copy()
    cloudy[:, gap] = 0
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(cloudy)
    return arr, gap


def synthetic(path: Path, size: int, coverage: float) -> None:
    """A smooth uint16 single-band raster with cloud gaps, written block by block."""
    from geonp.data.gap_shapes import cloud_mask

    profile = {"driver": "GTiff", "width": size, "height": size, "count": 1, "dtype": "uint16", "nodata": 0, "tiled": True,
                   "blockxsize": 256, "blockysize": 256, "compress": "deflate", "crs": "EPSG:32621",
                   "transform": rasterio.transform.from_origin(500000, 7000000, 30, 30)}
    block = 1024
    with rasterio.open(path, "w", **profile) as dst:
        for r in range(0, size, block):
            for c in range(0, size, block):
                rr, cc = np.mgrid[r : r + block, c : c + block]
                vals = 8000 + 800 * np.sin(rr / 37.0) * np.cos(cc / 53.0) + 300 * np.sin((rr + cc) / 11.0)
                gap = cloud_mask((block, block), coverage=coverage, rng=r * 7 + c)
                vals[gap] = 0
                dst.write(vals.astype("uint16")[None], window=Window(c, r, block, block))


def run_geonp(src: Path, dst: Path, model: str, device: str, workers: int | None) -> dict:
    import torch

    import geonp

    t0 = time.perf_counter()
    report = geonp.fill_raster(src, dst, model=model, overwrite=True, device=device, workers=workers)
    cuda_mb = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0.0
    return {"seconds": time.perf_counter() - t0, "peak_mb": peak_mb(), "worker_peak_mb": peak_children_mb(),
            "cuda_mb": cuda_mb, "gap_pixels": report.gap_pixels, "filled": report.filled_pixels,
            "timings": report.timings, "workers": report.workers}


def child_fill(args: argparse.Namespace, src: Path, dst: Path, device: str) -> dict:
    """One geonp fill in a fresh process, timed from the command line: the whole process's seconds."""
    cmd = [sys.executable, __file__, "--model", args.model, "--device", device, "--one", str(src), str(dst)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - t0
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--coverage", type=float, default=0.3)
    parser.add_argument("--model", default="default")
    parser.add_argument("--sizes", default="2048,8192", help="synthetic sizes for the memory runs")
    parser.add_argument("--memory-coverage", type=float, default=0.02, help="gap fraction of the memory runs")
    parser.add_argument("--skip-crop", action="store_true", help="only the memory runs")
    parser.add_argument("--devices", default=None, help="comma-separated: cpu,cuda [default: cpu, and cuda if present]")
    parser.add_argument("--workers", type=int, default=None, help="fill worker processes [default: geonp's choice]")
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # child process: one geonp fill, print JSON
        print(json.dumps(run_geonp(Path(args.one[0]), Path(args.one[1]), args.model, args.device, args.workers)))
        return
    import torch

    devices = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"host: {os.cpu_count()} CPU(s); CUDA: "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}; torch {torch.__version__}")
    tmp = Path(tempfile.mkdtemp(prefix="geonp-bench-"))
    if not args.skip_crop:
        compare(args, devices, tmp)
    memory_runs(args, devices, tmp)


def memory_runs(args: argparse.Namespace, devices: list[str], tmp: Path) -> None:
    """Peak memory of whole fills of synthetic rasters of growing size, each in its own process."""
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if sizes:
        print(f"\ngeonp peak memory vs raster size (synthetic, 1 band, {args.memory_coverage:.0%} cloud gaps, "
              f"{devices[0]})")
        print(f"{'size':>7}{'Mpx':>8}{'seconds':>9}{'peak MB':>9}{'worker MB':>10}")
        for size in sizes:
            synthetic(tmp / f"s{size}.tif", size, args.memory_coverage)
            r = child_fill(args, tmp / f"s{size}.tif", tmp / f"o{size}.tif", devices[0])
            print(f"{size:>7}{size * size / 1e6:>8.1f}{r['process_seconds']:>9.0f}{r['peak_mb']:>9.0f}"
                  f"{r['worker_peak_mb']:>10.0f}", flush=True)


def compare(args: argparse.Namespace, devices: list[str], tmp: Path) -> None:
    """geonp (each device) and GDAL FillNodata on the same hidden pixels of a Landsat crop."""
    truth, gap = make_crop(tmp / "crop.tif", args.size, args.coverage, seed=1)
    bands = truth.shape[0]
    runs = {}
    for device in devices:
        g = child_fill(args, tmp / "crop.tif", tmp / f"geonp_{device}.tif", device)
        with rasterio.open(tmp / f"geonp_{device}.tif") as f:
            pred = f.read().astype(float)
        g["rmse"] = float(np.sqrt(((pred[:, gap] - truth[:, gap]) ** 2).mean()))
        runs[device] = (g, pred)
    with rasterio.open(SCENE) as src:
        held = np.zeros_like(gap)
        held[:, max(0, args.size - round(0.2 * src.width)):] = True  # columns of the held-out region
    # GDAL FillNodata, same pixels, same process-isolated peak memory measure
    code = (
        "import json,resource,time,numpy as np,rasterio; from rasterio.fill import fillnodata\n"
        f"src=rasterio.open({str(tmp / 'crop.tif')!r}); a=src.read(); t=time.perf_counter()\n"
        "out=np.stack([fillnodata(b.astype('float32'), mask=(b>0).astype('uint8'), max_search_distance=2000, smoothing_iterations=0) for b in a])\n"
        "print(json.dumps({'seconds': time.perf_counter()-t, 'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024}))\n"
        f"np.save({str(tmp / 'gdal.npy')!r}, out)"
    )
    d = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    gdal = np.load(tmp / "gdal.npy").astype(float)
    rmse_gdal = float(np.sqrt(((gdal[:, gap] - truth[:, gap]) ** 2).mean()))
    mpx = gap.sum() * bands / 1e6
    print(f"\nfill {args.size}x{args.size}, {bands} bands, {gap.mean():.1%} cloud gaps ({mpx:.2f} Mpx of gaps over all bands), "
          f"the rightmost {args.size} columns of {SCENE.name} (its last 408 columns were held out from training)")
    print(f"{'method':<22}{'process s':>10}{'fill s':>8}{'s/Mpx':>8}{'peak MB':>9}{'worker MB':>10}{'CUDA MB':>9}"
          f"{'RMSE (DN)':>11}")
    for device, (g, _) in runs.items():
        name = f"geonp {args.model} {device} x{g['workers']}"
        print(f"{name:<22}{g['process_seconds']:>10.1f}{g['seconds']:>8.1f}{g['process_seconds'] / mpx:>8.1f}"
              f"{g['peak_mb']:>9.0f}{g['worker_peak_mb']:>10.0f}{g['cuda_mb']:>9.0f}{g['rmse']:>11.1f}")
    print(f"{'GDAL FillNodata':<22}{d['seconds']:>10.1f}{d['seconds']:>8.1f}{d['seconds'] / mpx:>8.1f}"
          f"{d['peak_mb']:>9.0f}{0:>10.0f}{0:>9.0f}{rmse_gdal:>11.1f}")
    for device, (g, _) in runs.items():
        parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(g["timings"].items(), key=lambda kv: -kv[1]))
        print(f"time by stage, {device} (seconds summed over {g['workers']} process(es)): {parts}")
    g, pred = runs[devices[0]]
    rmse_geonp = g["rmse"]
    hg = gap & held
    rh_g = float(np.sqrt(((pred[:, hg] - truth[:, hg]) ** 2).mean()))
    rh_d = float(np.sqrt(((gdal[:, hg] - truth[:, hg]) ** 2).mean()))
    print(f"RMSE on the held-out columns only ({hg.sum()} gap px per band): geonp {rh_g:.1f}, GDAL {rh_d:.1f} "
          f"({100 * (1 - rh_g / rh_d):+.1f} %)")
    print(f"ratios geonp ({devices[0]})/GDAL: time x{g['process_seconds'] / d['seconds']:.0f}, RMSE x{rmse_geonp / rmse_gdal:.3f} "
          f"({100 * (1 - rmse_geonp / rmse_gdal):+.1f} % RMSE reduction)")


if __name__ == "__main__":
    main()
