"""Fill the gaps of a class raster with the class of the nearest observed pixel.

A class raster (land cover, a classification, a paletted image) holds labels, not measurements:
the mean of class 2 and class 4 is not class 3, so a model, which predicts continuous values,
must not fill it. geonp refuses a raster with a colour table unless told how to read it
(:attr:`geonp.config.FillConfig.categorical`): ``nearest`` fills each gap pixel with the class
of the nearest observed pixel of its band (Euclidean distance in pixels, as
``scipy.ndimage.distance_transform_edt`` finds it; one of them when several are equally near),
``continuous`` fills it as measurements.

A nearest-class fill reaches :func:`reach` pixels (``max_distance``, else ``search_radius``);
gap pixels farther from any observed pixel, and those outside the data footprint, stay
unfilled, as in a model fill. The file engine reads each block with a halo of that reach, so a
block's fill equals a fill of the whole raster.

**Std.** A class fill has no predictive std: no distribution over classes is modelled. Its std
raster holds 0 on class-filled pixels, as on observed ones (the pixel holds a class, so NaN,
which means "unfilled", would be wrong), NaN on unfilled pixels, and its tags say so
(:data:`STD_CONTENT`, :data:`METHOD_TAG`). The distance to the nearest observed pixel says how
far a class was carried, but it is no std in the band's units, so it is not written there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from scipy import ndimage

from geonp.errors import ConfigError, InputRasterError
from geonp.io.metadata import colour_table
from geonp.tasks.context import ContextSpec
from geonp.tasks.tiling import Region

if TYPE_CHECKING:
    from rasterio.io import DatasetReader

__all__ = ["METHOD_TAG", "STD_CONTENT", "halo", "is_class_fill", "nearest_class", "reach"]

#: ``GEONP_FILL_METHOD`` tag of both outputs of a nearest-class fill.
METHOD_TAG = "nearest class: each gap pixel took the class of the nearest observed pixel (no model)"
#: ``GEONP_CONTENT`` tag of the std raster of a nearest-class fill.
STD_CONTENT = ("class fill: no predictive std exists; 0 = observed or filled with the class of the "
               "nearest observed pixel, NaN = unfilled")


def reach(max_distance: float | None, search_radius: int | None) -> float:
    """How far (pixels) a nearest-class fill carries a class.

    ``max_distance``, else ``search_radius``, else a model fill's default
    (:class:`~geonp.tasks.context.ContextSpec`'s).
    """
    if max_distance is not None:
        return float(max_distance)
    return float(ContextSpec.search_radius if search_radius is None else search_radius)


def halo(reach: float) -> int:
    """The halo (pixels) a block needs so that its nearest-class fill (of this reach) equals the whole raster's."""
    return math.ceil(reach) + 1


def is_class_fill(src: DatasetReader, bands: Sequence[int], categorical: str, *,
                  references: bool = False) -> bool:
    """Decide whether a raster is filled by nearest class; refuse a colour table left unexplained.

    Args:
        src: The open input.
        bands: The 1-based bands to fill.
        categorical: :attr:`geonp.config.FillConfig.categorical`.
        references: Whether other dates are given (a class fill takes none).

    Returns:
        True for a nearest-class fill, False for a model fill.

    Raises:
        InputRasterError: ``categorical`` is ``auto`` and a band has a colour table.
        ConfigError: a nearest-class fill is asked with references.
    """
    if categorical == "nearest":
        if references:
            raise ConfigError("--categorical nearest fills each gap from the raster's own classes and takes no "
                              "--reference; drop --reference, or fill measurements without --categorical")
        return True
    if categorical == "auto":
        paletted = [b for b in bands if colour_table(src, int(b)) is not None]
        if paletted:
            raise InputRasterError(
                f"{src.name} has a colour table (band {paletted[0]}), so its values are classes, which a model "
                "would blend into classes that are not there; pass --categorical nearest (categorical='nearest' "
                "in Python) to fill each gap with the class of the nearest observed pixel, or --categorical "
                "continuous if its values are measurements")
    return False


def nearest_class(
    values: np.ndarray,
    observed: np.ndarray,
    region: Region,
    *,
    reach: float,
    fillable: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fill one block's gaps with the class of the nearest observed pixel of each band.

    Args:
        values: ``[bands, h, w]`` class values of the block with its halo.
        observed: Bool ``[bands, h, w]``, True where a class is observed.
        region: ``(r0, r1, c0, c1)`` of the block's own pixels in the arrays.
        reach: Fill gap pixels up to this distance (pixels) from an observed pixel.
        fillable: Bool ``[h, w]``: where classes may go (the data footprint); None = all.

    Returns:
        ``(classes, std)`` float64 ``[bands, r1 - r0, c1 - c0]``: the nearest observed class on
        filled gap pixels, NaN elsewhere; std 0 on filled pixels, NaN elsewhere (module docstring).
    """
    r0, r1, c0, c1 = region
    n = values.shape[0]
    classes = np.full((n, r1 - r0, c1 - c0), np.nan)
    done: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for b in range(n):
        obs = np.asarray(observed[b], dtype=bool)
        if not obs.any():
            continue
        key = np.packbits(obs).tobytes()
        if key not in done:  # bands share their gaps most of the time: one transform for them all
            dist, (rows, cols) = ndimage.distance_transform_edt(~obs, return_indices=True)
            done = {key: (dist[r0:r1, c0:c1], rows[r0:r1, c0:c1], cols[r0:r1, c0:c1])}
        dist, rows, cols = done[key]
        to_fill = ~obs[r0:r1, c0:c1] & (dist <= reach)
        if fillable is not None:
            to_fill &= fillable[r0:r1, c0:c1]
        classes[b][to_fill] = values[b][rows[to_fill], cols[to_fill]]
    std = np.where(np.isfinite(classes), 0.0, np.nan)
    return classes, std
