"""Which observed pixels a task sees as context, for training and filling alike. Pure numpy.

A pixel deep inside a large cloud is hundreds of pixels from data. If its context were only the
pixels nearest to it, they would all lie on one shore of the cloud, and the model could neither
interpolate across the gap nor know how far from data it is. So the context of a query window is
two sets:

* the **near set**: the ``n_near`` observed pixels nearest to any query pixel (the rule of
  :func:`geonp.tasks.tiling.nearest_context`, ranked by a distance transform of the query pixels), which
  keeps the immediate neighbours of every gap;
* the **far set**: up to ``n_far`` more observed pixels spread over distance and direction: the
  plane around the query window is cut into ``rings`` log-spaced distance rings (out to
  ``search_radius``) and ``sectors`` angular sectors, and each cell contributes observed pixels
  picked from a coarse lattice of candidates, so both shores of a cloud and the land beyond it are
  seen at a cost that does not grow with the search window's area.

The choice depends only on absolute pixel positions (lattices are aligned to the raster's grid and
ties and picks use a fixed per-pixel hash), so two blocks or tiles that see the same pixels choose
the same context. Training (:mod:`geonp.data.tasks`) and filling (:mod:`geonp.filling.predict`) both call
:func:`select_context`.

The post-hoc std calibration by distance to data is in :mod:`geonp.filling.calibration`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from scipy import ndimage

from geonp.tasks.tiling import _pixel_jitter, nearest_context

__all__ = [
    "ContextSpec",
    "HaloTooSmall",
    "select_context",
    "select_reference_context",
]

class HaloTooSmall(Exception):
    """A context search needs more pixels around a block than were read (see ``limit``)."""


#: Lattice candidates per ring width: a ring ``w`` px wide is sampled every ``w / 6`` px.
_CANDIDATES_PER_WIDTH = 6
#: First radius of the near search; it doubles until ``n_near`` pixels are found.
_FIRST_RADIUS = 32


@dataclass(frozen=True)
class ContextSpec:
    """How many context pixels a query window gets, and from how far.

    Attributes:
        n_near: observed pixels nearest to the query pixels.
        n_far: extra observed pixels spread over rings and sectors (0 = near set only).
        search_radius: farthest distance (pixels beyond the query window) a context pixel may lie.
        rings: log-spaced distance rings of the far set (the innermost ends at ``search_radius / 2 ** (rings - 1)``).
        sectors: angular sectors of the far set, around the query window's centre.
        n_ref: multi-date: pixels taken from each reference date (:func:`select_reference_context`).
        ref_margin: multi-date: how far (pixels) beyond the query window reference pixels are taken.
        ref_slots: multi-date models that read references as features of each point
            (:attr:`geonp.config.ModelConfig.ref_slots`): the context holds the target's date alone.
    """

    n_near: int = 256
    n_far: int = 0
    search_radius: int = 512
    rings: int = 8
    sectors: int = 16
    n_ref: int = 1024
    ref_margin: int = 4
    ref_slots: int = 0

    def __post_init__(self) -> None:
        """Check the counts; a negative or non-integer one raises ValueError naming it."""
        for f in fields(self):
            v = getattr(self, f.name)
            low = 0 if f.name in ("n_far", "ref_margin", "ref_slots") else 1
            if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < low:
                raise ValueError(f"ContextSpec.{f.name}={v!r} must be an integer >= {low}")

    @property
    def max_points(self) -> int:
        """Largest context size this spec gives."""
        return self.n_near + self.n_far

    def to_dict(self) -> dict[str, int]:
        """The fields as a JSON-ready dict (stored in a model card's ``task_shape``)."""
        return {k: int(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ContextSpec:
        """Build from a dict of fields or a model card's ``task_shape``.

        A ``task_shape`` written before far context existed has only ``max_context``: it gives the
        old rule, ``n_near = max_context`` and ``n_far = 0``. Unknown keys are ignored (a
        ``task_shape`` also holds patch and core sizes).
        """
        d = dict(d or {})
        n_near = d.get("n_near", d.get("max_context", cls.n_near))
        kw = {"n_near": int(n_near), "n_far": int(d.get("n_far", 0))}
        for key in ("search_radius", "rings", "sectors", "n_ref", "ref_margin", "ref_slots"):
            if key in d and d[key] is not None:
                kw[key] = int(d[key])
        return cls(**kw)


def ring_edges(spec: ContextSpec) -> np.ndarray:
    """``rings + 1`` distance edges (px from the query window): 0, then log-spaced to the radius."""
    r = float(spec.search_radius)
    inner = r / 2.0 ** (spec.rings - 1)
    return np.concatenate([[0.0], np.geomspace(inner, r, spec.rings)])


def _near(
    observed: np.ndarray,
    query_mask: np.ndarray,
    qb: tuple[int, int, int, int],
    n_near: int,
    radius_cap: int,
    origin: tuple[int, int],
    limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The near set: a search window that doubles until it holds ``n_near`` observed pixels.

    The rule's window is found first; the pixels are then ranked on the smallest window of
    :data:`_TIGHT_RADII` that provably gives the same answer (:func:`_near_in`), the rule's
    window otherwise. Stripes and dropped pixels find their context within a few pixels of the
    query window, and a distance transform of a 72-px window costs a third of a 128-px one.
    """
    h, w = observed.shape
    radius = _FIRST_RADIUS
    while True:
        radius = min(radius, radius_cap)
        if limit is not None and radius > limit:
            raise HaloTooSmall(f"context search radius {radius} > {limit}")
        win = _window(qb, radius, (h, w))
        if int(np.count_nonzero(observed[win[0]:win[1], win[2]:win[3]])) >= n_near or radius >= radius_cap:
            break
        radius *= 2
    for tight in _TIGHT_RADII:
        if tight >= radius:
            break
        t = _window(qb, tight, (h, w))
        if int(np.count_nonzero(observed[t[0]:t[1], t[2]:t[3]])) <= n_near:
            continue  # too few to choose from (the rule then keeps every pixel of its window)
        rows, cols, reach = _near_in(observed, query_mask, qb, t, n_near, origin)
        # every pixel outside the tight window lies at least tight + 1 from the query window
        if reach < tight + 1:
            return rows, cols
    rows, cols, _ = _near_in(observed, query_mask, qb, win, n_near, origin)
    return rows, cols


#: Smaller search windows the near set is ranked on first (:func:`_near`); the rule's own window
#: (:data:`_FIRST_RADIUS`, doubling) is the answer they must give.
_TIGHT_RADII = (4, 12)


def _window(qb: tuple[int, int, int, int], radius: int, shape: tuple[int, int]) -> tuple[int, int, int, int]:
    """``qb`` grown by ``radius`` and clipped to ``shape``."""
    r0, r1, c0, c1 = qb
    return max(0, r0 - radius), min(shape[0], r1 + radius), max(0, c0 - radius), min(shape[1], c1 + radius)


def _near_in(observed: np.ndarray, query_mask: np.ndarray, qb: tuple[int, int, int, int],
             win: tuple[int, int, int, int], n_near: int, origin: tuple[int, int]
             ) -> tuple[np.ndarray, np.ndarray, float]:
    """The ``n_near`` observed pixels of window ``win`` nearest to the query pixels of ``qb``.

    Returns their rows and columns (nearest first) and the largest ranking distance among them
    (distance to the nearest query pixel plus the tie-breaking jitter).
    """
    r0, r1, c0, c1 = qb
    s0, s1, t0, t1 = win
    sub = observed[s0:s1, t0:t1]
    q = np.zeros(sub.shape, bool)
    q[r0 - s0 : r1 - s0, c0 - t0 : c1 - t0] = query_mask[r0:r1, c0:c1]
    dist = ndimage.distance_transform_edt(~q) if q.any() else None
    rows, cols = nearest_context(sub, (r0 - s0, r1 - s0, c0 - t0, c1 - t0), max_context=n_near,
                                 origin=(origin[0] + s0, origin[1] + t0), query_distance=dist)
    if rows.size == 0:
        reach = 0.0
    else:
        base = dist[rows[-1], cols[-1]] if dist is not None else \
            float(_box_distance(rows[-1:], cols[-1:], (r0 - s0, r1 - s0, c0 - t0, c1 - t0))[0])
        reach = float(base) + float(_pixel_jitter(rows[-1:] + origin[0] + s0, cols[-1:] + origin[1] + t0)[0])
    return rows + s0, cols + t0, reach


def _box_distance(rows: np.ndarray, cols: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """Euclidean distance (px) from pixels to the nearest pixel of a box ``(r0, r1, c0, c1)``."""
    r0, r1, c0, c1 = box
    dr = np.maximum(np.maximum(r0 - rows, rows - (r1 - 1)), 0)
    dc = np.maximum(np.maximum(c0 - cols, cols - (c1 - 1)), 0)
    return np.sqrt((dr * dr + dc * dc).astype(np.float64))


def _far(
    observed: np.ndarray,
    qb: tuple[int, int, int, int],
    spec: ContextSpec,
    origin: tuple[int, int],
    skip_within: float,
    exclude: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The far set: observed lattice candidates, picked round-robin over rings and sectors."""
    w = observed.shape[1]
    o0, o1 = origin
    box = (qb[0] + o0, qb[1] + o0, qb[2] + o1, qb[3] + o1)  # absolute query window
    pr, pc, ring = _far_candidates(observed, box, spec, origin, skip_within)
    if pr.size and exclude.size:
        flat = (pr - o0) * w + (pc - o1)
        ok = ~np.isin(flat, exclude)
        pr, pc, ring = pr[ok], pc[ok], ring[ok]
    if pr.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pick = _round_robin(pr, pc, ring, box, spec)
    return pr[pick] - o0, pc[pick] - o1


def _far_candidates(
    observed: np.ndarray,
    box: tuple[int, int, int, int],
    spec: ContextSpec,
    origin: tuple[int, int],
    skip_within: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observed pixels of each ring's lattice around ``box``: absolute rows, columns and ring."""
    h, w = observed.shape
    o0, o1 = origin
    edges = ring_edges(spec)
    all_r, all_c, all_ring = [], [], []
    for k in range(spec.rings):
        lo, hi = edges[k], edges[k + 1]
        if hi <= skip_within:
            continue  # the near set already covers this ring densely
        step = max(1, int((hi - lo) // _CANDIDATES_PER_WIDTH))
        reach = math.ceil(hi)
        # lattice aligned to the raster grid (multiples of step), clipped to the search window
        ra = max(box[0] - reach, o0)
        rb = min(box[1] + reach, o0 + h)
        ca = max(box[2] - reach, o1)
        cb = min(box[3] + reach, o1 + w)
        rr = np.arange(-(-ra // step) * step, rb, step)
        cc = np.arange(-(-ca // step) * step, cb, step)
        if rr.size == 0 or cc.size == 0:
            continue
        # observed lattice pixels first (cheap), then their distance ring
        sub = observed[rr[:, None] - o0, cc[None, :] - o1]
        ir, ic = np.nonzero(sub)
        pr, pc = rr[ir], cc[ic]
        d = _box_distance(pr, pc, box)
        keep = (d >= max(lo, skip_within)) & ((d < hi) | ((d <= hi) & (k == spec.rings - 1)))
        all_r.append(pr[keep])
        all_c.append(pc[keep])
        all_ring.append(np.full(int(keep.sum()), k))
    if not all_r:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(all_r), np.concatenate(all_c), np.concatenate(all_ring)


def _round_robin(
    pr: np.ndarray, pc: np.ndarray, ring: np.ndarray, box: tuple[int, int, int, int], spec: ContextSpec
) -> np.ndarray:
    """Indices of the ``spec.n_far`` candidates picked round-robin over rings and sectors."""
    centre_r = 0.5 * (box[0] + box[1] - 1)
    centre_c = 0.5 * (box[2] + box[3] - 1)
    angle = np.arctan2(pr - centre_r, pc - centre_c)  # (-pi, pi]
    sector = np.minimum((angle + math.pi) / (2 * math.pi) * spec.sectors, spec.sectors - 1).astype(
        np.int64
    )
    cell = ring * spec.sectors + sector
    key = _pixel_jitter(pr, pc)  # a fixed hash of the absolute position
    # rank of each candidate inside its cell (by hash)
    order = np.lexsort((key, cell))
    cell_s = cell[order]
    starts = np.flatnonzero(np.r_[True, cell_s[1:] != cell_s[:-1]])
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size]))
    # rank of each cell inside its ring (by the hash of its first candidate): every ring with
    # candidates gets a pick before any ring gets its second
    heads = order[starts]
    head_order = np.lexsort((key[heads], ring[heads]))
    ring_h = ring[heads][head_order]
    rstarts = np.flatnonzero(np.r_[True, ring_h[1:] != ring_h[:-1]])
    cell_rank_sorted = np.arange(head_order.size) - np.repeat(
        rstarts, np.diff(np.r_[rstarts, head_order.size])
    )
    cell_rank_of_head = np.empty(heads.size, np.int64)
    cell_rank_of_head[head_order] = cell_rank_sorted
    cell_rank = np.repeat(cell_rank_of_head, np.diff(np.r_[starts, order.size]))
    cell_rank_all = np.empty(order.size, np.int64)
    cell_rank_all[order] = cell_rank
    return np.lexsort((ring, cell_rank_all, rank))[: spec.n_far]


def select_context(
    observed: np.ndarray,
    query_mask: np.ndarray,
    query_bounds: tuple[int, int, int, int],
    spec: ContextSpec,
    *,
    origin: tuple[int, int] = (0, 0),
    limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Choose the context pixels of a query window: the near set, then the far set.

    Args:
        observed: bool ``[h, w]`` search window, True where a pixel may be context.
        query_mask: bool ``[h, w]``, True at pixels to predict; only those inside ``query_bounds``
            count.
        query_bounds: ``(r0, r1, c0, c1)`` of the query window in the search window's pixels.
        spec: how many pixels, from how far.
        origin: the search window's offset in the full raster (positions are hashed absolutely).
        limit: the largest search radius the window holds around the query window (None: all of
            ``spec.search_radius``); a search that needs more raises :class:`HaloTooSmall` (the far
            set always needs the whole radius).

    Returns:
        ``(rows, cols)`` int arrays in the search window: the near set (nearest first), then the
        far set (round-robin over rings and sectors); no pixel twice; at most
        ``spec.n_near + spec.n_far`` pixels, all within ``spec.search_radius`` of the query window.
    """
    observed = np.asarray(observed, bool)
    query_mask = np.asarray(query_mask, bool)
    if observed.shape != query_mask.shape or observed.ndim != 2:
        raise ValueError(
            f"observed {observed.shape} and query_mask {query_mask.shape} must have one 2-D shape"
        )
    r0, r1, c0, c1 = (int(v) for v in query_bounds)
    qb = (r0, r1, c0, c1)
    rows, cols, reach = near_set(observed, query_mask, qb, spec, origin, limit)
    if spec.n_far == 0 or not math.isfinite(reach):
        return rows, cols  # no far set, or every observed pixel within the radius is already context
    exclude = rows * observed.shape[1] + cols
    fr, fc = _far(observed, qb, spec, origin, reach, exclude)
    return np.concatenate([rows, fr]), np.concatenate([cols, fc])


def near_set(observed: np.ndarray, query_mask: np.ndarray, qb: tuple[int, int, int, int], spec: ContextSpec,
             origin: tuple[int, int], limit: int | None) -> tuple[np.ndarray, np.ndarray, float]:
    """A query window's near set (int64 rows and columns) and where its far set starts.

    The far set starts beyond the near set's reach (inside it the near set is already dense);
    the reach is infinite when the near set holds every observed pixel within the radius. Raises
    :class:`HaloTooSmall` when a far set is asked for and ``limit`` is short of the search radius.
    """
    if spec.n_far and limit is not None and limit < spec.search_radius:
        raise HaloTooSmall(f"the far set needs the whole search radius {spec.search_radius} > {limit}")
    rows, cols = _near(observed, query_mask, qb, spec.n_near, spec.search_radius, origin, limit)
    rows, cols = rows.astype(np.int64), cols.astype(np.int64)
    reach = float(_box_distance(rows, cols, qb).max()) if rows.size == spec.n_near else math.inf
    return rows, cols, reach


def select_reference_context(
    ref_observed: np.ndarray,
    query_mask: np.ndarray,
    query_bounds: tuple[int, int, int, int],
    spec: ContextSpec,
    *,
    origin: tuple[int, int] = (0, 0),
) -> tuple[np.ndarray, np.ndarray]:
    """Choose the pixels of one reference date that a query window sees (multi-date fills).

    What another date says about a gap pixel is mostly said *at* that pixel and around it, so a
    reference contributes its observed pixels inside the query window grown by
    ``spec.ref_margin``: first those at query pixels, then the others; beyond ``spec.n_ref`` they
    are thinned by a fixed per-pixel hash (the same in every block and in training).

    Args:
        ref_observed: bool ``[h, w]``, True where the reference date has data (same window as the
            target's arrays).
        query_mask: bool ``[h, w]``, True at pixels to predict.
        query_bounds: ``(r0, r1, c0, c1)`` of the query window.
        spec: ``n_ref`` and ``ref_margin``.
        origin: the window's offset in the full raster.

    Returns:
        ``(rows, cols)`` in the window, in row-major order; at most ``spec.n_ref``.
    """
    h, w = ref_observed.shape
    r0, r1, c0, c1 = (int(v) for v in query_bounds)
    m = spec.ref_margin
    s0, s1, t0, t1 = max(0, r0 - m), min(h, r1 + m), max(0, c0 - m), min(w, c1 + m)
    rows, cols = np.nonzero(ref_observed[s0:s1, t0:t1])
    rows, cols = rows + s0, cols + t0
    if rows.size <= spec.n_ref:
        return rows, cols
    inside = (rows >= r0) & (rows < r1) & (cols >= c0) & (cols < c1)
    at_query = inside & query_mask[rows, cols]
    key = (~at_query).astype(np.float64) + _pixel_jitter(rows + origin[0], cols + origin[1]) * 1e4
    keep = np.sort(np.argpartition(key, spec.n_ref)[: spec.n_ref])
    return rows[keep], cols[keep]
