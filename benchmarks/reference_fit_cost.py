"""Time the reference regression's estimate with and without its residual correction, by gap pattern.

The residual correction (``geonp/filling/references.py``) also estimates the observed pixels within
8 px of a gap, so its cost depends on how the gaps lie: one wide cloud has a thin ring of such
pixels around many gap pixels; scattered dropped pixels put nearly every pixel of the raster in
the ring. This script takes a crop of the shared Landsat 8 scene and a synthetic reference date
(``multidate_speed.reference_of``: gain, offset and a smooth change), hides the crop's
pixels under three patterns (simulated clouds, stripes, random pixels), and times
:meth:`~geonp.filling.references.ReferenceLines.estimate` on them with the correction and without it
(session 6's similar pixels alone), in the same run, on one thread, with one synthetic reference
and with two (every reference observing a gap pixel estimates it, so two cost about twice one).
It prints seconds, µs per gap pixel and the ratio; compare the µs with the multi-date model's
cost per gap pixel (``benchmarks/multidate_speed.py``: s per Mpx of band-gaps x 3 bands).

    python benchmarks/reference_fit_cost.py [--size 512]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import rasterio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fill import SCENE, crop_window
from multidate_speed import reference_of

from geonp.data.gap_shapes import cloud_mask, random_mask, stripe_mask
from geonp.filling.references import fit_regression


def crop(size: int) -> np.ndarray:
    """The benchmarks' crop of the scene (``benchmarks/fill.py``), float64."""
    with rasterio.open(SCENE) as src:
        return src.read(window=crop_window(src, size)).astype(np.float64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    truth = crop(args.size)
    footprint = (truth > 0).all(0)
    references = [reference_of(truth, args.seed + 1), reference_of(truth, args.seed + 2)]
    shape = (args.size, args.size)
    patterns = {
        "clouds, 30 %": cloud_mask(shape, coverage=0.3, rng=args.seed),
        "stripes, 20 %": stripe_mask(shape, coverage=0.2, rng=args.seed),
        "random pixels, 5 %": random_mask(shape, coverage=0.05, rng=args.seed),
    }
    print(f"{args.size}x{args.size} crop, 3 bands, synthetic references; ReferenceLines.estimate on one thread")
    print("| gaps | references | gap px | similar pixels alone, s | with the residual correction, s | ratio "
          "| µs per gap px, with |")
    print("|---|---|---|---|---|---|---|")
    for name, gap in patterns.items():
        gap = gap & footprint
        observed = np.broadcast_to(footprint & ~gap, truth.shape)
        for count in (1, 2):
            refs = [(reference, np.broadcast_to(footprint, truth.shape)) for reference in references[:count]]
            lines = fit_regression(truth, observed, refs)
            seconds = {}
            for residual in (False, True):
                t0 = time.perf_counter()
                lines.estimate(truth, observed, refs, gap, residual=residual)
                seconds[residual] = time.perf_counter() - t0
            n = int(gap.sum())
            print(f"| {name} | {count} | {n} | {seconds[False]:.1f} | {seconds[True]:.1f} "
                  f"| {seconds[True] / seconds[False]:.2f}x | {1e6 * seconds[True] / n:.0f} |")


if __name__ == "__main__":
    main()
