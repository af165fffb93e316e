"""Gap shapes: clouds with shadows, scan-line stripes, dropped pixels, borrowed real patterns.

The generators behind :func:`geonp.data.gaps.make_mask` (which also holds the training
distribution over them). Every function returns a boolean ``is_gap`` array ``[h, w]``
(``True`` = hidden) and takes its randomness only from ``rng`` (a ``numpy.random.Generator`` or
an integer seed). Most build a *priority* field (higher = hidden first) and hide the
``round(coverage * h * w)`` highest pixels, so their coverage is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import ndimage

from geonp.data.gap_args import as_rng, check_coverage, check_shape, check_source
from geonp.errors import ConfigError

__all__ = [
    "borrowed_mask",
    "cloud_and_shadow",
    "cloud_mask",
    "footprint_mask",
    "random_mask",
    "scene_cloud_mask",
    "stripe_mask",
]


# --------------------------------------------------------------------------------------------
# coverage from a priority field
# --------------------------------------------------------------------------------------------


def hide_highest(priority: np.ndarray, coverage: float) -> np.ndarray:
    """Hide exactly ``round(coverage * n)`` pixels, those with the highest priority."""
    n = priority.size
    k = round(coverage * n)
    is_gap = np.zeros(n, dtype=bool)
    if k >= n:
        is_gap[:] = True
    elif k > 0:
        # argpartition is O(n); ties are split deterministically for a given input.
        is_gap[np.argpartition(-priority.ravel(), k - 1)[:k]] = True
    return is_gap.reshape(priority.shape)


def descending_rank(priority: np.ndarray) -> np.ndarray:
    """Rank of each pixel, 0 = highest priority (hidden first)."""
    order = np.argsort(-priority.ravel(), kind="stable")
    rank = np.empty(priority.size, dtype=np.float64)
    rank[order] = np.arange(priority.size, dtype=np.float64)
    return rank.reshape(priority.shape)


# --------------------------------------------------------------------------------------------
# clouds and shadows
# --------------------------------------------------------------------------------------------


def _fractal_field(
    shape: tuple[int, int], *, scale: float, roughness: float, rng: np.random.Generator
) -> np.ndarray:
    """Smooth random field with a power-law spectrum (fBm-like), so thresholds look cloudy.

    Amplitude spectrum ``(f^2 + f0^2)^(-roughness/2) * exp(-(f/0.25)^2)`` on the torus ``shape``:
    flat below ``f0 = 1/scale`` (blob size ~ scale), fractal edges above, pixel noise removed.
    """
    fy = np.fft.fftfreq(shape[0])[:, None]
    fx = np.fft.rfftfreq(shape[1])[None, :]
    f2 = fx * fx + fy * fy  # cycles / pixel, squared
    amp = (f2 + 1.0 / scale**2) ** (-roughness / 2.0) * np.exp(-f2 / 0.25**2)
    noise = np.fft.rfft2(rng.standard_normal(shape))
    field = np.fft.irfft2(noise * amp, s=shape)
    return field / (field.std() + 1e-300)


def _disk(radius: int) -> np.ndarray:
    r = np.arange(-radius, radius + 1)
    return (r[:, None] ** 2 + r[None, :] ** 2) <= radius * radius + 0.5


def cloud_fields(
    shape: tuple[int, int],
    *,
    rng: np.random.Generator,
    shadow: bool,
    shadow_offset: tuple[float, float] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Cloud field ``f`` and cloud-or-shadow field ``g`` on ``shape`` (threshold both at t).

    Clouds are ``f > t``. A shadow is the cloud eroded by a small disk and shifted by the sun
    offset; erosion of a level set is the level set of a minimum filter, so the union of cloud
    and shadow is exactly ``g = max(f, shift(minfilter(f))) > t`` and one quantile of ``g`` hits
    the requested coverage. The field lives on a padded torus so that shadows of clouds outside
    the patch fall into it, as in a real scene.
    """
    h, w = shape
    size = 0.5 * (h + w)
    if shadow:
        if shadow_offset is None:
            angle = rng.uniform(0.0, 2.0 * math.pi)  # one sun direction per mask
            dist = rng.uniform(0.03, 0.15) * size
            dy, dx = round(dist * math.sin(angle)), round(dist * math.cos(angle))
        else:
            dy, dx = (round(float(o)) for o in shadow_offset)
    else:
        dy = dx = 0
    erode = max(1, round(0.005 * size)) if shadow else 0
    margin = math.ceil(0.25 * size) + max(abs(dy), abs(dx)) + erode + 1
    hp, wp = h + 2 * margin, w + 2 * margin

    scale = rng.uniform(0.15, 0.5) * size  # blob size: a few big decks ... many small cumuli
    roughness = rng.uniform(1.6, 2.4)  # amplitude slope; lower = more ragged, speckled edges
    field = _fractal_field((hp, wp), scale=scale, roughness=roughness, rng=rng)

    crop = (slice(margin, margin + h), slice(margin, margin + w))
    f = field[crop]
    if not shadow:
        return f, f
    shrunk = ndimage.minimum_filter(field, footprint=_disk(erode), mode="wrap")
    # shadow at p + offset comes from the cloud at p: shadow_field[y, x] = shrunk[y-dy, x-dx]
    shadow_field = np.roll(shrunk, (dy, dx), axis=(0, 1))[crop]
    return f, np.maximum(f, shadow_field)


