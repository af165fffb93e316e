"""Fill an xarray DataArray (``[band,] y, x``), lazily when it is Dask-backed: ``fill``.

A Dask-backed ``DataArray`` is filled chunk by chunk with one plan (:func:`dask_plan`), each chunk
read with a halo so that tiles align across chunks and the result equals an in-memory fill; the
reference regression's lines are summed over fixed windows of the whole array first. Each chunk
runs :func:`geonp.filling.block.fill_block`, as :func:`geonp.filling.arrays.fill_array` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
from rasterio.windows import Window

from geonp.config import FillConfig
from geonp.data.tasks import ReferenceView
from geonp.errors import ConfigError, InputRasterError, NoValidPixelsError
from geonp.filling import survey
from geonp.filling.arrays import (
    _in_type,
    _refuse_files,
    _refuse_references_for_classes,
    check_nodata,
    fill_array,
)
from geonp.filling.block import BlockInput, fill_block
from geonp.filling.inputs import Reference, as_references
from geonp.filling.plan import FillPlan, fill_model, load_for_fill, plan_model
from geonp.filling.predict import tune_heap
from geonp.filling.references import LineStats, ReferenceLines
from geonp.io.masks import valid_mask
from geonp.io.raster import cap_gdal_cache
from geonp.tasks.tiling import Region

__all__ = ["check_dataarray", "dask_plan", "fill", "nodata_of"]


def fill(da: Any, config: FillConfig | None = None, *, references: Sequence[Reference | tuple[Any, float]] = (),
         **options: Any) -> Any:
    """Fill the gaps of an ``xarray.DataArray`` (``[band,] y, x``); lazy when it is Dask-backed.

    ``geonp.fill`` is :func:`geonp.filling.cube.fill`: it fills a data cube with a ``time`` dimension
    (:func:`geonp.filling.cube.fill_cube`) and hands one date to this function.

    Missing pixels are NaN/Inf, ``nodata`` (default ``da.rio.nodata`` or ``da.attrs["_FillValue"]``).
    A Dask-backed array is filled chunk by chunk with one plan (:func:`dask_plan`: the model, and
    the normaliser from the windows ``fill_raster`` samples, computed now): each output chunk reads
    its input chunk with a halo of ``search_radius + tile_size + 2 * overlap`` pixels, so tiles
    align across chunks and the result equals an in-memory fill.

    ``references`` are other dates of the same grid, each a :class:`~geonp.filling.inputs.Reference`
    of a DataArray (or its ``(DataArray, days)`` pair) with ``days`` the date offset from ``da``'s
    date (negative = before it); their gaps follow the same rule (their own
    nodata). They are filled with the ``multidate`` model by default and the reference
    regression (``reference_fit``), whose lines are fitted on the whole array first (one pass
    over a Dask-backed input), as ``geonp fill --reference`` does. Reproject references onto
    ``da``'s grid first (``rioxarray``'s ``reproject_match``).

    ``categorical="nearest"`` fills a class array with the class of the nearest observed pixel
    (:mod:`geonp.filling.classes`; no model runs, and chunks are read with a halo of its reach).

    Returns:
        An ``xarray.Dataset`` with ``filled`` (in the input's dtype, CRS set the rioxarray way,
        nodata as the input's: an input without nodata gets none, as ``geonp fill`` writes
        none) and ``uncertainty`` (float32 std, 0 on observed pixels, NaN where nothing was
        filled), with the input's coordinates and attributes
        (:func:`geonp.filling.xarray_result.build_result`; also ``da.geonp.fill()``).
    """
    if da.ndim not in (2, 3):
        raise InputRasterError(f"expected a DataArray with dims (band, y, x) or (y, x), got {da.dims}; select or "
                               "stack the other dimensions first (da.isel(...), da.stack(band=[...]))")
    squeeze = da.ndim == 2
    arr3 = da.expand_dims("band") if squeeze else da
    cfg = FillConfig.of(config, **options)
    nodata = nodata_of(arr3, cfg)
    refs = _xarray_references(references, arr3)
    if cfg.categorical == "nearest":
        _refuse_references_for_classes(refs)
    data = arr3.data
    footprint = None
    if not cfg.fill_outside:  # the same footprint rule as fill_raster (geonp.io.footprint)
        from geonp.io.footprint import footprint_of_array

        footprint = footprint_of_array(_valid(data, nodata).any(axis=0))
    if hasattr(data, "dask"):
        filled, std = _fill_dask(data, nodata, cfg, footprint=footprint, references=refs)
    else:
        values = np.asarray(data, dtype=np.float64)
        h, w = values.shape[1:]
        ref_values = [np.asarray(r, dtype=np.float64) for r, _ in refs]
        inside = _inside(footprint, Window(0, 0, w, h), [valid_mask(r, nodata=cfg.nodata) for r in ref_values])
        filled, std = fill_array(values, _valid(values, nodata), cfg, fillable=inside,
                                 references=[(r, None, days) for r, (_, days) in zip(ref_values, refs, strict=True)])
    from geonp.filling.xarray_result import build_result

    ds = build_result(filled, std, arr3, nodata=nodata)
    if squeeze:
        ds = ds.isel(band=0, drop=True)
    return ds


def check_dataarray(obj: Any, what: str) -> None:
    """Refuse ``obj`` unless it is an ``xarray.DataArray``, saying what to give instead."""
    import xarray as xr

    if isinstance(obj, xr.DataArray):
        return
    if isinstance(obj, xr.Dataset):
        name = next(iter(obj.data_vars), "B04")
        kind, hint = "Dataset", f"pick one variable: ds[{name!r}], or its variables as bands: ds.to_array('band')"
    elif isinstance(obj, np.ndarray):
        kind, hint = "numpy array", "geonp.fill_array fills numpy arrays"
    else:
        kind, hint = type(obj).__name__, "wrap it: xr.DataArray(values, dims=('band', 'y', 'x'))"
    raise InputRasterError(f"{what} must be an xarray DataArray, not a {kind}; {hint}")


def nodata_of(da: Any, cfg: FillConfig) -> float | None:
    """The nodata value in force for ``da``: the option's, else ``rio.nodata``, ``_FillValue`` or ``nodata``.

    Raises:
        ConfigError: a nodata value ``da``'s type cannot hold.
    """
    nodata = cfg.nodata
    if nodata is None:
        nodata = da.attrs.get("_FillValue", da.attrs.get("nodata"))
        with contextlib.suppress(Exception):  # rioxarray not imported or no CRS: keep the attrs' value
            nodata = da.rio.nodata if da.rio.nodata is not None else nodata
    check_nodata(nodata, da.dtype)
    return nodata


def _inside(footprint: Any, window: Window, observed_by: Sequence[np.ndarray]) -> np.ndarray | None:
    """Where gaps may be filled: inside the footprint, or observed by a reference (``observed_by``: their masks).

    A pixel a reference observes is inside the scene where the footprint is only the collar's
    shape (:mod:`geonp.io.footprint`).
    """
    return None if footprint is None else footprint.fillable(window, observed_by)


def _valid(values: Any, nodata: float | None) -> Any:
    """:func:`geonp.io.masks.valid_mask` of numpy values, block by block (lazily) of Dask ones."""
    if hasattr(values, "dask"):
        return values.map_blocks(lambda block: valid_mask(block, nodata=nodata), dtype=bool)
    return valid_mask(values, nodata=nodata)


def _xarray_references(references: Sequence[Any], like: Any) -> list[tuple[Any, float]]:
    """``geonp.fill``'s references as ``([band, y, x] data, days)``, checked against ``like``'s grid."""
    out = []
    for i, item in enumerate(as_references(references), 1):
        _refuse_files(i, item, "geonp.fill")
        assert item.days is not None  # Reference.check: in-memory references carry their days
        check_dataarray(item.source, f"geonp.fill's reference {i}")
        if item.valid is not None:
            raise ConfigError(f"reference {i}: a DataArray's gaps are its NaN/Inf and nodata; valid is for "
                              "fill_array")
        ref, days = item.source, float(item.days)
        ref3 = ref.expand_dims("band") if ref.ndim == 2 else ref
        if ref3.shape != like.shape:
            raise InputRasterError(f"reference {i} has shape {tuple(ref3.shape)}, the array {tuple(like.shape)}; "
                                   "reproject it onto the array's grid first (rioxarray's reproject_match)")
        data = ref3.data
        ref_nodata = ref3.attrs.get("_FillValue", ref3.attrs.get("nodata"))
        with contextlib.suppress(Exception):
            ref_nodata = ref3.rio.nodata if ref3.rio.nodata is not None else ref_nodata
        if ref_nodata is not None:  # its own nodata becomes NaN, the missing value every fill knows
            data = data.astype(np.float64)
            data = (data.map_blocks(lambda b, v=ref_nodata: np.where(b == v, np.nan, b), dtype=np.float64)
                    if hasattr(data, "dask") else np.where(data == ref_nodata, np.nan, data))
        out.append((data, days))
    return out


#: The reference regression's sums are taken on windows of this many pixels a side, aligned on the
#: grid, and added in one fixed order: float sums then come out the same bit for bit whatever the
#: chunks (summed chunk by chunk, their order and grouping would follow the chunks).
STATS_WINDOW = 512


def _window_sums(block: np.ndarray, *refs: np.ndarray, nodata: float | None, ref_nodata: float | None) -> LineStats:
    """The regression's sums over one window of the target (``[bands, h, w]``) and its references."""
    values = np.ascontiguousarray(block, dtype=np.float64)
    stats = LineStats.empty(len(refs), values.shape[0])
    ref_values = [np.ascontiguousarray(r, dtype=np.float64) for r in refs]
    stats.add(values, _valid(values, nodata), [(r, valid_mask(r, nodata=ref_nodata)) for r in ref_values])
    return stats


