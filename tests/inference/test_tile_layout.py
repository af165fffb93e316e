"""The real tile layout of a block, quarter splits included, against a brute-force reference.

``tile_tasks.band_tasks`` lays tiles on the raster's global grid and splits a tile in four (again
and again, down to ``min_split``, 12 px) where scattered gaps have more observed neighbours than the context
cap. The reference below rebuilds that layout with plain loops from the documented rules, and
the test checks every task's pixels and blend weights against it, and that every gap pixel of
the region lies on exactly one tile core.
"""

from __future__ import annotations

import numpy as np
import pytest

from geonp.filling.tile_tasks import BandGroup, TileOptions, band_tasks
from geonp.tasks.context import ContextSpec


def _neighbours(observed, to_fill, qb) -> int:
    """Observed pixels of the window with a pixel to fill among their 8 neighbours (in the window)."""
    r0, r1, c0, c1 = qb
    count = 0
    for r in range(r0, r1):
        for c in range(c0, c1):
            if not observed[r, c]:
                continue
            near = to_fill[max(r - 1, r0):min(r + 2, r1), max(c - 1, c0):min(c + 2, c1)]
            count += bool(near.any())
    return count


def _weight(r: int, c: int, tile: tuple[int, int, int, int, int]) -> float:
    """1 on the core, falling linearly to 0 one pixel past the overlap, per axis."""
    row, col, height, width, o = tile
    dr = max(row - r, r - (row + height - 1), 0)
    dc = max(col - c, c - (col + width - 1), 0)
    return (1 - dr / (o + 1)) * (1 - dc / (o + 1))


def reference_layout(observed, to_fill, region, origin, opts):
    """``[(tile, {(r, c): weight})]`` in block coordinates, by brute force."""
    h, w = observed.shape
    r0, r1, c0, c1 = region
    size, o = opts.tile_size, opts.overlap
    grid = range(-4 * size, 40 * size, size)  # global tile corners, wide enough for any test
    tiles = [(gr - origin[0], gc - origin[1], size, size, o) for gr in grid for gc in grid]
    tiles = [t for t in tiles  # query window touches the region
             if t[0] - o < r1 and t[0] + size + o > r0 and t[1] - o < c1 and t[1] + size + o > c0]
    out = []

    def visit(tile):
        row, col, height, width, ov = tile
        qb = (max(row - ov, 0), min(row + height + ov, h), max(col - ov, 0), min(col + width + ov, w))
        pixels = [(r, c) for r in range(max(qb[0], r0), min(qb[1], r1))
                  for c in range(max(qb[2], c0), min(qb[3], c1)) if to_fill[r, c]]
        if not pixels:
            return
        if height > opts.min_split and _neighbours(observed, to_fill, qb) > opts.max_context:
            h1, w1 = height // 2, width // 2
            o2 = max(2, min(ov, h1 // 3))
            for dr, hh in ((0, h1), (h1, height - h1)):
                for dc, ww in ((0, w1), (w1, width - w1)):
                    visit((row + dr, col + dc, hh, ww, o2))
            return
        out.append((tile, {p: _weight(*p, tile) for p in pixels}))

    for t in sorted(tiles):
        visit(t)
    return out


def _scene(size=120, seed=0):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(size, size))
    to_fill = np.zeros((size, size), bool)
    to_fill[70:100, 15:60] = True  # a cloud: no split there
    to_fill[10:60, 50:110] = rng.random((50, 60)) < 0.35  # dropped pixels: splits, some twice
    to_fill[100:115, 90:118] = rng.random((15, 28)) < 0.5
    return values, ~to_fill, to_fill


@pytest.mark.parametrize("origin,region,min_split", [((0, 0), (0, 120, 0, 120), 12),
                                                     ((37, 203), (9, 111, 14, 104), 12),
                                                     ((0, 0), (0, 120, 0, 120), 16)])
def test_tasks_match_the_brute_force_layout_and_every_gap_is_on_one_core(origin, region, min_split):
    values, observed, to_fill = _scene()
    opts = TileOptions(tile_size=32, overlap=5, context=ContextSpec(n_near=60, search_radius=40),
                       min_split=min_split)
    tasks = band_tasks(BandGroup(values, observed, to_fill), region, origin=origin, opts=opts)
    ref = reference_layout(observed, to_fill, region, origin, opts)
    r0, r1, c0, c1 = region
    rw = c1 - c0

    heights = sorted({t[0][2] for t in ref})
    if min_split == 12:
        assert heights[0] < 16 and 16 in heights and 32 in heights  # unsplit, split once, split twice
    else:
        assert heights == [16, 32]  # split once at most: not below 16 px
    assert len(tasks) == len(ref)
    got = []
    for t in tasks:
        rows, cols = np.divmod(t.index, rw)
        pixels = {(int(r) + r0, int(c) + c0): float(wt) for r, c, wt in zip(rows, cols, t.weights, strict=True)}
        got.append(pixels)
        assert t.core == sum(wt >= 1.0 for wt in pixels.values())
    for pixels, (tile, want) in zip(got, ref, strict=True):
        assert pixels.keys() == want.keys(), tile
        np.testing.assert_allclose([pixels[p] for p in want], list(want.values()), rtol=0, atol=1e-12)

    # every gap pixel of the region: on exactly one core, blend weights summing to >= 1
    cores = np.zeros(to_fill.shape, int)
    total = np.zeros(to_fill.shape)
    for pixels in got:
        for (r, c), wt in pixels.items():
            cores[r, c] += wt >= 1.0
            total[r, c] += wt
    gap = np.zeros_like(to_fill)
    gap[r0:r1, c0:c1] = to_fill[r0:r1, c0:c1]
    assert (cores[gap] == 1).all() and (cores[~gap] == 0).all()
    assert (total[gap] >= 1.0).all() and (total[~gap] == 0).all()
    assert sum(t.core for t in tasks) == int(gap.sum())
