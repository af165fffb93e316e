import json

import numpy as np
import pytest

from geonp.errors import ConfigError, NoValidPixelsError
from geonp.tasks.normalize import Normalizer


def _bands(seed=0):
    rng = np.random.default_rng(seed)
    values = np.stack(
        [
            rng.normal(8000.0, 500.0, (40, 50)),
            rng.normal(-3.0, 0.01, (40, 50)),
            rng.normal(0.0, 1.0, (40, 50)),
        ]
    )
    return values


def test_fit_recovers_mean_and_std():
    values = _bands()
    norm = Normalizer.fit(values)
    assert norm.n_bands == 3
    np.testing.assert_allclose(norm.mean, values.reshape(3, -1).mean(1), rtol=1e-12)
    np.testing.assert_allclose(norm.std, values.reshape(3, -1).std(1), rtol=1e-12)
    z = norm.apply(values)
    np.testing.assert_allclose(z.reshape(3, -1).mean(1), 0.0, atol=1e-10)
    np.testing.assert_allclose(z.reshape(3, -1).std(1), 1.0, rtol=1e-10)


def test_apply_standardises_each_band_in_either_layout():
    values = _bands()
    norm = Normalizer.fit(values)
    z = norm.apply(values)
    assert z.dtype == np.float64
    mean, std = np.asarray(norm.mean)[:, None, None], np.asarray(norm.std)[:, None, None]
    np.testing.assert_allclose(z, (values - mean) / std, rtol=1e-12)
    # channel-last layout [n, bands]
    tokens = values.reshape(3, -1).T
    np.testing.assert_allclose(norm.apply(tokens, axis=-1), z.reshape(3, -1).T, rtol=1e-12)


def test_dtypes():
    norm = Normalizer(mean=(100.0,), std=(10.0,))
    ints = np.array([[[90, 110]]], dtype=np.uint16)
    np.testing.assert_array_equal(norm.apply(ints), [[[-1.0, 1.0]]])
    assert norm.apply(ints.astype(np.float32)).dtype == np.float32
    assert norm.apply(ints.astype(np.float64)).dtype == np.float64


def test_invert_std_scales_only():
    norm = Normalizer(mean=(1000.0, -5.0), std=(20.0, 0.5))
    std = np.ones((2, 3, 3))
    out = norm.invert_std(std)
    np.testing.assert_array_equal(out[0], 20.0)
    np.testing.assert_array_equal(out[1], 0.5)


def test_nan_and_masked_pixels_are_ignored():
    values = _bands()
    dirty = values.copy()
    dirty[0, :5] = np.nan
    dirty[1, 3, 3] = np.inf
    dirty[2, :, :10] = 1e9  # masked out below
    valid = np.ones((40, 50), dtype=bool)
    valid[:, :10] = False
    norm = Normalizer.fit(dirty, valid[None] | (np.arange(3) < 2)[:, None, None])
    np.testing.assert_allclose(norm.mean[0], values[0, 5:].mean(), rtol=1e-12)
    ok1 = np.isfinite(dirty[1])
    np.testing.assert_allclose(norm.mean[1], dirty[1][ok1].mean(), rtol=1e-12)
    np.testing.assert_allclose(norm.std[2], values[2, :, 10:].std(), rtol=1e-12)
    # a [h, w] mask applies to every band
    norm2 = Normalizer.fit(values, valid)
    np.testing.assert_allclose(norm2.mean, values[:, :, 10:].reshape(3, -1).mean(1), rtol=1e-12)


def test_constant_band_gets_a_floor_std():
    values = np.stack([np.full((8, 8), 7.0), np.zeros((8, 8))])
    norm = Normalizer.fit(values)
    assert norm.std[0] == pytest.approx(7e-6 + 1e-12, rel=1e-9)
    assert norm.std[1] == 1e-12
    z = norm.apply(values)
    assert np.isfinite(z).all() and np.abs(z).max() == 0.0


def test_subsampling_is_seeded_and_close():
    values = _bands()
    a = Normalizer.fit(values, max_samples=500, seed=1)
    b = Normalizer.fit(values, max_samples=500, seed=1)
    c = Normalizer.fit(values, max_samples=500, seed=2)
    full = Normalizer.fit(values)
    assert a == b and a != c
    assert abs(a.mean[0] - full.mean[0]) < 4 * 500 / np.sqrt(500)
    assert abs(a.std[0] / full.std[0] - 1) < 0.15


def test_dict_round_trip_through_json():
    norm = Normalizer.fit(_bands())
    d = json.loads(json.dumps(norm.to_dict()))
    assert d == {"mean": list(norm.mean), "std": list(norm.std)}
    assert Normalizer.from_dict(d) == norm


def test_from_dict_rejects_bad_input():
    with pytest.raises(ConfigError, match=r"unknown keys \['scale'\]"):
        Normalizer.from_dict({"mean": [0.0], "std": [1.0], "scale": 2})
    with pytest.raises(ConfigError, match=r"missing keys \['std'\]"):
        Normalizer.from_dict({"mean": [0.0]})
    with pytest.raises(ConfigError, match="2 means and 1 stds"):
        Normalizer.from_dict({"mean": [0.0, 1.0], "std": [1.0]})
    with pytest.raises(ConfigError, match="has a value <= 0"):
        Normalizer.from_dict({"mean": [0.0], "std": [0.0]})
    with pytest.raises(ConfigError, match="non-finite"):
        Normalizer.from_dict({"mean": [float("nan")], "std": [1.0]})


def test_errors_for_band_mismatch_and_empty_band():
    norm = Normalizer(mean=(0.0, 0.0), std=(1.0, 1.0))
    with pytest.raises(ConfigError, match="values has 3 bands on axis 0 but the normaliser has 2"):
        norm.apply(np.zeros((3, 4, 4)))
    values = _bands()
    values[1] = np.nan
    with pytest.raises(NoValidPixelsError, match="band 2 has no valid pixels"):
        Normalizer.fit(values)
    with pytest.raises(ConfigError, match=r"valid has shape \(5, 5\)"):
        Normalizer.fit(_bands(), np.ones((5, 5), bool))