def _lines_of_sums(parts: Sequence[LineStats]) -> ReferenceLines | None:
    """Add the windows' sums in their order and fit the lines."""
    return functools.reduce(operator.add, parts).lines()


def _lines_of_dask(data: Any, nodata: float | None, cfg: FillConfig, references: Sequence[tuple[Any, float]]
                   ) -> Any:
    """The reference regression's lines over the whole Dask array, lazily (a ``dask.delayed`` reduction).

    The sums are taken on fixed windows of the grid (:data:`STATS_WINDOW`), whatever the chunks,
    and added in row-major order, so that the lines do not depend on the chunking, bit for bit.
    """
    import dask

    _, h, w = data.shape
    parts = []
    for r0 in range(0, h, STATS_WINDOW):
        for c0 in range(0, w, STATS_WINDOW):
            win = (slice(None), slice(r0, min(h, r0 + STATS_WINDOW)), slice(c0, min(w, c0 + STATS_WINDOW)))
            parts.append(dask.delayed(_window_sums, pure=True)(data[win], *(r[win] for r, _ in references),
                                                                 nodata=nodata, ref_nodata=cfg.nodata))
    return dask.delayed(_lines_of_sums, pure=True)(parts)


def dask_plan(data: Any, nodata: float | None, cfg: FillConfig, *, references: bool) -> tuple[FillPlan, Any]:
    """The plan of a Dask fill of ``data`` (``[bands, y, x]``) and the model it loaded (None: no model).

    Built once per date, before any chunk: the normaliser, where it is fitted on the input, from
    the windows :func:`fill_raster <geonp.filling.raster.fill_raster>` samples of the same raster
    (:func:`~geonp.filling.survey.sample_windows`; only they are computed), so that no chunk's
    fill depends on the chunks. The plan holds no reference lines: they are a lazy reduction
    (:func:`_lines_of_dask`) that :func:`_fill_dask` adds to it.
    """
    n = data.shape[0]

    def sample() -> tuple[np.ndarray, np.ndarray]:
        return survey.sample_windows(data.shape[1], data.shape[2], n, functools.partial(_read_windows, data, nodata,
                                                                                        cfg.nodata))

    if cfg.categorical == "nearest":
        return FillPlan.build(cfg, None, n_bands=n, sample=sample, class_fill=True), None
    loaded = load_for_fill(fill_model(cfg.model, references=references), references=references)
    return FillPlan.build(cfg, loaded, n_bands=n, sample=sample), loaded


