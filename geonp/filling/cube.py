"""Fill a data cube ``(time, [band,] y, x)`` from its own dates, lazily on Dask (``geonp.fill(cube)``).

odc-stac and stackstac load STAC items as one lazy ``DataArray`` with a ``time`` dimension. Each
date of such a cube is filled as :func:`geonp.fill` fills one date with references: its
``neighbours`` nearest other dates of the cube (within ``max_days``) are the references, chosen
by the rule ``geonp batch --neighbours`` uses (:func:`geonp.io.timeseries.nearest_dates`), and
the date is filled block by block (:func:`geonp.filling.xarray_fill._fill_dask`), each block read with a
halo. When the cube is Dask-backed nothing is computed but each date's normalisation sample (a few
windows: :func:`geonp.filling.xarray_fill.dask_plan`). The result is the same bit for bit
whatever the cube's chunks: the blocks are ``block_size`` squares of the grid, as
:func:`geonp.fill_raster` lays them (so the model's batches are the same), and the reference
regression's lines of a date are a Dask reduction over fixed windows of the grid
(:func:`geonp.filling.xarray_fill._lines_of_dask`), which the date's blocks wait for. A cube held in
memory is filled at once.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import numpy as np

from geonp.config import FillConfig
from geonp.errors import ConfigError, InputRasterError
from geonp.filling.inputs import Reference
from geonp.filling.xarray_fill import _fill_dask, nodata_of
from geonp.io.masks import valid_mask
from geonp.io.timeseries import nearest_dates

__all__ = ["FROM_SPACE", "NOT_FILLED", "OBSERVED", "cube_neighbours", "fill", "fill_cube"]

#: ``provenance`` codes of a cube fill: observed; 1-250: filled, seen clear by this many of the
#: date's references; filled from the date's own pixels alone (no reference saw it); not filled.
OBSERVED, FROM_SPACE, NOT_FILLED = 0, 254, 255


def fill(da: Any, config: FillConfig | None = None, *, references: Sequence[Reference | tuple[Any, float]] = (),
         neighbours: int | None = None, max_days: float | None = None, mask: Any = None, **options: Any) -> Any:
    """Fill the gaps of an ``xarray.DataArray``: one date, or every date of a data cube; lazy on Dask.

    A DataArray with a ``time`` dimension (``time, [band,] y, x``, as odc-stac and stackstac load
    STAC items) is a cube: every date is filled from its ``neighbours`` (default 2) nearest other
    dates within ``max_days``, its gaps from NaN/nodata or the ``mask`` cube (:func:`fill_cube`).
    Any other (``[band,] y, x``) is one date, filled from its own pixels and the ``references``
    given (:func:`geonp.filling.xarray_fill.fill`, whose docstring tells the options and the result).

    Raises:
        InputRasterError: ``da`` is not a DataArray (a Dataset, a numpy array).
        ConfigError: ``references`` with a cube, or ``neighbours``/``max_days``/``mask`` with one date.
    """
    from geonp.filling import xarray_fill

    xarray_fill.check_dataarray(da, "geonp.fill's input")
    if "time" in da.dims:
        if references:
            raise ConfigError("a cube's references are its own dates; drop references=, or choose them with "
                              "neighbours= and max_days=")
        return fill_cube(da, config, neighbours=2 if neighbours is None else neighbours, max_days=max_days,
                         mask=mask, **options)
    if neighbours is not None or max_days is not None or mask is not None:
        raise ConfigError(f"neighbours=, max_days= and mask= fill a cube with a time dimension; this DataArray has "
                          f"dims {da.dims}: give one date's references with references=[geonp.Reference(DataArray, days=-16)]")
    return xarray_fill.fill(da, config, references=references, **options)


def cube_neighbours(times: Sequence[Any] | np.ndarray, k: int | str | Any, *, max_days: float | None = None,
                    usable: Sequence[bool] | None = None, clear: Any = None
                    ) -> list[list[tuple[int, float]]]:
    """Pick each date's references among the other dates of a cube (:func:`nearest_dates`).

    With a count ``k``, each date gets its ``k`` nearest usable dates. With ``k="auto"`` (or a
    :class:`~geonp.io.reference_choice.CoverageRule`), the candidates are all the other dates within
    ``max_days``, nearest first, and :func:`~geonp.io.reference_choice.choose_references` keeps the
    nearest of them until every gap pixel of the date (where ``clear`` is False) is seen clear by
    ``views`` of them, at most ``cap``. The choice looks at the whole date's gaps at once: every
    block of the date gets the same references (choosing per block is a later refinement).

    Args:
        times: The cube's ``datetime64`` time coordinate.
        k: References per date, or ``"auto"`` / a ``CoverageRule``.
        max_days: Take only dates at most this many days away (None: any).
        usable: Per date, whether it sees ground (any clear pixel); the others are passed over
            for the next nearest. None: every date is usable.
        clear: ``[time, y, x]`` (any array indexed by date first): where each date is clear
            (bool), or on a coarse grid the fraction of each cell clear: a date's gaps are its
            cells below 1, a candidate sees its cells above 0. Needed with ``"auto"`` when the
            cube has several dates.

    Returns:
        Per date, ``(index, days)`` of its references, nearest first (at equal distance the
        earlier date first, then the lower index), ``days`` the offset from the date
        (negative = before it; fractional where the times hold hours).

    Raises:
        ConfigError: A negative ``k`` or ``max_days``, another string than ``"auto"``, or
            ``"auto"`` without ``clear``.
    """
    from geonp.io.reference_choice import choose_references, coverage_rule

    rule = coverage_rule(k)
    stamps = np.asarray(times, dtype="datetime64[us]")
    moments = [t.astype(datetime.datetime) for t in stamps]
    if rule is not None and clear is None and len(moments) > 1:
        raise ConfigError("neighbours='auto' chooses each date's references by what they see of "
                          "its gaps; give clear= (bool [time, y, x], True = clear)")
    out = []
    for i, moment in enumerate(moments):
        others = [j for j in range(len(moments)) if j != i]
        count = len(others) if rule is not None else int(k)  # auto: every candidate, nearest first
        picked = nearest_dates([moments[j] for j in others], moment, count, max_days=max_days,
                               usable=None if usable is None else [bool(usable[j]) for j in others])
        if rule is not None:
            candidates = [np.asarray(clear[others[p]]) > 0 for p in picked]
            gap = np.asarray(clear[i]) < 1
            picked = [picked[c] for c in choose_references(gap, candidates, rule.views, rule.cap)]
        out.append([(others[p], float((stamps[others[p]] - stamps[i]) / np.timedelta64(1, "D")))
                    for p in picked])
    return out


def _check_time(cube: Any) -> np.ndarray:
    """The cube's time coordinate, refused with what to do when it is missing or holds no dates."""
    if "time" not in cube.coords:
        raise InputRasterError("the cube's time dimension has no coordinate; give each date its acquisition time: "
                               "cube.assign_coords(time=pd.to_datetime([...]))")
    times = cube["time"].values
    if not np.issubdtype(times.dtype, np.datetime64):
        raise InputRasterError(f"the cube's time coordinate holds {times.dtype} values, not datetime64 dates; "
                               "convert it: cube.assign_coords(time=pd.to_datetime(cube.time.values))")
    if np.isnat(times).any():
        raise InputRasterError(f"the cube's time coordinate has NaT at position(s) {np.flatnonzero(np.isnat(times)).tolist()}; "
                               "date those slices or drop them (cube.dropna('time'))")
    return times


