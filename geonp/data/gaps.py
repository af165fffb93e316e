"""Simulated gaps: where pixels are hidden during training and evaluation.

A model learns to fill the gaps it sees in training, so the gap shapes must look like real ones:
clouds with their offset shadows, Landsat-7 scan-line (SLC-off) stripes, dropped pixels, and gap
patterns borrowed from real rasters. Training (`geonp train`) and scoring (`geonp evaluate`) use
this one module, so a score always refers to the same gap distribution the model was trained on.

Every function returns a boolean ``is_gap`` array of shape ``[h, w]``: ``True`` = hidden.
Randomness comes only from the ``rng`` argument (a ``numpy.random.Generator`` or an integer
seed), so the same seed always gives the same mask.

Most generators build a *priority* field (higher = hidden first) and hide the ``round(coverage *
h * w)`` highest pixels, so their coverage is exact; only :func:`random_mask` (i.i.d. pixels) and
:func:`borrowed_mask` (coverage set by the source) are approximate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy import ndimage

from geonp.errors import ConfigError

MASK_KINDS: tuple[str, ...] = ("cloud", "stripe", "random", "borrowed", "mixed", "scene_cloud")
"""Gap kinds accepted by :func:`make_mask` (new kinds are appended: evaluation seeds use the index)."""

MaskKind = Literal["cloud", "stripe", "random", "borrowed", "mixed", "scene_cloud"]

#: Training distribution of gap kinds (``borrowed`` only when a source pattern is given).
TRAINING_KIND_WEIGHTS: dict[str, float] = {
    "cloud": 0.45,
    "stripe": 0.25,
    "random": 0.15,
    "borrowed": 0.15,
}
#: Range of the gap fraction drawn by :func:`sample_training_mask`.
TRAINING_COVERAGE: tuple[float, float] = (0.1, 0.7)
#: Smallest visible fraction :func:`sample_training_mask` leaves (the model needs context).
MIN_VISIBLE_FRACTION = 0.05


# --------------------------------------------------------------------------------------------
# argument checks and shared helpers
# --------------------------------------------------------------------------------------------


def as_rng(rng: np.random.Generator | int, *, what: str = "gap masks") -> np.random.Generator:
    """A numpy Generator from a Generator or an integer seed (anything else is refused)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise ConfigError(
        f"rng={rng!r} is not a numpy Generator or an integer seed; {what} must be "
        "reproducible. Pass rng=np.random.default_rng(SEED) or an int seed."
    )


def _check_shape(shape: Sequence[int]) -> tuple[int, int]:
    try:
        h, w = (int(s) for s in shape)
    except (TypeError, ValueError) as err:
        raise ConfigError(
            f"shape={shape!r} is not (height, width); masks are 2-D. Pass two positive ints."
        ) from err
    if h < 1 or w < 1 or (h, w) != tuple(shape):
        raise ConfigError(
            f"shape={tuple(shape)!r} is not two positive integers; a mask needs at least one "
            "pixel. Pass e.g. shape=(64, 64)."
        )
    return h, w


def _check_coverage(coverage: float) -> float:
    c = float(coverage)
    if not (0.0 <= c <= 1.0):
        raise ConfigError(
            f"coverage={coverage!r} is outside [0, 1]; it is the fraction of hidden pixels. "
            "Pass a value such as 0.3."
        )
    return c


def _hide_highest(priority: np.ndarray, coverage: float) -> np.ndarray:
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


def _descending_rank(priority: np.ndarray) -> np.ndarray:
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


