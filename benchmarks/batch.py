"""Throughput of ``geonp batch`` (``fill_many``) on a Dask local cluster as the worker count grows.

Writes a directory of synthetic rasters (smooth fields, ~20 % gaps: a block plus scattered pixels),
then fills it with 1, 2, 4, ... worker processes (one thread each), up to the CPU count. Each
cluster is started and warmed up (torch imported, model loaded on every worker) before the clock
starts, so the table shows the steady-state rate; cluster start-up is a separate column. Prints
files per minute, tiles per second, speed-up over one worker and parallel efficiency.

    python benchmarks/batch.py                          # 12 files of 128x128, tiny untrained model
    python benchmarks/batch.py --model default --files 24 --size 512 --workers 1,2,4,8,16

Without ``--model`` a tiny randomly initialised model is used: the figures then measure the
pipeline (reading, tiling, scheduling, writing) more than the network.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def write_scenes(directory: Path, files: int, size: int) -> None:
    import rasterio
    from affine import Affine

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:size, 0:size]
    for i in range(files):
        arr = (np.sin(xx / 11 + i) + np.cos(yy / 13) + 0.1 * rng.normal(size=(size, size))).astype("float32")
        gap = rng.random((size, size)) < 0.1
        r, c = rng.integers(0, size // 2, 2)
        gap[r:r + size // 3, c:c + size // 3] = True
        arr[gap] = np.nan
        with rasterio.open(directory / f"scene{i:03d}.tif", "w", driver="GTiff", width=size, height=size,
                           count=1, dtype="float32", crs="EPSG:32621", nodata=float("nan"),
                           transform=Affine(30.0, 0.0, 300000.0, 0.0, -30.0, 5000000.0)) as dst:
            dst.write(arr[None])


def tiny_model(directory: Path) -> Path:
    import torch

    from geonp.config import ModelConfig
    from geonp.model_files.card import ModelCard
    from geonp.model_files.checkpoint import save_model
    from geonp.models import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(dim=16, depth=1, num_heads=2, ff_dim=32)
    return save_model(directory / "tiny", build_model(cfg), cfg, card=ModelCard(name="tiny (untrained)"))


def _warm(model: str) -> int:
    from geonp.model_files.registry import cached_model

    cached_model(model, "cpu")
    return os.getpid()


def measure(workers: int, src: Path, out: Path, model: str, fill_opts: dict) -> dict:
    from distributed import Client, LocalCluster

    import geonp
    from geonp.model_files.registry import resolve_model_path

    t0 = time.perf_counter()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.run(_warm, str(resolve_model_path(model).resolve()))
        startup = time.perf_counter() - t0
        t1 = time.perf_counter()
        report = geonp.fill_many(src, out, model=model, device="cpu", cluster=geonp.Cluster(scheduler=cluster.scheduler_address),
                                 **fill_opts)
        seconds = time.perf_counter() - t1
    assert report.ok, report.table()
    return {"workers": workers, "files": len(report.done), "tiles": report.tiles, "seconds": seconds,
            "startup": startup}


def main() -> None:
    cpus = os.cpu_count() or 1
    default_workers = sorted({w for w in (1, 2, 4, 8, 16, 32, 64) if w <= cpus} | {min(2, cpus)})
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=12)
    ap.add_argument("--size", type=int, default=128, help="raster edge in pixels")
    ap.add_argument("--workers", default=",".join(map(str, default_workers)),
                    help=f"comma-separated worker counts [default: {','.join(map(str, default_workers))}]")
    ap.add_argument("--model", default=None, help="model name or directory [default: a tiny untrained model]")
    ap.add_argument("--max-context", type=int, default=None)
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    fill_opts = {} if args.max_context is None else {"max_context": args.max_context}

    with tempfile.TemporaryDirectory(prefix="geonp-bench-batch-") as tmp:
        root = Path(tmp)
        (root / "in").mkdir()
        write_scenes(root / "in", args.files, args.size)
        model = args.model or str(tiny_model(root))
        rows = [measure(w, root / "in", root / f"out{w}", model, fill_opts) for w in counts]

    base = rows[0]["seconds"] * rows[0]["workers"]
    print(f"geonp batch: {args.files} files of {args.size}x{args.size} px (1 band, ~20 % gaps), "
          f"model {args.model or 'tiny untrained'}, {cpus} CPU cores, 1 thread per worker")
    print(f"{'workers':>7} {'files':>6} {'tiles':>6} {'seconds':>8} {'files/min':>10} {'tiles/s':>8} "
          f"{'speed-up':>9} {'efficiency':>10} {'start-up s':>11}")
    for r in rows:
        speedup = base / r["seconds"]
        print(f"{r['workers']:>7} {r['files']:>6} {r['tiles']:>6} {r['seconds']:>8.2f} "
              f"{60 * r['files'] / r['seconds']:>10.1f} {r['tiles'] / r['seconds']:>8.1f} "
              f"{speedup:>8.2f}x {speedup / r['workers']:>9.0%} {r['startup']:>11.1f}")
    if cpus <= max(counts):
        print(f"(only {cpus} cores here: run on a bigger machine, e.g. --workers 1,2,4,8,16, for the scaling)")


if __name__ == "__main__":
    main()