def _as_cube4(cube: Any) -> tuple[Any, bool]:
    """The cube as ``(time, band, y, x)`` (a band added when it has none), and whether one was added."""
    cube = cube.transpose("time", ...)
    if cube.ndim not in (3, 4):
        raise InputRasterError(f"expected a cube with dims (time, band, y, x) or (time, y, x), got {cube.dims}; "
                               "select or stack the other dimensions first")
    if cube.ndim == 3:
        return cube.expand_dims("band", axis=1), True
    return cube, False


def _gaps_as_nan(cube4: Any, nodata: float | None, mask: Any) -> Any:
    """The cube's values as a float Dask array ``[time, band, y, x]``, NaN on every gap.

    Gaps: NaN/Inf, ``nodata``, and where ``mask`` (dims among the cube's, same sizes) is True or
    non-zero. The float type holds every value exactly: float32 for 8- and 16-bit integers and for
    float32 (half the memory of float64 in the chunks Dask holds), float64 for the others; each
    chunk's fill reads it as float64, so the result does not depend on it.
    """
    import dask.array as dsa

    data = cube4.data
    if not hasattr(data, "dask"):
        data = dsa.from_array(np.asarray(data), chunks=(1, -1, -1, -1))
    data = data.astype(np.promote_types(data.dtype, np.float32))
    observed = data.map_blocks(lambda b: valid_mask(b, nodata=nodata), dtype=bool)
    if mask is not None:
        observed = observed & ~_mask_cube(mask, cube4).rechunk(data.chunks)
    return dsa.where(observed, data, np.nan)


