"""Everything besides the raster itself that decides which pixels are gaps and which may be filled.

One :class:`GapSources` is built per fill (picklable, so Dask workers get it whole) from the
user's :class:`Gaps` (``geonp.Gaps``: ``--mask`` with ``--mask-values``/``--mask-bits``, ``--qa``
with ``--qa-kind``/``--qa-classes``, ``--footprint FILE``) and ``--fill-outside``. The fill engine asks it two things per window:

- :meth:`GapSources.extra_gaps`: pixels the masks call gaps (clouds, shadows...), added to
  the raster's own nodata/NaN/alpha gaps;
- :meth:`GapSources.fillable`: pixels a prediction may be written to: inside the footprint
  (:mod:`geonp.io.footprint`), or, where the footprint is only the collar's shape, observed by a
  reference date (the pixel is then inside the scene). Gaps outside stay nodata in the output
  and in the std raster, and are counted by their evidence (:attr:`GapSources.outside_evidence`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rasterio.io import DatasetReader
from rasterio.windows import Window

from geonp.errors import ConfigError
from geonp.io.footprint import Footprint, compute_footprint, footprint_everywhere, load_footprint
from geonp.io.masks import read_mask_file
from geonp.io.qa import QA_KINDS, parse_int_list, resolve_classes
from geonp.io.raster import RasterInfo, raster_info

__all__ = ["GapSources", "Gaps", "build_gap_sources"]

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Gaps:
    """Where a raster file's gaps are, beyond its nodata value, NaN/Inf and GDAL mask/alpha band.

    Attributes:
        mask: a gap mask (non-zero = missing; any grid or CRS, or GeoJSON polygons).
        mask_values: values of ``mask`` that mean a gap (``"8,9"`` or ``(8, 9)``).
        mask_bits: bits of ``mask`` that mean a gap when set (``"3,4"``).
        qa: a quality band whose classes give gaps (any grid); needs ``qa_kind``.
        qa_kind: ``landsat-c2``, ``sentinel2-scl`` or ``fmask``; it also reads the references'
            quality bands (:attr:`geonp.filling.inputs.Reference.qa`).
        qa_classes: classes of ``qa_kind`` that are gaps (default: the kind's defaults).
        footprint: the data footprint (raster, non-zero = inside, or GeoJSON) instead of
            computing it (:mod:`geonp.io.footprint`).
    """

    mask: PathLike | None = None
    mask_values: str | Sequence[int] | None = None
    mask_bits: str | Sequence[int] | None = None
    qa: PathLike | None = None
    qa_kind: str | None = None
    qa_classes: str | Sequence[str] | None = None
    footprint: PathLike | None = None

    def files(self) -> list[PathLike]:
        """The files these gaps are read from (outputs must not overwrite them)."""
        return [p for p in (self.mask, self.qa, self.footprint) if p is not None]


@dataclass(frozen=True)
class GapSources:
    """The user's gap masks and the footprint of one fill (see the module docstring).

    Attributes:
        info: The input raster.
        footprint: Where predictions may be written.
        mask: ``--mask`` path, or None.
        mask_values: ``--mask-values`` (values of ``mask`` that mean a gap), or None.
        mask_bits: ``--mask-bits`` (bits of ``mask`` that mean a gap), or None.
        qa: ``--qa`` path, or None.
        qa_kind: ``--qa-kind``.
        qa_classes: ``--qa-classes`` (resolved; the kind's defaults when not given).
        references: Other dates (:class:`geonp.io.references.ReferenceFile`): a pixel one of them
            observes is inside the scene, where the footprint is only the collar's shape.
    """

    info: RasterInfo
    footprint: Footprint
    mask: str | None = None
    mask_values: tuple[int, ...] | None = None
    mask_bits: tuple[int, ...] | None = None
    qa: str | None = None
    qa_kind: str | None = None
    qa_classes: tuple[str, ...] = field(default_factory=tuple)
    references: tuple[Any, ...] = ()

    @property
    def inputs(self) -> list[str]:
        """The files these sources read (outputs must not be any of them)."""
        return [p for p in (self.mask, self.qa, self.footprint.source) if p is not None]

    def extra_gaps(self, window: Window) -> np.ndarray | None:
        """Gaps the masks add in a window: bool ``[h, w]`` (True = gap), or None without masks.

        Pixels outside the raster count as gaps, as everywhere in geonp.
        """
        gaps = None
        if self.mask is not None:
            gaps = read_mask_file(
                self.mask,
                like=self.info,
                window=window,
                mask_values=self.mask_values,
                mask_bits=self.mask_bits,
            )
        if self.qa is not None:
            qa_gaps = read_mask_file(
                self.qa,
                like=self.info,
                window=window,
                qa_kind=self.qa_kind,
                qa_classes=self.qa_classes,
            )
            gaps = qa_gaps if gaps is None else gaps | qa_gaps
        return gaps

    def fillable(self, window: Window, observed_by: Sequence[np.ndarray] | None = None) -> np.ndarray:
        """Pixels of a window a prediction may be written to: bool ``[h, w]``.

        Args:
            window: A window of the input's grid.
            observed_by: The references' observed flags ``[bands, h, w]`` on this window, when
                the caller has read them already (read here otherwise).
        """
        if observed_by is None:
            observed_by = ([ref.read(self.info, window)[1] for ref in self.references]
                           if self.footprint.kind == "hull" else [])
        return self.footprint.fillable(window, observed_by)

    @property
    def outside_evidence(self) -> str:
        """Why gaps outside :meth:`fillable` are outside (for summaries and tags)."""
        return self.footprint.evidence


def build_gap_sources(
    src: DatasetReader,
    gaps: Gaps,
    *,
    bands: Sequence[int],
    nodata: float | None,
    fill_outside: bool = False,
    references: Sequence[Any] = (),
) -> GapSources:
    """Check the mask options and compute (or load) the footprint, before any fill work.

    Args:
        src: The open input.
        gaps: Its gap mask, quality band and footprint file (``--mask``, ``--mask-values``,
            ``--mask-bits``, ``--qa``, ``--qa-kind``, ``--qa-classes``, ``--footprint``).
        bands: 1-based bands being filled (a pixel has data when any of them is observed).
        nodata: The nodata value in force.
        fill_outside: ``--fill-outside``: fill every gap, the collar too.
        references: Other dates (:class:`geonp.io.references.ReferenceFile`), evidence that the
            pixels they observe are inside the scene.

    Returns:
        The gap sources.

    Raises:
        ConfigError: Conflicting or incomplete options.
        InputRasterError: A mask or footprint file that cannot be used.
    """
    _check_gap_options(gaps, fill_outside)
    info = raster_info(src)
    values = parse_int_list(gaps.mask_values, option="--mask-values", low=-(2**63))
    bits = parse_int_list(gaps.mask_bits, option="--mask-bits", high=63)
    classes = resolve_classes(gaps.qa_kind, gaps.qa_classes) if gaps.qa_kind is not None else ()
    sources = GapSources(
        info=info,
        footprint=_footprint(src, info, gaps, bands=bands, nodata=nodata, fill_outside=fill_outside),
        mask=None if gaps.mask is None else os.fspath(gaps.mask),
        mask_values=values,
        mask_bits=bits,
        qa=None if gaps.qa is None else os.fspath(gaps.qa),
        qa_kind=gaps.qa_kind,
        qa_classes=classes,
        references=tuple(references),
    )
    sources.extra_gaps(Window(0, 0, 1, 1))  # a bad mask file fails here, before any work
    return sources


def _check_gap_options(gaps: Gaps, fill_outside: bool) -> None:
    """Refuse conflicting or incomplete mask, QA and footprint options (see :func:`build_gap_sources`)."""
    if gaps.mask_values is not None and gaps.mask_bits is not None:
        raise ConfigError(
            "--mask-values and --mask-bits read the mask in two ways; give one of them."
        )
    if (gaps.mask_values is not None or gaps.mask_bits is not None) and gaps.mask is None:
        raise ConfigError(
            "--mask-values/--mask-bits say how to read a --mask FILE; give the mask too."
        )
    if gaps.qa is not None and gaps.qa_kind is None:
        raise ConfigError(f"--qa needs --qa-kind ({', '.join(QA_KINDS)}) to know how to read it.")
    if gaps.qa is None and (gaps.qa_kind is not None or gaps.qa_classes is not None):
        raise ConfigError(
            "--qa-kind/--qa-classes say how to read a --qa FILE; give the QA band too."
        )
    if gaps.footprint is not None and fill_outside:
        raise ConfigError("--footprint and --fill-outside contradict each other; give one of them.")


def _footprint(src: DatasetReader, info: RasterInfo, gaps: Gaps, *, bands: Sequence[int], nodata: float | None,
               fill_outside: bool) -> Footprint:
    """The data footprint: everywhere, loaded from ``gaps.footprint``, or computed (QA fill = no data)."""
    if fill_outside:
        return footprint_everywhere(info.width, info.height)
    if gaps.footprint is not None:
        return load_footprint(gaps.footprint, like=info)
    no_data = None
    qa_kind = gaps.qa_kind
    if gaps.qa is not None and qa_kind is not None:  # every kind has a fill class: no data there
        qa_name = os.fspath(gaps.qa)

        def no_data(window: Window) -> np.ndarray:
            return read_mask_file(
                qa_name, like=info, window=window, qa_kind=qa_kind, qa_classes=("fill",)
            )

    return compute_footprint(src, info=info, bands=bands, nodata=nodata, no_data=no_data)