def cloud_and_shadow(
    shape: Sequence[int],
    *,
    coverage: float,
    rng: np.random.Generator | int,
    shadow_offset: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Simulate clouds and their shadows as two separate masks.

    Args:
        shape: ``(h, w)`` in pixels.
        coverage: fraction of pixels hidden by cloud *or* shadow, in [0, 1] (exact to one pixel).
        rng: generator or integer seed.
        shadow_offset: ``(dy, dx)`` pixels from a cloud to its shadow; default a random sun
            direction (one per mask) and a length of 3-15 % of the patch size.

    Returns:
        ``(is_cloud, is_shadow)``: bool ``[h, w]``; ``is_shadow`` is only the shadow pixels that
        are not also cloud, so the two masks are disjoint and their union is :func:`cloud_mask`.
    """
    hw = check_shape(shape)
    c = check_coverage(coverage)
    f, g = cloud_fields(hw, rng=as_rng(rng), shadow=True, shadow_offset=shadow_offset)
    union = hide_highest(g, c)
    if not union.any():
        return union, union.copy()
    threshold = g[union].min()
    is_cloud = union & (f >= threshold)
    return is_cloud, union & ~is_cloud


def cloud_mask(
    shape: Sequence[int],
    *,
    coverage: float,
    rng: np.random.Generator | int,
    shadow: bool = True,
    shadow_offset: tuple[float, float] | None = None,
) -> np.ndarray:
    """Simulate cloud gaps (with offset shadows): thresholded fractal blobs.

    Args:
        shape: ``(h, w)`` in pixels.
        coverage: fraction of hidden pixels (cloud and shadow together), in [0, 1]; exact to one
            pixel.
        rng: generator or integer seed.
        shadow: add each cloud's shadow, a slightly eroded copy offset in one sun direction.
        shadow_offset: ``(dy, dx)`` in pixels (rows down, columns right); default random with a
            length of 3-15 % of the patch size. Ignored when ``shadow`` is False.

    Returns:
        bool ``[h, w]``, True = hidden.

    Raises:
        ConfigError: bad shape, coverage or rng.
    """
    hw = check_shape(shape)
    c = check_coverage(coverage)
    _, g = cloud_fields(hw, rng=as_rng(rng), shadow=shadow, shadow_offset=shadow_offset)
    return hide_highest(g, c)


def scene_cloud_mask(
    shape: Sequence[int], *, coverage: float, rng: np.random.Generator | int, scale: float | None = None
) -> np.ndarray:
    """Simulate scene-scale cloud decks: smooth blobs hundreds of pixels across.

    The headline case of gap filling is a pixel deep inside a large cloud, far from any observed
    pixel. These masks threshold a smooth fractal field whose blob size is at least 400 px (or
    the mask's size, when larger), so at coverage 0.3 a mask holds gaps of 200 px and more across
    even on windows of a few hundred pixels.

    Args:
        shape: ``(h, w)`` in pixels.
        coverage: fraction of hidden pixels in [0, 1]; exact to one pixel.
        rng: generator or integer seed.
        scale: blob size in pixels (default ``max(400, 0.75 * (h + w) / 2)`` times U(1, 1.5)).

    Returns:
        bool ``[h, w]``, True = hidden.
    """
    h, w = check_shape(shape)
    c = check_coverage(coverage)
    gen = as_rng(rng)
    if scale is None:
        scale = max(400.0, 0.375 * (h + w)) * gen.uniform(1.0, 1.5)
    # a canvas twice the window (a torus): the mask is a crop of a bigger cloud field
    pad = math.ceil(min(scale, 0.5 * max(h, w)))
    field = _fractal_field((h + 2 * pad, w + 2 * pad), scale=float(scale), roughness=gen.uniform(2.6, 3.2), rng=gen)
    return hide_highest(field[pad:pad + h, pad:pad + w], c)


def footprint_mask(shape: Sequence[int], *, rng: np.random.Generator | int,
                   fraction: tuple[float, float] = (0.05, 0.4)) -> np.ndarray:
    """A straight nodata collar entering the window: the outside of a scene's footprint.

    A half-plane at a random angle covering a fraction of the window drawn from ``fraction``.
    These pixels are *invalid* (neither context nor targets), as ``geonp fill`` treats the collar
    around a scene; near them the context is one-sided, which the model must learn.

    Returns:
        bool ``[h, w]``, True = outside the footprint.
    """
    h, w = check_shape(shape)
    gen = as_rng(rng)
    a = gen.uniform(0.0, 2.0 * math.pi)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    prio = x * math.cos(a) + y * math.sin(a)
    return hide_highest(prio, float(gen.uniform(*fraction)))


# --------------------------------------------------------------------------------------------
# Landsat-7 SLC-off stripes
# --------------------------------------------------------------------------------------------


def stripe_priority(
    shape: tuple[int, int], *, angle_deg: float, period: float, phase: float, centre_offset: float
) -> np.ndarray:
    """Priority field of wedge-shaped stripes; hiding its top ``c`` fraction gives the stripes.

    ``u`` runs along the stripes, ``v`` across them. A pixel's distance from the middle of its
    band, ``d in [0, 1]`` (as a fraction of half a period), is hidden when ``d < lam * p(u)``,
    where ``p(u) = |u - u0| + 0.5`` grows away from the scene centre line ``u = u0`` (the gap is
    ~0 px wide on the centre line, widest at the scene edges). That is ``d / p(u) < lam``, so the
    priority is ``-d / p(u)`` and the coverage picks ``lam``.
    """
    h, w = shape
    a = math.radians(angle_deg)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    # stripes rise to the right for a positive angle (rows grow downwards)
    u = x * math.cos(a) - y * math.sin(a)
    v = x * math.sin(a) + y * math.cos(a)
    u_mid = 0.5 * w * math.cos(a) - 0.5 * h * math.sin(a)
    t = np.mod((v - phase) / period, 1.0)
    d = np.abs(t - 0.5) * 2.0
    p = np.abs(u - (u_mid + centre_offset)) + 0.5
    return -d / p


def stripe_mask(
    shape: Sequence[int],
    *,
    coverage: float,
    rng: np.random.Generator | int,
    angle_deg: float | None = None,
    period: float | None = None,
) -> np.ndarray:
    """Simulate Landsat-7 SLC-off scan-line gaps: parallel wedge-shaped stripes.

    Since the scan-line corrector failed (2003), every ETM+ scene has gaps between scans that are
    ~0 px wide along the scene centre line and ~14 px at the edges, tilted ~8-15 degrees from the
    image rows by the orbit. A random patch may lie anywhere in such a scene, so the centre line
    is placed at a random distance (up to 3 patch sizes) from the patch.

    Args:
        shape: ``(h, w)`` in pixels.
        coverage: fraction of hidden pixels in [0, 1]; exact to one pixel.
        rng: generator or integer seed.
        angle_deg: stripe direction in degrees counter-clockwise from the row direction (as
            displayed); default random, 8-15 degrees either way.
        period: stripe repeat distance in pixels, across the stripes; default random in 10-30.

    Returns:
        bool ``[h, w]``, True = hidden.

    Raises:
        ConfigError: bad shape, coverage, period or rng.
    """
    hw = check_shape(shape)
    c = check_coverage(coverage)
    gen = as_rng(rng)
    if angle_deg is None:
        angle_deg = float(gen.choice([-1.0, 1.0]) * gen.uniform(8.0, 15.0))
    if period is None:
        period = float(gen.uniform(10.0, 30.0))
    if not period > 0:
        raise ConfigError(
            f"period={period!r} px is not positive; stripes must repeat. Pass e.g. period=16."
        )
    phase = gen.uniform(0.0, period)
    centre_offset = gen.uniform(-3.0, 3.0) * 0.5 * (hw[0] + hw[1])
    prio = stripe_priority(
        hw,
        angle_deg=float(angle_deg),
        period=float(period),
        phase=phase,
        centre_offset=centre_offset,
    )
    return hide_highest(prio, c)


# --------------------------------------------------------------------------------------------
# random pixels, borrowed patterns
# --------------------------------------------------------------------------------------------


def random_mask(
    shape: Sequence[int], *, coverage: float, rng: np.random.Generator | int
) -> np.ndarray:
    """Hide i.i.d. random pixels (dropped pixels, salt-and-pepper sensor errors).

    Args:
        shape: ``(h, w)`` in pixels.
        coverage: probability that a pixel is hidden, in [0, 1].
        rng: generator or integer seed.

    Returns:
        bool ``[h, w]``, True = hidden.
    """
    hw = check_shape(shape)
    c = check_coverage(coverage)
    return as_rng(rng).random(hw) < c


def borrowed_mask(
    shape: Sequence[int], *, source: np.ndarray, rng: np.random.Generator | int
) -> np.ndarray:
    """Borrow a real gap pattern: a random crop of ``source`` after a random flip/rotation.

    The crop is taken from one of the 8 rotations/reflections of ``source``; a source smaller
    than ``shape`` is mirror-tiled first, which keeps stripes and cloud edges continuous.

    Args:
        shape: ``(h, w)`` in pixels.
        source: bool ``[H, W]`` real ``is_gap`` pattern (non-zero = gap).
        rng: generator or integer seed.

    Returns:
        bool ``[h, w]``, True = hidden.

    Raises:
        ConfigError: bad shape, missing or non-2-D source.
    """
    h, w = check_shape(shape)
    src = check_source(source)
    gen = as_rng(rng)
    pattern = np.rot90(src, k=int(gen.integers(4)))
    if gen.random() < 0.5:
        pattern = pattern[:, ::-1]
    ph, pw = pattern.shape
    if ph < h or pw < w:
        pattern = np.pad(pattern, ((0, max(0, h - ph)), (0, max(0, w - pw))), mode="symmetric")
        ph, pw = pattern.shape
    y0 = int(gen.integers(ph - h + 1))
    x0 = int(gen.integers(pw - w + 1))
    return np.ascontiguousarray(pattern[y0 : y0 + h, x0 : x0 + w])


