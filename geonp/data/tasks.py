"""Raster windows to neural-process tasks (numpy), and padding of tasks into a :class:`Batch`.

A task mirrors what ``geonp fill`` does on a tile: targets are the gap pixels of a query window,
context is chosen by :func:`geonp.tasks.context.select_context` (the nearest observed pixels plus,
with ``n_far``, pixels spread over distance and direction), and coordinates are (row, col) in
pixels relative to the query window's corner.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import torch
from scipy import ndimage

from geonp.data.batch import Batch
from geonp.tasks.context import ContextSpec, select_context, select_reference_context

# Floor of the context std used to standardise a task, in globally normalised units: a tile of
# near-constant context (open water) must not blow its small noise up to unit variance.
STD_FLOOR = 0.05
# Weight (in context pixels) of the band's global std, 1 in normalised units, in a task's scale:
# a handful of context pixels says little about the local spread, so their scale shrinks towards
# the global one; with one pixel it is sqrt(PRIOR_COUNT / (1 + PRIOR_COUNT)) of it, never ~0.
PRIOR_COUNT = 2.0


@dataclass
class Task:
    """One task in numpy (coordinates in pixels, values standardised by the context).

    Values are first normalised per band (:class:`~geonp.tasks.normalize.Normalizer`), then shifted and
    scaled by the mean and std of the task's own context (``shift``, ``scale``), so the model sees
    every task at the same scale whatever the sensor, band or landscape. Predictions go back with
    ``mean * scale + shift`` and ``std * scale``.

    Attributes:
        xc: ``[Nc, P]``; yc: ``[Nc, dy]``; xt: ``[Nt, P]``; yt: ``[Nt, dy]`` or None. ``P`` is 2
            (row, col), or 3 for multi-date models (row, col, days from the target's date).
        shift: ``[dy]`` context mean; scale: ``[dy]`` context std (floored).
    """

    xc: np.ndarray
    yc: np.ndarray
    xt: np.ndarray
    yt: np.ndarray | None
    shift: np.ndarray | None = None
    scale: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class ReferenceView:
    """Another date of the same place, on the arrays of a block, a tile's band group or a training window.

    Its values are in the units its holder states: the raster's own in
    :class:`~geonp.filling.block_input.BlockInput`, the target's globally normalised units once
    :mod:`geonp.filling.block` has normalised them (tiles, training tasks).

    Attributes:
        values: ``[n, h, w]`` (anything where not observed).
        observed: bool ``[n, h, w]``, True where the reference has data.
        days: date offset from the target's date, in days (negative = before it).
    """

    values: np.ndarray
    observed: np.ndarray
    days: float

    @property
    def mask(self) -> np.ndarray:
        """The ``[h, w]`` observed mask of every band: ``observed[0]``.

        The bands of a tile's group or a training window share one gap pattern, in each reference too
        (:func:`geonp.filling.tile_tasks.block_tasks` groups them so; training tasks hold one band).
        """
        return self.observed[0]

    @functools.cached_property
    def nearest(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, cols, distance)`` ``[h, w]``: each pixel's nearest pixel the reference sees (itself where it sees)."""
        if not self.mask.any():
            h, w = self.mask.shape
            return *np.indices((h, w)), np.full((h, w), np.inf)
        distance, (rows, cols) = ndimage.distance_transform_edt(~self.mask, return_indices=True)
        return rows, cols, distance


#: Fewest pixels observed on both dates for a reference to be matched to the target (below it,
#: the reference enters in the global normalisation alone).
MIN_MATCH = 16


def match_reference(ref_at_common: np.ndarray, target_at_common: np.ndarray, ref_values: np.ndarray) -> np.ndarray:
    """Linear histogram matching of a reference to the target on pixels observed on both dates.

    ``ref_values [n, dy]`` mapped by gain ``std_t / std_r`` (clipped to [0.2, 5]) and the offset
    that matches the means of the common pixels ``[m, dy]``; unchanged with fewer than
    :data:`MIN_MATCH` common pixels. The classic first step of reference-based gap filling: the
    model then corrects locally what one gain and offset per window cannot.
    """
    if ref_at_common.shape[0] < MIN_MATCH:
        return ref_values
    sr = np.maximum(ref_at_common.std(0), 1e-3)
    gain = np.clip(target_at_common.std(0) / sr, 0.2, 5.0)
    return (ref_values - ref_at_common.mean(0)) * gain + target_at_common.mean(0)


#: Days per unit of a reference slot's date-offset feature (:class:`ReferenceColumns`).
DAY_UNIT = 32.0
#: A slot's value where its reference does not see the point: the nearest pixel it sees, up to this
#: far (pixels; beyond, 0): a reference's own gaps (SLC-off stripes) then leave no step in its slot.
NEAREST_REACH = 8.0


@dataclass(frozen=True)
class ReferenceColumns:
    """The references at some points, in globally normalised units (before a task's standardisation).

    What a ``ref_slots`` model reads of other dates, where a token model (``temporal``) takes their
    pixels as context tokens: at each point's own pixel, each reference's value matched to the
    target as :func:`match_reference` does (where it does not see the pixel, that of the nearest
    pixel it sees within :data:`NEAREST_REACH`), whether it sees the pixel, and its date offset;
    slots are filled nearest date first, an empty slot all zeros.

    Attributes:
        values: ``[dy, n, slots]`` each slot's reference matched to the target (NaN where it sees no
            pixel within :data:`NEAREST_REACH`: the feature is then 0).
        seen: ``[n, slots]`` 1.0 where the slot's reference sees the point.
        days: ``[slots]`` date offsets in :data:`DAY_UNIT` (0 for an empty slot).
        n_context: the first ``n_context`` points are the context pixels, the others the queries.
    """

    values: np.ndarray
    seen: np.ndarray
    days: np.ndarray
    n_context: int

    def features(self, band: int, shift: float, scale: float) -> np.ndarray:
        """``[n, 3 * slots]`` float32 of band ``band``: values standardised by ``shift``/``scale``, seen, days."""
        v = np.nan_to_num((self.values[band] - shift) / scale)
        days = np.broadcast_to(self.days, self.seen.shape)
        return np.concatenate([v, self.seen, days], -1).astype(np.float32)

    def with_features(self, xc: np.ndarray, xt: np.ndarray, band: int, shift: float, scale: float
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Context and query coordinates ``xc``, ``xt`` with band ``band``'s :meth:`features` after them."""
        f = self.features(band, shift, scale)
        return np.concatenate([xc, f[:self.n_context]], 1), np.concatenate([xt, f[self.n_context:]], 1)


def reference_columns(references: Sequence[ReferenceView], slots: int, context: tuple[np.ndarray, np.ndarray],
                      target_at_context: np.ndarray, queries: tuple[np.ndarray, np.ndarray]) -> ReferenceColumns:
    """The ``slots`` nearest references (by date) at the context pixels, then at the queries.

    Args:
        references: other dates on the window (``values [dy, h, w]``, ``observed``).
        slots: features per point come in this many slots.
        context: ``(rows, cols)`` of the target date's context pixels (the matching's common pixels
            are those a reference also sees).
        target_at_context: ``[n_context, dy]`` target values there, globally normalised.
        queries: ``(rows, cols)`` of the queries.
    """
    rows, cols = np.concatenate([context[0], queries[0]]), np.concatenate([context[1], queries[1]])
    dy = target_at_context.shape[1]
    values = np.full((dy, rows.size, slots), np.nan)
    seen = np.zeros((rows.size, slots))
    days = np.zeros(slots)
    nearest = sorted(references, key=lambda r: abs(r.days))[:slots]
    for s, ref in enumerate(nearest):
        sees = ref.mask[rows, cols]
        common = ref.mask[context]
        at_common = ref.values[:, context[0][common], context[1][common]].T
        near_r, near_c, distance = (a[rows, cols] for a in ref.nearest)
        matched = match_reference(at_common, target_at_context[common], ref.values[:, near_r, near_c].T)
        values[:, :, s] = np.where(distance <= NEAREST_REACH, np.nan_to_num(matched.T), np.nan)
        seen[:, s] = sees
        days[s] = ref.days / DAY_UNIT
    return ReferenceColumns(values, seen, days, context[0].size)


def feature_context(values: np.ndarray, chosen: tuple[np.ndarray, np.ndarray], query_mask: np.ndarray,
                    query_bounds: tuple[int, int, int, int], spec: ContextSpec, *, origin: tuple[int, int] = (0, 0),
                    references: Sequence[ReferenceView] = ()
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ``ref_slots`` model's context: ``(rows, cols, y [n, dy])``, the target date's ``chosen`` pixels.

    Where the target date has no context pixel (a date clouded over the whole search window), the
    references stand in for it: the pixels :func:`select_reference_context` picks where any of
    them sees, each the mean of the references that see it weighed by 1 / |days| (between a date
    before and one after: their linear interpolation in time). Training draws such tasks too.
    """
    rows, cols = chosen
    if rows.size == 0 and references:
        seen = np.stack([r.mask for r in references])
        rr, rc = select_reference_context(seen.any(0), query_mask, query_bounds, spec, origin=origin)
        w = seen[:, rr, rc] / np.array([max(abs(r.days), 1.0) for r in references])[:, None]  # [refs, n]
        y = sum(np.where(w[i] > 0, r.values[:, rr, rc], 0.0) * w[i] for i, r in enumerate(references))
        return rr, rc, (y / w.sum(0)).T
    return rows, cols, values[:, rows, cols].T


def context_values(values: np.ndarray, chosen: tuple[np.ndarray, np.ndarray], query_mask: np.ndarray,
                   query_bounds: tuple[int, int, int, int], spec: ContextSpec, *, origin: tuple[int, int] = (0, 0),
                   references: Sequence[ReferenceView] = ()
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """A query window's context, for training and filling alike.

    ``chosen``: ``(rows, cols)`` of the target date's context pixels (:func:`geonp.tasks.context.select_context`).
    Each reference adds the pixels :func:`geonp.tasks.context.select_reference_context` picks,
    matched to the target by :func:`match_reference` on the target's context pixels it also observes;
    with ``spec.ref_slots`` the context is :func:`feature_context`'s (the references are features).

    Returns:
        ``(rows, cols, days, y, n_target)``: window rows/cols, date offsets, values ``[n, dy]``
        (target date first, then each reference), and how many are of the target date.
    """
    if spec.ref_slots:  # the references enter as features (:func:`with_features`), not as tokens
        rows, cols, y = feature_context(values, chosen, query_mask, query_bounds, spec, origin=origin,
                                        references=references)
        return rows, cols, np.zeros(rows.size), y, int(rows.size)
    rows, cols = chosen
    ys = [values[:, rows, cols].T]
    rs, cs, ds = [rows], [cols], [np.zeros(rows.size)]
    for ref in references:
        rr, rc = select_reference_context(ref.mask, query_mask, query_bounds, spec, origin=origin)
        if rr.size == 0:
            continue
        common = ref.mask[rows, cols]
        ys.append(match_reference(ref.values[:, rows[common], cols[common]].T, ys[0][common],
                                  ref.values[:, rr, rc].T))
        rs.append(rr)
        cs.append(rc)
        ds.append(np.full(rr.size, float(ref.days)))
    return (np.concatenate(rs), np.concatenate(cs), np.concatenate(ds), np.concatenate(ys),
            int(rows.size))


def positions(rows: np.ndarray, cols: np.ndarray, corner: tuple[int, int], days: np.ndarray | None) -> np.ndarray:
    """Model coordinates ``[n, 2]``: row and col from the query window's corner.

    With ``days`` (multi-date models), the date offset is a third column: ``[n, 3]``.
    """
    xy = np.stack([rows - corner[0], cols - corner[1]], -1).astype(np.float32)
    if days is None:
        return xy
    return np.concatenate([xy, np.asarray(days, np.float32)[:, None]], -1)


def task_scale(yc: np.ndarray) -> np.ndarray:
    """Scale ``[dy]`` of a task with context values ``[N, dy]`` in globally normalised units.

    ``sqrt((N s² + k) / (N + k))`` with ``s`` the context std and ``k = PRIOR_COUNT``: the
    context's spread shrunk towards the band's global std (1), floored at ``STD_FLOOR``. With many
    context pixels it is ``s``; with one it is ``sqrt(k / (1 + k))``, so a prediction from a
    single observed pixel keeps a std of the order of the band's spread.
    """
    n = yc.shape[0]
    return _shrunk_scale(n, yc.var(0) if n else np.zeros(yc.shape[1]))


def _shrunk_scale(n: int, var: np.ndarray) -> np.ndarray:
    """:func:`task_scale` from ``n`` context values of variance ``var`` (per band)."""
    return np.maximum(np.sqrt((n * var + PRIOR_COUNT) / (n + PRIOR_COUNT)), STD_FLOOR)


def standardize_bands(y: np.ndarray, n_stats: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`standardize` of each column of ``y [N, dy]`` on its own, all columns at once.

    Returns ``(yc [dy, N], shift [dy], scale [dy])``; row ``j`` of ``yc`` equals
    ``standardize(y[:, j:j + 1], None, n_stats)[0][:, 0]`` bit for bit (each row is reduced as
    one contiguous array, as a single column is).
    """
    rows = np.ascontiguousarray(y.T)
    stats = rows[:, :n_stats] if n_stats else rows
    n = stats.shape[1]
    shift = stats.mean(1)
    scale = _shrunk_scale(n, stats.var(1) if n else np.zeros(rows.shape[0]))
    return (rows - shift[:, None]) / scale[:, None], shift, scale


@overload
def standardize(yc: np.ndarray, yt: np.ndarray, n_stats: int | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
@overload
def standardize(yc: np.ndarray, yt: None, n_stats: int | None = None
                ) -> tuple[np.ndarray, None, np.ndarray, np.ndarray]: ...
def standardize(yc: np.ndarray, yt: np.ndarray | None, n_stats: int | None = None
                ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """Standardise context (and target) values ``[N, dy]`` by the context mean and :func:`task_scale`.

    Values must be in globally normalised units (band mean 0, std 1), as training and filling
    both pass them. ``n_stats``: only the first ``n_stats`` context values (the target date's)
    set the mean and scale, unless there are none (a window seen by references alone).
    """
    stats = yc[:n_stats] if n_stats else yc
    shift = stats.mean(0)
    scale = task_scale(stats)
    return (yc - shift) / scale, None if yt is None else (yt - shift) / scale, shift, scale


@dataclass(frozen=True, eq=False)
class TaskWindow:
    """A window of one date that training tasks are cut from, with its hidden pixels.

    Attributes:
        values: ``[dy, h, w]`` values in globally normalised units.
        valid: bool ``[h, w]``, True where the ground truth exists (outside = neither context
            nor target).
        is_gap: bool ``[h, w]``, True where a pixel is hidden.
        targets: bool ``[h, w]``: only the hidden pixels marked here are targets (the rest are
            hidden all the same); None: every hidden pixel of a query window.
        origin: the window's offset in its raster (positions are hashed absolutely).
        references: other dates of the window (multi-date models); None for single-date models
            (2-D coordinates), a sequence (possibly empty) for multi-date ones (a date column).
    """

    values: np.ndarray
    valid: np.ndarray
    is_gap: np.ndarray
    targets: np.ndarray | None = None
    origin: tuple[int, int] = (0, 0)
    references: Sequence[ReferenceView] | None = None


def window_task(window: TaskWindow, *, core: tuple[int, int, int, int], spec: ContextSpec, max_targets: int,
                rng: np.random.Generator) -> Task | None:
    """Build a training task from a window, as ``geonp fill`` builds one from a tile.

    Args:
        window: the window, its hidden pixels and its other dates.
        core: ``(r0, r1, c0, c1)`` query window; targets are its hidden valid pixels.
        spec: context geometry (:func:`geonp.tasks.context.select_context`).
        max_targets: cap on targets (a random subset; targets are independent given the context).
        rng: generator for the target subset.

    Returns:
        The task (coordinates relative to the query window's corner), or None when it has no
        context or no target.
    """
    values, valid, is_gap, references = window.values, window.valid, window.is_gap, window.references
    r0, r1, c0, c1 = core
    hidden = np.zeros_like(valid)
    hidden[r0:r1, c0:c1] = (is_gap & valid)[r0:r1, c0:c1]
    if window.targets is not None:
        hidden &= window.targets
    if not hidden.any():
        return None
    chosen = select_context(valid & ~is_gap, hidden, core, spec, origin=window.origin)
    cr, cc, days, yc_raw, n_target = context_values(values, chosen, hidden, core, spec, origin=window.origin,
                                                    references=references or ())
    if cr.size == 0:
        return None
    tr, tc = np.nonzero(hidden)
    if tr.size > max_targets:
        pick = rng.choice(tr.size, size=max_targets, replace=False)
        tr, tc = tr[pick], tc[pick]
    yc, yt, shift, scale = standardize(yc_raw, values[:, tr, tc].T, n_target)
    timed = references is not None and not spec.ref_slots
    xc = positions(cr, cc, (r0, c0), days if timed else None)
    xt = positions(tr, tc, (r0, c0), np.zeros(tr.size) if timed else None)
    if spec.ref_slots:
        columns = reference_columns(references or (), spec.ref_slots, (cr, cc), yc_raw, (tr, tc))
        xc, xt = columns.with_features(xc, xt, 0, shift[0], scale[0])
    return Task(xc=xc, yc=yc.astype(np.float32), xt=xt, yt=yt.astype(np.float32), shift=shift, scale=scale)


def collate(tasks: list[Task]) -> Batch:
    """Pad tasks to a common size; padding is marked invalid in ``context_valid``/``target_valid``."""
    b = len(tasks)
    nc = max(t.xc.shape[0] for t in tasks)
    nt = max(t.xt.shape[0] for t in tasks)
    dy, p = tasks[0].yc.shape[1], tasks[0].xc.shape[1]
    xc, yc = np.zeros((b, nc, p), np.float32), np.zeros((b, nc, dy), np.float32)
    xt, yt = np.zeros((b, nt, p), np.float32), np.zeros((b, nt, dy), np.float32)
    cv, tv = np.zeros((b, nc), bool), np.zeros((b, nt), bool)
    for i, t in enumerate(tasks):
        n, m = t.xc.shape[0], t.xt.shape[0]
        xc[i, :n], yc[i, :n], cv[i, :n] = t.xc, t.yc, True
        xt[i, :m], tv[i, :m] = t.xt, True
        if t.yt is not None:
            yt[i, :m] = t.yt
        # padded points sit on a real point so coordinate spans (bias tables) do not grow
        xc[i, n:], xt[i, m:] = t.xc[0], t.xt[0]
    has_y = all(t.yt is not None for t in tasks)
    return Batch(
        xc=torch.from_numpy(xc), yc=torch.from_numpy(yc), xt=torch.from_numpy(xt),
        yt=torch.from_numpy(yt) if has_y else None,
        context_valid=torch.from_numpy(cv), target_valid=torch.from_numpy(tv),
    )
