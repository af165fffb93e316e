import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from geonp.tasks.tiling import Tile, make_tiles, nearest_context, pixel_weights


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 90), st.integers(1, 90), st.integers(1, 40), st.integers(0, 10))
def test_tiles_cover_every_pixel_once_and_stay_in_bounds(h, w, size, overlap):
    tiles = make_tiles(h, w, tile_size=size, overlap=overlap)
    cover = np.zeros((h, w), int)
    for t in tiles:
        assert 0 <= t.row and t.row + t.height <= h and 0 <= t.col and t.col + t.width <= w
        cover[t.row : t.row + t.height, t.col : t.col + t.width] += 1
        r0, r1, c0, c1 = t.query_bounds((h, w))
        assert 0 <= r0 < r1 <= h and 0 <= c0 < c1 <= w
        rows, cols = np.mgrid[r0:r1, c0:c1]
        assert (pixel_weights(rows, cols, t) > 0).all()  # every query pixel counts in the blend
    assert (cover == 1).all()
    assert tiles == sorted(tiles)


def test_pixel_weights_are_one_on_core_and_ramp_in_overlap():
    t = Tile(10, 10, 4, 4, overlap=2)
    r0, r1, c0, c1 = t.query_bounds((30, 30))
    rows, cols = np.mgrid[r0:r1, c0:c1]
    w = pixel_weights(rows, cols, t)
    assert w.shape == (8, 8)
    np.testing.assert_allclose(w[2:6, 2:6], 1.0)
    np.testing.assert_allclose(w[0, 2:6], 1 / 3)
    np.testing.assert_allclose(w[1, 2:6], 2 / 3)
    np.testing.assert_allclose(pixel_weights(rows.ravel(), cols.ravel(), t).reshape(8, 8), w)


def test_nearest_context_takes_the_nearest_and_breaks_ties_by_position():
    obs = np.ones((20, 20), bool)
    obs[5:15, 5:15] = False
    rows, cols = nearest_context(obs, (5, 15, 5, 15), max_context=40)
    d = np.maximum(np.maximum(5 - rows, rows - 14), 0) + np.maximum(np.maximum(5 - cols, cols - 14), 0)
    assert rows.size == 40 and d.max() == 1  # the ring right around the gap (40 pixels at distance 1)
    again = nearest_context(obs, (5, 15, 5, 15), max_context=30, origin=(100, 100))
    shifted = nearest_context(np.pad(obs, ((3, 0), (3, 0))), (8, 18, 8, 18), max_context=30, origin=(97, 97))
    np.testing.assert_array_equal(again[0], shifted[0] - 3)  # same absolute pixels chosen
    np.testing.assert_array_equal(again[1], shifted[1] - 3)
    few_r, _few_c = nearest_context(obs, (5, 15, 5, 15), max_context=10_000)
    assert few_r.size == obs.sum()
