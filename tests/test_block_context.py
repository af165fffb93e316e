"""The batched context of a block's windows against the one-window rule, and the fast helpers of task building."""

import numpy as np
import pytest
from scipy import ndimage

from geonp.data.gap_shapes import cloud_mask
from geonp.data.gaps import make_mask
from geonp.data.tasks import standardize, standardize_bands
from geonp.filling.tile_tasks import dilate8
from geonp.tasks.block_context import select_contexts
from geonp.tasks.context import ContextSpec, HaloTooSmall, near_set, select_context
from geonp.tasks.tiling import nearest_context

SPEC = ContextSpec(n_near=64, n_far=96, search_radius=256, rings=7, sectors=12)


def _windows(shape, rng, count=60):
    """Query windows of the sizes a fill cuts (64, 40, 22, 16 px: tiles and split tiles), some clipped at the edges."""
    h, w = shape
    out = []
    for _ in range(count):
        size = int(rng.choice([64, 40, 22, 16]))
        r0, c0 = int(rng.integers(-8, h - size + 8)), int(rng.integers(-8, w - size + 8))
        out.append((max(r0, 0), min(r0 + size, h), max(c0, 0), min(c0 + size, w)))
    return out


def _gaps(kind, shape, seed):
    if kind == "cloud":
        return cloud_mask(shape, coverage=0.45, rng=seed)
    if kind == "stripe":
        return make_mask("stripe", shape, coverage=0.3, rng=np.random.default_rng(seed))
    return np.random.default_rng(seed).random(shape) < 0.9


@pytest.mark.parametrize("kind", ["cloud", "stripe", "random"])
def test_select_contexts_is_select_context_on_every_window(kind):
    rng = np.random.default_rng(3)
    shape = (300, 340)
    gaps = _gaps(kind, shape, 5)
    observed = ~gaps
    windows = _windows(shape, rng)
    # counts differ between windows (near tiles take fewer far pixels), the geometry does not
    specs = [SPEC if i % 3 else ContextSpec(n_near=40, n_far=24, search_radius=256, rings=7, sectors=12)
             for i in range(len(windows))]
    got = select_contexts(observed, gaps, windows, specs, origin=(1037, 2411))
    far_windows = 0
    for box, spec, (rows, cols) in zip(windows, specs, got, strict=True):
        want = select_context(observed, gaps, box, spec, origin=(1037, 2411))
        np.testing.assert_array_equal(rows, want[0])
        np.testing.assert_array_equal(cols, want[1])
        assert rows.dtype == want[0].dtype == np.int64
        far_windows += rows.size > spec.n_near
    if kind == "cloud":
        assert far_windows > 20  # the far sets were exercised


def test_select_contexts_without_far_sets_and_with_a_short_halo():
    rng = np.random.default_rng(4)
    gaps = _gaps("cloud", (200, 200), 2)
    windows = _windows((200, 200), rng, 12)
    plain = ContextSpec(n_near=100, n_far=0, search_radius=128)
    got = select_contexts(~gaps, gaps, windows, [plain] * len(windows))
    for box, (rows, cols) in zip(windows, got, strict=True):
        want = select_context(~gaps, gaps, box, plain)
        np.testing.assert_array_equal(rows, want[0])
        np.testing.assert_array_equal(cols, want[1])
    with pytest.raises(HaloTooSmall, match="the far set needs the whole search radius 256 > 100"):
        select_contexts(~gaps, gaps, windows, [SPEC] * len(windows), limit=100)
    assert select_contexts(~gaps, gaps, [], []) == []


def _near_on_the_rules_window(observed, queries, qb, n_near, origin):
    """The near set's rule, literally: the first window (radius 32, doubling) holding n_near observed pixels."""
    h, w = observed.shape
    r0, r1, c0, c1 = qb
    radius = 32
    while True:
        s0, s1, t0, t1 = max(0, r0 - radius), min(h, r1 + radius), max(0, c0 - radius), min(w, c1 + radius)
        if observed[s0:s1, t0:t1].sum() >= n_near or radius >= 512:
            break
        radius *= 2
    q = np.zeros((s1 - s0, t1 - t0), bool)
    q[r0 - s0:r1 - s0, c0 - t0:c1 - t0] = queries[r0:r1, c0:c1]
    rows, cols = nearest_context(observed[s0:s1, t0:t1], (r0 - s0, r1 - s0, c0 - t0, c1 - t0), max_context=n_near,
                                 origin=(origin[0] + s0, origin[1] + t0),
                                 query_distance=ndimage.distance_transform_edt(~q) if q.any() else None)
    return rows + s0, cols + t0


@pytest.mark.parametrize("kind", ["cloud", "stripe", "random"])
def test_the_near_set_ranked_on_a_tight_window_is_the_rules_choice(kind):
    """The near set is ranked on a 4- or 12-px window where that provably gives the rule's answer."""
    rng = np.random.default_rng(8)
    gaps = _gaps(kind, (260, 260), 1)
    for box in _windows((260, 260), rng, 40):
        for n_near in (16, 64, 256):
            rows, cols, _ = near_set(~gaps, gaps, box, ContextSpec(n_near=n_near), (640, 77), None)
            want = _near_on_the_rules_window(~gaps, gaps, box, n_near, (640, 77))
            np.testing.assert_array_equal(rows, want[0])
            np.testing.assert_array_equal(cols, want[1])


def test_dilate8_is_a_3x3_binary_dilation():
    rng = np.random.default_rng(0)
    for shape in [(1, 1), (1, 7), (5, 1), (17, 23), (64, 64)]:
        for p in (0.02, 0.3):
            mask = rng.random(shape) < p
            mask[0, 0] = mask[-1, -1] = True  # the edges
            np.testing.assert_array_equal(dilate8(mask), ndimage.binary_dilation(mask, structure=np.ones((3, 3), bool)))


@pytest.mark.parametrize("n_stats", [None, 0, 1, 7, 300])
def test_standardize_bands_is_standardize_of_each_band(n_stats):
    rng = np.random.default_rng(n_stats or 0)
    y = rng.normal(2.0, 3.0, (301, 3))
    ys, shift, scale = standardize_bands(y, n_stats)
    for j in range(3):
        yc, _, sh, sc = standardize(np.ascontiguousarray(y[:, j:j + 1]), None, n_stats)
        np.testing.assert_array_equal(ys[j], yc[:, 0])  # bit for bit
        assert (shift[j], scale[j]) == (sh[0], sc[0])