def _read_windows(data: Any, nodata: float | None, option_nodata: float | None, windows: list[Window]
                  ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Values and observed flags of windows of ``data`` (computed together when it is a Dask array)."""
    parts = [data[:, w.row_off:w.row_off + w.height, w.col_off:w.col_off + w.width] for w in windows]
    if hasattr(data, "dask"):
        import dask

        parts = list(dask.compute(*parts))
    values = [np.asarray(p, dtype=np.float64) for p in parts]
    return [(v, _observed(v, nodata, option_nodata)) for v in values]


def _observed(values: np.ndarray, nodata: float | None, option_nodata: float | None) -> np.ndarray:
    """The observed pixels of a chunk as ``fill_array`` marks them (the option's nodata, then the array's)."""
    return valid_mask(values, nodata=option_nodata, internal_valid=_valid(values, nodata))


def _with_lines(plan: FillPlan, lines: ReferenceLines | None) -> FillPlan:
    """``plan`` with the reference regression's lines (fitted lazily on the whole array)."""
    return plan if lines is None else dataclasses.replace(plan, reference_lines=lines)


@dataclasses.dataclass(frozen=True)
class ChunkUnits:
    """What every chunk of a lazy fill reads its values with.

    Attributes:
        nodata: the input's nodata value, or None.
        option_nodata: the ``nodata=`` the user gave (the references' too), or None.
        days: each reference's date offset from the target's date.
    """

    nodata: float | None
    option_nodata: float | None
    days: tuple[float, ...]


def _fill_chunk(block: np.ndarray, at: tuple[int, int, Region], footprint: Any,
                plan: FillPlan, loaded: Any, units: ChunkUnits, *refs: np.ndarray) -> np.ndarray:
    """Fill one output chunk from its input read with a halo: ``[2, bands, h, w]`` (filled, std).

    ``at``: the block's ``(row, col)`` offset in the input and its chunk's ``region`` within it.
    ``loaded`` is the model when it was given as an object; else this worker's copy of the
    model the plan names is used (:func:`~geonp.filling.plan.plan_model`, loaded once per worker).
    """
    if tune_heap():  # a Dask worker: it reads each chunk of the input's files once, GDAL's cache only grows
        cap_gdal_cache()
    r0, c0, region = at
    option_nodata = units.option_nodata
    values = np.asarray(block, dtype=np.float64)
    valid = _observed(values, units.nodata, option_nodata)
    references = tuple(ReferenceView(r, valid_mask(r, nodata=option_nodata), d)
                       for r, d in zip((np.asarray(r, dtype=np.float64) for r in refs), units.days, strict=True))
    core = (slice(None), *region.slices)
    if not valid.any() and not any(r.observed.any() for r in references):
        # nothing observed within the chunk's halo: its gaps have no context
        return np.stack([values[core], np.where(valid[core], 0.0, np.nan)])
    inside = _inside(footprint, Window(c0, r0, values.shape[2], values.shape[1]), [r.observed for r in references])
    predictor = None if plan.class_reach is not None else plan.predictor(loaded or plan_model(plan))
    out = fill_block(BlockInput(values, valid, region, origin=(r0, c0), fillable=inside, references=references),
                     plan, predictor)
    filled = _in_type(values[core], valid[core], out.mean, option_nodata)
    return np.stack([filled, out.uncertainty.astype(np.float64)])


def _fill_dask(data: Any, nodata: float | None, cfg: FillConfig, *, footprint: Any = None,
               references: Sequence[tuple[Any, float]] = (), blocks: int | None = None) -> tuple[Any, Any]:
    """Build lazy filled/std arrays, one delayed task per output chunk (input read with a halo).

    The fill's plan is built here, once (:func:`dask_plan`), and every chunk's task shares it;
    each chunk is read with the plan's halo (:meth:`FillPlan.halo
    <geonp.filling.plan.FillPlan.halo>`) and filled by :func:`~geonp.filling.block.fill_block`.
    ``footprint`` may be a :class:`~geonp.io.footprint.Footprint` or a ``dask.delayed`` one; the
    reference regression's lines are a Dask reduction over the whole array (:func:`_lines_of_dask`)
    that every chunk's task waits for: nothing but the normaliser's sample windows is computed
    here. ``blocks``: fill squares of this many pixels on the grid (``fill_raster``'s blocks)
    whatever the input's chunks, so that the model's batches, and the result, do not depend on
    them (None: the input's chunks).
    """
    import dask
    import dask.array as dsa
    from dask.delayed import Delayed

    data = data.rechunk({0: -1})
    references = [(r.rechunk(data.chunks) if hasattr(r, "dask") else dsa.from_array(r, chunks=data.chunks), days)
                  for r, days in references]
    try:
        plan, loaded = dask_plan(data, nodata, cfg, references=bool(references))
    except NoValidPixelsError:  # a band observed nowhere: nothing to fill from, every chunk left as it is
        valid = data.map_blocks(_observed, nodata, cfg.nodata, dtype=bool)
        return data.astype(np.float64), dsa.where(valid, 0.0, np.nan).astype(np.float32)
    regression = bool(references) and cfg.reference_fit == "regression"
    halo = plan.halo(regression)
    lines = _lines_of_dask(data, nodata, cfg, references) if regression else None
    # one key that every chunk's task shares (not pure: a pure key would hash the plan's arrays)
    shared_plan = dask.delayed(_with_lines, pure=False)(plan, lines)
    # a model given as an object travels to the workers (once each); a named one each worker loads
    # (a plan built with a model names it: plan.model is None only without one)
    by_object = loaded is not None and plan.model is not None and plan.model.startswith("object:")
    model = dask.delayed(loaded, traverse=False) if by_object else None
    if footprint is not None and not isinstance(footprint, Delayed):
        footprint = dask.delayed(footprint)  # one key that every chunk's task shares
    one = dask.delayed(_fill_chunk, pure=False)
    units = ChunkUnits(nodata, cfg.nodata, tuple(float(d) for _, d in references))
    _, h, w = data.shape
    if blocks is None:
        row_edges, col_edges = np.cumsum((0,) + data.chunks[1]), np.cumsum((0,) + data.chunks[2])
    else:
        row_edges, col_edges = np.r_[0:h:blocks, h], np.r_[0:w:blocks, w]
    rows = []
    for i in range(len(row_edges) - 1):
        cols = []
        for j in range(len(col_edges) - 1):
            r0, r1, c0, c1 = row_edges[i], row_edges[i + 1], col_edges[j], col_edges[j + 1]
            hr0, hr1, hc0, hc1 = max(0, r0 - halo), min(h, r1 + halo), max(0, c0 - halo), min(w, c1 + halo)
            region = Region(int(r0 - hr0), int(r1 - hr0), int(c0 - hc0), int(c1 - hc0))
            shape = (2, data.shape[0], r1 - r0, c1 - c0)
            refs = [r[:, hr0:hr1, hc0:hc1] for r, _ in references]
            task = one(data[:, hr0:hr1, hc0:hc1], (int(hr0), int(hc0), region), footprint, shared_plan, model, units,
                       *refs)
            cols.append(dsa.from_delayed(task, shape=shape, dtype=np.float64))
        rows.append(cols)
    both = dsa.block(rows)
    return both[0], both[1].astype(np.float32)
