"""Fill a raster file: ``fill_raster``, from the input's checks to the atomic write of both outputs.

It takes a :class:`~geonp.config.FillConfig` and/or its fields as keywords. The in-memory fills
(``fill_array`` for numpy, ``fill`` for xarray/Dask) are :mod:`geonp.filling.arrays`. The block
engine (reading with a halo, process pools, Dask, casting) is :mod:`geonp.filling.engine`, the gap
count and dry-run plan :mod:`geonp.filling.survey`; the numeric core (tiles, tasks, batched model
calls, blending) is :mod:`geonp.filling.predict`.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from geonp._version import __version__
from geonp.config import FillConfig
from geonp.errors import ConfigError, NoValidPixelsError
from geonp.filling import classes, engine, pool, survey
from geonp.filling.inputs import (
    MOVED_KEYWORDS,
    Gaps,
    Outputs,
    Reference,
    as_references,
    check_file_fill,
    refuse_moved,
)
from geonp.filling.plan import FillPlan, fill_model, load_for_fill, model_key, tile_options
from geonp.filling.references import REGRESSION_WEIGHT
from geonp.filling.report import FillReport
from geonp.filling.similar_pixels import (
    RESIDUAL_RADIUS,
    SIMILAR_PIXELS,
    SIMILAR_REACH,
    SIMILAR_WINDOW,
)
from geonp.filling.write_blocks import stage, write_blocks
from geonp.io.atomic import AtomicGroup
from geonp.io.formats import OutputSpec, check_creation_options, output_driver
from geonp.io.gap_sources import GapSources, build_gap_sources
from geonp.io.hints import untagged_nodata_hint
from geonp.io.masks import resolve_nodata
from geonp.io.metadata import copy_metadata, copy_std_metadata
from geonp.io.paths import RUN_ID_TAG, check_output_path, default_uncertainty_path
from geonp.io.profiles import output_profile, parse_creation_options
from geonp.io.raster import gdal_cache_env, open_raster, raster_info, select_bands
from geonp.io.remote import is_virtual
from geonp.io.validity import plan_output_validity
from geonp.models.layers import resolve_device

__all__ = ["FillReport", "fill_raster"]


def fill_raster(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str] | Outputs,
    config: FillConfig | None = None,
    *,
    gaps: Gaps | None = None,
    references: Sequence[Reference | str | os.PathLike[str]] = (),
    date: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> FillReport:
    """Fill every gap of a raster file; write the filled raster and a std raster beside it.

    Only gaps inside the data footprint are filled (:mod:`geonp.io.footprint`; ``fill_outside``
    fills all); unfilled pixels read as nodata (:mod:`geonp.io.validity`).

    Example::

        fill_raster("scene.tif", Outputs("filled.tif", quicklook="filled.png"), nodata=0,
                    gaps=Gaps(qa="QA_PIXEL.TIF", qa_kind="landsat-c2"))

    Args:
        input: the raster with gaps.
        output: the filled raster's path (same grid, bands, dtype, nodata, metadata), or
            :class:`~geonp.filling.inputs.Outputs`: that path with the std raster's path (default
            ``<OUTPUT stem>_std.tif``), a quicklook PNG, the GDAL driver, or a dry run (only plan:
            tiles, context sizes, memory and time estimates; nothing written).
        config: fill options (:class:`~geonp.config.FillConfig`); keywords override its fields.
        gaps: gaps beyond the nodata value, NaN/Inf and the mask/alpha band: a gap mask, a quality
            band's classes, the data footprint (:class:`~geonp.filling.inputs.Gaps`).
        references: other dates of the place, each a path or a
            :class:`~geonp.filling.inputs.Reference` (with its date and quality band; any grid or
            CRS, reprojected on the fly), read as context by a multi-date model (the built-in
            ``multidate`` when ``model`` is left at ``default``).
        date: the input's acquisition date, where its tags and name lack it (needed with
            references).
        progress: ``(gap_pixels_done, gap_pixels_total)`` callback; one with a ``stage(label, unit)``
            method hears every long step, each opened by a ``stage`` call, in its own units
            (:mod:`geonp.filling.write_blocks`).
        **options: any :class:`~geonp.config.FillConfig` field (``model``, ``nodata``, ``bands``,
            ``device``, ``tile_size``, ``overlap``, ``max_context``, ``search_radius``,
            ``max_distance``, ``block_size``, ``workers``, ``scheduler``, ``batch_rows``,
            ``creation_options``, ``cog``, ``overwrite``, ``std_creation_options``,
            ``fill_outside``, ...).

    Returns:
        A :class:`~geonp.filling.report.FillReport`.
    """
    refuse_moved(options, MOVED_KEYWORDS, "fill_raster")
    check_file_fill(input, gaps)
    refs = as_references(references)
    for i, ref in enumerate(refs, 1):
        if not ref.is_file:
            raise ConfigError(f"reference {i}: fill_raster reads references from files; give a path (fill_array "
                              "and geonp.fill take arrays)")
    fill = _FileFill(input, Outputs.of(output), FillConfig.of(config, **options), gaps or Gaps(), refs, date)
    with gdal_cache_env():
        return fill.run(progress)


def reference_fit_tag(plan: FillPlan) -> str:
    """What a multi-date fill did with its references, for the output's tags."""
    if plan.reference_lines is None:
        return "none: references are context of the model"
    return (f"regression (each band on its own band and on all the reference's bands, averaged), corrected by "
            f"{SIMILAR_PIXELS} similar pixels within {SIMILAR_WINDOW} px (else {SIMILAR_REACH} px) and by its errors "
            f"on observed pixels within {RESIDUAL_RADIUS} px, references weighed by inverse variance, weight "
            f"{REGRESSION_WEIGHT:g}; {plan.reference_lines.describe()}")


