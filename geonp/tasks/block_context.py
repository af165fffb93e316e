"""The context of every query window of a block at once: the far sets as batched arrays. Pure numpy.

:func:`select_contexts` gives what :func:`geonp.tasks.context.select_context` gives for each window
of a block, bit for bit (``tests/test_block_context.py`` ties them). The near set stays a search
per window; the far set, the larger part of a cloud fill's task building, is worked out for all
windows in a few array operations per ring: windows of one shape and lattice phase share the
candidate offsets of a ring, so their candidates are one gather, and the round-robin pick over
rings and sectors is one set of sorts keyed by window.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np

from geonp.tasks.context import (
    _CANDIDATES_PER_WIDTH,
    ContextSpec,
    near_set,
    ring_edges,
)
from geonp.tasks.tiling import Region, pixel_hash

__all__ = ["select_contexts"]

#: Hash values per cell in a sort key (:func:`~geonp.tasks.tiling.pixel_hash` is 32-bit).
_HASHES = 1 << 32
#: Windows whose candidates are gathered at once (bounds the memory of a ring's gather).
_CHUNK = 128


def select_contexts(observed: np.ndarray, query_mask: np.ndarray, boxes: Sequence[Region],
                    specs: Sequence[ContextSpec], *, origin: tuple[int, int] = (0, 0), limit: int | None = None
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`~geonp.tasks.context.select_context` of each query window of one search window.

    ``boxes[i]`` is a query window, ``specs[i]`` its context spec (their rings, sectors and
    search radius must agree; counts may differ). Raises :class:`~geonp.tasks.context.HaloTooSmall` as the
    one-window rule does.
    """
    near = [near_set(observed, query_mask, box, spec, origin, limit) for box, spec in zip(boxes, specs, strict=True)]
    want = [i for i, (_, _, reach) in enumerate(near) if specs[i].n_far and math.isfinite(reach)]
    far = _far_sets(observed, [boxes[i] for i in want], [near[i] for i in want], [specs[i] for i in want], origin)
    out = [(rows, cols) for rows, cols, _ in near]
    for i, (fr, fc) in zip(want, far, strict=True):
        out[i] = (np.concatenate([out[i][0], fr]), np.concatenate([out[i][1], fc]))
    return out