def _cloud_fields(
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
    hw = _check_shape(shape)
    c = _check_coverage(coverage)
    f, g = _cloud_fields(hw, rng=as_rng(rng), shadow=True, shadow_offset=shadow_offset)
    union = _hide_highest(g, c)
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
    hw = _check_shape(shape)
    c = _check_coverage(coverage)
    _, g = _cloud_fields(hw, rng=as_rng(rng), shadow=shadow, shadow_offset=shadow_offset)
    return _hide_highest(g, c)


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
    h, w = _check_shape(shape)
    c = _check_coverage(coverage)
    gen = as_rng(rng)
    if scale is None:
        scale = max(400.0, 0.375 * (h + w)) * gen.uniform(1.0, 1.5)
    # a canvas twice the window (a torus): the mask is a crop of a bigger cloud field
    pad = int(math.ceil(min(scale, 0.5 * max(h, w))))
    field = _fractal_field((h + 2 * pad, w + 2 * pad), scale=float(scale), roughness=gen.uniform(2.6, 3.2), rng=gen)
    return _hide_highest(field[pad:pad + h, pad:pad + w], c)


def footprint_mask(shape: Sequence[int], *, rng: np.random.Generator | int,
                   fraction: tuple[float, float] = (0.05, 0.4)) -> np.ndarray:
    """A straight nodata collar entering the window: the outside of a scene's footprint.

    A half-plane at a random angle covering a fraction of the window drawn from ``fraction``.
    These pixels are *invalid* (neither context nor targets), as ``geonp fill`` treats the collar
    around a scene; near them the context is one-sided, which the model must learn.

    Returns:
        bool ``[h, w]``, True = outside the footprint.
    """
    h, w = _check_shape(shape)
    gen = as_rng(rng)
    a = gen.uniform(0.0, 2.0 * math.pi)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    prio = x * math.cos(a) + y * math.sin(a)
    return _hide_highest(prio, float(gen.uniform(*fraction)))


# --------------------------------------------------------------------------------------------
# Landsat-7 SLC-off stripes
# --------------------------------------------------------------------------------------------


def _stripe_priority(
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
    hw = _check_shape(shape)
    c = _check_coverage(coverage)
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
    prio = _stripe_priority(
        hw,
        angle_deg=float(angle_deg),
        period=float(period),
        phase=phase,
        centre_offset=centre_offset,
    )
    return _hide_highest(prio, c)


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
    hw = _check_shape(shape)
    c = _check_coverage(coverage)
    return as_rng(rng).random(hw) < c


def _check_source(source: np.ndarray | None) -> np.ndarray:
    if source is None:
        raise ConfigError(
            "borrowed gaps need a source is_gap pattern, but source=None; pass source= a 2-D "
            "bool array, e.g. the NaN pattern of a real raster (np.isnan(band))."
        )
    src = np.asarray(source)
    if src.ndim != 2 or src.size == 0:
        raise ConfigError(
            f"source has shape {src.shape}; a gap pattern must be a non-empty 2-D [h, w] array. "
            "Pass one band's is_gap mask."
        )
    return src.astype(bool, copy=False)


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
    h, w = _check_shape(shape)
    src = _check_source(source)
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


# --------------------------------------------------------------------------------------------
# dispatch and the training distribution
# --------------------------------------------------------------------------------------------


def _priority(kind: str, shape: tuple[int, int], gen: np.random.Generator) -> np.ndarray:
    if kind == "cloud":
        return _cloud_fields(shape, rng=gen, shadow=True, shadow_offset=None)[1]
    if kind == "stripe":
        angle = float(gen.choice([-1.0, 1.0]) * gen.uniform(8.0, 15.0))
        period = float(gen.uniform(10.0, 30.0))
        return _stripe_priority(
            shape,
            angle_deg=angle,
            period=period,
            phase=gen.uniform(0.0, period),
            centre_offset=gen.uniform(-3.0, 3.0) * 0.5 * sum(shape),
        )
    return gen.random(shape)  # "random"


def _mixed_mask(shape: tuple[int, int], coverage: float, gen: np.random.Generator) -> np.ndarray:
    """One of cloud/stripe/random (half the time) or a union of 2-3 of them.

    In a union each kind k gets a share ``s_k`` (Dirichlet) and hides its own pixels of rank
    ``< s_k * C``; a pixel is in the union when ``min_k rank_k / s_k < C``, so hiding the lowest
    ``min_k rank_k / s_k`` hits the requested coverage exactly.
    """
    singles = ("cloud", "stripe", "random")
    if gen.random() < 0.5:
        return _hide_highest(_priority(str(gen.choice(singles)), shape, gen), coverage)
    n_kinds = int(gen.integers(2, 4))
    kinds = [str(k) for k in gen.choice(singles, size=n_kinds, replace=False)]
    shares = gen.dirichlet(np.ones(n_kinds))
    score = np.full(shape, np.inf)
    for kind, share in zip(kinds, shares, strict=True):
        score = np.minimum(score, _descending_rank(_priority(kind, shape, gen)) / share)
    return _hide_highest(-score, coverage)


def make_mask(
    kind: str,
    shape: Sequence[int],
    *,
    coverage: float | None,
    rng: np.random.Generator | int,
    source: np.ndarray | None = None,
) -> np.ndarray:
    """Make a gap mask of the named kind.

    Args:
        kind: one of :data:`MASK_KINDS`: ``"cloud"`` (with shadows), ``"stripe"`` (SLC-off),
            ``"random"`` (i.i.d. pixels), ``"borrowed"`` (crop of ``source``), ``"mixed"`` (one
            of cloud/stripe/random, or a union of them), ``"scene_cloud"`` (blobs hundreds of
            pixels across, :func:`scene_cloud_mask`).
        shape: ``(h, w)`` in pixels.
        coverage: fraction of hidden pixels in [0, 1]. For ``"borrowed"`` the source decides the
            coverage: the best of 8 random crops is kept (``None`` = the first crop).
        rng: generator or integer seed.
        source: bool ``[H, W]`` real gap pattern, required for ``"borrowed"``.

    Returns:
        bool ``[h, w]``, True = hidden.

    Raises:
        ConfigError: unknown kind (the message lists the valid ones), bad arguments.
    """
    if kind not in MASK_KINDS:
        raise ConfigError(
            f"Unknown gap kind {kind!r}; geonp simulates only these. "
            f"Use one of: {', '.join(MASK_KINDS)}."
        )
    hw = _check_shape(shape)
    gen = as_rng(rng)
    if kind == "borrowed":
        src = _check_source(source)
        if coverage is None:
            return borrowed_mask(hw, source=src, rng=gen)
        c = _check_coverage(coverage)
        crops = [borrowed_mask(hw, source=src, rng=gen) for _ in range(8)]
        return min(crops, key=lambda m: abs(float(m.mean()) - c))
    if coverage is None:
        raise ConfigError(
            f"coverage=None is only allowed for kind='borrowed', not {kind!r}; "
            "pass the fraction of pixels to hide, e.g. coverage=0.3."
        )
    c = _check_coverage(coverage)
    if kind == "cloud":
        return cloud_mask(hw, coverage=c, rng=gen)
    if kind == "stripe":
        return stripe_mask(hw, coverage=c, rng=gen)
    if kind == "random":
        return random_mask(hw, coverage=c, rng=gen)
    if kind == "scene_cloud":
        return scene_cloud_mask(hw, coverage=c, rng=gen)
    return _mixed_mask(hw, c, gen)


def sample_training_mask(
    shape: Sequence[int], *, rng: np.random.Generator | int, source: np.ndarray | None = None
) -> np.ndarray:
    """Draw one mask from the training gap distribution.

    Kinds are drawn with :data:`TRAINING_KIND_WEIGHTS` (cloud 0.45, stripe 0.25, random 0.15,
    borrowed 0.15; without ``source`` the borrowed weight is shared out proportionally) and the
    coverage uniformly from :data:`TRAINING_COVERAGE`. The result always keeps at least 5 % of the
    pixels visible (context for the model) and hides at least one (a target to learn from).

    Args:
        shape: ``(h, w)`` in pixels, at least 2 pixels in all.
        rng: generator or integer seed.
        source: optional bool ``[H, W]`` real gap pattern for the borrowed kind.

    Returns:
        bool ``[h, w]``, True = hidden.
    """
    h, w = _check_shape(shape)
    n = h * w
    if n < 2:
        raise ConfigError(
            f"shape={(h, w)} has {n} pixel; a training mask needs one visible and "
            "one hidden pixel. Use patches of at least 2 pixels (e.g. 64x64)."
        )
    gen = as_rng(rng)
    if source is not None:
        source = _check_source(source)
    kinds = [k for k in TRAINING_KIND_WEIGHTS if source is not None or k != "borrowed"]
    weights = np.array([TRAINING_KIND_WEIGHTS[k] for k in kinds])
    kind = kinds[int(gen.choice(len(kinds), p=weights / weights.sum()))]
    coverage = float(gen.uniform(*TRAINING_COVERAGE))
    is_gap = make_mask(kind, (h, w), coverage=coverage, rng=gen, source=source).ravel().copy()

    n_visible_min = min(n - 1, max(1, math.ceil(MIN_VISIBLE_FRACTION * n)))
    n_reveal = n_visible_min - int((~is_gap).sum())
    if n_reveal > 0:
        is_gap[gen.choice(np.flatnonzero(is_gap), size=n_reveal, replace=False)] = False
    if not is_gap.any():
        is_gap[int(gen.integers(n))] = True
    return is_gap.reshape(h, w)


# --------------------------------------------------------------------------------------------
# gaps of fill-like training windows
# --------------------------------------------------------------------------------------------


#: Default mix of gap kinds for window training (``borrowed`` only with a source pattern).
WINDOW_KIND_WEIGHTS: dict[str, float] = {
    "cloud": 0.28,
    "scene_cloud": 0.25,
    "stripe": 0.15,
    "random": 0.14,
    "borrowed": 0.13,
    "sparse": 0.05,
}
#: Window-only gap kind: all but 1-64 random pixels hidden, so that a model learns what a handful
#: of context pixels can (not) tell, and keeps its std of the order of the band's spread.
SPARSE_KIND = "sparse"


def sample_window_mask(
    shape: Sequence[int],
    *,
    rng: np.random.Generator | int,
    source: np.ndarray | None = None,
    weights: dict[str, float] | None = None,
    coverage: tuple[float, float] = TRAINING_COVERAGE,
    scene_coverage: tuple[float, float] = (0.4, 0.9),
    footprint_probability: float = 0.15,
) -> tuple[np.ndarray, np.ndarray]:
    """Gaps of a large training window (e.g. 256 px), from single pixels to scene-scale clouds.

    Args:
        shape: ``(h, w)`` of the window.
        rng: generator or integer seed.
        source: optional real gap pattern for ``borrowed``.
        weights: kind -> weight (default :data:`WINDOW_KIND_WEIGHTS`); kinds from
            :data:`MASK_KINDS` or ``"sparse"`` (all but 1-64 pixels hidden); ``borrowed`` is
            dropped without a source.
        coverage: range of the gap fraction for all kinds but ``scene_cloud``.
        scene_coverage: range of the gap fraction of ``scene_cloud`` (high, so that gaps are
            larger than a query window and targets lie far from data).
        footprint_probability: chance of adding a straight nodata collar (:func:`footprint_mask`).

    Returns:
        ``(is_gap, outside)``: bool ``[h, w]`` each; ``outside`` pixels are neither context nor
        targets, and are not in ``is_gap``. At least one pixel stays visible.
    """
    h, w = _check_shape(shape)
    gen = as_rng(rng)
    table = dict(WINDOW_KIND_WEIGHTS if weights is None else weights)
    unknown = set(table) - set(MASK_KINDS) - {SPARSE_KIND}
    if unknown:
        raise ConfigError(f"unknown gap kind(s) {sorted(unknown)} in the gap mix; use "
                          f"{', '.join((*MASK_KINDS, SPARSE_KIND))}")
    kinds = [k for k, v in table.items() if v > 0 and (source is not None or k != "borrowed")]
    if not kinds:
        raise ConfigError(f"the gap mix {table} has no usable kind (borrowed needs --gap-source)")
    p = np.array([table[k] for k in kinds], float)
    kind = kinds[int(gen.choice(len(kinds), p=p / p.sum()))]
    cov = float(gen.uniform(*(scene_coverage if kind == "scene_cloud" else coverage)))
    if kind == SPARSE_KIND:
        keep = int(round(math.exp(gen.uniform(0.0, math.log(64.0)))))
        is_gap = np.ones(h * w, bool)
        is_gap[gen.choice(h * w, size=min(keep, h * w - 1), replace=False)] = False
        is_gap = is_gap.reshape(h, w)
    elif kind == "scene_cloud":
        # blobs of 1-3 windows: the window is inside a cloud field much larger than itself
        is_gap = scene_cloud_mask((h, w), coverage=cov, rng=gen, scale=float(gen.uniform(1.0, 3.0)) * 0.5 * (h + w))
    else:
        is_gap = make_mask(kind, (h, w), coverage=None if kind == "borrowed" else cov, rng=gen, source=source)
    outside = np.zeros((h, w), bool)
    if gen.random() < footprint_probability:
        outside = footprint_mask((h, w), rng=gen)
        is_gap = is_gap & ~outside
    if not (~is_gap & ~outside).any():
        is_gap.flat[int(gen.integers(h * w))] = False
        outside[~is_gap] = False
    return is_gap, outside
