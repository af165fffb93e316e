"""Read a just-written raster back before it gets its final name (:mod:`geonp.io.atomic`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import rasterio
import rasterio.errors
from rasterio.windows import Window

from geonp.io.write_errors import verify_failed

__all__ = ["verify_raster_file"]


#: Bytes read at a time when a finished file is read back.
_VERIFY_CHUNK_BYTES = 32 * 2**20


def verify_raster_file(path: str | os.PathLike[str], profile: Mapping[str, Any]) -> None:
    """Read a just-written raster back, all of it, strip by strip.

    GDAL does not always report a failed write: on a full disk libtiff prints a message and
    ``close()`` returns normally, leaving a truncated file. Reading every block back (memory
    bounded by ``_VERIFY_CHUNK_BYTES``) catches that before the file gets its final name.

    Args:
        path: The finished file.
        profile: The profile it was written with (size, band count and type are checked).

    Raises:
        OutputError: If the file cannot be opened or read, or does not have the written shape.
    """
    name = os.fspath(path)
    try:
        with rasterio.open(name) as src:
            want = (int(profile["width"]), int(profile["height"]), int(profile["count"]))
            got = (src.width, src.height, src.count)
            if got != want:
                raise ValueError(f"it has {got[0]}x{got[1]} px and {got[2]} band(s), not "
                                 f"{want[0]}x{want[1]} and {want[2]}")
            block_h = max(1, src.block_shapes[0][0])
            row_bytes = src.width * src.count * np.dtype(src.dtypes[0]).itemsize
            rows = max(block_h, (_VERIFY_CHUNK_BYTES // max(row_bytes, 1)) // block_h * block_h)
            for r0 in range(0, src.height, rows):
                src.read(window=Window(0, r0, src.width, min(rows, src.height - r0)))
    except (rasterio.errors.RasterioError, OSError, ValueError) as err:
        raise verify_failed(path, err) from err
