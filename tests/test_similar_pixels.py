"""The similar-pixel search (:func:`geonp.filling.similar_pixels.similar_pixel_correction`) against its slow twin."""

import numpy as np
import pytest

from geonp.filling import similar_pixels as sp


def _slow_similar_pixels(spectra, error, at, origin, searches, count=sp.SIMILAR_PIXELS):
    """The rule written pixel by pixel: candidates in their order (the dense square's offsets, then
    the window's on the stride's raster lines, each row-major), the ``count`` nearest in spectra
    (ties: the earlier candidate; squared distances summed band by band in float32), weights, mean
    and spread; each search for the pixels the ones before left with fewer than 3."""
    bands, h, w = spectra.shape
    mean, spread = np.full(error.shape, np.nan), np.full(error.shape, np.nan)
    known = np.isfinite(error).all(axis=0)
    rad = sp._DENSE_RADIUS
    for r, c in zip(*np.nonzero(at), strict=True):
        for window, stride in searches:
            sq_r, sq_c = (a.ravel() for a in np.mgrid[-rad:rad + 1, -rad:rad + 1])
            wr, wc = (a.ravel() for a in np.mgrid[-window:window + 1, -window:window + 1])
            lines = ((np.maximum(abs(wr), abs(wc)) > rad) & ((r + wr + origin[0]) % stride == 0)
                     & ((c + wc + origin[1]) % stride == 0))
            dr = np.concatenate([sq_r[(sq_r != 0) | (sq_c != 0)], wr[lines]])
            dc = np.concatenate([sq_c[(sq_r != 0) | (sq_c != 0)], wc[lines]])
            q, p = r + dr, c + dc
            ok = (q >= 0) & (q < h) & (p >= 0) & (p < w)
            dr, dc, q, p = dr[ok], dc[ok], q[ok], p[ok]
            d2 = np.zeros(q.size, np.float32)
            for b in range(bands):
                d2 += (spectra[b, q, p].astype(np.float32) - np.float32(spectra[b, r, c])) ** 2
            ok = known[q, p] & np.isfinite(d2)
            order = np.flatnonzero(ok)[np.argsort(d2[ok], kind="stable")][:count]
            if order.size < sp._MIN_SIMILAR:
                continue
            d = np.sqrt(d2[order].astype(np.float64) / bands)
            weight = 1.0 / ((d + sp._SPECTRAL_FLOOR) * (1.0 + sp._SPATIAL_WEIGHT * np.hypot(dr[order], dc[order]) / window))
            effective = weight.sum() ** 2 / (weight ** 2).sum()
            e = error[:, q[order], p[order]]  # [bands', k]
            m = (weight * e).sum(1) / weight.sum()
            v = (weight * (e - m[:, None]) ** 2).sum(1) / weight.sum() * (1.0 + 1.0 / effective)
            mean[:, r, c], spread[:, r, c] = m, np.sqrt(v)
            break
    return mean, spread


def _scene(seed, known_fraction=0.8, shape=(120, 140), cloud=(slice(20, 100), slice(30, 120))):
    """Reference spectra with many ties (quantised), an error known on part of the pixels, a cloud
    whose middle lies beyond the first search, and every 7th of its pixels and its middle to correct."""
    rng = np.random.default_rng(seed)
    spectra = np.round(rng.normal(0.0, 1.0, (2, *shape)), 1)  # rounded: many equal distances
    error = rng.normal(0.0, 50.0, (3, *shape))
    known = rng.random(shape) < known_fraction
    known[cloud] = False
    error[:, ~known] = np.nan
    spectra[:, 5, 7] = np.nan  # a pixel the reference does not see
    at = np.zeros(shape, dtype=bool)
    at.ravel()[::7] = True
    at[57:63, 72:78] = True
    return spectra, error, at & ~known


@pytest.mark.parametrize("seed, origin, searches", [
    (0, (0, 0), ((sp.SIMILAR_WINDOW, 2), (sp.SIMILAR_REACH, sp._FAR_STRIDE))),
    (1, (3, 5), ((sp.SIMILAR_WINDOW, 2), (sp.SIMILAR_REACH, sp._FAR_STRIDE))),
    (2, (1, 0), sp._RING_SEARCHES),
])
def test_similar_pixel_search_equals_its_slow_twin(seed, origin, searches):
    spectra, error, at = _scene(seed)
    even = np.isfinite(error).all(0)[(np.arange(120) + origin[0]) % 2 == 0][:, (np.arange(140) + origin[1]) % 2 == 0]
    assert even.sum() >= (2 * sp.SIMILAR_WINDOW // 2 + 1) ** 2  # many candidates: the search by phase
    mean, spread = sp.similar_pixel_correction(spectra, error, at, origin=origin, searches=searches)
    slow_mean, slow_spread = _slow_similar_pixels(spectra, error, at, origin, searches)
    first = sp.similar_pixel_correction(spectra, error, at, origin=origin, searches=searches[:1])[0]
    assert np.isnan(first[0][at]).sum() > 20 and np.isfinite(mean[0][at]).mean() > 0.99  # the second search was needed
    np.testing.assert_allclose(mean, slow_mean, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(spread, slow_spread, rtol=1e-12, atol=1e-9)


def test_similar_pixel_search_on_a_cloudy_date_equals_its_slow_twin():
    """Few pixels with an error on the search's lines: the sparse branch (candidates are those pixels)."""
    spectra, error, at = _scene(3, known_fraction=0.01, cloud=(slice(0, 120), slice(10, 140)))
    searches = ((sp.SIMILAR_WINDOW, 2), (sp.SIMILAR_REACH, sp._FAR_STRIDE))
    mean, spread = sp.similar_pixel_correction(spectra, error, at, searches=searches)
    slow_mean, slow_spread = _slow_similar_pixels(spectra, error, at, (0, 0), searches)
    assert 0 < np.isfinite(mean[0][at]).sum() < at.sum()
    np.testing.assert_allclose(mean, slow_mean, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(spread, slow_spread, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize(("window", "stride", "clear"), [(10, 2, 0.1), (10, 2, 0.9), (8, 4, 0.9), (30, 4, 0.05),
                                                         (30, 4, 0.7), (120, 8, 0.3)])
def test_one_search_equals_its_slow_twin_on_either_branch(window, stride, clear):
    """Both ways a search gathers candidates (by phase, or a cloudy date's few clear pixels on its
    lines) give the slow twin's result, with the arrays offset in the raster, gap pixels and
    observed ones corrected (neither is its own similar pixel)."""
    rng = np.random.default_rng(stride)
    spectra = rng.normal(0.0, 1.0, (3, 30, 37))
    error = rng.normal(0.0, 100.0, (2, 30, 37))
    error[:, rng.random((30, 37)) > clear] = np.nan
    at = rng.random((30, 37)) < 0.3
    mean, spread = sp.similar_pixel_correction(spectra, error, at, origin=(3, 5), searches=((window, stride),))
    slow_mean, slow_spread = _slow_similar_pixels(spectra, error, at, (3, 5), ((window, stride),))
    assert np.isfinite(slow_mean).sum() > 50
    np.testing.assert_allclose(mean, slow_mean, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(spread, slow_spread, rtol=1e-12, atol=1e-9)
