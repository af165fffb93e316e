"""Tile blocks in big gaps: the jump of the fill across tile borders against the jump inside tiles.

Hides a scene-scale cloud (gaps hundreds of pixels across) on the Landsat scene's unseen test
columns, fills it with each model, and compares the mean absolute difference between horizontally
or vertically adjacent filled pixels that straddle a tile border with the same inside tiles, for
pixel pairs at least ``--min-distance`` px from data. A ratio near 1 means no visible blocks.

    python benchmarks/seams.py geonp/pretrained/default geonp/pretrained/default_new
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from rasterio.windows import Window

from geonp.data.gaps import make_mask
from geonp.filling.arrays import fill_array
from geonp.filling.calibration import distance_to_observed
from geonp.filling.plan import tile_options
from geonp.io.observed import read_observed
from geonp.io.raster import open_raster, raster_info
from geonp.model_files.registry import load_model

SCENE = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "data"
    / "landsat8_224078_20200518_b234.tif"
)


def seam_ratio(
    mean: np.ndarray, gap: np.ndarray, far: np.ndarray, tile: int
) -> tuple[float, float, int]:
    """``(border jump, inside jump, border pairs)`` of a ``[h, w]`` fill on gap pixels far from data."""
    border, inside = [], []
    for axis in (0, 1):
        a = np.swapaxes(mean, 0, axis)
        ok = np.swapaxes(gap & far, 0, axis)
        jump = np.abs(np.diff(a, axis=0))
        both = ok[1:] & ok[:-1]
        at_border = ((np.arange(1, a.shape[0]) % tile) == 0)[:, None] & both
        border.append(jump[at_border])
        inside.append(jump[both & ~at_border])
    b, i = np.concatenate(border), np.concatenate(inside)
    return float(b.mean()), float(i.mean()), int(b.size)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("models", nargs="+")
    parser.add_argument(
        "--window",
        type=int,
        nargs=4,
        default=[1633, 640, 408, 512],
        metavar=("COL", "ROW", "W", "H"),
    )
    parser.add_argument("--coverage", type=float, default=0.4)
    parser.add_argument("--min-distance", type=float, default=20.0)
    parser.add_argument("--overlap", type=int, nargs="+", default=[None],
                        help="tile blend margins to compare (default: the model's)")
    parser.add_argument("--queries", nargs="+", default=["lattice", "every"], help="fill modes to compare")
    args = parser.parse_args()
    col, row, w, h = args.window
    with open_raster(SCENE) as src:
        info = raster_info(src)
        values, valid = read_observed(src, Window(col, row, w, h), [1, 2, 3], info=info, nodata=0)
    gap = make_mask("scene_cloud", (h, w), coverage=args.coverage, rng=0)
    context = valid & ~gap[None]
    far = distance_to_observed(context[0]) >= args.min_distance
    print(
        f"window {args.window}, scene-scale cloud {args.coverage:.0%}, pairs >= {args.min_distance:g} px from data"
    )
    print("model  queries  tile  overlap  border_jump  inside_jump  ratio  border_pairs  rmse  seconds")
    for path, overlap, queries in ((p, o, q) for p in args.models for o in args.overlap for q in args.queries):
        lm = load_model(path)
        opts = tile_options(lm, None, None, overlap, 512)
        t0 = time.perf_counter()
        mean, _ = fill_array(np.where(context, values, np.nan), context, model=lm, overlap=overlap,
                             queries=queries)
        seconds = time.perf_counter() - t0
        ratios = [seam_ratio(mean[b], gap & valid[b], far, opts.tile_size) for b in range(3)]
        bj = float(np.mean([r[0] for r in ratios]))
        ij = float(np.mean([r[1] for r in ratios]))
        hidden = gap[None] & valid
        rmse = float(np.sqrt(np.mean((mean[hidden] - values[hidden]) ** 2)))
        print(f"{path}  {queries}  {opts.tile_size}  {opts.overlap}  {bj:.2f}  {ij:.2f}  {bj / ij:.2f}  {ratios[0][2]}  "
              f"{rmse:.1f}  {seconds:.0f}", flush=True)


if __name__ == "__main__":
    main()
