"""Fill a raster file: ``fill_raster``, from the input's checks to the atomic write of both outputs.

It takes a :class:`~geonp.config.FillConfig` and/or its fields as keywords. The in-memory fills
(``fill_array`` for numpy, ``fill`` for xarray/Dask) are :mod:`geonp.filling.arrays`. The block
engine (reading with a halo, process pools, Dask, casting) is :mod:`geonp.filling.engine`, the gap
count and dry-run plan :mod:`geonp.filling.survey`; the numeric core (tiles, tasks, batched model
calls, blending) is :mod:`geonp.filling.predict`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rasterio.windows import Window

from geonp._version import __version__
from geonp.config import FillConfig
from geonp.errors import ConfigError, NoValidPixelsError
from geonp.filling import classes, engine, survey
from geonp.filling.plan import FillPlan, fill_model, load_for_fill, model_key, tile_options
from geonp.filling.references import (
    REGRESSION_WEIGHT,
    RESIDUAL_RADIUS,
    SIMILAR_PIXELS,
    SIMILAR_REACH,
    SIMILAR_WINDOW,
)
from geonp.io.atomic import AtomicGroup
from geonp.io.formats import check_creation_options, output_driver
from geonp.io.gap_sources import GapSources, build_gap_sources
from geonp.io.hints import untagged_nodata_hint
from geonp.io.masks import resolve_nodata
from geonp.io.metadata import copy_metadata, copy_std_metadata
from geonp.io.paths import RUN_ID_TAG, check_output_path, default_uncertainty_path
from geonp.io.profiles import output_profile, parse_creation_options
from geonp.io.raster import open_raster, raster_info, select_bands
from geonp.io.remote import is_virtual
from geonp.io.validity import plan_output_validity
from geonp.models.layers import resolve_device

__all__ = ["FillReport", "fill_raster"]


@dataclass
class FillReport:
    """What a fill did (or, for a dry run, would do).

    Attributes:
        output: filled raster path.
        uncertainty: std raster path.
        model: model name.
        gap_pixels: missing pixels over all bands.
        filled_pixels: gap pixels that received a prediction.
        tiles: tiles with gaps (estimated before the run).
        seconds: wall time.
        dry_run: True when nothing was written.
        plan: dry-run details (blocks, context sizes, memory and time estimates).
        timings: seconds per stage summed over blocks and processes (``read``, ``context``,
            ``model``, ``blend``, ``cast``, ``write``).
        workers: processes that filled blocks.
        outside_pixels: missing pixels outside the data footprint (left nodata; not in
            ``gap_pixels``).
        outside_evidence: why those are outside (``--footprint``, the QA band's fill class, a
            straight collar edge: :mod:`geonp.io.footprint`).
        beyond_pixels: gap pixels left nodata because they lie beyond ``max_distance``.
        hints: advice for the user (for example an untagged nodata value).

    Every missing pixel is counted once: :attr:`missing_pixels` = :attr:`filled_pixels` +
    :attr:`outside_pixels` + :attr:`beyond_pixels` + :attr:`no_context_pixels`.
    """

    output: Path
    uncertainty: Path
    model: str
    gap_pixels: int = 0
    filled_pixels: int = 0
    tiles: int = 0
    seconds: float = 0.0
    dry_run: bool = False
    plan: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    workers: int = 1
    outside_pixels: int = 0
    outside_evidence: str = "none"
    beyond_pixels: int = 0
    hints: list[str] = field(default_factory=list)

    @property
    def missing_pixels(self) -> int:
        """Every missing pixel of the filled bands: gaps inside the footprint and outside it."""
        return self.gap_pixels + self.outside_pixels

    @property
    def unfilled_pixels(self) -> int:
        """Gap pixels inside the footprint left as nodata (beyond ``max_distance`` or any context)."""
        return self.gap_pixels - self.filled_pixels

    @property
    def no_context_pixels(self) -> int:
        """Gap pixels inside the footprint and within ``max_distance`` that found no context."""
        return self.unfilled_pixels - self.beyond_pixels

    def count_tags(self) -> dict[str, str]:
        """The counts as output tags: what became of every missing pixel."""
        return {"GEONP_MISSING_PIXELS": str(self.missing_pixels), "GEONP_GAP_PIXELS": str(self.gap_pixels),
                "GEONP_FILLED_PIXELS": str(self.filled_pixels),
                "GEONP_OUTSIDE_FOOTPRINT_PIXELS": f"{self.outside_pixels} ({self.outside_evidence})",
                "GEONP_BEYOND_MAX_DISTANCE_PIXELS": str(self.beyond_pixels),
                "GEONP_NO_CONTEXT_PIXELS": str(self.no_context_pixels)}

    def left_unfilled(self) -> list[str]:
        """One phrase per reason some missing pixels were left nodata, with the option that fills them."""
        left = []
        if self.outside_pixels:
            left.append(f"{self.outside_pixels} outside the data footprint ({self.outside_evidence}; "
                        "--fill-outside fills them)")
        if self.beyond_pixels:
            left.append(f"{self.beyond_pixels} beyond --max-distance (a larger --max-distance fills them)")
        if self.no_context_pixels:
            left.append(f"{self.no_context_pixels} with no observed pixel within --search-radius (a larger "
                        "--search-radius fills them)")
        return left


def fill_raster(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    config: FillConfig | None = None,
    *,
    uncertainty: str | os.PathLike[str] | None = None,
    mask: str | os.PathLike[str] | None = None,
    quicklook: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
    scheduler: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    mask_values: str | Sequence[int] | None = None,
    mask_bits: str | Sequence[int] | None = None,
    qa: str | os.PathLike[str] | None = None,
    qa_kind: str | None = None,
    qa_classes: str | Sequence[str] | None = None,
    footprint: str | os.PathLike[str] | None = None,
    format: str | None = None,
    references: Sequence[str | os.PathLike[str]] = (),
    reference_dates: Sequence[str | None] | None = None,
    reference_qa: Sequence[str | None] | None = None,
    date: str | None = None,
    **options: Any,
) -> FillReport:
    """Fill every gap of a raster file; write the filled raster and a std raster beside it.

    Only gaps inside the data footprint are filled (:mod:`geonp.io.footprint`; ``fill_outside``
    fills all); unfilled pixels read as nodata (:mod:`geonp.io.validity`).

    Args:
        input: the raster with gaps.
        output: the filled raster (same grid, bands, dtype, nodata, metadata).
        config: fill options (:class:`~geonp.config.FillConfig`); keywords override its fields.
        uncertainty: the std raster (default ``<OUTPUT stem>_std.tif``).
        mask: a gap mask (non-zero = missing; any grid, or GeoJSON), added to the nodata gaps.
        quicklook: write a PNG with input, prediction and std side by side.
        dry_run: only plan: tiles, context sizes, memory and time estimates.
        scheduler: address of a Dask distributed scheduler; blocks are spread over its workers
            (each loads the model once). The model must then be a name or a directory.
        progress: ``(gap_pixels_done, gap_pixels_total)`` callback.
        mask_values: values of ``mask`` that mean a gap (``"8,9"``).
        mask_bits: bits of ``mask`` that mean a gap when set (``"3,4"``).
        qa: a quality band whose classes give gaps (any grid); needs ``qa_kind``.
        qa_kind: ``landsat-c2``, ``sentinel2-scl`` or ``fmask``.
        qa_classes: classes of ``qa_kind`` that are gaps (default: the kind's defaults).
        footprint: the data footprint (raster, non-zero = inside, or GeoJSON) instead of
            computing it.
        format: GDAL driver of OUTPUT (default: from its extension).
        references: other dates of the place (any grid or CRS; reprojected on the fly), read as
            context by a multi-date model (the built-in ``multidate`` when ``model`` is left at
            ``default``).
        reference_dates: their acquisition dates, where the files' tags and names lack them.
        reference_qa: a quality band per reference (``qa_kind`` reads them; None entries: none).
        date: the input's acquisition date, where its tags and name lack it (needed with
            references).
        **options: any :class:`~geonp.config.FillConfig` field (``model``, ``nodata``, ``bands``,
            ``device``, ``tile_size``, ``overlap``, ``max_context``, ``search_radius``,
            ``max_distance``, ``block_size``, ``workers``, ``batch_rows``, ``creation_options``,
            ``cog``, ``overwrite``, ``std_creation_options``, ``fill_outside``).

    Returns:
        A :class:`FillReport`.
    """
    import rasterio

    with rasterio.Env(GDAL_CACHEMAX=engine.GDAL_CACHE_MB):
        return _fill_raster(input, output, FillConfig.of(config, **options), uncertainty=uncertainty, mask=mask,
                            quicklook=quicklook, dry_run=dry_run, scheduler=scheduler, progress=progress,
                            mask_values=mask_values, mask_bits=mask_bits, qa=qa, qa_kind=qa_kind,
                            qa_classes=qa_classes, footprint=footprint, format=format,
                            references=_References(tuple(references), reference_dates, reference_qa, date))


def reference_fit_tag(plan: FillPlan) -> str:
    """What a multi-date fill did with its references, for the output's tags."""
    if plan.reference_lines is None:
        return "none: references are context of the model"
    return (f"regression (each band on its own band and on all the reference's bands, averaged), corrected by "
            f"{SIMILAR_PIXELS} similar pixels within {SIMILAR_WINDOW} px (else {SIMILAR_REACH} px) and by its errors "
            f"on observed pixels within {RESIDUAL_RADIUS} px, references weighed by inverse variance, weight "
            f"{REGRESSION_WEIGHT:g}; {plan.reference_lines.describe()}")


