"""The convex hull of a raster's data pixels as half-planes, and the corners it may give back.

Rules 2 and 3 of :mod:`geonp.io.footprint`, as geometry: the hull of the data pixels' centres,
whose outline is split by its vertices on the raster's border into chains; a chain that runs
from one side of the raster to another is kept as a scene edge when the pixels just inside it
have data (along at least half of it, or along a straight run of 16 pixels) and the region beyond
it is at least 8 pixels deep on average, and is dropped otherwise (a cloud over that corner or
side: the region beyond it counts as inside). Pure numpy (and scipy's Qhull); no I/O.
"""

from __future__ import annotations

import logging
import math

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["footprint_half_planes"]

#: Pixels of data along one straight line of a corner-cutting stretch of the hull that make it a
#: scene edge (a swath edge is straight for kilometres; a cloud's outline is not).
_EDGE_LENGTH = 64
#: ... along at least this share of that line (a smooth cloud touches a long line here and there).
_LINE_SHARE = 0.3
#: ... or, on a short stretch (a small raster), data along this share of it, with a straight run
#: of at least _EDGE_RUN pixels.
_EDGE_SHARE = 0.5
_EDGE_RUN = 32
#: ... or, on a chain shorter than that run, a run along this share of it (a tiny raster).
_SHORT_RUN = 0.75
#: Consecutive hull edges lie on one straight line when every vertex between them is this close
#: (pixels) to it: a staircase of pixels along a tilted swath edge is within a pixel of its line.
_LINE_TOLERANCE = 1.5
#: A strip between the hull and the grid's border thinner than this (pixels, on average) is
#: a cloud along the border, never a collar.
_THIN_STRIP = 8


def _hull_vertices(points: np.ndarray) -> np.ndarray | None:
    """The convex hull's vertices counterclockwise, or None when the points are collinear.

    Andrew's monotone chain on the points (at most two per raster row: a few thousand), with
    points on an edge's line dropped, as Qhull does; :func:`_qhull_vertices` is its twin.
    """
    pts = np.unique(np.asarray(points, dtype=np.float64), axis=0)  # sorted by x, then y
    if len(pts) < 3:
        return None
    xy = pts.tolist()  # Python floats: numpy scalars cost 10x in this loop

    def chain(order: range) -> list[int]:
        kept: list[int] = []
        for i in order:
            x, y = xy[i]
            while len(kept) >= 2:
                (ox, oy), (ax, ay) = xy[kept[-2]], xy[kept[-1]]
                if (ax - ox) * (y - oy) - (ay - oy) * (x - ox) > 0:
                    break
                kept.pop()  # a clockwise or straight turn: not a vertex
            kept.append(i)
        return kept

    lower, upper = chain(range(len(xy))), chain(range(len(xy) - 1, -1, -1))
    vertices = lower[:-1] + upper[:-1]
    return pts[vertices] if len(vertices) >= 3 else None


def _qhull_vertices(points: np.ndarray) -> np.ndarray | None:
    """:func:`_hull_vertices` by scipy's Qhull (slower to import than the whole fill of a small raster)."""
    from scipy.spatial import ConvexHull, QhullError

    if len(points) < 3:
        return None
    try:
        return points[ConvexHull(points).vertices]
    except QhullError:
        return None


