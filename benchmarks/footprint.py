"""The footprint rule on the shared Landsat 8 scene: gaps lost to it, collar pixels invented by it.

Three sets, each with simulated clouds and shadows (``geonp.data.gap_shapes``) as gaps:

- crops cut from inside the scene (no collar at all; 61 to 512 px): every gap pixel the rule puts
  outside the footprint is a loss (the aim: none);
- crops across the scene's collar edge, clouds only on the data: collar pixels the rule puts
  inside are invented, cloud pixels it puts outside are lost;
- the whole scene with cloud fields of 10, 30 and 50 % cover: the collar must stay outside.

    python benchmarks/footprint.py [--crops 600] [--collar-crops 200]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import rasterio
from rasterio.windows import Window

from geonp.data.gap_shapes import cloud_mask, scene_cloud_mask
from geonp.io.footprint import footprint_of_array

SCENE = Path(__file__).resolve().parents[2] / "shared" / "data" / "landsat8_224078_20200518_b234.tif"


def _inside(has: np.ndarray) -> np.ndarray:
    h, w = has.shape
    return footprint_of_array(has).fillable(Window(0, 0, w, h))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene", default=str(SCENE))
    ap.add_argument("--crops", type=int, default=600)
    ap.add_argument("--collar-crops", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    with rasterio.open(args.scene) as src:
        has_scene = (src.read() != 0).any(axis=0)
    height, width = has_scene.shape
    rng = np.random.default_rng(args.seed)
    rows = []

    lost = gaps = crops_losing = n = 0
    while n < args.crops:
        s = int(rng.choice([61, 128, 256, 512]))
        r, c = rng.integers(0, height - s), rng.integers(0, width - s)
        if not has_scene[r:r + s, c:c + s].all():
            continue
        n += 1
        cloud = cloud_mask((s, s), coverage=rng.uniform(0.1, 0.6), rng=rng)
        out = int((cloud & ~_inside(~cloud)).sum())
        lost, gaps, crops_losing = lost + out, gaps + int(cloud.sum()), crops_losing + (out > 0)
    rows.append(("crops from inside the scene", n, crops_losing, lost, gaps, 0, 0, 0))

    lost = gaps = invented = collar = crops_losing = crops_inventing = n = 0
    while n < args.collar_crops:
        s = int(rng.choice([61, 128, 256, 512]))
        r, c = rng.integers(0, height - s), rng.integers(0, width - s)
        has = has_scene[r:r + s, c:c + s]
        if not 0.1 < has.mean() < 0.9:
            continue
        n += 1
        cloud = cloud_mask((s, s), coverage=rng.uniform(0.05, 0.4), rng=rng) & has
        inside = _inside(has & ~cloud)
        out, inv = int((cloud & ~inside).sum()), int((inside & ~has).sum())
        lost, gaps, crops_losing = lost + out, gaps + int(cloud.sum()), crops_losing + (out > 0)
        invented, collar, crops_inventing = invented + inv, collar + int((~has).sum()), crops_inventing + (inv > 0)
    rows.append(("crops across the collar edge", n, crops_losing, lost, gaps, crops_inventing, invented, collar))

    lost = gaps = invented = losing = inventing = n = 0
    for seed in range(6):
        for cover in (0.1, 0.3, 0.5):
            make = scene_cloud_mask if seed % 2 else cloud_mask
            cloud = make((height, width), coverage=cover, rng=seed) & has_scene
            inside = _inside(has_scene & ~cloud)
            out, inv = int((cloud & ~inside).sum()), int((inside & ~has_scene).sum())
            n += 1
            lost, gaps, losing = lost + out, gaps + int(cloud.sum()), losing + (out > 0)
            invented, inventing = invented + inv, inventing + (inv > 0)
    rows.append(("the whole scene", n, losing, lost, gaps, inventing, invented, n * int((~has_scene).sum())))

    print("| set | rasters | rasters losing gaps | gap px lost | of gap px | rasters inventing collar | "
          "collar px invented | of collar px |")
    print("|---|---|---|---|---|---|---|---|")
    for name, count, losing, out, total, inventing, inv, coll in rows:
        print(f"| {name} | {count} | {losing} | {out} ({100 * out / max(total, 1):.2f} %) | {total} | {inventing} | "
              f"{inv} ({100 * inv / max(coll, 1):.2f} %) | {coll} |")
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
