"""Copy descriptive metadata (tags, descriptions, scales, units, colour tables and interpretation) to outputs."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import rasterio
import rasterio.errors
import rasterio.shutil
from rasterio.enums import ColorInterp
from rasterio.io import DatasetReader, DatasetWriter

logger = logging.getLogger(__name__)

__all__ = ["colour_table", "copy_metadata", "copy_std_metadata"]


#: Band tags that describe the old pixel values and would be wrong after filling.
_STALE_TAG_PREFIXES = ("STATISTICS_",)


#: Metadata domains not copied: GDAL derives them from the file's structure, or geonp copies
#: them otherwise (RPCs); ``xml:`` domains hold one document each, which rasterio cannot copy.
_SKIPPED_DOMAINS = frozenset({"IMAGE_STRUCTURE", "DERIVED_SUBDATASETS", "SUBDATASETS", "RPC"})

#: Types a GeoTIFF colour table can describe.
_PALETTE_DTYPES = frozenset({"uint8", "uint16"})


def copy_metadata(src: DatasetReader, dst: DatasetWriter, *, bands: Sequence[int]) -> None:
    """Copy descriptive metadata from the input to an output of the selected bands.

    Copies dataset tags of every metadata domain (except those GDAL derives from the file's
    structure), ground control points and RPCs (a raster georeferenced by GCPs has no CRS or
    transform of its own), and per band: description, tags of every domain (except
    ``STATISTICS_*``, which the fill makes stale), scale, offset, unit, colour table and colour
    interpretation. A data band tagged alpha (:mod:`geonp.io.alpha`) is written as
    ``undefined``: it is data. Output band ``i`` (1-based) receives the metadata of source band
    ``bands[i-1]``. A GeoTIFF keeps a colour table on its first band only (uint8 or uint16): a
    colour table another band would need is logged as a warning. A source without any
    georeferencing is logged as a warning: geonp fills it in pixel units, and the output has
    none either.

    Call it before any pixel is written: GDAL sets a colour table only then.

    Args:
        src: The open input.
        dst: The open output (mode "w"), with ``len(bands)`` bands, or one more: an alpha band
            written after them (its colour interpretation is set to alpha).
        bands: 1-based source band indexes, in output order.
    """
    dst.update_tags(**src.tags())
    _copy_domains(src, dst, 0, 0)
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
        _copy_domains(src, dst, band, out_band)
    extra = dst.count - len(bands)  # an alpha band geonp writes after the data bands
    dst.scales = tuple(src.scales[b - 1] for b in bands) + (1.0,) * extra
    dst.offsets = tuple(src.offsets[b - 1] for b in bands) + (0.0,) * extra
    units = tuple(src.units[b - 1] or "" for b in bands) + ("",) * extra
    if any(units):
        dst.units = units
    with_table = _copy_colour_tables(src, dst, bands)
    interp = [_data_interp(src.colorinterp[b - 1], out in with_table)
              for out, b in enumerate(bands, start=1)] + list(dst.colorinterp[len(bands):])
    if extra:
        interp[-1] = ColorInterp.alpha
    if interp != list(dst.colorinterp):
        try:
            dst.colorinterp = interp
        except (rasterio.errors.RasterioError, ValueError) as err:
            logger.debug("colour interpretation %s not copied: %s", interp, err)


def _data_interp(interp: ColorInterp, has_table: bool) -> ColorInterp:
    """A data band's colour interpretation: alpha is wrong for data, palette needs its table."""
    if interp == ColorInterp.alpha:
        return ColorInterp.undefined
    if interp == ColorInterp.palette and not has_table:
        return ColorInterp.gray
    return interp


def colour_table(src: DatasetReader, band: int) -> dict[int, tuple[int, ...]] | None:
    """The colour table of a band (1-based), or None when it has none."""
    try:
        return src.colormap(band)
    except ValueError:  # rasterio: "NULL color table"
        return None


def _copy_colour_tables(src: DatasetReader, dst: DatasetWriter, bands: Sequence[int]) -> set[int]:
    """Write the source bands' colour tables; returns the output bands (1-based) that got one."""
    written: set[int] = set()
    for out_band, band in enumerate(bands, start=1):
        table = colour_table(src, band)
        if table is None:
            continue
        # GDAL reports a refused table only at a later call: check what GTiff takes first
        if out_band != 1 or dst.dtypes[0] not in _PALETTE_DTYPES or dst.driver != "GTiff":
            logger.warning("the colour table of band %d of %s is not kept: a GeoTIFF keeps one on its "
                           "first band only, of type uint8 or uint16 (select that band first with -b %d)",
                           band, src.name, band)
            continue
        dst.write_colormap(out_band, table)
        written.add(out_band)
    return written


def _copy_domains(src: DatasetReader, dst: DatasetWriter, band: int, out_band: int) -> None:
    """Copy the tags of every metadata domain but the default one (band 0: the dataset's)."""
    for ns in src.tag_namespaces(band) if band else src.tag_namespaces():
        if ns in _SKIPPED_DOMAINS or ns.startswith("xml:"):
            continue
        tags = src.tags(band, ns=ns) if band else src.tags(ns=ns)
        if tags:
            if out_band:
                dst.update_tags(out_band, ns=ns, **tags)
            else:
                dst.update_tags(ns=ns, **tags)


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
