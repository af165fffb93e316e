"""Which classical estimates the near blend should weigh: an ablation on the shared Landsat scene.

The default model (without its near blend) fills the validation columns and the test columns
of the shared Landsat 8 scene under the four evaluation masks (30 % hidden, seeds 0-2 by default,
as ``geonp evaluate`` draws them). For each set of estimates a near blend is fitted on the
validation pixels (:func:`geonp.filling.near_blend.fit_near_blend`) and applied to the test pixels;
the script prints, per mask, RMSE ÷ GDAL FillNodata's (the peer, full search) and 95 % coverage on
the test columns, for no blend and for each set.

    python benchmarks/near_blend.py
    python benchmarks/near_blend.py --seeds 0 --sets gdal,gdal+ring1+ring2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from rasterio.windows import Window

from geonp.evaluation.near_fit import near_pixels
from geonp.filling.near_blend import NEAR_ESTIMATES, blend_pixels, fit_near_blend
from geonp.io.observed import read_observed
from geonp.io.raster import open_raster, raster_info
from geonp.model_files.registry import load_model

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"
WINDOWS = {"validation": (1327, 502, 306, 856), "test": (1633, 640, 408, 256)}
KINDS = ("cloud", "stripe", "random", "scene_cloud")
SETS = ("gdal", "ring1+ring2+ring4+ring5+ring8+ring9", "gdal+ring1+ring2+ring4+ring5", "+".join(NEAR_ESTIMATES))


def collect(model, window, seeds) -> dict[str, dict[str, np.ndarray]]:
    """Per mask kind, over the seeds: truth, mean, std, estimates, distance, neighbours and GDAL's full fill."""
    col, row, w, h = window
    with open_raster(SCENE) as src:
        values, valid = read_observed(src, Window(col, row, w, h), [1, 2, 3], info=raster_info(src), nodata=0)
    return near_pixels(model, values, valid, masks=KINDS, seeds=seeds, peer=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sets", default=",".join(SETS), help="comma list of estimate sets joined by +")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    lm = load_model("default")  # filled without its near blend
    data = {name: collect(lm, window, seeds) for name, window in WINDOWS.items()}
    fit = {key: np.concatenate([data["validation"][k][key] for k in KINDS], axis=-1) for key in data["validation"]["cloud"]}
    print(f"test columns, seeds {seeds}: RMSE / GDAL FillNodata's RMSE, and 95 % coverage, per mask")
    print(f"{'estimates':48s}" + "".join(f"{k:>20s}" for k in KINDS))
    for name in ["none", *args.sets.split(",")]:
        cells = []
        blend = None
        if name != "none":
            idx = [NEAR_ESTIMATES.index(n) for n in name.split("+")]
            blend = fit_near_blend(fit["y"], fit["mean"], fit["std"], fit["estimates"][idx], fit["distance"],
                                   fit["neighbours"], names=name.split("+"))
        for kind in KINDS:
            t = data["test"][kind]
            mean, std = t["mean"], t["std"]
            if blend is not None:
                mean, std = blend_pixels(mean, std, t["estimates"][idx], t["distance"], t["neighbours"], blend)
            rmse = np.sqrt(np.mean((t["y"] - mean) ** 2)) / np.sqrt(np.mean((t["y"] - t["peer"]) ** 2))
            cov = np.mean(np.abs(t["y"] - mean) < 1.959964 * std)
            cells.append(f"{rmse:12.4f} / {cov:.3f}")
        print(f"{name:48s}" + "".join(f"{c:>20s}" for c in cells))


if __name__ == "__main__":
    main()
