"""Is the std honest next to a handful of observed pixels? Models side by side on validation crops.

A model's std is calibrated on ordinary gaps (clouds, stripes, dropped pixels), where every gap
pixel has many observed pixels around it. Here each 64x64 crop of the default model's validation
columns keeps only 1-3 observed pixels (the rest hidden), every model fills it through
``geonp.fill_array`` (the library call of ``geonp fill``), and the script prints the 95 % coverage
of the std next to the observed pixels (within 1.5 px) and over the whole crop, and the median
std next to them, beside the ordinary-gap figures of the model card. A model trained only on dense
context can give a std that is too small there (``tests/test_honest_std_few_pixels.py``).

    python benchmarks/few_pixels.py --model default --model runs/near_ft2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import rasterio
from rasterio.windows import Window
from scipy import ndimage

import geonp

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"
#: The default model's validation columns (its card's split) and rows.
COLUMNS, ROWS = (1327, 1633), (502, 1358)


def crops(count: int, size: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` crops ``[bands, size, size]`` without nodata, each with 1-3 observed pixels."""
    rng = np.random.default_rng(seed)
    out = []
    with rasterio.open(SCENE) as src:
        while len(out) < count:
            r0 = int(rng.integers(ROWS[0], ROWS[1] - size))
            c0 = int(rng.integers(COLUMNS[0], COLUMNS[1] - size))
            arr = src.read(window=Window(c0, r0, size, size)).astype(float)
            if (arr == 0).any():
                continue
            observed = np.zeros((size, size), bool)
            for _ in range(int(rng.integers(1, 4))):
                observed[rng.integers(8, size - 8), rng.integers(8, size - 8)] = True
            out.append((arr, observed))
    return out


def score(model: str, data: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """Coverage within 1.5 px and over the crops, median std within 1.5 px (DN)."""
    near_z, all_z, near_std = [], [], []
    for truth, observed in data:
        obs = np.broadcast_to(observed, truth.shape).copy()
        mean, std = geonp.fill_array(np.where(obs, truth, 0), obs, model=model, fill_outside=True, device="cpu",
                                     workers=1)
        dist = ndimage.distance_transform_edt(~observed)
        near = (dist > 0) & (dist <= 1.5)
        z = np.abs(mean - truth)[:, dist > 0] / std[:, dist > 0]  # hidden pixels (std 0 where observed)
        near_z.append(np.abs(mean - truth)[:, near].ravel() / std[:, near].ravel())
        all_z.append(z.ravel())
        near_std.append(std[:, near].ravel())
    nz, az = np.concatenate(near_z), np.concatenate(all_z)
    return {"near": float((nz <= 1.96).mean()), "all": float((az <= 1.96).mean()), "n": nz.size,
            "std": float(np.median(np.concatenate(near_std)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, help="model name or directory (repeatable)")
    parser.add_argument("--crops", type=int, default=12)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data = crops(args.crops, args.size, args.seed)
    print(f"{args.crops} crops of {args.size}x{args.size} px of the validation columns, 1-3 observed pixels each")
    print(f"{'model':<32}{'cov95 ≤1.5 px':>15}{'cov95 all':>11}{'median std ≤1.5 px':>20}")
    for model in args.model:
        s = score(model, data)
        print(f"{model:<32}{s['near']:>15.3f}{s['all']:>11.3f}{s['std']:>20.1f}   ({s['n']} pixels within 1.5 px)")


if __name__ == "__main__":
    main()