def _mask_cube(mask: Any, cube4: Any) -> Any:
    """The mask as a bool Dask array shaped like ``cube4`` (True = gap), or a one-line error."""
    import dask.array as dsa
    import xarray as xr

    if not isinstance(mask, xr.DataArray):
        raise ConfigError("mask= takes an xarray DataArray with the cube's dims (time, [band,] y, x); True or "
                          "non-zero = gap")
    extra = [d for d in mask.dims if d not in cube4.dims]
    wrong = {d: (mask.sizes[d], cube4.sizes[d]) for d in mask.dims if d in cube4.dims and mask.sizes[d] != cube4.sizes[d]}
    if extra or wrong:
        raise InputRasterError(f"the mask cube has dims {dict(mask.sizes)}, the cube {dict(cube4.sizes)}; give it "
                               "the cube's dims and sizes (the band dim may be left out)")
    gap = mask != 0  # NaN counts as gap, as any non-zero value
    gap = gap.transpose(*[d for d in cube4.dims if d in gap.dims]).broadcast_like(cube4).transpose(*cube4.dims)
    data = gap.data
    return data if hasattr(data, "dask") else dsa.from_array(np.asarray(data))


def _footprint(date: Any) -> Any:
    """A date's data footprint (:func:`geonp.io.footprint.footprint_of_array`), as a ``dask.delayed``."""
    import dask
    import dask.array as dsa

    from geonp.io.footprint import footprint_of_array

    return dask.delayed(footprint_of_array)(dsa.isfinite(date).any(axis=0))


