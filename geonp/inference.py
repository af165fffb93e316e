"""``fill_raster`` (files, window by window) and ``fill`` (xarray, lazily with Dask).

A raster is processed in blocks of ``block_size`` pixels, each read with a halo of
``search_radius`` pixels so that every tile finds its context; memory depends on the block size,
never on the raster size. Observed pixels are copied bit for bit; only gaps are written.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rasterio.windows import Window
from scipy import ndimage

from geonp._version import __version__
from geonp.errors import ConfigError, InputRasterError, NoValidPixelsError
from geonp.io.masks import read_mask_file, resolve_nodata
from geonp.io.observed import read_observed
from geonp.io.gap_sources import GapSources, build_gap_sources
from geonp.io.hints import untagged_nodata_hint
from geonp.io.output import (
    AtomicRasterWriter,
    check_creation_options,
    check_output_path,
    copy_metadata,
    copy_std_metadata,
    output_driver,
    output_profile,
    parse_creation_options,
)
from geonp.io.validity import OutputValidity, alpha_values, finish_block, plan_output_validity
from geonp.io.raster import RasterInfo, open_raster, raster_info, read_window, select_bands
from geonp.normalize import Normalizer
from geonp.predict import TileOptions, predict_block
from geonp.tiling import make_tiles

logger = logging.getLogger(__name__)


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
        outside_pixels: missing pixels outside the data footprint (left nodata, not counted in
            ``gap_pixels``).
        hints: advice for the user (for example an untagged nodata value).
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
    outside_pixels: int = 0
    hints: list[str] = field(default_factory=list)

    @property
    def unfilled_pixels(self) -> int:
        """Gap pixels left as nodata (beyond ``max_distance`` or any context)."""
        return self.gap_pixels - self.filled_pixels


def default_uncertainty_path(output: str | os.PathLike[str]) -> Path:
    """``<OUTPUT stem>_std.tif`` beside OUTPUT."""
    out = Path(output)
    return out.with_name(f"{out.stem}_std{out.suffix or '.tif'}")


def tile_defaults(loaded: Any, tile_size: int | None, max_context: int | None) -> tuple[int, int]:
    """Tile size and context cap: as given, else what the model was trained with (its card)."""
    shape = loaded.card.get("task_shape") or {}
    return (int(tile_size or shape.get("core_size", 48)), int(max_context or shape.get("max_context", 256)))


def _resolve_device(device: str) -> Any:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for but no CUDA device is available; use --device cpu or auto")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _normalizer_for(loaded: Any, n_bands: int, sample: Callable[[], tuple[np.ndarray, np.ndarray]]) -> Normalizer:
    """The model's per-band statistics when they fit the band count, else the input's own."""
    stored = loaded.normalizer
    if stored is not None and len(stored.get("mean", [])) == n_bands:
        return Normalizer.from_dict(stored)
    if loaded.card.get("any_band_count", True) is False:
        raise InputRasterError(
            f"model {loaded.name} was trained on {len(stored['mean'])} band(s) and cannot take "
            f"{n_bands}; select matching bands with -b, or train a model on this sensor with geonp train"
        )
    values, valid = sample()
    return Normalizer.fit(values, valid)


def _fill_blocks(
    height: int, width: int, block_size: int
) -> list[tuple[int, int, int, int]]:
    return [(t.row, t.row + t.height, t.col, t.col + t.width)
            for t in make_tiles(height, width, tile_size=block_size)]


def _within(observed: np.ndarray, max_distance: float | None) -> np.ndarray:
    """Pixels within ``max_distance`` of an observed pixel (all pixels when None)."""
    if max_distance is None:
        return np.ones_like(observed)
    if not observed.any():
        return np.zeros_like(observed)
    return ndimage.distance_transform_edt(~observed) <= max_distance


def fill_block(
    model: Any,
    raw: np.ndarray,
    observed: np.ndarray,
    region: tuple[int, int, int, int],
    *,
    origin: tuple[int, int],
    norm: Normalizer,
    opts: TileOptions,
    device: Any,
    max_distance: float | None,
    std_scale: Sequence[float] | None = None,
    progress: Callable[[int], None] | None = None,
    fillable: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fill the gaps of one block's region, in the bands' units.

    Args:
        model: the torch module.
        raw: ``[bands, h, w]`` values of the block with its halo.
        observed: bool ``[bands, h, w]``.
        region: ``(r0, r1, c0, c1)`` of the block's own pixels.
        origin: the block array's offset in the raster.
        norm: per-band normaliser.
        opts: tiling options.
        device: torch device.
        max_distance: leave gaps farther than this from observed pixels unfilled.
        std_scale: per-band post-hoc std calibration factors.
        progress: tiles-done callback.
        fillable: bool ``[h, w]``: where predictions may go (the data footprint); None = all.

    Returns:
        ``(mean, std)`` ``[bands, r1 - r0, c1 - c0]``: predictions on gap pixels, NaN elsewhere.
    """
    r0, r1, c0, c1 = region
    n = raw.shape[0]
    mean = np.full((n, r1 - r0, c1 - c0), np.nan)
    std = np.full((n, r1 - r0, c1 - c0), np.nan)
    normed = norm.apply(np.where(observed, raw, 0.0))
    for b in range(n):
        obs = observed[b]
        # Gaps in the halo stay in to_fill: they shape the context choice and the tile splits of the
        # tiles near the region's edge exactly as in the neighbouring block, which keeps blocks
        # seamless. predict_block only predicts inside the region.
        to_fill = ~obs & _within(obs, max_distance)
        if fillable is not None:
            to_fill &= fillable
        if not to_fill[r0:r1, c0:c1].any() or not obs.any():
            continue
        m, s = predict_block(model, normed[b], obs, to_fill, region, origin=origin, opts=opts,
                             device=device, progress=progress)
        scale = std_scale[b] if std_scale is not None and len(std_scale) == n else (
            std_scale[0] if std_scale else 1.0)
        mean[b] = m * norm.std[b] + norm.mean[b]
        std[b] = s * norm.std[b] * scale
    return mean, std