class _FileFill:
    """One ``fill_raster`` call, stage by stage.

    The input read, outputs checked, gaps counted, then the blocks filled and written (or a dry
    run's plan).
    """

    def __init__(self, input: str | os.PathLike[str], outs: Outputs, cfg: FillConfig, gaps: Gaps,
                 refs: tuple[Reference, ...], date: str | None) -> None:
        self.t0 = time.perf_counter()
        self.input, self.outs, self.gaps, self.refs, self.date = input, outs, gaps, refs, date
        self.cfg = dataclasses.replace(cfg, model=fill_model(cfg.model, references=bool(refs)))
        self.loaded = load_for_fill(self.cfg.model, references=bool(refs))
        # the survey and dry run need the tiles before the plan (whose normaliser samples the raster)
        self.opts = tile_options(self.loaded, cfg.tile_size, cfg.max_context, cfg.overlap, cfg.search_radius,
                                 cfg.queries)
        self.co = parse_creation_options(cfg.creation_options)
        self.std_co = (self.co if cfg.std_creation_options is None
                       else parse_creation_options(cfg.std_creation_options))
        self.out_path = Path(outs.path)
        self.std_path = (Path(outs.uncertainty) if outs.uncertainty is not None
                         else default_uncertainty_path(outs.path, outs.format))

    def run(self, progress: Callable[[int, int], None] | None) -> FillReport:
        """The whole fill; the report of what it did."""
        self.progress = progress
        with open_raster(self.input) as src:
            self._read_input(src)
            self._check_outputs(src)
            report = self._survey(src)
            if self.outs.dry_run:
                return self._dry_run(report)
            self._write(src, report, progress)
        if self.outs.quicklook is not None:
            from geonp.io.quicklook import write_quicklook

            write_quicklook(self.outs.quicklook, self.input, self.out_path, self.std_path, bands=self.band_list,
                            nodata=self.nodata, mask=self.gaps.mask)
        return report

    def _read_input(self, src: Any) -> None:
        """The input's grid, bands, nodata, output validity and whether it is a class raster."""
        cfg = self.cfg
        self.info = info = raster_info(src)
        select_bands(info, cfg.bands)  # range and duplicate checks
        self.nodata = resolve_nodata(info, cfg.nodata)
        self.validity = plan_output_validity(src, cfg.bands, nodata=info.nodata if cfg.nodata is None else cfg.nodata)
        self.band_list = list(self.validity.bands)  # never the alpha band
        # a class raster (colour table): refused, or filled by nearest class (geonp.filling.classes)
        self.class_raster = classes.is_class_fill(src, self.band_list, cfg.categorical, references=bool(self.refs))

    def _check_outputs(self, src: Any) -> None:
        """Drivers, creation options and output paths checked, references opened, before any work."""
        from geonp.io import formats as output_formats  # the output-path checks
        from geonp.io import paths as output_paths

        cfg, outs = self.cfg, self.outs
        self.out_driver = output_driver(self.out_path, outs.format)
        self.std_driver = output_driver(self.std_path, outs.format if self.std_path.suffix == self.out_path.suffix
                                        else None)
        if cfg.cog:
            output_formats.check_cog_output(self.out_path, self.out_driver)
            output_formats.check_cog_output(self.std_path, self.std_driver, role="--uncertainty")
        _check_creation(self.co, self.std_co, cfg, src, self.info, self.validity, self.out_driver, self.std_driver)
        self.opened, self.ref_days = _open_references(self.input, self.info, cfg, self.refs, self.date,
                                                      self.gaps.qa_kind, self.gaps.qa_classes)
        if outs.dry_run:
            return
        inputs = [self.input, *self.gaps.files(), *(r.source for r in self.refs)]
        output_paths.check_std_path(self.std_path, output=self.out_path, inputs=inputs, overwrite=cfg.overwrite,
                                    given=outs.uncertainty is not None)  # not an input, not a leftover
        self.out_path = check_output_path(self.out_path, inputs=inputs, overwrite=cfg.overwrite)
        self.std_path = check_output_path(self.std_path, inputs=inputs, overwrite=cfg.overwrite,
                                          role="--uncertainty" if outs.uncertainty is not None else "The std raster")
        if self.out_path == self.std_path:
            raise ConfigError(f"--uncertainty {self.std_path} is the same path as OUTPUT; give another path")
        if outs.quicklook is not None:
            ql = check_output_path(outs.quicklook, inputs=inputs, overwrite=cfg.overwrite)
            if ql in (self.out_path, self.std_path):
                raise ConfigError(f"--quicklook {outs.quicklook} is one of the output rasters; give a .png path")

    def _survey(self, src: Any) -> FillReport:
        """The gap sources built and the gaps counted (estimated on a huge raster's dry run)."""
        cfg, gaps, info = self.cfg, self.gaps, self.info
        only_refs = gaps.qa is None and any(r.qa is not None for r in self.refs)  # --qa-kind reads the refs' QA
        own = dataclasses.replace(gaps, qa_kind=None, qa_classes=None) if only_refs else gaps
        self.sources = build_gap_sources(src, own, bands=self.band_list, nodata=self.nodata,
                                         fill_outside=cfg.fill_outside, references=self.opened)
        self.blocks = pool.plan_blocks(info.height, info.width, cfg.block_size)
        outside = [0]
        self.sampled = survey.sample_rows(info) if self.outs.dry_run else None  # a huge raster: an estimate
        self.counts = survey.BlockCounts(info.height, info.width, cfg.block_size)
        step = stage(self.progress, "surveying", "block")
        self.reader = survey.GapReader(src, info, self.band_list, self.nodata, self.sources.extra_gaps,
                                       self.sources.fillable)
        count = (survey.count_gaps(self.reader, self.blocks, self.opts.tile_size, outside, self.counts, step)
                 if self.sampled is None else
                 survey.estimate_gaps(self.reader, self.sampled, self.opts.tile_size, outside, self.counts, step))
        gap_pixels, obs_pixels, gap_tiles = count
        if obs_pixels == 0 and not self.refs:  # a date under cloud is filled from its references
            raise NoValidPixelsError(
                f"{self.input} has no observed pixel in band(s) {self.band_list} (nodata={self.nodata}); nothing to "
                "fill from. Check --nodata, --band or --mask"
            )
        report = FillReport(self.out_path, self.std_path, self.loaded.name, gap_pixels=gap_pixels, tiles=gap_tiles,
                            outside_pixels=outside[0], outside_evidence=self.sources.outside_evidence)
        report.hints.extend(self.validity.hints)  # a data band tagged alpha (geonp.io.alpha)
        if self.class_raster:
            report.model = "nearest class"
        if gap_pixels == 0 and cfg.nodata is None:
            hint = untagged_nodata_hint(src, self.band_list)
            if hint:
                report.hints.append(hint)
        # a small raster's blocks are cut smaller to be shared by the worker processes
        self.blocks, report.workers = pool.plan_pool(info.height, info.width, cfg.block_size, cfg.workers,
                                                       resolve_device(cfg.device), gap_pixels)
        v = self.validity  # blocks with neither gaps nor data are never read (geonp.filling.write_blocks)
        self.fill_blocks, self.copy_blocks = self.counts.route(
            self.blocks, skip_empty=v.nodata is not None and not v.write_mask and v.alpha_band is None)
        report.workers = min(report.workers, max(1, len(self.fill_blocks)))
        return report

    def _dry_run(self, report: FillReport) -> FillReport:
        """The plan of a dry run: blocks, tiles, context sizes, memory and time estimates."""
        report.dry_run = True
        spent = time.process_time()  # this process so far: what the fill does before its blocks
        model = 0.0 if self.class_raster else survey.price_model(self.reader, self.counts, self.opts,
                                                                   report.gap_pixels)
        times = survey.time_estimate(self.info, len(self.band_list), self.fill_blocks, self.copy_blocks,
                                     self.opts.halo, spent=spent, model=model, workers=report.workers,
                                     surveyed=self.sampled is None)
        report.plan = survey.plan(self.info, self.band_list, self.blocks, self.opts, report.gap_pixels, report.tiles,
                                  report.workers,
                                  sampled_rows=None if self.sampled is None else len(self.sampled), times=times)
        report.plan["outside_footprint_pixels"] = report.outside_pixels
        report.plan["footprint"] = self.sources.footprint.describe()
        report.seconds = time.perf_counter() - self.t0
        return report

    def _job(self, src: Any) -> tuple[engine.BlockJob, dict[str, Any], dict[str, Any]]:
        """The block job (what every block reads and the plan it is filled with) and both profiles."""
        cfg, info = self.cfg, self.info
        dtype = info.dtype
        # Other formats than GTiff (and COGs) are written as a GeoTIFF and converted at the end.
        convert, std_convert = cfg.cog or self.out_driver != "GTiff", cfg.cog or self.std_driver != "GTiff"
        profile = output_profile(src.profile, count=self.validity.count, dtype=dtype, nodata=self.validity.nodata,
                                 creation_options={} if convert else self.co, cog=convert)
        std_profile = output_profile(src.profile, count=len(self.band_list), dtype="float32", nodata=float("nan"),
                                     creation_options={} if std_convert else self.std_co, cog=std_convert)
        source = engine.BlockSource(
            input=_absolute(self.input), bands=tuple(self.band_list), nodata=self.nodata, dtype=dtype,
            out_nodata=profile.get("nodata"), sources=_absolute_sources(self.sources), validity=self.validity,
            references=self.opened, reference_days=self.ref_days)
        lines = None
        if self.opened and cfg.reference_fit == "regression":
            step = stage(self.progress, "fitting references", "block")
            lines = engine.fit_reference_lines(source, self.blocks, step)
        plan = FillPlan.build(
            cfg, self.loaded, n_bands=len(self.band_list), model=model_key(cfg.model, self.loaded),
            reference_lines=lines, class_fill=self.class_raster,
            sample=lambda: survey.sample_for_stats(self.reader, self.counts))
        return engine.BlockJob(source, plan), profile, std_profile

    def _tags(self, plan: FillPlan) -> dict[str, str]:
        """The tags both outputs carry: model, version, run id, references."""
        # The model's name only: an absolute local path would publish the user's directories.
        tags = {"GEONP_MODEL": self.loaded.name, "GEONP_VERSION": __version__,
                RUN_ID_TAG: uuid.uuid4().hex[:12]}  # one id for the pair: io.paths.unpaired_output
        if self.opened:
            tags["GEONP_REFERENCES"] = ", ".join(f"{Path(r.path).name} ({r.date})" for r in self.opened)
            tags["GEONP_REFERENCE_FIT"] = reference_fit_tag(plan)
        if self.class_raster:  # no model ran: say how the classes were filled, and that the std raster holds none
            tags.pop("GEONP_MODEL")
            tags["GEONP_FILL_METHOD"] = classes.METHOD_TAG
        return tags

    def _write(self, src: Any, report: FillReport, progress: Callable[[int, int], None] | None) -> None:
        """Fill every block and write both outputs atomically: together or not at all, the filled one last."""
        cfg, band_list = self.cfg, self.band_list
        job, profile, std_profile = self._job(src)
        tags = self._tags(job.plan)
        with AtomicGroup() as group, \
                group.writer(self.out_path, profile, overwrite=cfg.overwrite, cog=cfg.cog, creation_options=self.co,
                             driver=self.out_driver, primary=True) as dst, \
                group.writer(self.std_path, std_profile, overwrite=cfg.overwrite, cog=cfg.cog,
                             creation_options=self.std_co, driver=self.std_driver, overview_resampling="RMS") as dstd:
            copy_metadata(src, dst, bands=band_list)
            copy_std_metadata(src, dstd, bands=band_list)
            dst.update_tags(**tags)
            dstd.update_tags(**tags, GEONP_CONTENT=classes.STD_CONTENT if self.class_raster else
                             "predictive standard deviation of the filled pixels; 0 = observed")
            for i, b in enumerate(band_list, start=1):
                desc = src.descriptions[b - 1]
                dstd.set_band_description(i, f"std of {desc}" if desc else f"std of band {b}")
            timings = write_blocks(job, (dst, dstd), report, (self.fill_blocks, self.copy_blocks), progress,
                                   scheduler=cfg.scheduler, loaded=self.loaded, write_mask=self.validity.write_mask)
            dst.update_tags(**report.count_tags())
            closing = stage(progress, "closing and verifying", "step")
            if closing is not None:
                closing(0, 1)
            t_write = time.perf_counter()
        timings["write"] += time.perf_counter() - t_write  # the atomic writers' close and read-back
        if closing is not None:
            closing(1, 1)
        report.timings = timings
        report.seconds = time.perf_counter() - self.t0


