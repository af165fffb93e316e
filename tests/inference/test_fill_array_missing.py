"""fill_array counts a pixel missing by the rule every fill uses (NaN/Inf, nodata, the caller's mask)."""

import numpy as np

from geonp.filling.arrays import fill_array


def test_fill_array_fills_nodata_nan_and_masked_pixels(tiny_model):
    rng = np.random.default_rng(0)
    values = rng.normal(100.0, 5.0, size=(1, 40, 40))
    valid = np.ones((40, 40), bool)
    values[0, 5, 5] = -9999.0  # nodata
    values[0, 10, 12] = np.nan  # NaN
    values[0, 20, 30] = np.inf  # Inf
    valid[30, 3] = False  # the caller's mask
    filled, std = fill_array(values, valid, model=tiny_model, nodata=-9999.0)
    for r, c in ((5, 5), (10, 12), (20, 30), (30, 3)):
        assert np.isfinite(filled[0, r, c]) and filled[0, r, c] != -9999.0
        assert std[0, r, c] > 0
    kept = np.ones((40, 40), bool)
    kept[[5, 10, 20, 30], [5, 12, 30, 3]] = False
    np.testing.assert_array_equal(filled[0][kept], values[0][kept])
    assert (std[0][kept] == 0).all()
    # without nodata, -9999 is a value like any other and is kept
    kept_value, _ = fill_array(values, valid, model=tiny_model)
    assert kept_value[0, 5, 5] == -9999.0