def _half_plane(p: np.ndarray, q: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """``(a, b, c)`` of the line through p and q with ``a*x + b*y + c <= 0`` on ``centre``'s side."""
    a, b = q[1] - p[1], -(q[0] - p[0])
    c = -(a * p[0] + b * p[1])
    if a * centre[0] + b * centre[1] + c > 0:
        a, b, c = -a, -b, -c
    return np.array([a, b, c], dtype=np.float64)


def _sides(p: np.ndarray, width: int, height: int, tol: float) -> frozenset[str]:
    """Which raster sides a pixel centre lies on (within ``tol`` pixels of the outermost centres)."""
    x, y = p
    sides = set()
    if x < 0.5 + tol:
        sides.add("left")
    if x > width - 0.5 - tol:
        sides.add("right")
    if y < 0.5 + tol:
        sides.add("top")
    if y > height - 0.5 - tol:
        sides.add("bottom")
    return frozenset(sides)


def _support(
    p: np.ndarray, q: np.ndarray, inward: np.ndarray, has: np.ndarray, sx: float, sy: float
) -> np.ndarray:
    """Whether the pixels just inside the edge p-q have data (one-pixel spacing, 1.5 px inwards)."""
    dec_h, dec_w = has.shape
    n = max(2, int(math.hypot(*(q - p))))
    t = np.linspace(0.0, 1.0, n)[:, None]
    inner = p + t * (q - p) + 1.5 * inward * max(sx, sy)
    cols = np.clip((inner[:, 0] / sx).astype(int), 0, dec_w - 1)
    rows = np.clip((inner[:, 1] / sy).astype(int), 0, dec_h - 1)
    return has[rows, cols]


def _region_area(planes: list[np.ndarray], chain: set[int], width: int, height: int) -> float:
    """Area (pixels) of the grid beyond a chain of hull edges: inside every other edge, not these."""
    step = max(1.0, math.sqrt(width * height / 250_000))
    xs = np.arange(step / 2, width, step)
    ys = np.arange(step / 2, height, step)
    x, y = np.meshgrid(xs, ys)
    inside_others = np.ones(x.shape, dtype=bool)
    beyond = np.zeros(x.shape, dtype=bool)
    for i, (a, b, c) in enumerate(planes):
        side = a * x + b * y + c <= 1e-6 * (abs(a) + abs(b) + abs(c) + 1.0)
        if i in chain:
            beyond |= ~side
        else:
            inside_others &= side
    return float(np.count_nonzero(inside_others & beyond)) * step * step


def _length(chain: list[int], verts: np.ndarray) -> float:
    """Length (pixels) of a chain of hull edges; edge ``e`` runs from vertex ``e`` to ``e + 1``."""
    n = len(verts)
    return sum(float(np.hypot(*(verts[(e + 1) % n] - verts[e]))) for e in chain)


def _scene_edges(
    chain: list[int],
    verts: np.ndarray,
    planes: list[np.ndarray],
    has: np.ndarray,
    *,
    sx: float,
    sy: float,
) -> list[int]:
    """The edges of a corner-cutting chain that lie on a straight scene edge (the rest bridge gaps).

    The chain's edges are grouped into straight lines (consecutive edges whose vertices lie within
    :data:`_LINE_TOLERANCE` pixels of one line: a tilted edge's staircase of pixels, or a cloud
    hugging a scene edge, splits it into several hull edges). A line is a scene edge when the pixels right inside it have data along
    :data:`_EDGE_LENGTH` pixels, or, on a short chain (a small raster), along
    :data:`_EDGE_SHARE` of the chain with a run of :data:`_EDGE_RUN` pixels (or
    :data:`_SHORT_RUN` of a shorter chain). A cloud's outline is
    not straight for that long, so a cloud over the grid's corner or side gives none.
    """
    n = len(verts)
    tol = _LINE_TOLERANCE * max(sx, sy)
    lines: list[list[int]] = []
    for e in chain:
        if lines and _straight(verts, [*lines[-1], e], tol):
            lines[-1].append(e)
        else:
            lines.append([e])
    total = _length(chain, verts)
    kept: list[int] = []
    for line in lines:
        p, q = verts[line[0]], verts[(line[-1] + 1) % n]
        a, b, _ = _half_plane(p, q, verts.mean(axis=0))
        inward = -np.array([a, b]) / max(math.hypot(a, b), 1e-12)
        flags = _support(p, q, inward, has, sx, sy)
        on_line = float(flags.mean()) * float(np.hypot(*(q - p)))
        run = _longest_run(flags)  # samples lie one pixel apart
        long_edge = on_line >= _EDGE_LENGTH and flags.mean() >= _LINE_SHARE
        if long_edge or (on_line >= _EDGE_SHARE * total and run >= min(_EDGE_RUN, _SHORT_RUN * total)):
            kept.extend(line)
    return kept


def _straight(verts: np.ndarray, edges: list[int], tol: float) -> bool:
    """Whether consecutive hull edges lie on one straight line (every vertex within ``tol`` of it)."""
    n = len(verts)
    p, q = verts[edges[0]], verts[(edges[-1] + 1) % n]
    d = q - p
    norm = max(float(np.hypot(*d)), 1e-12)
    inner = verts[[(e + 1) % n for e in edges[:-1]]]
    dist = np.abs(d[0] * (inner[:, 1] - p[1]) - d[1] * (inner[:, 0] - p[0])) / norm
    return bool((dist <= tol).all())


def _longest_run(flags: np.ndarray) -> int:
    """Length of the longest stretch of True values."""
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def footprint_half_planes(
    points: np.ndarray, has: np.ndarray, *, sx: float, sy: float, width: int, height: int
) -> np.ndarray:
    """Half-planes of the hull, without the chains of edges that cut a grid corner across gaps.

    The hull's vertices on the raster's border split its outline into chains (the whole outline
    is one chain when it touches the border once or never). A chain that cuts off part of the
    grid is either a scene edge (the collar lies beyond it, and the pixels just inside it have
    data along a long straight line) or a cloud over the grid's corner or edge (the pixels just
    inside are gaps); the second kind is dropped, so the region beyond it, which the raster's
    border closes, counts as inside. Data on one line (or one pixel) has no edge: all is inside.
    """
    verts = _hull_vertices(points)
    if verts is None:  # one pixel, or pixels on one line: no collar edge to see, all is inside
        return np.zeros((0, 3))
    centre = verts.mean(axis=0)
    n = len(verts)
    tol = max(sx, sy)
    sides = [_sides(v, width, height, tol) for v in verts]
    planes = [_half_plane(verts[i], verts[(i + 1) % n], centre) for i in range(n)]
    drop = [False] * n
    border = [i for i in range(n) if sides[i]]
    for k, start in enumerate(border or [0]):
        end = border[(k + 1) % len(border)] if border else 0
        chain = []
        i = start
        while True:
            chain.append(i)  # edge i runs from vertex i to vertex i + 1
            i = (i + 1) % n
            if i == end:
                break
        if len(border) > 1 and sides[start] & sides[end]:
            continue  # along one side of the raster: it cuts nothing off
        edges = _scene_edges(chain, verts, planes, has, sx=sx, sy=sy)
        if edges:
            depth = _region_area(planes, set(edges), width, height) / max(_length(edges, verts), 1.0)
            if depth < _THIN_STRIP:
                edges = []  # a thin strip along the border: a cloud, not a collar
        bridges = [e for e in chain if e not in edges]
        if bridges:
            logger.info(
                "footprint: %d of %d hull edges between two sides of the grid cross gaps, not a "
                "straight scene edge; the gaps beyond them count as inside",
                len(bridges),
                len(chain),
            )
        for e in bridges:
            drop[e] = True
    kept = [pl for pl, d in zip(planes, drop, strict=True) if not d]
    return np.array(kept, dtype=np.float64).reshape(-1, 3)
