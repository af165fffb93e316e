"""Copy descriptive metadata (tags, descriptions, scales, units, colour interpretation) to outputs."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import rasterio
import rasterio.errors
import rasterio.shutil
from rasterio.enums import ColorInterp
from rasterio.io import DatasetReader, DatasetWriter

logger = logging.getLogger(__name__)

__all__ = ["copy_metadata", "copy_std_metadata"]


#: Band tags that describe the old pixel values and would be wrong after filling.
_STALE_TAG_PREFIXES = ("STATISTICS_",)


#: Colour interpretations not copied: alpha would hide the filled pixels, palette needs a
#: colour table that a filled band no longer matches.
_SKIPPED_COLORINTERP = frozenset({ColorInterp.alpha, ColorInterp.palette})


def copy_metadata(src: DatasetReader, dst: DatasetWriter, *, bands: Sequence[int]) -> None:
    """Copy descriptive metadata from the input to an output of the selected bands.

    Copies dataset tags, ground control points and RPCs (a raster georeferenced by GCPs has
    no CRS or transform of its own), and per band: description, tags (except
    ``STATISTICS_*``, which the fill makes stale), scale, offset, unit and colour
    interpretation (except alpha and palette). Output band ``i`` (1-based) receives the
    metadata of source band ``bands[i-1]``. A source without any georeferencing is logged as
    a warning: geonp fills it in pixel units, and the output has none either.

    Args:
        src: The open input.
        dst: The open output (mode "w"), with ``len(bands)`` bands, or one more: an alpha band
            written after them (its colour interpretation is set to alpha).
        bands: 1-based source band indexes, in output order.
    """
    dst.update_tags(**src.tags())
    gcps, gcp_crs = src.gcps
    if gcps:
        dst.gcps = (gcps, gcp_crs)
    if src.rpcs is not None:
        dst.rpcs = src.rpcs
    if src.crs is None and not gcps and src.rpcs is None:
        logger.warning(
            "%s has no CRS; it is filled in pixel units and the output has no CRS either "
            "(assign one with gdal_edit.py -a_srs EPSG:<code>)", src.name
        )
    for out_band, band in enumerate(bands, start=1):
        description = src.descriptions[band - 1]
        if description:
            dst.set_band_description(out_band, description)
        tags = {
            k: v for k, v in src.tags(band).items() if not k.startswith(_STALE_TAG_PREFIXES)
        }
        if tags:
            dst.update_tags(out_band, **tags)
    extra = dst.count - len(bands)  # an alpha band geonp writes after the data bands
    dst.scales = tuple(src.scales[b - 1] for b in bands) + (1.0,) * extra
    dst.offsets = tuple(src.offsets[b - 1] for b in bands) + (0.0,) * extra
    units = tuple(src.units[b - 1] or "" for b in bands) + ("",) * extra
    if any(units):
        dst.units = units
    interp = [src.colorinterp[b - 1] for b in bands] + list(dst.colorinterp[len(bands):])
    if extra:
        interp[-1] = ColorInterp.alpha
    if not any(ci in _SKIPPED_COLORINTERP for ci in interp[:len(bands)]) and interp != list(dst.colorinterp):
        try:
            dst.colorinterp = interp
        except (rasterio.errors.RasterioError, ValueError) as err:
            logger.debug("colour interpretation %s not copied: %s", interp, err)


def copy_std_metadata(src: DatasetReader, dst: DatasetWriter, *, bands: Sequence[int]) -> None:
    """Give the std raster the bands' scale and units (a std has no offset).

    The std is in the stored values' units, so ``scale * std`` is the std in physical units,
    exactly as for the data; the offset cancels in a standard deviation.

    Args:
        src: The open input.
        dst: The open std raster, with ``len(bands)`` bands.
        bands: 1-based source band indexes, in output order.
    """
    dst.scales = tuple(src.scales[b - 1] for b in bands)
    dst.offsets = tuple(0.0 for _ in bands)
    units = tuple(src.units[b - 1] or "" for b in bands)
    if any(units):
        dst.units = units