def _open_references(input: str | os.PathLike[str], info: Any, cfg: FillConfig, refs: tuple[Reference, ...],
                     date: str | None, qa_kind: str | None,
                     qa_classes: str | Sequence[str] | None) -> tuple[tuple, tuple]:
    """The references on the input's grid and their date offsets (days) from the input's date."""
    if not refs:
        return (), ()
    from geonp.io.dates import raster_date
    from geonp.io.references import open_references

    target = raster_date(info, override=date, option="--date")
    band_list = select_bands(info, cfg.bands)
    dates = [r.date for r in refs]
    qa = [None if r.qa is None else _absolute(r.qa) for r in refs]
    opened = open_references([_absolute(r.source) for r in refs], like=info, bands=band_list,
                             dates=dates if any(d is not None for d in dates) else None, nodata=cfg.nodata,
                             qa=qa if any(q is not None for q in qa) else None,
                             qa_kind=qa_kind, qa_classes=qa_classes)
    return tuple(opened), tuple(float((r.date - target).days) for r in opened)


def _check_creation(co: dict[str, str], std_co: dict[str, str], cfg: FillConfig, src: Any, info: Any,
                    validity: Any, out_driver: str, std_driver: str) -> None:
    """Both creation profiles, checked by GDAL with the outputs' real types, before any work."""
    grid = {"cog": cfg.cog, "width": info.width, "height": info.height, "crs": src.crs,
            "transform": src.transform}
    check_creation_options(co, OutputSpec(info.dtype, validity.count, validity.nodata, out_driver, **grid))
    check_creation_options(std_co, OutputSpec("float32", len(validity.bands), float("nan"), std_driver, **grid),
                           what="std raster", option="--co" if cfg.std_creation_options is None else "--std-co")


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
