"""Fill an in-memory numpy array: ``fill_array``.

It runs the fill of one block (:func:`geonp.filling.block.fill_block`, with a
:class:`~geonp.filling.plan.FillPlan`) on arrays the caller holds, with the same missing-pixel
rule, footprint rule and model options as :func:`geonp.filling.raster.fill_raster`, which fills
files. xarray and Dask arrays are :mod:`geonp.filling.xarray_fill`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rasterio.windows import Window

from geonp.config import FillConfig
from geonp.data.tasks import ReferenceView
from geonp.errors import ConfigError, InputRasterError, NoValidPixelsError
from geonp.filling import engine
from geonp.filling.block import BlockInput, fill_block
from geonp.filling.inputs import Reference, as_references
from geonp.filling.plan import FillPlan, fill_model, load_for_fill
from geonp.filling.references import fit_regression
from geonp.io.footprint import footprint_of_array
from geonp.io.masks import _nodata_in_dtype, valid_mask
from geonp.io.validity import OutputValidity, finish_block, refuse_complex
from geonp.tasks.tiling import Region

__all__ = ["fill_array"]


def fill_array(
    values: np.ndarray,
    valid: np.ndarray,
    config: FillConfig | None = None,
    *,
    origin: tuple[int, int] = (0, 0),
    region: tuple[int, int, int, int] | None = None,
    fillable: np.ndarray | None = None,
    references: Sequence[Reference | tuple[np.ndarray, np.ndarray | None, float]] = (),
    **options: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """Fill the gaps of an in-memory ``[bands, h, w]`` or ``[h, w]`` array.

    Args:
        values: band values (anything where not valid), ``[bands, h, w]`` or one band ``[h, w]``.
        valid: bool, True where observed (same shape as ``values`` or ``[h, w]``); NaN/Inf and
            ``nodata`` (when given) are missing too, as in :func:`fill_raster` (None: only they).
        config: fill options; keywords override its fields (``model`` may be a loaded model).
            ``categorical="nearest"`` fills each gap with the class of the nearest observed pixel
            and runs no model (:mod:`geonp.filling.classes`); an array has no colour table, so
            ``auto`` fills it as measurements.
        origin: the array's offset in a larger raster (keeps tiles aligned across chunks).
        region: ``(r0, r1, c0, c1)`` to fill (default all); the rest is context only.
        fillable: bool ``[h, w]``: where gaps may be filled (the data footprint). None: the
            footprint of the NaN/Inf and ``nodata`` pixels, as :func:`fill_raster` finds it
            (:mod:`geonp.io.footprint`; ``valid``'s gaps, like clouds, lie inside it): a collar
            around a tilted swath stays unfilled; ``fill_outside=True`` fills every gap.
        references: other dates of the same pixels, for a multi-date model (the built-in
            ``multidate`` when no model is given): each a :class:`~geonp.filling.inputs.Reference`
            (or its ``(values, valid, days)`` triple) with ``values`` of the array's shape,
            ``valid`` its mask (or None: NaN/Inf and ``nodata`` are missing) and ``days`` the date
            offset from the array's date (negative = before it).
        **options: :class:`~geonp.config.FillConfig` fields.

    Returns:
        ``(filled, std)``, shaped like ``values`` (cut to ``region``): a ``[h, w]`` input gives
        ``[h, w]`` outputs. ``filled`` has the type of ``values``: observed pixels unchanged,
        predictions cast to it as :func:`fill_raster` casts them (integers rounded and clipped
        to the type's range; a prediction equal to ``nodata`` moved one step away). Unfilled
        gap pixels (beyond ``max_distance``, outside ``fillable``, without context) are NaN in a
        float array; in an integer array they hold ``nodata``, or without one keep their input
        values. ``std`` is float32: 0 on observed pixels, NaN on unfilled ones (the one mark of
        an unfilled pixel in an integer array without ``nodata``). Arrays of other types (bool)
        give float64.

    Raises:
        InputRasterError: ``values`` not 2-D or 3-D, or ``valid``, ``fillable`` or a reference
            of another shape.
        ConfigError: a ``nodata`` the array's type cannot hold, a ``region`` or ``origin`` that
            does not fit, references given to a model that takes none, or a date offset that is
            not a finite number of days.
    """
    cfg = FillConfig.of(config, **options)
    values = np.asarray(values)
    refuse_complex(values.dtype, "values")
    one_band = values.ndim == 2
    values, valid = _checked(values[None] if one_band else values, valid, cfg.nodata)
    refs = _array_references(references, values.shape, cfg.nodata)
    if not valid.any() and not any(r.observed.any() for r in refs):  # a date under cloud: its references
        raise NoValidPixelsError("the array has no valid pixel to fill from")
    h, w = values.shape[1:]
    region = _check_place(region or (0, h, 0, w), origin, h, w)
    if fillable is not None and np.shape(fillable) != (h, w):
        raise InputRasterError(f"fillable has shape {np.shape(fillable)}; give a bool [h, w] mask of shape {(h, w)}")
    if fillable is None and not cfg.fill_outside:  # fill_raster's footprint: from the data, clouds inside
        footprint = footprint_of_array(valid_mask(values, nodata=cfg.nodata).any(axis=0))
        fillable = footprint.fillable(Window(0, 0, w, h), [r.observed for r in refs])
    plan, predictor = _plan(values, valid, cfg, refs)
    out = fill_block(BlockInput(values.astype(np.float64), valid, region, origin=origin, fillable=fillable,
                                references=tuple(refs)), plan, predictor)
    core = (slice(None), *region.slices)
    filled = _in_type(values[core], valid[core], out.mean, cfg.nodata)
    std_out = out.uncertainty
    return (filled[0], std_out[0]) if one_band else (filled, std_out)


def check_nodata(nodata: float | None, dtype: np.dtype) -> None:
    """Refuse a ``nodata`` that values of ``dtype`` cannot hold (it would match no pixel)."""
    dtype = np.dtype(dtype)
    if nodata is None or not np.issubdtype(dtype, np.number) or _nodata_in_dtype(float(nodata), dtype) is not None:
        return
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else np.finfo(dtype)
    raise ConfigError(f"nodata={nodata!r} cannot be stored in the array's {dtype} values ({info.min}..{info.max}"
                      f"{', whole numbers' if np.issubdtype(dtype, np.integer) else ''}); give a nodata in that "
                      "range, or none")


def _checked(values: np.ndarray, valid: Any, nodata: float | None) -> tuple[np.ndarray, np.ndarray]:
    """``values`` (``[bands, h, w]``) checked, and its observed mask: NaN/Inf, ``nodata`` and ``valid``."""
    if values.ndim != 3:
        raise InputRasterError(f"values has shape {values.shape}; fill_array takes [bands, h, w] or [h, w]: fill "
                               "the images of a stack one by one, or a cube with a time dimension with geonp.fill")
    check_nodata(nodata, values.dtype)
    if valid is not None and np.shape(valid) not in (values.shape, values.shape[1:]):
        raise InputRasterError(f"valid has shape {np.shape(valid)}, values {values.shape}; give valid the shape of "
                               f"values or [h, w] {values.shape[1:]}")
    # the rule every fill uses for a missing pixel: NaN/Inf, the nodata value, the caller's mask
    return values, valid_mask(values, nodata=nodata, internal_valid=valid)


def _check_place(region: Any, origin: Any, h: int, w: int) -> Region:
    """``region`` as four ints inside the ``h`` x ``w`` array; refuse it, or an ``origin`` not two ints."""
    if np.shape(origin) != (2,):
        raise ConfigError(f"origin={origin!r} must be the array's (row, col) offset in a larger raster")
    r0, r1, c0, c1 = np.ravel(region).tolist() if np.shape(region) == (4,) else (0, 0, 0, 0)
    if not (0 <= r0 < r1 <= h and 0 <= c0 < c1 <= w):
        raise ConfigError(f"region={region!r} must be (r0, r1, c0, c1) with 0 <= r0 < r1 <= {h} and "
                          f"0 <= c0 < c1 <= {w}, the rows and columns to fill")
    return Region(int(r0), int(r1), int(c0), int(c1))


def _plan(values: np.ndarray, valid: np.ndarray, cfg: FillConfig,
          refs: list[ReferenceView]) -> tuple[FillPlan, Any]:
    """The plan of an array's fill and its predictor (None for a nearest-class fill: no model)."""
    n = values.shape[0]

    def sample() -> tuple[np.ndarray, np.ndarray]:
        return values.reshape(n, -1), valid.reshape(n, -1)

    if cfg.categorical == "nearest":
        _refuse_references_for_classes(refs)
        return FillPlan.build(cfg, None, n_bands=n, sample=sample, class_fill=True), None
    loaded = load_for_fill(fill_model(cfg.model, references=bool(refs)), references=bool(refs))
    lines = None
    if refs and cfg.reference_fit == "regression":
        lines = fit_regression(values, valid, [(r.values, r.observed) for r in refs])
    plan = FillPlan.build(cfg, loaded, n_bands=n, sample=sample, reference_lines=lines)
    return plan, plan.predictor(loaded)


def _in_type(values: np.ndarray, observed: np.ndarray, mean: np.ndarray, nodata: float | None) -> np.ndarray:
    """``values`` with the predictions ``mean`` (NaN: none) on its gaps, in its own type (``fill_array``)."""
    dtype = values.dtype if np.issubdtype(values.dtype, np.number) else np.dtype(np.float64)
    filled = ~observed & np.isfinite(mean)
    out = values.astype(dtype, copy=True)
    out[filled] = engine.cast(mean[filled], dtype.name)
    # integers: unfilled pixels read nodata and no prediction equals it (as fill_raster writes them);
    # floats: unfilled pixels are NaN
    integer = np.issubdtype(dtype, np.integer)
    plan = OutputValidity(bands=(), alpha_band=None, nodata=nodata if integer else None, dtype=dtype.name,
                          write_mask=False)
    out, _ = finish_block(out, observed=observed, filled=filled, mean=mean, plan=plan)
    return out


def _refuse_references_for_classes(refs: Sequence[Any]) -> None:
    """A nearest-class fill uses the array's own classes: refuse references."""
    if refs:
        raise ConfigError("categorical='nearest' fills each gap from the array's own classes and takes no "
                          "references; drop references, or fill measurements without categorical")


def _array_references(references: Sequence[Any], shape: tuple[int, ...],
                      nodata: float | None) -> list[ReferenceView]:
    """Check ``fill_array``'s references; each on ``shape`` in the array's units."""
    out = []
    for i, item in enumerate(as_references(references), 1):
        _refuse_files(i, item, "fill_array")
        assert item.days is not None  # Reference.check: in-memory references carry their days
        ref, ok, days = item.source, item.valid, item.days
        ref = np.asarray(ref, dtype=np.float64)
        ref = ref[None] if ref.ndim == 2 else ref
        if ref.shape != shape or (ok is not None and np.shape(ok) not in (shape, shape[1:])):
            got = ref.shape if ref.shape != shape else f"{ref.shape} and valid {np.shape(ok)}"
            raise InputRasterError(f"reference {i} has shape {got}, the array {shape}; give each reference (and "
                                   "its valid mask) on the array's grid with the same bands")
        out.append(ReferenceView(ref, valid_mask(ref, nodata=nodata, internal_valid=ok), float(days)))
    return out


def _refuse_files(i: int, ref: Reference, function: str) -> None:
    """An in-memory fill's references are in memory too."""
    if ref.is_file:
        raise ConfigError(f"reference {i}: {function} takes arrays on the array's grid; fill_raster reads files")
