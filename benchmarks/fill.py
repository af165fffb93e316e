"""Fill a 1024x1024 3-band Landsat crop with ~30 % cloud gaps: geonp against GDAL FillNodata.

Both methods fill the same hidden pixels of a crop of the shared Landsat 8 scene that the default
model never saw in training (the held-out test columns); the script prints seconds, megapixels of
gaps per second, peak memory and RMSE for each, then geonp's peak memory on larger synthetic
rasters with the same gap fraction (each size in its own process) to show it does not grow with
the raster.

    python benchmarks/fill.py                      # 1024x1024 crop + 2048² and 8192² memory runs
    python benchmarks/fill.py --sizes ""           # the comparison only
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import rasterio
from rasterio.fill import fillnodata
from rasterio.windows import Window

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_crop(path: Path, size: int, coverage: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from geonp.data.gaps import cloud_mask

    with rasterio.open(SCENE) as src:
        # the rightmost columns; the last 20 % (408) are the default model's held-out test region,
        # the rest of a 1024-wide crop overlaps its training and validation columns
        col = src.width - size
        row = min(640, src.height - size)
        win = Window(col, row, size, size)
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
    from geonp.data.gaps import cloud_mask

    profile = dict(driver="GTiff", width=size, height=size, count=1, dtype="uint16", nodata=0, tiled=True,
                   blockxsize=256, blockysize=256, compress="deflate", crs="EPSG:32621",
                   transform=rasterio.transform.from_origin(500000, 7000000, 30, 30))
    block = 1024
    with rasterio.open(path, "w", **profile) as dst:
        for r in range(0, size, block):
            for c in range(0, size, block):
                rr, cc = np.mgrid[r : r + block, c : c + block]
                vals = 8000 + 800 * np.sin(rr / 37.0) * np.cos(cc / 53.0) + 300 * np.sin((rr + cc) / 11.0)
                gap = cloud_mask((block, block), coverage=coverage, rng=r * 7 + c)
                vals[gap] = 0
                dst.write(vals.astype("uint16")[None], window=Window(c, r, block, block))


def run_geonp(src: Path, dst: Path, model: str) -> dict:
    import geonp

    t0 = time.perf_counter()
    report = geonp.fill_raster(src, dst, model=model, overwrite=True)
    return {"seconds": time.perf_counter() - t0, "peak_mb": peak_mb(), "gap_pixels": report.gap_pixels,
            "filled": report.filled_pixels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--coverage", type=float, default=0.3)
    parser.add_argument("--model", default="default")
    parser.add_argument("--sizes", default="2048,8192", help="synthetic sizes for the memory runs")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # child process: one geonp fill, print JSON
        print(json.dumps(run_geonp(Path(args.one[0]), Path(args.one[1]), args.model)))
        return
    tmp = Path(tempfile.mkdtemp(prefix="geonp-bench-"))
    truth, gap = make_crop(tmp / "crop.tif", args.size, args.coverage, seed=1)
    bands = truth.shape[0]
    child = [sys.executable, __file__, "--model", args.model, "--one"]
    g = json.loads(subprocess.run(child + [str(tmp / "crop.tif"), str(tmp / "geonp.tif")], check=True,
                                  capture_output=True, text=True).stdout.strip().splitlines()[-1])
    with rasterio.open(tmp / "geonp.tif") as f:
        pred = f.read().astype(float)
    rmse_geonp = float(np.sqrt(((pred[:, gap] - truth[:, gap]) ** 2).mean()))
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
    print(f"{'method':<18}{'seconds':>9}{'Mpx gaps/s':>12}{'s/Mpx/band':>12}{'peak MB':>9}{'RMSE (DN)':>11}")
    for name, r, rmse in (("geonp " + args.model, g, rmse_geonp), ("GDAL FillNodata", d, rmse_gdal)):
        print(f"{name:<18}{r['seconds']:>9.1f}{mpx / r['seconds']:>12.3f}{r['seconds'] / mpx:>12.1f}"
              f"{r['peak_mb']:>9.0f}{rmse:>11.1f}")
    hg = gap & held
    rh_g = float(np.sqrt(((pred[:, hg] - truth[:, hg]) ** 2).mean()))
    rh_d = float(np.sqrt(((gdal[:, hg] - truth[:, hg]) ** 2).mean()))
    print(f"RMSE on the held-out columns only ({hg.sum()} gap px per band): geonp {rh_g:.1f}, GDAL {rh_d:.1f} "
          f"({100 * (1 - rh_g / rh_d):+.1f} %)")
    print(f"ratios geonp/GDAL: time x{g['seconds'] / d['seconds']:.0f}, RMSE x{rmse_geonp / rmse_gdal:.3f} "
          f"({100 * (1 - rmse_geonp / rmse_gdal):+.1f} % RMSE reduction)")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if sizes:
        print(f"\ngeonp peak memory vs raster size (synthetic, 1 band, {args.coverage:.0%} cloud gaps)")
        print(f"{'size':>7}{'Mpx':>8}{'seconds':>9}{'peak MB':>9}")
        for size in sizes:
            synthetic(tmp / f"s{size}.tif", size, args.coverage)
            r = json.loads(subprocess.run(child + [str(tmp / f"s{size}.tif"), str(tmp / f"o{size}.tif")], check=True,
                                          capture_output=True, text=True).stdout.strip().splitlines()[-1])
            print(f"{size:>7}{size * size / 1e6:>8.1f}{r['seconds']:>9.0f}{r['peak_mb']:>9.0f}", flush=True)


if __name__ == "__main__":
    main()
