"""Tell whether a band tagged as alpha is a transparency mask or a data band.

Many 4-band GeoTIFFs (red, green, blue, near infrared) carry the alpha colour interpretation on
their fourth band, set by software that took every 4-band image for RGBA. Taken at its word,
such a band is no data at all: GDAL reads its zeros as transparent pixels of the other bands,
and a fill would rewrite it as a mask (opaque wherever a pixel was filled), destroying it.

So a band tagged alpha is a mask only when it looks like one:

- its values take at most :data:`MAX_DISTINCT` distinct values (0 and opaque, maybe one level
  of partial transparency), or
- at least :data:`OPAQUE_SHARE` of its non-zero values equal its largest value (opaque, with
  some partial transparency along anti-aliased edges).

Otherwise (a near-infrared band holds hundreds of distinct values) it is data: it is filled
like any band, its zeros mask nothing, and the caller warns that its colour interpretation is
wrong (:meth:`TaggedAlpha.warning`).

The decision reads a sample, never a whole large band: the whole band when it has at most
:data:`WHOLE_READ_PIXELS` pixels, else :data:`SAMPLE_GRID` x :data:`SAMPLE_GRID` windows of
:data:`SAMPLE_SIDE` pixels spread over the raster, each aligned to a block of the file so that
it decodes one block. Decisions are cached per file (path, inode, size, modification time).
"""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass

import numpy as np
import rasterio.errors
from rasterio.enums import ColorInterp
from rasterio.io import DatasetReader
from rasterio.windows import Window

logger = logging.getLogger(__name__)

__all__ = ["TaggedAlpha", "looks_like_alpha", "sample_band", "tagged_alpha"]

#: A band tagged alpha with at most this many distinct values is a mask.
MAX_DISTINCT = 3
#: ... or when at least this share of its non-zero values are its largest value (opaque).
OPAQUE_SHARE = 0.95
#: Bands up to this many pixels are read whole for the decision.
WHOLE_READ_PIXELS = 1024 * 1024
#: Larger bands: this many windows per side, each this many pixels square.
SAMPLE_GRID = 4
SAMPLE_SIDE = 64

_CACHE: dict[tuple[object, ...], TaggedAlpha | None] = {}
_CACHE_SIZE = 64


@dataclass(frozen=True)
class TaggedAlpha:
    """A band whose colour interpretation is alpha, and what it really is.

    Attributes:
        band: 1-based band index.
        is_mask: True when it looks like a transparency mask (module docstring); False when it
            is data with a wrong colour interpretation.
        distinct: Distinct values in the sample the decision read.
    """

    band: int
    is_mask: bool
    distinct: int

    def warning(self, name: str) -> str:
        """The one-line warning for a data band tagged alpha (``name``: the raster's path)."""
        return (
            f"band {self.band} of {name} is tagged as alpha but holds {self.distinct} distinct values "
            "(an alpha band holds 0 and opaque): it is filled as data and masks nothing; fix its "
            f"colour interpretation with `gdal_edit.py -colorinterp_{self.band} undefined "
            f"{shlex.quote(name)}`"
        )


def looks_like_alpha(values: np.ndarray) -> bool:
    """Tell whether sampled values of a band look like a transparency mask (module docstring).

    Args:
        values: Sampled pixel values, any shape (NaN ignored).

    Returns:
        True for a mask: at most :data:`MAX_DISTINCT` distinct values, or at least
        :data:`OPAQUE_SHARE` of the non-zero values at the largest value.
    """
    flat = np.asarray(values).ravel()
    if np.issubdtype(flat.dtype, np.floating):
        flat = flat[np.isfinite(flat)]
    distinct = np.unique(flat)
    if distinct.size <= MAX_DISTINCT:
        return True
    nonzero = flat[flat != 0]
    return bool(np.mean(nonzero == distinct[-1]) >= OPAQUE_SHARE)


def sample_band(src: DatasetReader, band: int) -> np.ndarray:
    """Read a sample of one band: all of it when small, else windows spread over the raster.

    Args:
        src: An open dataset.
        band: 1-based band index.

    Returns:
        The sampled values (1-D, the band's type).
    """
    if src.width * src.height <= WHOLE_READ_PIXELS:
        return src.read(band).ravel()
    block_h, block_w = src.block_shapes[band - 1]
    side_h, side_w = min(SAMPLE_SIDE, src.height), min(SAMPLE_SIDE, src.width)
    parts = []
    for row in np.linspace(0, src.height - side_h, SAMPLE_GRID).astype(int):
        for col in np.linspace(0, src.width - side_w, SAMPLE_GRID).astype(int):
            # start on a block's corner (decodes one block when blocks are at least SAMPLE_SIDE)
            r0 = min(int(row) // block_h * block_h, src.height - side_h)
            c0 = min(int(col) // block_w * block_w, src.width - side_w)
            parts.append(src.read(band, window=Window(c0, r0, side_w, side_h)).ravel())
    return np.concatenate(parts)


def _cache_key(src: DatasetReader) -> tuple[object, ...]:
    name = str(src.name)
    try:
        st = os.stat(name)
    except OSError:  # a /vsi... path: its name only
        return (name,)
    return (name, st.st_ino, st.st_size, st.st_mtime_ns)


def tagged_alpha(src: DatasetReader) -> TaggedAlpha | None:
    """The raster's band tagged alpha (the first, as GDAL uses it), decided mask or data.

    Args:
        src: An open dataset.

    Returns:
        The band and the decision, or None when no band is tagged alpha.
    """
    alpha = [b for b, ci in enumerate(src.colorinterp, start=1) if ci == ColorInterp.alpha]
    if not alpha:
        return None
    key = (*_cache_key(src), alpha[0])
    if key in _CACHE:
        return _CACHE[key]
    try:
        sample = sample_band(src, alpha[0])
    except (rasterio.errors.RasterioError, OSError) as err:
        # the pixels' own reads report a damaged file clearly; keep GDAL's reading meanwhile
        logger.debug("alpha band %d of %s not sampled (%s); taken as a mask", alpha[0], src.name, err)
        return TaggedAlpha(alpha[0], True, 0)
    decided = TaggedAlpha(alpha[0], looks_like_alpha(sample), int(np.unique(sample).size))
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = decided
    return decided
