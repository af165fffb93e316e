"""Choose the query lattice and context size by measurement: time against RMSE and coverage.

On the default model's held-out test columns of the shared Landsat 8 scene (a 408-px wide crop
the model never saw), each gap kind of ``geonp evaluate`` hides ~30 % of the pixels; every
configuration below fills the same hidden pixels with the default model through the fill's
engine (``geonp.filling.block.fill_block``, what ``geonp fill`` runs per block) and the
script prints seconds, band-gap pixels per second, RMSE (DN), 95 % coverage and NLL, and each
configuration's time and RMSE as ratios to ``every`` (every gap pixel predicted by every
overlapping tile) in the same run. GDAL FillNodata's RMSE on the same pixels is the peer.

    python benchmarks/lattice.py                        # all kinds, all configurations
    python benchmarks/lattice.py --kinds cloud --rows 256 --configs every,lattice
    python benchmarks/lattice.py --model runs/near_ft --configs lattice,near-full   # a model's near context
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np
import rasterio
import torch
from rasterio.windows import Window

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"
TEST_COLUMNS = (1633, 2041)  # the default model's held-out test split (its card)

CONFIGS = {
    "every": {"queries": "every"},
    "lattice": {},  # the default: lattice, near margin 1, far context 48 (none for tiles near data)
    "lattice-far96": {"n_far": 96},  # the card's far context
    "lattice-only": {"n_far": 96, "near_overlap": None},  # the lattice alone
    "ctx128": {"max_context": 128},  # a smaller near context: cheaper, std too small near data
    "lattice-coarse": {"lattice": ((6.0, 2), (12.0, 4), (24.0, 8), (48.0, 16))},
    "split24": {"min_split": 24},  # tiles of scattered gaps split down to 24 px, not 12
    "lattice4": {"lattice": ((4.0, 2), (8.0, 4), (16.0, 8), (32.0, 16))},  # the lattice from 4 px
    "near2": {"near_overlap": 2},  # a narrower blend margin near data
    "near0": {"near_overlap": 0},  # no blend near data: each near pixel predicted once
    "near4": {"near_overlap": 4},  # the previous near margin
    "far-everywhere": {"near_far": None},  # far context for tiles near data too
    "near128": {"near_context": 128},  # tiles near data: 128 near context pixels (a model's near_context)
    "near96": {"near_context": 96},
    "near64": {"near_context": 64},
    "near-full": {"near_context": None},  # tiles near data: the whole near context, whatever the card says
    "mid4": {"mid_overlap": 4},
    "mid8": {"mid_overlap": 8},
    "far192": {"far_context": 192},
    "far160": {"far_context": 160},
    "far128": {"far_context": 128},
    "old": {"mid_overlap": None, "far_context": None},  # before: 16-px margin at 8-16 px, 256 near context
    "tile64": {"tile_size": 64},  # 64-px tiles: no fewer pairs on clouds, NLL +0.06 on a scene-scale cloud
    "mid8-far160": {"mid_overlap": 8, "far_context": 160},
    "mid4-far192": {"mid_overlap": 4, "far_context": 192},
    "mid4-far160": {"mid_overlap": 4, "far_context": 160},
}


def read_crop(rows: int) -> np.ndarray:
    with rasterio.open(SCENE) as src:
        c0, c1 = TEST_COLUMNS
        return src.read(window=Window(c0, 640, c1 - c0, rows)).astype(np.float64)


MODEL = "default"  # --model


def fill(truth: np.ndarray, gap: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray, float, float]:
    from geonp.filling.block import BlockInput, fill_block
    from geonp.filling.plan import FillPlan, normalizer_for, tile_options
    from geonp.model_files.registry import cached_model
    from geonp.tasks.tiling import Region

    loaded = cached_model(MODEL, "cpu")
    spec = CONFIGS[name]
    opts = tile_options(loaded, None, spec.get("max_context"), None, 512, spec.get("queries", "lattice"))
    opts = dataclasses.replace(opts, **{k: v for k, v in spec.items() if k in ("lattice", "near_overlap", "near_far",
                                                                           "near_context", "min_split", "mid_overlap",
                                                                           "far_context", "tile_size")})
    if "n_far" in spec:
        opts = dataclasses.replace(opts, context=dataclasses.replace(opts.context, n_far=spec["n_far"]))
    observed = np.broadcast_to(~gap, truth.shape).copy() & (truth > 0)
    n = truth.shape[0]
    norm = normalizer_for(loaded, n, lambda: (truth.reshape(n, -1), observed.reshape(n, -1)))
    # the predictor a fill builds (geonp.filling.plan.FillPlan.predictor): the near model too
    plan = FillPlan(model=MODEL, device="cpu", batch_rows=None, opts=opts, norm=norm,
                    calibration=loaded.calibration, max_distance=None, queries=spec.get("queries", "lattice"))
    t0 = time.perf_counter()
    out = fill_block(BlockInput(np.where(observed, truth, 0.0), observed, Region(0, truth.shape[1], 0, truth.shape[2])),
                     plan, plan.predictor(loaded))
    mean, std = out.mean, out.std
    seconds = time.perf_counter() - t0
    return mean, std, seconds, pairs(observed, opts)


def pairs(observed: np.ndarray, opts: object) -> float:
    """Attention pairs per layer (context x context + targets x context, over all tasks), in millions:
    the model's cost, independent of the machine's load."""
    from geonp.filling.block_input import BlockInput
    from geonp.filling.tile_tasks import block_tasks
    from geonp.tasks.tiling import Region

    block = BlockInput(np.zeros(observed.shape), observed, Region(0, observed.shape[1], 0, observed.shape[2]))
    tasks = block_tasks(block, ~observed, opts)
    return sum(t.task.xc.shape[0] * (t.task.xc.shape[0] + t.task.xt.shape[0]) for t in tasks) / 1e6


def scores(truth: np.ndarray, mean: np.ndarray, std: np.ndarray, gap: np.ndarray) -> tuple[float, float, float]:
    y, m, s = truth[:, gap], mean[:, gap], std[:, gap]
    ok = np.isfinite(m)
    err = (m - y)[ok]
    z = np.abs(err) / s[ok]
    nll = 0.5 * np.log(2 * np.pi * s[ok] ** 2) + 0.5 * z**2
    return float(np.sqrt(np.mean(err**2))), float(np.mean(z <= 1.959964)), float(np.mean(nll))


def near_seams(mean: np.ndarray, gap: np.ndarray, observed: np.ndarray) -> float:
    """Seam ratio near data: the fill's jump across borders of 12 px (every tile and split tile edge)
    over its jump inside them, for adjacent gap pixels within 8 px of data (1: no visible seams)."""
    from scipy import ndimage
    from seams import seam_ratio

    near = ndimage.distance_transform_edt(~observed[0]) <= 8
    ratios = [seam_ratio(mean[b], gap, near, 12) for b in range(mean.shape[0])]
    return float(np.mean([r[0] for r in ratios]) / np.mean([r[1] for r in ratios]))


def mid_seams(mean: np.ndarray, gap: np.ndarray, observed: np.ndarray, tile: int) -> float:
    """Seam ratio between 8 and 16 px from data (the lattice's finest spacing): the fill's jump across
    tile borders (every ``tile`` px) over its jump inside tiles (1: no visible seams)."""
    from scipy import ndimage
    from seams import seam_ratio

    d = ndimage.distance_transform_edt(~observed[0])
    mid = (d > 8) & (d <= 16)
    ratios = [seam_ratio(mean[b], gap, mid, tile) for b in range(mean.shape[0])]
    return float(np.mean([r[0] for r in ratios]) / np.mean([r[1] for r in ratios]))


def gdal_rmse(truth: np.ndarray, gap: np.ndarray) -> float:
    from geonp.evaluation.baselines import fillnodata_baseline

    valid = np.broadcast_to(~gap, truth.shape) & (truth > 0)
    mean = fillnodata_baseline(np.where(valid, truth, 0.0), valid).mean
    return float(np.sqrt(np.mean((mean[:, gap] - truth[:, gap]) ** 2)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default="cloud,stripe,random,scene_cloud")
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--coverage", type=float, default=0.3)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default="default", help="model name or directory (default: default)")
    args = parser.parse_args()
    global MODEL
    MODEL = args.model
    torch.set_num_threads(args.threads)
    from geonp.evaluation.run import simulate_masks

    truth = read_crop(args.rows)
    footprint = (truth > 0).all(0)
    print(f"{truth.shape[2]}x{truth.shape[1]} px, {truth.shape[0]} bands, {args.threads} thread(s)")
    print(f"{'kind':<12}{'config':<22}{'s':>7}{'kpx/s':>8}{'time÷every':>11}{'pairs÷every':>12}{'RMSE':>8}{'÷every':>8}"
          f"{'÷GDAL':>7}{'cov95':>7}{'NLL':>7}{'seams':>7}{'mid':>6}")
    for kind, gap in simulate_masks(truth.shape[1:], args.kinds.split(","), coverage=args.coverage, seed=0):
        gap = gap & footprint
        base = gdal_rmse(truth, gap)
        first: tuple[float, float, float] | None = None
        for name in args.configs.split(","):
            mean, std, seconds, cost = fill(truth, gap, name)
            rmse, cov, nll = scores(truth, mean, std, gap)
            seen = np.broadcast_to(~gap, truth.shape) & (truth > 0)
            seams, mids = near_seams(mean, gap, seen), mid_seams(mean, gap, seen, 48)
            first = first or (seconds, rmse, cost)
            rate = gap.sum() * truth.shape[0] / seconds / 1e3
            print(f"{kind:<12}{name:<22}{seconds:7.1f}{rate:8.1f}{seconds / first[0]:11.2f}{cost / first[2]:12.2f}{rmse:8.1f}"
                  f"{rmse / first[1]:8.3f}{rmse / base:7.3f}{cov:7.3f}{nll:7.2f}{seams:7.2f}{mids:6.2f}", flush=True)


if __name__ == "__main__":
    main()
