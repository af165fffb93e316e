"""``geonp fill`` against GDAL FillNodata on cloud blobs, SLC-off stripes and random dropped pixels.

Each gap kind hides pixels of a crop of the shared Landsat 8 scene (1024² for clouds and stripes,
512² with 90 % of the pixels dropped); ``geonp fill`` runs as a whole process (the command users
run) with ``--queries lattice`` (the default) and ``--queries every`` (every gap pixel predicted by
every overlapping tile), on the CPU and (where present) CUDA, and GDAL FillNodata on the same gaps
in the same run. The script prints seconds, seconds per megapixel of band-gaps, ratios to GDAL
and to ``every``, the peak RSS of the largest process (workers included), RMSE and the 95 %
coverage of the std raster; then geonp's peak memory on larger synthetic rasters (each size in its
own process) to show that it does not grow with the raster.

    python benchmarks/fill.py                      # the comparison + 2048² and 8192² memory runs
    python benchmarks/fill.py --sizes ""           # the comparison only
    python benchmarks/fill.py --kinds cloud --size 512 --sizes ""   # a quick look
    python benchmarks/fill.py --sizes "" --queries lattice --model DIR   # another model, the default queries only
    python benchmarks/fill.py --sizes "" --queries lattice --engine ../old   # and another checkout's geonp

``--engine DIR`` also times the geonp package of another checkout (``git worktree add ../old
COMMIT``) on the same gaps in the same run, each fill run from that folder (``python -m`` puts the
working directory first on the import path: run from this repository, every fill imports it).
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
    parser.add_argument("--kinds", default=",".join(KINDS), help="gap kinds of the comparison: cloud,stripe,random")
    parser.add_argument("--model", default="default")
    parser.add_argument("--queries", default="lattice,every", help="query modes of geonp (each a whole run)")
    parser.add_argument("--sizes", default="2048,8192", help="synthetic sizes for the memory runs")
    parser.add_argument("--memory-coverage", type=float, default=0.02, help="gap fraction of the memory runs")
    parser.add_argument("--skip-crop", action="store_true", help="only the memory runs")
    parser.add_argument("--devices", default=None, help="comma-separated: cpu,cuda [default: cpu, and cuda if present]")
    parser.add_argument("--workers", type=int, default=None, help="fill worker processes [default: geonp's choice]")
    parser.add_argument("--engine", type=Path, default=None,
                        help="also time the geonp of this checkout (its folder; rows marked with its name)")
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


KINDS = ("cloud", "stripe", "random")


def gap_mask(kind: str, size: int, coverage: float, seed: int) -> np.ndarray:
    """Cloud blobs (with their shadows' shapes), SLC-off-like stripes, or 90 % random dropped pixels."""
    from geonp.data.gap_shapes import cloud_mask
    from geonp.data.gaps import make_mask

    rng = np.random.default_rng(seed)
    if kind == "cloud":
        return cloud_mask((size, size), coverage=coverage, rng=seed)
    if kind == "random":
        return rng.random((size, size)) < 0.9
    return make_mask("stripe", (size, size), coverage=coverage, rng=rng)


def write_crop(path: Path, size: int, gap: np.ndarray) -> np.ndarray:
    """The scene's crop with ``gap`` set to nodata 0; returns the truth."""
    with rasterio.open(SCENE) as src:
        win = crop_window(src, size)
        arr = src.read(window=win)
        profile = src.profile | {"width": size, "height": size, "transform": src.window_transform(win), "nodata": 0}
    cloudy = arr.copy()
    cloudy[:, gap] = 0
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(cloudy)
    return arr


def timed(cmd: list[str], engine: Path | None = None) -> tuple[float, float]:
    """Run a command; its wall seconds and the peak RSS (MB) of its largest process (workers included).

    ``engine``: run it from that checkout's folder, with the checkout first on ``PYTHONPATH``.
    """
    code = ("import json,resource,subprocess,sys,time; t=time.perf_counter(); subprocess.run(sys.argv[1:], check=True, "
            "capture_output=True); print(json.dumps([time.perf_counter()-t, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024]))")
    env = None if engine is None else os.environ | {"PYTHONPATH": str(engine.resolve())}
    out = subprocess.run([sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True,
                         cwd=engine, env=env).stdout
    seconds, mb = json.loads(out)
    return seconds, mb


def compare(args: argparse.Namespace, devices: list[str], tmp: Path) -> None:
    """``geonp fill`` (lattice and every-pixel queries) and GDAL FillNodata on the same hidden pixels."""
    geonp_cmd = [sys.executable, "-m", "geonp_cli", "-q", "fill"]
    print(f"whole processes on crops of {SCENE.name} (rightmost columns, from row 640; its last 408 columns "
          f"were held out from training); GDAL FillNodata on the same gaps; {args.model} model")
    print(f"{'gaps':<8}{'method':<30}{'s':>7}{'s/Mpx':>8}{'÷GDAL':>7}{'÷every':>7}{'peak MB':>9}{'RMSE':>8}"
          f"{'÷GDAL':>7}{'cov95':>7}")
    for kind in args.kinds.split(","):
        size = args.size if kind != "random" else min(args.size, 512)
        gap = gap_mask(kind, size, args.coverage, seed=1)
        truth = write_crop(tmp / f"{kind}.tif", size, gap)
        gap &= (truth > 0).all(0)
        mpx = gap.sum() * truth.shape[0] / 1e6
        gdal_s, gdal_mb = timed([sys.executable, "-c", _GDAL, str(tmp / f"{kind}.tif"), str(tmp / "gdal.npy")])
        gdal = np.load(tmp / "gdal.npy").astype(float)
        rmse_gdal = float(np.sqrt(((gdal[:, gap] - truth[:, gap]) ** 2).mean()))
        rows = {}
        for engine in [None] + ([args.engine] if args.engine else []):
            tag = "" if engine is None else f" @{engine.resolve().name}"
            for device in devices:
                for queries in args.queries.split(","):
                    out = tmp / f"{kind}_{queries}_{device}{tag.strip(' @')}.tif"
                    seconds, mb = timed(geonp_cmd + [str(tmp / f"{kind}.tif"), str(out), "--model", args.model,
                                                     "--queries", queries, "--device", device, "--overwrite"]
                                        + (["--workers", str(args.workers)] if args.workers else []), engine)
                    with rasterio.open(out) as f, rasterio.open(str(out)[:-4] + "_std.tif") as g:
                        pred, std = f.read().astype(float), g.read().astype(float)
                    err = pred[:, gap] - truth[:, gap]
                    rows[(device, queries, tag)] = (seconds, mb, float(np.sqrt((err**2).mean())),
                                                    float((np.abs(err) <= 1.96 * std[:, gap]).mean()))
        print(f"{kind:<8}{'GDAL FillNodata':<30}{gdal_s:7.1f}{gdal_s / mpx:8.2f}{1:7.0f}{'':>7}{gdal_mb:9.0f}"
              f"{rmse_gdal:8.1f}{1:7.3f}{'':>7}   ({mpx:.2f} Mpx of band-gaps, {size}x{size})")
        for (device, queries, tag), (seconds, mb, rmse, cov) in rows.items():
            every = rows.get((device, "every", tag), (np.nan,))[0]
            print(f"{kind:<8}{f'geonp {queries} {device}{tag}':<30}{seconds:7.1f}{seconds / mpx:8.1f}{seconds / gdal_s:7.0f}"
                  f"{seconds / every:7.2f}{mb:9.0f}{rmse:8.1f}{rmse / rmse_gdal:7.3f}{cov:7.3f}", flush=True)


_GDAL = (
    "import sys,numpy as np,rasterio; from rasterio.fill import fillnodata\n"
    "a=rasterio.open(sys.argv[1]).read()\n"
    "np.save(sys.argv[2], np.stack([fillnodata(b.astype('float32'), mask=(b>0).astype('uint8'), "
    "max_search_distance=2000, smoothing_iterations=0) for b in a]))"
)


if __name__ == "__main__":
    main()
