"""Which classical estimates the near blend should weigh: an ablation on the shared Landsat scene.

The default model (without its near blend) fills the validation columns and the test columns
of the shared Landsat 8 scene under the four evaluation masks (30 % hidden, seeds 0-2 by default,
as ``geonp evaluate`` draws them). For each set of estimates a near blend is fitted on the
validation pixels (:func:`geonp.filling.near_blend.fit_near_blend`) and applied to the test pixels;
the script prints, per mask, RMSE ÷ GDAL FillNodata's (the peer, full search) and 95 % coverage on
the test columns, for no blend and for each set.

Two probes of what such a correction can reach: the estimate ``twoside`` (this script's own, not
the package's: the nearest observed pixel and the first observed pixel straight across the gap
from it, interpolated linearly, as across a stripe), and ``--ceiling``: a second table where each
mask's blend is fitted on the test pixels themselves, with distance bins out to any distance (an
in-sample bound for a linear correction of the model by these estimates, not a result).

    python benchmarks/near_blend.py
    python benchmarks/near_blend.py --seeds 0 --sets gdal,gdal+ring1+ring2
    python benchmarks/near_blend.py --sets gdal+ring1+ring2+ring4+ring5+ring8+ring9+twoside --ceiling
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from rasterio.windows import Window
from scipy import ndimage

from geonp.evaluation.near_fit import near_pixels
from geonp.evaluation.run import simulate_masks
from geonp.filling.near_blend import (
    NEAR_BLEND_DISTANCE_EDGES,
    NEAR_ESTIMATES,
    NearPixels,
    blend_pixels,
    fit_near_blend,
)
from geonp.io.observed import read_observed
from geonp.io.raster import open_raster, raster_info
from geonp.model_files.registry import load_model

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"
WINDOWS = {"validation": (1327, 502, 306, 856), "test": (1633, 640, 408, 256)}
KINDS = ("cloud", "stripe", "random", "scene_cloud")
NAMES = (*NEAR_ESTIMATES, "twoside")
SETS = ("gdal", "ring1+ring2+ring4+ring5+ring8+ring9", "gdal+ring1+ring2+ring4+ring5", "+".join(NEAR_ESTIMATES))


def twoside(values: np.ndarray, ok: np.ndarray, reach: int = 96) -> np.ndarray:
    """``[h, w]``: at each gap pixel, the nearest observed value and the first observed one straight
    across the gap from it (within ``reach`` px), interpolated linearly by distance; NaN elsewhere."""
    h, w = ok.shape
    d1, (i1, j1) = ndimage.distance_transform_edt(~ok, return_indices=True)
    rows, cols = np.nonzero(~ok)
    near, d1 = values[i1[rows, cols], j1[rows, cols]], d1[rows, cols]
    step_r, step_c = (rows - i1[rows, cols]) / d1, (cols - j1[rows, cols]) / d1
    far, d2 = np.full(rows.size, np.nan), np.full(rows.size, np.nan)
    todo = np.arange(rows.size)
    for t in range(1, reach + 1):
        r, c = np.rint(rows[todo] + t * step_r[todo]).astype(int), np.rint(cols[todo] + t * step_c[todo]).astype(int)
        inside = (r >= 0) & (r < h) & (c >= 0) & (c < w)
        todo, r, c = todo[inside], r[inside], c[inside]
        hit = ok[r, c]
        far[todo[hit]], d2[todo[hit]] = values[r[hit], c[hit]], np.hypot(r[hit] - rows[todo[hit]], c[hit] - cols[todo[hit]])
        todo = todo[~hit]
    out = np.full((h, w), np.nan)
    out[rows, cols] = (near * d2 + far * d1) / (d1 + d2)
    return out


def collect(model, window, seeds) -> dict[str, dict[str, np.ndarray]]:
    """Per mask kind, over the seeds: truth, mean, std, estimates (:data:`NAMES`), distance, neighbours and GDAL's full fill."""
    col, row, w, h = window
    with open_raster(SCENE) as src:
        values, valid = read_observed(src, Window(col, row, w, h), [1, 2, 3], info=raster_info(src), nodata=0)
    data = near_pixels(model, values, valid, masks=KINDS, seeds=seeds, peer=True)
    extra: dict[str, list[np.ndarray]] = {}
    for seed in seeds:  # in near_pixels' order
        for kind, gap in simulate_masks((h, w), KINDS, coverage=0.3, seed=seed):
            context = valid & ~gap[None]
            extra.setdefault(kind, []).append(np.stack([twoside(v, c) for v, c in zip(values, context, strict=True)])[gap[None] & valid])
    for kind, parts in extra.items():
        data[kind]["estimates"] = np.concatenate([data[kind]["estimates"], np.concatenate(parts)[None]])
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sets", default=",".join(SETS), help="comma list of estimate sets joined by +")
    parser.add_argument("--ceiling", action="store_true", help="fit each mask's blend on its test pixels, at any distance")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    lm = load_model("default")  # filled without its near blend
    data = {name: collect(lm, window, seeds) for name, window in WINDOWS.items()}
    fit = {key: np.concatenate([data["validation"][k][key] for k in KINDS], axis=-1) for key in data["validation"]["cloud"]}
    print(f"test columns, seeds {seeds}: RMSE / GDAL FillNodata's RMSE, and 95 % coverage, per mask")
    table(data["test"], args.sets.split(","), lambda kind: ("validation", fit), NEAR_BLEND_DISTANCE_EDGES)
    if args.ceiling:
        print("\nIN-SAMPLE BOUND: each mask's blend fitted on its own test pixels, distance bins to any distance")
        table(data["test"], args.sets.split(","), lambda kind: (kind, data["test"][kind]),
              (*NEAR_BLEND_DISTANCE_EDGES, 24.0, 48.0, 96.0, np.inf))


def table(test: dict, sets: list[str], fitted_on, edges) -> None:
    """One row per estimate set: RMSE ÷ GDAL's and coverage per mask; ``fitted_on(kind)`` -> ``(key, pixels)``."""
    print(f"{'estimates':48s}" + "".join(f"{k:>20s}" for k in KINDS))
    for name in ["none", *sets]:
        cells, blends = [], {}
        idx = [NAMES.index(n) for n in name.split("+")] if name != "none" else []
        for kind in KINDS:
            t = test[kind]
            mean, std = t["mean"], t["std"]
            if idx:  # the names stored are only labels here: "twoside" is not the package's
                key, on = fitted_on(kind)
                if key not in blends:
                    pixels = NearPixels(on["y"], on["mean"], on["std"], on["estimates"][idx], on["distance"],
                                        on["neighbours"])
                    blends[key] = fit_near_blend(pixels, names=["ring1"] * len(idx), distance_edges=edges)
                mean, std = blend_pixels(mean, std, t["estimates"][idx], t["distance"], t["neighbours"], blends[key])
            rmse = np.sqrt(np.mean((t["y"] - mean) ** 2)) / np.sqrt(np.mean((t["y"] - t["peer"]) ** 2))
            cov = np.mean(np.abs(t["y"] - mean) < 1.959964 * std)
            cells.append(f"{rmse:12.4f} / {cov:.3f}")
        print(f"{name:48s}" + "".join(f"{c:>20s}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
