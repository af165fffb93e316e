"""Helpers shared by the output-writing tests (io/paths, profiles, formats, atomic, metadata)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
from affine import Affine

from geonp.io.profiles import output_profile

TRANSFORM = Affine(30.0, 0.0, 300000.0, 0.0, -30.0, 5000020.0)


def src_profile(width: int = 20, height: int = 10) -> dict:
    return {
        "driver": "GTiff", "width": width, "height": height, "count": 1, "dtype": "uint8",
        "crs": rasterio.crs.CRS.from_epsg(32621), "transform": TRANSFORM,
        "compress": "jpeg", "photometric": "ycbcr", "blockxsize": 16, "blockysize": 16,
        "tiled": True,
    }


def write_tif(path: Path, data: np.ndarray, **kwargs) -> Path:
    profile = {
        "driver": "GTiff", "width": data.shape[2], "height": data.shape[1],
        "count": data.shape[0], "dtype": data.dtype.name, "crs": "EPSG:32621",
        "transform": TRANSFORM,
    }
    profile.update(kwargs)
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
    return path


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def small_profile(**kw) -> dict:
    prof = output_profile(src_profile(20, 10), count=1, dtype="float32", nodata=-9999.0,
                          creation_options={}, cog=False)
    prof.update(kw)
    return prof