def _far_sets(observed: np.ndarray, boxes: Sequence[Region], near: Sequence[tuple[np.ndarray, np.ndarray, float]],
              specs: Sequence[ContextSpec], origin: tuple[int, int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The far set of each window (``near``: its near set and reach), as the one-window rule picks it."""
    if not boxes:
        return []
    spec = specs[0]
    if any((s.rings, s.sectors, s.search_radius) != (spec.rings, spec.sectors, spec.search_radius) for s in specs):
        raise ValueError("windows of one batch share their rings, sectors and search radius")
    h, w = observed.shape
    o0, o1 = origin
    boxes_abs = np.array(boxes, np.int64).reshape(-1, 4) + np.array([o0, o0, o1, o1])
    skips = np.array([reach for _, _, reach in near])
    tile, pr, pc, ring, dist = _candidates(observed, boxes_abs, skips, spec, origin)
    # the near set's pixels are not picked again; they lie within its reach, the far set from it on
    edge = np.flatnonzero(dist == skips[tile])
    excluded = np.concatenate([t * h * w + r * w + c for t, (r, c, _) in enumerate(near)])
    keep = np.ones(tile.size, bool)
    keep[edge] = ~np.isin(tile[edge] * (h * w) + (pr[edge] - o0) * w + (pc[edge] - o1), excluded)
    tile, pr, pc, ring = tile[keep], pr[keep], pc[keep], ring[keep]
    pick = _round_robin(tile, pr, pc, ring, boxes_abs, spec, np.array([s.n_far for s in specs]))
    tile, pr, pc = tile[pick], pr[pick], pc[pick]
    ends = np.searchsorted(tile, np.arange(len(boxes) + 1))
    return [(pr[a:b] - o0, pc[a:b] - o1) for a, b in itertools.pairwise(ends)]


@functools.cache
def _ring_offsets(height: int, width: int, phase_r: int, phase_c: int, k: int, rings: int, radius: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lattice points of ring ``k`` around a ``height`` x ``width`` window, row-major.

    Rows and columns relative to the window's corner, and their distance to the window; the
    lattice phase is that of the window's corner less the ring's reach.
    """
    edges = _edges(rings, radius)
    lo, hi = edges[k], edges[k + 1]
    step = max(1, int((hi - lo) // _CANDIDATES_PER_WIDTH))
    reach = math.ceil(hi)
    rel_r = np.arange(-reach + (-phase_r) % step, height + reach, step)
    rel_c = np.arange(-reach + (-phase_c) % step, width + reach, step)
    rr, cc = np.repeat(rel_r, rel_c.size), np.tile(rel_c, rel_r.size)
    dr = np.maximum(np.maximum(-rr, rr - (height - 1)), 0)
    dc = np.maximum(np.maximum(-cc, cc - (width - 1)), 0)
    d = np.sqrt((dr * dr + dc * dc).astype(np.float64))
    ok = (d >= lo) & ((d < hi) | ((d <= hi) & (k == rings - 1)))
    return rr[ok], cc[ok], d[ok]


@functools.cache
def _edges(rings: int, radius: int) -> np.ndarray:
    return ring_edges(ContextSpec(search_radius=radius, rings=rings))


def _candidates(observed: np.ndarray, boxes: np.ndarray, skips: np.ndarray, spec: ContextSpec,
                origin: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Observed lattice candidates of every window: window index, absolute row and column, ring, distance.

    Ordered by window, then ring, then row-major, as the one-window rule lists them.
    """
    h, w = observed.shape
    o0, o1 = origin
    edges = _edges(spec.rings, spec.search_radius)
    parts: list[tuple[np.ndarray, ...]] = []
    for k in range(spec.rings):
        hi = edges[k + 1]
        step = max(1, int((hi - edges[k]) // _CANDIDATES_PER_WIDTH))
        reach = math.ceil(hi)
        active = np.flatnonzero(hi > skips)
        b = boxes[active]
        shape_key = np.stack([b[:, 1] - b[:, 0], b[:, 3] - b[:, 2], (b[:, 0] - reach) % step,
                              (b[:, 2] - reach) % step], 1)
        keys, group = np.unique(shape_key, axis=0, return_inverse=True)
        for g, (bh, bw, ph_r, ph_c) in enumerate(keys.tolist()):
            orr, occ, od = _ring_offsets(bh, bw, ph_r, ph_c, k, spec.rings, spec.search_radius)
            members = active[group.ravel() == g]
            for start in range(0, members.size, _CHUNK):
                t = members[start:start + _CHUNK]
                ar = boxes[t, 0, None] + orr[None, :]
                ac = boxes[t, 2, None] + occ[None, :]
                inside = (ar >= o0) & (ar < o0 + h) & (ac >= o1) & (ac < o1 + w)
                seen = np.zeros(ar.shape, bool)
                seen[inside] = observed[ar[inside] - o0, ac[inside] - o1]
                ti, j = np.nonzero(seen & (od[None, :] >= skips[t, None]))
                parts.append((t[ti], ar[ti, j], ac[ti, j], np.full(ti.size, k), od[j]))
    if not parts:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty, np.zeros(0)
    tile, pr, pc, ring, dist = (np.concatenate(p) for p in zip(*parts, strict=True))
    order = np.argsort(tile * spec.rings + ring, kind="stable")
    return tile[order], pr[order], pc[order], ring[order], dist[order]


def _round_robin(tile: np.ndarray, pr: np.ndarray, pc: np.ndarray, ring: np.ndarray, boxes: np.ndarray,
                 spec: ContextSpec, n_far: np.ndarray) -> np.ndarray:
    """Indices of each window's picks, round-robin over its rings and sectors, window by window.

    The one-window rule's sorts with the window as the first key, each sort on one int64 key
    (the position hash orders as the jitter does). A candidate ranked ``n_far`` or more within
    its cell is never picked, and leaves before the later sorts.
    """
    if tile.size == 0:
        return np.zeros(0, np.int64)
    b = boxes[tile]
    centre_r = 0.5 * (b[:, 0] + b[:, 1] - 1)
    centre_c = 0.5 * (b[:, 2] + b[:, 3] - 1)
    angle = np.arctan2(pr - centre_r, pc - centre_c)
    sector = np.minimum((angle + math.pi) / (2 * math.pi) * spec.sectors, spec.sectors - 1).astype(np.int64)
    cell = tile * (spec.rings * spec.sectors) + ring * spec.sectors + sector
    key = pixel_hash(pr, pc).astype(np.int64)
    order = np.argsort(cell * _HASHES + key, kind="stable")
    cell_s = cell[order]
    starts = np.flatnonzero(np.r_[True, cell_s[1:] != cell_s[:-1]])
    sizes = np.diff(np.r_[starts, order.size])
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size) - np.repeat(starts, sizes)
    # each cell's rank within its window's ring, by the hash of its first candidate
    heads = order[starts]
    window_ring = tile * spec.rings + ring
    head_order = np.argsort(window_ring[heads] * _HASHES + key[heads], kind="stable")
    wr_h = window_ring[heads][head_order]
    rstarts = np.flatnonzero(np.r_[True, wr_h[1:] != wr_h[:-1]])
    cell_rank_of_head = np.empty(heads.size, np.int64)
    cell_rank_of_head[head_order] = np.arange(head_order.size) - np.repeat(rstarts, np.diff(np.r_[rstarts, heads.size]))
    cell_rank = np.empty(order.size, np.int64)
    cell_rank[order] = np.repeat(cell_rank_of_head, sizes)
    live = np.flatnonzero(rank < n_far[tile])
    t, r = tile[live], rank[live]
    # (window, rank in cell, cell's rank in ring, ring): no two candidates share it
    final = live[np.argsort(((t * (r.max() + 1) + r) * spec.sectors + cell_rank[live]) * spec.rings + ring[live])]
    tile_f = tile[final]
    first = np.searchsorted(tile_f, tile_f)  # each pick's window's first pick
    return final[np.arange(final.size) - first < n_far[tile_f]]
