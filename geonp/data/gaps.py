"""Simulated gaps: where pixels are hidden during training and evaluation.

A model learns to fill the gaps it sees in training, so the gap shapes must look like real ones:
clouds with their offset shadows, Landsat-7 scan-line (SLC-off) stripes, dropped pixels, and gap
patterns borrowed from real rasters. Training (`geonp train`) and scoring (`geonp evaluate`) use
this one module, so a score always refers to the same gap distribution the model was trained on.

Every function returns a boolean ``is_gap`` array of shape ``[h, w]``: ``True`` = hidden.
Randomness comes only from the ``rng`` argument (a ``numpy.random.Generator`` or an integer
seed), so the same seed always gives the same mask.

Most generators build a *priority* field (higher = hidden first) and hide the ``round(coverage *
h * w)`` highest pixels, so their coverage is exact; only ``random_mask`` (i.i.d. pixels) and
``borrowed_mask`` (coverage set by the source) are approximate. The shapes themselves are in
:mod:`geonp.data.gap_shapes`; this module names them (:func:`make_mask`) and holds the training
distributions over them (:func:`sample_training_mask`, :func:`sample_window_mask`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from geonp.data.gap_args import as_rng, check_coverage, check_shape, check_source
from geonp.data.gap_shapes import (
    borrowed_mask,
    cloud_fields,
    cloud_mask,
    descending_rank,
    footprint_mask,
    hide_highest,
    random_mask,
    scene_cloud_mask,
    stripe_mask,
    stripe_priority,
)
from geonp.errors import ConfigError, UnknownNameError

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
# dispatch and the training distribution
# --------------------------------------------------------------------------------------------


def _priority(kind: str, shape: tuple[int, int], gen: np.random.Generator) -> np.ndarray:
    if kind == "cloud":
        return cloud_fields(shape, rng=gen, shadow=True, shadow_offset=None)[1]
    if kind == "stripe":
        angle = float(gen.choice([-1.0, 1.0]) * gen.uniform(8.0, 15.0))
        period = float(gen.uniform(10.0, 30.0))
        return stripe_priority(
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
        return hide_highest(_priority(str(gen.choice(singles)), shape, gen), coverage)
    n_kinds = int(gen.integers(2, 4))
    kinds = [str(k) for k in gen.choice(singles, size=n_kinds, replace=False)]
    shares = gen.dirichlet(np.ones(n_kinds))
    score = np.full(shape, np.inf)
    for kind, share in zip(kinds, shares, strict=True):
        score = np.minimum(score, descending_rank(_priority(kind, shape, gen)) / share)
    return hide_highest(-score, coverage)


def _borrowed(hw: tuple[int, int], coverage: float | None, gen: np.random.Generator,
              source: np.ndarray | None) -> np.ndarray:
    """A crop of ``source``: the best of 8 random crops for ``coverage`` (None = the first crop)."""
    src = check_source(source)
    if coverage is None:
        return borrowed_mask(hw, source=src, rng=gen)
    c = check_coverage(coverage)
    crops = [borrowed_mask(hw, source=src, rng=gen) for _ in range(8)]
    return min(crops, key=lambda m: abs(float(m.mean()) - c))


#: ``(shape, coverage, rng, source) -> is_gap``; :func:`make_mask` checks the coverage: a fraction,
#: or None for ``borrowed`` only (hence ``Any``).
MaskMaker = Callable[[tuple[int, int], Any, np.random.Generator, np.ndarray | None], np.ndarray]

#: The simulated gap kinds, by name (:func:`make_mask`); new kinds are appended: evaluation seeds
#: use the index. :data:`geonp.config.MASK_KINDS` lists the same names.
MASK_MAKERS: dict[str, MaskMaker] = {
    "cloud": lambda hw, c, gen, source: cloud_mask(hw, coverage=c, rng=gen),
    "stripe": lambda hw, c, gen, source: stripe_mask(hw, coverage=c, rng=gen),
    "random": lambda hw, c, gen, source: random_mask(hw, coverage=c, rng=gen),
    "borrowed": _borrowed,
    "mixed": lambda hw, c, gen, source: _mixed_mask(hw, c, gen),
    "scene_cloud": lambda hw, c, gen, source: scene_cloud_mask(hw, coverage=c, rng=gen),
}
#: Their names, in order.
MASK_KINDS: tuple[str, ...] = tuple(MASK_MAKERS)


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
    UnknownNameError.check("kind", kind, MASK_MAKERS, "geonp simulates only these gap kinds")
    hw = check_shape(shape)
    gen = as_rng(rng)
    if kind != "borrowed":  # a borrowed crop's coverage is the source's
        if coverage is None:
            raise ConfigError(
                f"coverage=None is only allowed for kind='borrowed', not {kind!r}; "
                "pass the fraction of pixels to hide, e.g. coverage=0.3."
            )
        coverage = check_coverage(coverage)
    return MASK_MAKERS[kind](hw, coverage, gen, source)


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
    h, w = check_shape(shape)
    n = h * w
    if n < 2:
        raise ConfigError(
            f"shape={(h, w)} has {n} pixel; a training mask needs one visible and "
            "one hidden pixel. Use patches of at least 2 pixels (e.g. 64x64)."
        )
    gen = as_rng(rng)
    if source is not None:
        source = check_source(source)
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
    h, w = check_shape(shape)
    gen = as_rng(rng)
    table = dict(WINDOW_KIND_WEIGHTS if weights is None else weights)
    for name in table:
        UnknownNameError.check("gap_mix kind", name, (*MASK_MAKERS, SPARSE_KIND))
    kinds = [k for k, v in table.items() if v > 0 and (source is not None or k != "borrowed")]
    if not kinds:
        raise ConfigError(f"the gap mix {table} has no usable kind (borrowed needs --gap-source)")
    p = np.array([table[k] for k in kinds], float)
    kind = kinds[int(gen.choice(len(kinds), p=p / p.sum()))]
    cov = float(gen.uniform(*(scene_coverage if kind == "scene_cloud" else coverage)))
    if kind == SPARSE_KIND:
        keep = round(math.exp(gen.uniform(0.0, math.log(64.0))))
        is_gap: np.ndarray = np.ones(h * w, bool)
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