def _cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round and clip to an integer dtype's range (never wrap); plain cast for floats."""
    dt = np.dtype(dtype)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return np.clip(np.rint(values), info.min, info.max).astype(dt)
    return values.astype(dt)


def _sample_for_stats(src: Any, info: RasterInfo, bands: list[int], nodata: float | None,
                      gaps_from: Callable[[Window], np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
    """Up to 16 windows of 256 px spread over the raster, for normalisation statistics."""
    size = 256
    rows = np.linspace(0, max(0, info.height - size), 4).astype(int)
    cols = np.linspace(0, max(0, info.width - size), 4).astype(int)
    vals, oks = [], []
    for r in sorted(set(rows)):
        for c in sorted(set(cols)):
            win = Window(c, r, min(size, info.width), min(size, info.height))
            arr, ok = read_observed(src, win, bands, info=info, nodata=nodata)
            gap = gaps_from(win)
            if gap is not None:
                ok &= ~gap[None]
            vals.append(arr.reshape(len(bands), -1))
            oks.append(ok.reshape(len(bands), -1))
    return np.concatenate(vals, 1), np.concatenate(oks, 1)


def fill_raster(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    uncertainty: str | os.PathLike[str] | None = None,
    model: str | os.PathLike[str] | Any = "default",
    mask: str | os.PathLike[str] | None = None,
    nodata: float | None = None,
    bands: Sequence[int] | None = None,
    device: str = "auto",
    tile_size: int | None = None,
    overlap: int = 8,
    max_context: int | None = None,
    search_radius: int = 512,
    max_distance: float | None = None,
    block_size: int = 512,
    creation_options: Sequence[str] | dict[str, str] = (),
    cog: bool = False,
    overwrite: bool = False,
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
    fill_outside: bool = False,
    std_creation_options: Sequence[str] | dict[str, str] | None = None,
    format: str | None = None,
) -> FillReport:
    """Fill every gap of a raster file; write the filled raster and a std raster beside it.

    Args:
        input: the raster with gaps.
        output: the filled raster (same grid, bands, dtype, nodata, metadata).
        uncertainty: the std raster (default ``<OUTPUT stem>_std.tif``).
        model: a built-in model name, a model directory, or a loaded model.
        mask: a gap mask on the input's grid (non-zero = missing), used instead of nodata.
        nodata: nodata value overriding a missing or wrong tag.
        bands: 1-based bands to fill (default all).
        device: ``auto``, ``cpu`` or ``cuda``.
        tile_size: tile core edge (pixels); default: the core size the model was trained with.
        overlap: tile blend margin (pixels).
        max_context: observed pixels per tile; default: the model's training context size.
        search_radius: farthest a tile looks for context (pixels).
        max_distance: leave gaps farther than this (pixels) from observed pixels as nodata.
        block_size: pixels per read/write block (memory scales with its square).
        creation_options: GTiff creation options (``KEY=VALUE`` strings or a dict).
        cog: write Cloud Optimized GeoTIFFs.
        overwrite: replace existing outputs.
        quicklook: write a PNG with input, prediction and std side by side.
        dry_run: only plan: tiles, context sizes, memory and time estimates.
        scheduler: address of a Dask distributed scheduler; blocks are spread over its workers
            (each loads the model once). The model must then be a name or a directory.
        progress: ``(tiles_done, tiles_total)`` callback.
        mask_values: values of ``mask`` that mean a gap (``"8,9"``).
        mask_bits: bits of ``mask`` that mean a gap when set (``"3,4"``).
        qa: a quality band (``--qa``), read as ``qa_kind``.
        qa_kind: ``landsat-c2``, ``sentinel2-scl`` or ``fmask``.
        qa_classes: classes of ``qa_kind`` that are gaps (default: the kind's defaults).
        footprint: the data footprint (raster, non-zero = inside, or GeoJSON); default computed.
        fill_outside: fill gaps outside the data footprint too (the collar).
        std_creation_options: creation options of the std raster (default: ``creation_options``).
        format: GDAL driver of OUTPUT (default: from its extension).

    Returns:
        A :class:`FillReport`.
    """
    t0 = time.perf_counter()
    from geonp.models.registry import load_model

    loaded = model if not isinstance(model, str | os.PathLike) else load_model(model, device="cpu")
    tile_size, max_context = tile_defaults(loaded, tile_size, max_context)
    opts = TileOptions(tile_size=tile_size, overlap=overlap, max_context=max_context,
                       search_radius=search_radius)
    if block_size < 16:
        raise ConfigError(f"--block-size {block_size} must be >= 16 pixels")
    if max_distance is not None and max_distance <= 0:
        raise ConfigError(f"--max-distance {max_distance} must be > 0 pixels")
    co = dict(creation_options) if isinstance(creation_options, dict) else parse_creation_options(creation_options)
    std_co = co if std_creation_options is None else (
        dict(std_creation_options) if isinstance(std_creation_options, dict)
        else parse_creation_options(std_creation_options))
    out_path = Path(output)
    std_path = Path(uncertainty) if uncertainty is not None else default_uncertainty_path(output)
    with open_raster(input) as src:
        info = raster_info(src)
        select_bands(info, bands)  # range and duplicate checks
        nodata_v = resolve_nodata(info, nodata)
        validity = plan_output_validity(src, bands, nodata=info.nodata if nodata is None else nodata)
        band_list = list(validity.bands)
        out_driver = output_driver(out_path, format)
        std_driver = output_driver(std_path, format if std_path.suffix == out_path.suffix else None)
        # Both creation profiles, checked by GDAL with the real types before any work.
        check_creation_options(co, dtype=info.dtype, count=validity.count, nodata=validity.nodata,
                               driver=out_driver, cog=cog, width=info.width, height=info.height,
                               crs=src.crs, transform=src.transform)
        check_creation_options(std_co, dtype="float32", count=len(band_list), nodata=float("nan"),
                               driver=std_driver, cog=cog, width=info.width, height=info.height,
                               crs=src.crs, transform=src.transform, what="std raster",
                               option="--co" if std_creation_options is None else "--std-co")
        inputs = [p for p in (input, mask, qa, footprint) if p is not None]
        if not dry_run:
            out_path = check_output_path(out_path, inputs=inputs, overwrite=overwrite)
            std_path = check_output_path(std_path, inputs=inputs, overwrite=overwrite)
            if out_path == std_path:
                raise ConfigError(f"--uncertainty {std_path} is the same path as OUTPUT; give another path")
            if quicklook is not None:
                ql = check_output_path(quicklook, inputs=inputs, overwrite=overwrite)
                if ql in (out_path, std_path):
                    raise ConfigError(f"--quicklook {quicklook} is one of the output rasters; give a .png path")
        sources = build_gap_sources(src, info=info, bands=band_list, nodata=nodata_v, mask=mask,
                                    mask_values=mask_values, mask_bits=mask_bits, qa=qa, qa_kind=qa_kind,
                                    qa_classes=qa_classes, footprint=footprint, fill_outside=fill_outside)

        def gaps_from(win: Window) -> np.ndarray | None:
            return sources.extra_gaps(win)

        # pass 1: count gaps and observed pixels, and tiles with gaps (for progress and dry run)
        blocks = _fill_blocks(info.height, info.width, block_size)
        gap_pixels, obs_pixels, gap_tiles, outside_pixels = 0, 0, 0, 0
        for r0, r1, c0, c1 in blocks:
            win = Window(c0, r0, c1 - c0, r1 - r0)
            _, ok = read_observed(src, win, band_list, info=info, nodata=nodata_v)
            gap = gaps_from(win)
            if gap is not None:
                ok &= ~gap[None]
            inside = sources.fillable(win)[None]
            gap_pixels += int((~ok & inside).sum())
            outside_pixels += int((~ok & ~inside).sum())
            obs_pixels += int(ok.sum())
            t = tile_size
            to_fill = ~ok & inside
            padded = np.pad(to_fill, ((0, 0), (0, (-ok.shape[1]) % t), (0, (-ok.shape[2]) % t)))
            gap_tiles += int(padded.reshape(len(band_list), padded.shape[1] // t, t, -1, t).any((2, 4)).sum())
        if obs_pixels == 0:
            raise NoValidPixelsError(
                f"{input} has no observed pixel in band(s) {band_list} (nodata={nodata_v}); nothing to fill "
                "from. Check --nodata, --band or --mask"
            )
        report = FillReport(out_path, std_path, loaded.name, gap_pixels=gap_pixels, tiles=gap_tiles,
                            outside_pixels=outside_pixels)
        if gap_pixels == 0 and nodata is None:
            hint = untagged_nodata_hint(src, band_list)
            if hint:
                report.hints.append(hint)
        if dry_run:
            report.dry_run = True
            report.plan = _plan(info, band_list, blocks, opts, gap_pixels, gap_tiles, block_size)
            report.plan["outside_footprint_pixels"] = outside_pixels
            report.plan["footprint"] = sources.footprint.describe()
            report.seconds = time.perf_counter() - t0
            return report
        if getattr(loaded.config, "dim_y", 1) != 1:
            raise InputRasterError(f"model {loaded.name} predicts {loaded.config.dim_y} bands jointly; "
                                   "geonp fill needs a per-band model (dim_y=1)")
        _resolve_device(device)
        norm = _normalizer_for(loaded, len(band_list),
                               lambda: _sample_for_stats(src, info, band_list, nodata_v, gaps_from))
        dtype = info.dtype
        convert = cog or out_driver != "GTiff"
        profile = output_profile(src.profile, count=validity.count, dtype=dtype, nodata=validity.nodata,
                                 creation_options={} if convert else co, cog=convert)
        std_convert = cog or std_driver != "GTiff"
        std_profile = output_profile(src.profile, count=len(band_list), dtype="float32", nodata=float("nan"),
                                     creation_options={} if std_convert else std_co, cog=std_convert)
        job = BlockJob(
            input=_absolute(input), bands=tuple(band_list), nodata=nodata_v, mask=None,
            model=_model_key(model, loaded), device=device, opts=opts, max_distance=max_distance,
            norm=norm.to_dict(), std_scale=(loaded.calibration or {}).get("std_scale"), dtype=dtype,
            out_nodata=profile.get("nodata"), sources=_absolute_sources(sources), validity=validity,
        )
        # The model's name only: an absolute local path would leak the user's directories.
        tags = {"GEONP_MODEL": loaded.name, "GEONP_VERSION": __version__}
        done = [0]
        with AtomicRasterWriter(out_path, profile, overwrite=overwrite, cog=cog, creation_options=co,
                                driver=out_driver) as dst, \
                AtomicRasterWriter(std_path, std_profile, overwrite=overwrite, cog=cog, creation_options=std_co,
                                   driver=std_driver, overview_resampling="RMS") as dstd:
            copy_metadata(src, dst, bands=band_list)
            copy_std_metadata(src, dstd, bands=band_list)
            dst.update_tags(**tags)
            dstd.update_tags(**tags, GEONP_CONTENT="predictive standard deviation of the filled pixels; 0 = observed")
            for i, b in enumerate(band_list, start=1):
                desc = src.descriptions[b - 1]
                dstd.set_band_description(i, f"std of {desc}" if desc else f"std of band {b}")
            filled = 0
            for result in _run_blocks(job, blocks, scheduler):
                (r0, r1, c0, c1), out, std_out, n_filled, n_tiles, valid = result
                wwin = Window(c0, r0, c1 - c0, r1 - r0)
                dst.write(out, window=wwin)
                if validity.write_mask:
                    dst.write_mask(np.where(valid, 255, 0).astype(np.uint8), window=wwin)
                dstd.write(std_out, window=wwin)
                filled += n_filled
                done[0] += n_tiles
                if progress is not None:
                    progress(min(done[0], max(gap_tiles, 1)), max(gap_tiles, 1))
            dst.update_tags(GEONP_FILLED_PIXELS=str(filled), GEONP_GAP_PIXELS=str(gap_pixels))
        report.filled_pixels = filled
        report.seconds = time.perf_counter() - t0
    if quicklook is not None:
        from geonp.quicklook import write_quicklook

        write_quicklook(quicklook, input, out_path, std_path, bands=band_list, nodata=nodata_v, mask=mask)
    return report


def _absolute(path: str | os.PathLike[str]) -> str:
    """An absolute path for Dask workers started elsewhere (GDAL virtual paths as they are)."""
    text = os.fspath(path)
    if text.startswith("/vsi") or "://" in text:
        return text
    return str(Path(text).expanduser().absolute())


def _absolute_sources(sources: GapSources) -> GapSources:
    from dataclasses import replace

    footprint = sources.footprint
    if footprint.source is not None:
        footprint = replace(footprint, source=_absolute(footprint.source))
    return replace(sources, mask=None if sources.mask is None else _absolute(sources.mask),
                   qa=None if sources.qa is None else _absolute(sources.qa), footprint=footprint)


# Models handed in as objects (not paths) for in-process runs, by key.
_LOCAL_MODELS: dict[str, Any] = {}


def _model_key(model: Any, loaded: Any) -> str:
    if isinstance(model, str | os.PathLike):
        return str(loaded.path) if loaded.path is not None else str(model)
    key = f"object:{id(loaded)}"
    _LOCAL_MODELS[key] = loaded
    return key


@dataclass(frozen=True)
class BlockJob:
    """Everything a worker needs to fill one block of a raster (picklable; no open handles)."""

    input: str
    bands: tuple[int, ...]
    nodata: float | None
    mask: str | None
    model: str
    device: str
    opts: TileOptions
    max_distance: float | None
    norm: dict[str, Any]
    std_scale: Sequence[float] | None
    dtype: str
    out_nodata: float | None
    sources: GapSources | None = None
    validity: OutputValidity | None = None


def run_block(job: BlockJob, block: tuple[int, int, int, int]) -> tuple[tuple[int, int, int, int], np.ndarray,
                                                                       np.ndarray, int, int, np.ndarray]:
    """Fill one block ``(r0, r1, c0, c1)``; returns it with its output and std arrays.

    Also returns the block's validity ``[h, w]`` (observed or filled in every band) for the
    alpha band or internal mask.

    Runs in this process or on a Dask worker: it opens the raster itself and loads the model once
    per process (:func:`geonp.models.registry.cached_model`).
    """
    from geonp.models.registry import cached_model

    loaded = _LOCAL_MODELS.get(job.model) or cached_model(job.model, "cpu")
    dev = _resolve_device(job.device)
    module = loaded.module.to(dev).eval()
    r0, r1, c0, c1 = block
    opts = job.opts
    halo = opts.search_radius + opts.overlap + opts.tile_size
    tiles = [0]
    with open_raster(job.input) as src:
        info = raster_info(src)
        win = Window(c0 - halo, r0 - halo, (c1 - c0) + 2 * halo, (r1 - r0) + 2 * halo)
        raw, ok = read_observed(src, win, job.bands, info=info, nodata=job.nodata)
        if job.mask is not None:
            ok &= ~read_mask_file(job.mask, like=info, window=win)[None]
        fillable = None
        if job.sources is not None:
            extra = job.sources.extra_gaps(win)
            if extra is not None:
                ok &= ~extra[None]
            fillable = job.sources.fillable(win)
        region = (halo, halo + r1 - r0, halo, halo + c1 - c0)
        mean, std = fill_block(module, raw, ok, region, origin=(r0 - halo, c0 - halo),
                               norm=Normalizer.from_dict(job.norm), opts=opts, device=dev,
                               max_distance=job.max_distance, std_scale=job.std_scale,
                               progress=lambda n: tiles.__setitem__(0, tiles[0] + n), fillable=fillable)
        # read_window gives float64 (exact for every GDAL integer type up to 32 bits) with clean errors
        core_win = Window(c0, r0, c1 - c0, r1 - r0)
        core_raw = _cast(read_window(src, core_win, list(job.bands)), job.dtype)
        alpha_raw = None
        if job.validity is not None and job.validity.alpha_band is not None:
            alpha_raw = read_window(src, core_win, [job.validity.alpha_band])[0]
    core_ok = ok[:, region[0]:region[1], region[2]:region[3]]
    has_pred = np.isfinite(mean) & ~core_ok
    out = core_raw.copy()
    out[has_pred] = _cast(mean[has_pred], job.dtype)
    validity = job.validity or OutputValidity(bands=job.bands, alpha_band=None, nodata=job.out_nodata,
                                              dtype=job.dtype, write_mask=False)
    out, valid = finish_block(out, observed=core_ok, filled=has_pred, mean=mean, plan=validity)
    if alpha_raw is not None:
        out = np.concatenate([out, alpha_values(valid, alpha_raw, job.dtype)[None]])
    std_out = np.where(core_ok, 0.0, np.where(has_pred, std, np.nan)).astype(np.float32)
    return block, out, std_out, int(has_pred.sum()), tiles[0], valid


def _run_blocks(job: BlockJob, blocks: list[tuple[int, int, int, int]], scheduler: str | None) -> Any:
    """Yield block results, computed here or on a Dask cluster (in completion order)."""
    if scheduler is None:
        for block in blocks:
            yield run_block(job, block)
        return
    if job.model.startswith("object:"):
        raise ConfigError("--scheduler needs the model as a name or directory, not an in-memory object")
    try:
        from distributed import Client, as_completed
    except ImportError as err:  # pragma: no cover - distributed is a core dependency
        from geonp.errors import MissingDependencyError

        raise MissingDependencyError("dask.distributed is not installed; pip install 'dask[distributed]'") from err
    try:
        client = Client(scheduler, timeout="10s")
    except OSError as err:
        raise ConfigError(f"cannot reach the Dask scheduler at {scheduler} ({err}); check the address") from err
    try:
        futures = client.map(run_block, [job] * len(blocks), blocks, pure=False)
        for future in as_completed(futures):
            yield future.result()
    finally:
        client.close()


def _plan(info: RasterInfo, bands: list[int], blocks: list[tuple[int, int, int, int]], opts: TileOptions,
          gap_pixels: int, gap_tiles: int, block_size: int) -> dict[str, Any]:
    halo = opts.search_radius + opts.overlap + opts.tile_size
    side = block_size + 2 * halo
    block_bytes = side * side * len(bands) * (8 + 1 + 8 + 8)  # values, mask, normalised, distance
    q = (opts.tile_size + 2 * opts.overlap) ** 2
    attn_bytes = opts.batch_tiles * 4 * (opts.max_context + q) * opts.max_context * 4 * 3
    # measured on the 2-core development CPU (1 thread, benchmarks/fill.py): ~0.15 s per 48 px tile
    # with gaps at 256 context pixels; cost grows about with the square of the context
    seconds_per_tile = 0.15 * (opts.max_context / 256) ** 2
    return {
        "raster": f"{info.width}x{info.height}, {len(bands)} band(s), {info.dtype}",
        "blocks": len(blocks),
        "block_pixels_with_halo": f"{side}x{side}",
        "tiles_with_gaps": gap_tiles,
        "gap_pixels": gap_pixels,
        "context_per_tile": opts.max_context,
        "queries_per_tile_max": q,
        "estimated_peak_memory_mb": round((block_bytes + attn_bytes) / 2**20 + 400),
        "estimated_cpu_seconds": round(gap_tiles * seconds_per_tile * 1.3, 1),
    }


def fill_array(
    values: np.ndarray,
    valid: np.ndarray,
    *,
    model: str | os.PathLike[str] | Any = "default",
    device: str = "auto",
    tile_size: int | None = None,
    overlap: int = 8,
    max_context: int | None = None,
    search_radius: int = 512,
    max_distance: float | None = None,
    origin: tuple[int, int] = (0, 0),
    region: tuple[int, int, int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fill the gaps of an in-memory ``[bands, h, w]`` array.

    Args:
        values: band values (anything where not valid).
        valid: bool, True where observed (same shape as ``values`` or ``[h, w]``).
        model: built-in name, model directory, or a loaded model.
        device: ``auto``, ``cpu`` or ``cuda``.
        tile_size: tile core edge.
        overlap: tile blend margin.
        max_context: observed pixels per tile.
        search_radius: farthest a tile looks for context.
        max_distance: leave gaps farther than this unfilled.
        origin: the array's offset in a larger raster (keeps tiles aligned across chunks).
        region: ``(r0, r1, c0, c1)`` to fill (default all); the rest is context only.

    Returns:
        ``(filled float64, std float32)``: observed pixels unchanged and std 0 there; unfilled gaps NaN.
    """
    from geonp.models.registry import cached_model

    if values.ndim == 2:
        values = values[None]
    valid = np.broadcast_to(valid, values.shape) & np.isfinite(values)
    if not valid.any():
        raise NoValidPixelsError("the array has no valid pixel to fill from")
    loaded = model if not isinstance(model, str | os.PathLike) else cached_model(str(model), "cpu")
    tile_size, max_context = tile_defaults(loaded, tile_size, max_context)
    dev = _resolve_device(device)
    module = loaded.module.to(dev).eval()
    norm = _normalizer_for(loaded, values.shape[0], lambda: (values.reshape(values.shape[0], -1),
                                                              valid.reshape(values.shape[0], -1)))
    opts = TileOptions(tile_size=tile_size, overlap=overlap, max_context=max_context, search_radius=search_radius)
    h, w = values.shape[1:]
    r0, r1, c0, c1 = region or (0, h, 0, w)
    mean, std = fill_block(module, values.astype(np.float64), valid, (r0, r1, c0, c1), origin=origin,
                           norm=norm, opts=opts, device=dev, max_distance=max_distance,
                           std_scale=(loaded.calibration or {}).get("std_scale"))
    core = (slice(None), slice(r0, r1), slice(c0, c1))
    filled = np.where(valid[core], values[core], mean)
    std_out = np.where(valid[core], 0.0, std).astype(np.float32)
    return filled, std_out


def fill(da: Any, *, model: str | os.PathLike[str] = "default", nodata: float | None = None,
         device: str = "auto", tile_size: int | None = None, overlap: int = 8, max_context: int | None = None,
         search_radius: int = 512, max_distance: float | None = None) -> Any:
    """Fill the gaps of an ``xarray.DataArray`` (``[band,] y, x``); lazy when it is Dask-backed.

    Missing pixels are NaN/Inf, ``nodata`` (default ``da.rio.nodata`` or ``da.attrs["_FillValue"]``).
    A Dask-backed array is filled chunk by chunk: each output chunk reads its input chunk with a
    halo of ``search_radius + tile_size + overlap`` pixels, so tiles align across chunks and the
    result equals an in-memory fill.

    Returns:
        An ``xarray.Dataset`` with ``filled`` (in the input's dtype, nodata and CRS set the
        rioxarray way) and ``uncertainty`` (float32 std, 0 on observed pixels, NaN where nothing
        was filled), with the input's coordinates and attributes
        (:func:`geonp.xarray_result.build_result`).
    """
    if da.ndim not in (2, 3):
        raise InputRasterError(f"expected a DataArray with dims (band, y, x) or (y, x), got {da.dims}")
    squeeze = da.ndim == 2
    arr3 = da.expand_dims("band") if squeeze else da
    if nodata is None:
        nodata = arr3.attrs.get("_FillValue", arr3.attrs.get("nodata"))
        try:
            nodata = arr3.rio.nodata if arr3.rio.nodata is not None else nodata
        except Exception:  # noqa: BLE001 - rioxarray not imported or no CRS: fall back to attrs
            pass
    from geonp.models.registry import cached_model

    tile_size, max_context = tile_defaults(cached_model(str(model), "cpu"), tile_size, max_context)
    kwargs = dict(model=model, device=device, tile_size=tile_size, overlap=overlap, max_context=max_context,
                  search_radius=search_radius, max_distance=max_distance)
    data = arr3.data
    if hasattr(data, "dask"):
        filled, std = _fill_dask(data, nodata, kwargs, halo=search_radius + tile_size + overlap)
    else:
        values = np.asarray(data, dtype=np.float64)
        filled, std = fill_array(values, _valid(values, nodata), **kwargs)
    from geonp.xarray_result import build_result

    ds = build_result(filled, std, arr3, nodata=nodata)
    if squeeze:
        ds = ds.isel(band=0, drop=True)
    return ds


def _valid(values: np.ndarray, nodata: float | None) -> np.ndarray:
    ok = np.isfinite(values)
    if nodata is not None and not (isinstance(nodata, float) and math.isnan(nodata)):
        ok &= values != nodata
    return ok


def _fill_dask(data: Any, nodata: float | None, kwargs: dict[str, Any], *, halo: int) -> tuple[Any, Any]:
    """Build lazy filled/std arrays, one delayed task per output chunk (input read with a halo)."""
    import dask
    import dask.array as dsa

    data = data.rechunk({0: -1})
    _, h, w = data.shape
    row_edges = np.cumsum((0,) + data.chunks[1])
    col_edges = np.cumsum((0,) + data.chunks[2])

    @dask.delayed(pure=True)
    def one(block: np.ndarray, r0: int, c0: int, region: tuple[int, int, int, int]) -> np.ndarray:
        values = np.asarray(block, dtype=np.float64)
        filled, std = fill_array(values, _valid(values, nodata), origin=(r0, c0), region=region, **kwargs)
        return np.stack([filled, std.astype(np.float64)])

    rows = []
    for i in range(len(row_edges) - 1):
        cols = []
        for j in range(len(col_edges) - 1):
            r0, r1, c0, c1 = row_edges[i], row_edges[i + 1], col_edges[j], col_edges[j + 1]
            hr0, hr1, hc0, hc1 = max(0, r0 - halo), min(h, r1 + halo), max(0, c0 - halo), min(w, c1 + halo)
            block = data[:, hr0:hr1, hc0:hc1]
            region = (r0 - hr0, r1 - hr0, c0 - hc0, c1 - hc0)
            shape = (2, data.shape[0], r1 - r0, c1 - c0)
            cols.append(dsa.from_delayed(one(block, int(hr0), int(hc0), region), shape=shape, dtype=np.float64))
        rows.append(cols)
    both = dsa.block([[c for c in row] for row in rows]) if rows else None
    return both[0], both[1].astype(np.float32)
