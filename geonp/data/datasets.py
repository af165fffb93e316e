"""Training patches sampled from the user's rasters, with spatially separate splits.

Each raster is split by columns into a training region, then (after it) a validation region and
optionally a held-out test region. A patch lies wholly inside one region, so training and
validation patches never share a pixel.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rasterio.windows import Window

from geonp.errors import InputRasterError, NoValidPixelsError
from geonp.io.masks import resolve_nodata
from geonp.io.observed import read_observed
from geonp.io.raster import open_raster, raster_info, select_bands

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Regions:
    """Column ranges ``[start, stop)`` of the splits of one raster."""

    train: tuple[int, int]
    val: tuple[int, int]
    test: tuple[int, int] | None


def split_columns(width: int, *, val_fraction: float, test_fraction: float,
                  min_val_columns: int = 0) -> Regions:
    """Split ``width`` columns into train | val | test, in that order from the left.

    On a small raster ``val_fraction`` of the columns can be narrower than one patch (15 % of
    256 columns is 38), which would leave no validation patch at all; the validation region is
    then widened to ``min_val_columns`` (the patch size) as long as the training region keeps at
    least as many.
    """
    test_w = round(width * test_fraction)
    val_w = round(width * val_fraction)
    if 0 < val_fraction and val_w < min_val_columns <= width - test_w - min_val_columns:
        val_w = min_val_columns
    train_w = width - val_w - test_w
    return Regions(
        train=(0, train_w),
        val=(train_w, train_w + val_w),
        test=(train_w + val_w, width) if test_w else None,
    )


@dataclass(frozen=True)
class ColumnSplit:
    """How each raster's columns are split into train | val | test (:func:`split_columns`).

    Attributes:
        val_fraction: share of the columns for validation, right of the training columns.
        test_fraction: share held out for testing, at the right edge (0: none).
        min_val_columns: narrowest validation region, as long as the training region keeps as
            many columns (training widens it to one patch).
    """

    val_fraction: float
    test_fraction: float
    min_val_columns: int = 0

    def regions(self, width: int) -> Regions:
        """The column ranges of a raster ``width`` columns wide."""
        return split_columns(width, val_fraction=self.val_fraction, test_fraction=self.test_fraction,
                             min_val_columns=self.min_val_columns)


@dataclass(frozen=True)
class PatchSpec:
    """The patches :func:`sample_patches` reads.

    Attributes:
        patch_size: edge in pixels.
        nodata: nodata value overriding the rasters' tags, or None.
        bands: 1-based bands read (None: all).
        split: the columns of each region; the validation region is at least one patch wide
            where the raster allows.
        min_valid_fraction: fewest valid pixels a patch holds.
    """

    patch_size: int
    nodata: float | None
    bands: Sequence[int] | None
    split: ColumnSplit
    min_valid_fraction: float


#: Windows tried before giving up on rasters where none has enough valid pixels.
_FIRST_TRIES = 400


@dataclass
class PatchPool:
    """Patches ``[N, bands, p, p]`` (raw units, NaN where invalid) and their window offsets."""

    values: np.ndarray
    offsets: list[tuple[int, int, int]]  # (raster index, row, col)

    def __len__(self) -> int:
        """Number of patches."""
        return self.values.shape[0]


def sample_patches(paths: Sequence[str | os.PathLike[str]], spec: PatchSpec, *, region: str, count: int,
                   rng: np.random.Generator) -> PatchPool:
    """Read ``count`` random patches of ``spec`` from one region (``train``, ``val``, ``test``) of the rasters.

    Raises:
        InputRasterError: rasters with different band counts, or too small for a patch.
        NoValidPixelsError: not enough patches with ``spec.min_valid_fraction`` valid pixels.
    """
    patch_size = spec.patch_size
    split = dataclasses.replace(spec.split, min_val_columns=max(spec.split.min_val_columns, patch_size))
    sources = [open_raster(p) for p in paths]
    try:
        infos = [raster_info(s) for s in sources]
        band_lists = [select_bands(i, spec.bands) for i in infos]
        counts = {len(b) for b in band_lists}
        if len(counts) > 1:
            listing = ", ".join(f"{i.path}: {len(b)}" for i, b in zip(infos, band_lists, strict=True))
            raise InputRasterError(
                f"the training rasters have different band counts ({listing}); "
                "train on rasters of one sensor, or pick common bands with --band"
            )
        out: list[np.ndarray] = []
        offsets: list[tuple[int, int, int]] = []
        attempts = 0
        # none valid in the first tries: the rasters (or --nodata) are wrong, say so now
        while len(out) < count and attempts < count * 20 and (out or attempts < _FIRST_TRIES):
            attempts += 1
            i = int(rng.integers(len(sources)))
            info = infos[i]
            cols = getattr(split.regions(info.width), region)
            if cols is None or cols[1] - cols[0] < patch_size or info.height < patch_size:
                continue
            r = int(rng.integers(0, info.height - patch_size + 1))
            c = int(rng.integers(cols[0], cols[1] - patch_size + 1))
            arr, valid = read_observed(
                sources[i], Window(c, r, patch_size, patch_size), band_lists[i],
                info=info, nodata=resolve_nodata(info, spec.nodata),
            )
            ok = valid.all(0)
            if ok.mean() < spec.min_valid_fraction:
                continue
            arr[:, ~ok] = np.nan
            out.append(arr.astype(np.float32))
            offsets.append((i, r, c))
        if len(out) < max(1, count // 4):
            names = ", ".join(str(i.path) for i in infos)
            raise NoValidPixelsError(
                f"found only {len(out)} {patch_size}x{patch_size} {region} patches with at least "
                f"{spec.min_valid_fraction:.0%} valid pixels in {names}; check --nodata, use a smaller "
                "--patch-size, or give rasters with more valid data"
            )
        if len(out) < count:
            logger.warning("only %d of %d %s patches found", len(out), count, region)
        return PatchPool(np.stack(out), offsets)
    finally:
        for s in sources:
            s.close()