@dataclasses.dataclass(frozen=True)
class _References:
    """The multi-date options of a fill, as given."""

    paths: tuple[str | os.PathLike[str], ...] = ()
    dates: Sequence[str | None] | None = None
    qa: Sequence[str | None] | None = None
    date: str | None = None


def _fill_raster(input: str | os.PathLike[str], output: str | os.PathLike[str], cfg: FillConfig, *,
                 uncertainty: str | os.PathLike[str] | None, mask: str | os.PathLike[str] | None,
                 quicklook: str | os.PathLike[str] | None, dry_run: bool, scheduler: str | None,
                 progress: Callable[[int, int], None] | None, mask_values: str | Sequence[int] | None,
                 mask_bits: str | Sequence[int] | None, qa: str | os.PathLike[str] | None, qa_kind: str | None,
                 qa_classes: str | Sequence[str] | None, footprint: str | os.PathLike[str] | None,
                 format: str | None, references: _References = _References()) -> FillReport:
    t0 = time.perf_counter()
    cfg = dataclasses.replace(cfg, model=fill_model(cfg.model, references=bool(references.paths)))
    loaded = load_for_fill(cfg.model, references=bool(references.paths))
    # the survey and dry run need the tiles before the plan (whose normaliser samples the raster)
    opts = tile_options(loaded, cfg.tile_size, cfg.max_context, cfg.overlap, cfg.search_radius, cfg.queries)
    co = parse_creation_options(cfg.creation_options)
    std_co = co if cfg.std_creation_options is None else parse_creation_options(cfg.std_creation_options)
    out_path = Path(output)
    std_path = Path(uncertainty) if uncertainty is not None else default_uncertainty_path(output, format)
    with open_raster(input) as src:
        info = raster_info(src)
        select_bands(info, cfg.bands)  # range and duplicate checks
        nodata_v = resolve_nodata(info, cfg.nodata)
        validity = plan_output_validity(src, cfg.bands, nodata=info.nodata if cfg.nodata is None else cfg.nodata)
        band_list = list(validity.bands)  # never the alpha band
        # a class raster (colour table): refused, or filled by nearest class (geonp.filling.classes)
        class_raster = classes.is_class_fill(src, band_list, cfg.categorical, references=bool(references.paths))
        out_driver = output_driver(out_path, format)
        from geonp.io import formats as output_formats  # the output-path checks
        from geonp.io import paths as output_paths

        std_driver = output_driver(std_path, format if std_path.suffix == out_path.suffix else None)
        if cfg.cog:
            output_formats.check_cog_output(out_path, out_driver)
            output_formats.check_cog_output(std_path, std_driver, role="--uncertainty")
        _check_creation(co, std_co, cfg, src, info, validity, out_driver, std_driver)
        refs, ref_days = _open_references(input, info, cfg, references, qa_kind, qa_classes)
        inputs = [p for p in (input, mask, qa, footprint, *references.paths) if p is not None]
        if not dry_run:
            output_paths.check_std_path(std_path, output=out_path, inputs=inputs, overwrite=cfg.overwrite,
                                        given=uncertainty is not None)  # not an input, not a leftover
            out_path = check_output_path(out_path, inputs=inputs, overwrite=cfg.overwrite)
            std_path = check_output_path(std_path, inputs=inputs, overwrite=cfg.overwrite,
                                         role="--uncertainty" if uncertainty is not None else "The std raster")
            if out_path == std_path:
                raise ConfigError(f"--uncertainty {std_path} is the same path as OUTPUT; give another path")
            if quicklook is not None:
                ql = check_output_path(quicklook, inputs=inputs, overwrite=cfg.overwrite)
                if ql in (out_path, std_path):
                    raise ConfigError(f"--quicklook {quicklook} is one of the output rasters; give a .png path")
        only_refs = qa is None and bool(references.qa)  # --qa-kind reads the references' QA alone
        sources = build_gap_sources(src, info=info, bands=band_list, nodata=nodata_v, mask=mask,
                                    mask_values=mask_values, mask_bits=mask_bits, qa=qa,
                                    qa_kind=None if only_refs else qa_kind,
                                    qa_classes=None if only_refs else qa_classes, footprint=footprint,
                                    fill_outside=cfg.fill_outside, references=refs)
        gaps_from = sources.extra_gaps
        blocks = engine.plan_blocks(info.height, info.width, cfg.block_size)
        outside = [0]
        sampled = survey.sample_rows(info) if dry_run else None  # a huge raster's dry run: an estimate
        if sampled is not None:
            gap_pixels, obs_pixels, gap_tiles = survey.estimate_gaps(src, info, band_list, nodata_v, gaps_from,
                                                                     sampled, opts.tile_size, sources.fillable,
                                                                     outside)
        else:
            gap_pixels, obs_pixels, gap_tiles = survey.count_gaps(src, info, band_list, nodata_v, gaps_from,
                                                                  blocks, opts.tile_size, sources.fillable, outside)
        if obs_pixels == 0 and not references.paths:  # a date under cloud is filled from its references
            raise NoValidPixelsError(
                f"{input} has no observed pixel in band(s) {band_list} (nodata={nodata_v}); nothing to fill "
                "from. Check --nodata, --band or --mask"
            )
        report = FillReport(out_path, std_path, loaded.name, gap_pixels=gap_pixels, tiles=gap_tiles,
                            outside_pixels=outside[0], outside_evidence=sources.outside_evidence)
        report.hints.extend(validity.hints)  # a data band tagged alpha (geonp.io.alpha)
        if class_raster:
            report.model = "nearest class"
        if gap_pixels == 0 and cfg.nodata is None:
            hint = untagged_nodata_hint(src, band_list)
            if hint:
                report.hints.append(hint)
        device = resolve_device(cfg.device)
        workers = engine.pool_size(cfg.workers, device, gap_pixels, len(blocks))
        if dry_run:
            report.dry_run = True
            report.plan = survey.plan(info, band_list, blocks, opts, gap_pixels, gap_tiles, cfg.block_size,
                                      workers, sampled_rows=None if sampled is None else len(sampled))
            report.plan["outside_footprint_pixels"] = outside[0]
            report.plan["footprint"] = sources.footprint.describe()
            report.seconds = time.perf_counter() - t0
            return report
        dtype = info.dtype
        # Other formats than GTiff (and COGs) are written as a GeoTIFF and converted at the end.
        convert, std_convert = cfg.cog or out_driver != "GTiff", cfg.cog or std_driver != "GTiff"
        profile = output_profile(src.profile, count=validity.count, dtype=dtype, nodata=validity.nodata,
                                 creation_options={} if convert else co, cog=convert)
        std_profile = output_profile(src.profile, count=len(band_list), dtype="float32", nodata=float("nan"),
                                     creation_options={} if std_convert else std_co, cog=std_convert)
        source = engine.BlockSource(
            input=_absolute(input), bands=tuple(band_list), nodata=nodata_v, dtype=dtype,
            out_nodata=profile.get("nodata"), sources=_absolute_sources(sources), validity=validity,
            references=refs, reference_days=ref_days)
        lines = (engine.fit_reference_lines(source, blocks) if refs and cfg.reference_fit == "regression"
                 else None)
        plan = FillPlan.build(
            cfg, loaded, n_bands=len(band_list), model=model_key(cfg.model, loaded), reference_lines=lines,
            sample=lambda: survey.sample_for_stats(src, info, band_list, nodata_v, gaps_from), class_fill=class_raster)
        job = engine.BlockJob(source, plan)
        # The model's name only: an absolute local path would publish the user's directories.
        tags = {"GEONP_MODEL": loaded.name, "GEONP_VERSION": __version__,
                RUN_ID_TAG: uuid.uuid4().hex[:12]}  # one id for the pair: io.paths.unpaired_output
        if refs:
            tags["GEONP_REFERENCES"] = ", ".join(f"{Path(r.path).name} ({r.date})" for r in refs)
            tags["GEONP_REFERENCE_FIT"] = reference_fit_tag(plan)
        if class_raster:  # no model ran: say how the classes were filled, and that the std raster holds none
            tags.pop("GEONP_MODEL")
            tags["GEONP_FILL_METHOD"] = classes.METHOD_TAG
        done = [0]
        total = max(gap_pixels, 1)

        def moved(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(min(done[0], total), total)

        # the filled raster and its std appear together or not at all, the filled raster last
        with AtomicGroup() as group, \
                group.writer(out_path, profile, overwrite=cfg.overwrite, cog=cfg.cog, creation_options=co,
                             driver=out_driver, primary=True) as dst, \
                group.writer(std_path, std_profile, overwrite=cfg.overwrite, cog=cfg.cog,
                             creation_options=std_co, driver=std_driver, overview_resampling="RMS") as dstd:
            copy_metadata(src, dst, bands=band_list)
            copy_std_metadata(src, dstd, bands=band_list)
            dst.update_tags(**tags)
            dstd.update_tags(**tags, GEONP_CONTENT=classes.STD_CONTENT if class_raster else
                             "predictive standard deviation of the filled pixels; 0 = observed")
            for i, b in enumerate(band_list, start=1):
                desc = src.descriptions[b - 1]
                dstd.set_band_description(i, f"std of {desc}" if desc else f"std of band {b}")
            filled = beyond = 0
            timings: dict[str, float] = {"write": 0.0}
            # closed at once on an interrupt or error, so the worker processes stop with the fill
            with contextlib.closing(engine.run_blocks(job, blocks, scheduler=scheduler, workers=workers,
                                                      progress=moved, loaded=loaded)) as results:
                for result in results:
                    t_write = time.perf_counter()
                    r0, r1, c0, c1 = result.block
                    wwin = Window(c0, r0, c1 - c0, r1 - r0)
                    dst.write(result.out, window=wwin)
                    if validity.write_mask and result.valid is not None:
                        dst.write_mask(np.where(result.valid, 255, 0).astype(np.uint8), window=wwin)
                    dstd.write(result.std, window=wwin)
                    filled += result.filled
                    beyond += result.beyond
                    for key, value in result.timings.items():
                        timings[key] = timings.get(key, 0.0) + value
                    timings["write"] += time.perf_counter() - t_write
            if progress is not None:
                progress(total, total)
            report.filled_pixels, report.beyond_pixels = filled, beyond
            dst.update_tags(**report.count_tags())
            t_write = time.perf_counter()
        timings["write"] += time.perf_counter() - t_write  # the atomic writers' close and read-back
        report.timings, report.workers = timings, workers
        report.seconds = time.perf_counter() - t0
    if quicklook is not None:
        from geonp.io.quicklook import write_quicklook

        write_quicklook(quicklook, input, out_path, std_path, bands=band_list, nodata=nodata_v, mask=mask)
    return report


def _open_references(input: str | os.PathLike[str], info: Any, cfg: FillConfig, references: _References,
                     qa_kind: str | None, qa_classes: str | Sequence[str] | None) -> tuple[tuple, tuple]:
    """The references on the input's grid and their date offsets (days) from the input's date."""
    if not references.paths:
        if references.dates or references.qa:
            raise ConfigError("--reference-date/--reference-qa describe references; give --reference FILE too")
        return (), ()
    from geonp.io.dates import raster_date
    from geonp.io.references import open_references

    target = raster_date(info, override=references.date, option="--date")
    band_list = select_bands(info, cfg.bands)
    refs = open_references([_absolute(p) for p in references.paths], like=info, bands=band_list,
                           dates=references.dates, nodata=cfg.nodata,
                           qa=None if references.qa is None else [None if q is None else _absolute(q)
                                                                  for q in references.qa],
                           qa_kind=qa_kind, qa_classes=qa_classes)
    return tuple(refs), tuple(float((r.date - target).days) for r in refs)


def _check_creation(co: dict[str, str], std_co: dict[str, str], cfg: FillConfig, src: Any, info: Any,
                    validity: Any, out_driver: str, std_driver: str) -> None:
    """Both creation profiles, checked by GDAL with the outputs' real types, before any work."""
    grid = {"cog": cfg.cog, "width": info.width, "height": info.height, "crs": src.crs,
            "transform": src.transform}
    check_creation_options(co, dtype=info.dtype, count=validity.count, nodata=validity.nodata,
                           driver=out_driver, **grid)
    check_creation_options(std_co, dtype="float32", count=len(validity.bands), nodata=float("nan"),
                           driver=std_driver, what="std raster",
                           option="--co" if cfg.std_creation_options is None else "--std-co", **grid)


def _absolute(path: str | os.PathLike[str]) -> str:
    """An absolute path for workers started elsewhere (GDAL virtual paths stay as they are)."""
    text = os.fspath(path)
    if is_virtual(text):
        return text
    return str(Path(text).expanduser().absolute())


def _absolute_sources(sources: GapSources) -> GapSources:
    footprint = sources.footprint
    if footprint.source is not None:
        footprint = dataclasses.replace(footprint, source=_absolute(footprint.source))
    return dataclasses.replace(sources, mask=None if sources.mask is None else _absolute(sources.mask),
                               qa=None if sources.qa is None else _absolute(sources.qa), footprint=footprint)