def fill_cube(cube: Any, config: FillConfig | None = None, *, neighbours: int | str | Any = 2,
              max_days: float | None = None, mask: Any = None, **options: Any) -> Any:
    """Fill every date of a data cube from its nearest other dates, lazily when it is Dask-backed.

    Each date is filled as ``geonp.fill(date, references=[(other_date, days), ...])`` fills it,
    with other dates near in time (within ``max_days``; at equal distance the earlier first) as
    references (:func:`cube_neighbours`). ``neighbours="auto"`` takes the nearest
    dates until every gap pixel of the date is seen clear by
    :data:`~geonp.io.reference_choice.AUTO_VIEWS` of them, at most
    :data:`~geonp.io.reference_choice.AUTO_CAP`, skipping a date that sees none of the gaps still
    short of views (:func:`~geonp.io.reference_choice.choose_references`; a date with few gaps gets
    few references, a cloudy one more); the choice is made on the date's whole gap mask, every
    block of it sharing it (a choice per block is a later refinement). The masks are
    ``isfinite`` of every band per pixel, computed once for the whole cube (one pass over it, as
    the check for dates that see no ground), on every pixel up to
    :data:`~geonp.io.reference_choice.AUTO_MASK_PIXELS` in all (time x y x x); beyond that, the
    fraction clear of n x n cells (a cell with a gap is a gap, a reference sees a cell with a
    clear pixel). An int takes exactly that many nearest dates that see ground, by the rule of
    ``geonp batch --neighbours`` (:func:`nearest_dates`). A date without references (none
    within ``max_days``, or no gap to fill), or a cube of one date, is filled from its own
    pixels: with the ``multidate`` model (as ``geonp batch --neighbours`` does) in a cube of
    several dates, with ``default`` in a cube of one (single-date filling). Other models:
    ``model=``.

    Args:
        cube: ``xarray.DataArray`` with dims ``(time, band, y, x)`` or ``(time, y, x)`` (any
            order) and a ``datetime64`` time coordinate; Dask-backed for a lazy fill (any
            chunks: each ``block_size`` block of a date is read with a halo from them).
        config: Fill options (:class:`~geonp.config.FillConfig`); keywords override its fields.
        neighbours: ``"auto"`` (references chosen by what they see of each date's gaps), a
            :class:`~geonp.io.reference_choice.CoverageRule` (the same with other ``views`` and
            ``cap``), or references per date (default 2; 0: each date alone).
        max_days: Take only references at most this many days away (None: any).
        mask: Optional ``DataArray`` of gaps (True or non-zero = gap, e.g. a decoded QA band),
            with the cube's dims (``band`` may be left out) and sizes; gaps also come from
            NaN/Inf and nodata (``rio.nodata``, ``_FillValue`` or ``nodata=``).
        **options: :class:`~geonp.config.FillConfig` fields.

    Returns:
        An ``xarray.Dataset`` with ``filled`` (the cube's dtype, nodata, CRS, attributes),
        ``uncertainty`` (float32 std: 0 on observed pixels, NaN where nothing was filled) and
        ``provenance`` (uint8 per pixel and band: :data:`OBSERVED` 0; 1-250 filled, seen clear
        by that many of the date's references; :data:`FROM_SPACE` 254 filled from the date's
        own pixels alone; :data:`NOT_FILLED` 255 left as nodata), all with the cube's dims and
        coordinates, chunked by date and ``block_size`` squares; lazy for a Dask-backed cube
        (:func:`geonp.filling.xarray_result.build_result`).

    Raises:
        InputRasterError: no datetime64 time coordinate, other dims, or a mask of other dims.
        ConfigError: a negative ``neighbours`` (or another string than ``"auto"``) or
            ``max_days``, or ``categorical="nearest"``.
    """
    import math

    import dask.array as dsa

    from geonp.filling.xarray_result import build_result
    from geonp.io import reference_choice
    from geonp.io.reference_choice import coverage_rule

    coverage_rule(neighbours)  # refuse a bad value before reading anything
    cfg = FillConfig.of(config, **options)
    if cfg.categorical == "nearest":
        raise ConfigError("categorical='nearest' fills one date from its own classes; fill each date of the cube "
                          "with geonp.fill(cube.isel(time=i), categorical='nearest')")
    times = _check_time(cube)
    cube4, added_band = _as_cube4(cube)
    nodata = nodata_of(cube4, cfg)
    data = _gaps_as_nan(cube4, nodata, mask)
    several = len(times) > 1
    if coverage_rule(neighbours) is not None and several:
        # each date's clear pixels (every band finite), in one pass over the cube; a cube of more
        # pixels than AUTO_MASK_PIXELS in all: the fraction clear of step x step cells
        clear = dsa.isfinite(data).all(axis=1)
        step = math.ceil(math.sqrt(clear.size / reference_choice.AUTO_MASK_PIXELS))
        if step > 1:
            pad = [(0, 0), (0, -clear.shape[1] % step), (0, -clear.shape[2] % step)]
            clear = dsa.pad(clear.astype(np.float32), pad, constant_values=np.nan)
            clear = dsa.coarsen(np.nanmean, clear, {1: step, 2: step}).astype(np.float16)
        plan = cube_neighbours(times, neighbours, max_days=max_days, clear=clear.compute())
    else:
        # a date that sees no ground gives nothing as a reference: the next nearest stands in for it
        # (one reduction over the cube, read again by the fill: small beside the model's cost)
        usable = None
        if several and neighbours:
            usable = dsa.isfinite(data).any(axis=(1, 2, 3)).compute()
        plan = cube_neighbours(times, neighbours, max_days=max_days, usable=usable)
    filled, std, seen = [], [], []
    for i, refs in enumerate(plan):
        date_cfg = FillConfig.of(cfg, model=cfg.model if cfg.model is not None else ("multidate" if several else "default"))
        references = [(data[j], days) for j, days in refs]
        footprint = None if cfg.fill_outside else _footprint(data[i])
        f, s = _fill_dask(data[i], nodata, date_cfg, footprint=footprint, references=references,
                          blocks=cfg.block_size)
        filled.append(f)
        std.append(s)
        seen.append(sum((dsa.isfinite(data[j]).astype(np.uint8) for j, _ in refs), dsa.zeros_like(data[i], np.uint8)))
    ds = build_result(dsa.stack(filled), dsa.stack(std), cube4, nodata=nodata)
    ds["provenance"] = _provenance(dsa.isfinite(data), dsa.stack(std), dsa.stack(seen), ds["filled"])
    if added_band:
        ds = ds.isel({cube4.dims[1]: 0}, drop=True)
    ds = ds.transpose(*cube.dims, ...)
    return ds if hasattr(cube.data, "dask") else ds.compute()


def _provenance(observed: Any, std: Any, seen: Any, like: Any) -> Any:
    """The ``provenance`` DataArray of a cube fill (codes: :data:`OBSERVED` ...), shaped and chunked as ``like``."""
    import dask.array as dsa
    import xarray as xr

    code = dsa.where(observed, OBSERVED, dsa.where(~dsa.isfinite(std), NOT_FILLED,
                                                    dsa.where(seen > 0, dsa.minimum(seen, 250), FROM_SPACE)))
    out = xr.DataArray(code.astype(np.uint8), dims=like.dims, coords=like.coords)
    if getattr(like.data, "chunks", None) is not None:
        out = out.chunk(dict(zip(like.dims, like.data.chunks, strict=True)))
    out.attrs = {"long_name": "provenance of each pixel",
                 "flag_values": "0 observed; 1-250 filled, seen clear by this many references; "
                                "254 filled from the date's own pixels alone; 255 not filled"}
    return out
