"""Regenerate the sample rasters in ``sample_data/`` (seeded; prints SHA-256 checksums).

Run from the repository root::

    python sample_data/make_sample_data.py [--source PATH]

It crops a gap-free 256x256 window of the Landsat 8 scene in ``../shared/data`` and writes

- ``landsat8_clean.tif``: the crop as is (the ground truth for ``geonp evaluate``);
- ``landsat8_cloudy.tif``: the same crop with simulated clouds and their shadows (25 % of the
  pixels, from ``geonp.data.gaps.cloud_mask``, seed ``SEED``) set to nodata 0 in all bands.

Both are uint16, 3 bands (B2, B3, B4), nodata 0, 128x128 tiles, DEFLATE with horizontal
predictor, with the scene's CRS and the window's transform.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
import rasterio
from rasterio.windows import Window

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"
# Farmland and reservoir shores (Itaipu lake, Parana river), ~300 px from the scene centre:
# fields, water edges and roads, with every pixel inside the scene footprint.
WINDOW = Window(col_off=640, row_off=640, width=256, height=256)
SEED = 20200518
CLOUD_COVERAGE = 0.25
DESCRIPTIONS = ("B2 (blue)", "B3 (green)", "B4 (red)")
NODATA = 0


def sha256(path: Path) -> str:
    """SHA-256 of a file, hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(path: Path, data: np.ndarray, profile: dict, tags: dict[str, str]) -> None:
    """Write a [bands, h, w] uint16 array with descriptions and tags."""
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
        dst.descriptions = DESCRIPTIONS
        dst.update_tags(**tags)


def main() -> None:
    """Crop, mask and write the sample rasters, then print their checksums."""
    sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing geonp
    from geonp.data.gap_shapes import cloud_mask

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE, help="Landsat 8 B2/B3/B4 scene")
    args = parser.parse_args()

    with rasterio.open(args.source) as src:
        clean = src.read(window=WINDOW)
        profile = {
            "driver": "GTiff",
            "dtype": "uint16",
            "count": src.count,
            "height": WINDOW.height,
            "width": WINDOW.width,
            "crs": src.crs,
            "transform": src.window_transform(WINDOW),
            "nodata": NODATA,
            "tiled": True,
            "blockxsize": 128,
            "blockysize": 128,
            "compress": "deflate",
            "predictor": 2,
            "zlevel": 9,
            "interleave": "pixel",
        }
    if clean.shape[0] != 3 or clean.dtype != np.uint16:
        raise SystemExit(
            f"{args.source}: expected 3 uint16 bands, got {clean.shape[0]} "
            f"{clean.dtype}; pass the B2/B3/B4 Landsat 8 scene with --source."
        )
    if not (clean > 0).all():
        raise SystemExit(
            f"window {WINDOW} of {args.source} has pixels outside the footprint "
            "(value 0); pick another window."
        )

    is_gap = cloud_mask(clean.shape[1:], coverage=CLOUD_COVERAGE, rng=np.random.default_rng(SEED))
    cloudy = clean.copy()
    cloudy[:, is_gap] = NODATA

    source = "USGS Landsat 8 OLI L1, path 224 row 078, 2020-05-18, public domain"
    window = (
        f"col_off={WINDOW.col_off} row_off={WINDOW.row_off} "
        f"width={WINDOW.width} height={WINDOW.height}"
    )
    outputs = {
        HERE / "landsat8_clean.tif": (clean, {"SOURCE": source, "WINDOW": window}),
        HERE / "landsat8_cloudy.tif": (
            cloudy,
            {
                "SOURCE": source,
                "WINDOW": window,
                "GAPS": f"geonp.data.gaps.cloud_mask coverage={CLOUD_COVERAGE} seed={SEED}",
            },
        ),
    }
    for path, (data, tags) in outputs.items():
        write(path, data, profile, tags)
    print(f"gap fraction in landsat8_cloudy.tif: {is_gap.mean():.4f}")
    for path in outputs:
        print(f"{sha256(path)}  {path.name}  ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
