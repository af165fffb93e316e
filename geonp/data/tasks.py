"""Raster patches to neural-process tasks (numpy), and padding of tasks into a :class:`Batch`.

A task mirrors what :mod:`geonp.inference` does on a tile: targets are the gap pixels of a core
window, context is the visible pixels nearest to it (:func:`geonp.tiling.nearest_context`), and
coordinates are (row, col) in pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy import ndimage

from geonp.data.batch import Batch
from geonp.tiling import nearest_context


# Floor of the context std used to standardise a task, in globally normalised units: a tile of
# near-constant context (open water) must not blow its small noise up to unit variance.
STD_FLOOR = 0.05


@dataclass
class Task:
    """One task in numpy (coordinates in pixels, values standardised by the context).

    Values are first normalised per band (:class:`~geonp.normalize.Normalizer`), then shifted and
    scaled by the mean and std of the task's own context (``shift``, ``scale``), so the model sees
    every task at the same scale whatever the sensor, band or landscape. Predictions go back with
    ``mean * scale + shift`` and ``std * scale``.

    Attributes:
        xc: ``[Nc, 2]``; yc: ``[Nc, dy]``; xt: ``[Nt, 2]``; yt: ``[Nt, dy]`` or None.
        shift: ``[dy]`` context mean; scale: ``[dy]`` context std (floored).
    """

    xc: np.ndarray
    yc: np.ndarray
    xt: np.ndarray
    yt: np.ndarray | None
    shift: np.ndarray | None = None
    scale: np.ndarray | None = None


def standardize(yc: np.ndarray, yt: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """Standardise context (and target) values ``[N, dy]`` by the context mean and floored std."""
    shift = yc.mean(0)
    scale = np.maximum(yc.std(0), STD_FLOOR)
    return (yc - shift) / scale, None if yt is None else (yt - shift) / scale, shift, scale


def patch_task(
    values: np.ndarray,
    valid: np.ndarray,
    is_gap: np.ndarray,
    *,
    core: tuple[int, int, int, int],
    max_context: int,
    max_targets: int,
    rng: np.random.Generator,
) -> Task | None:
    """Build a training task from a patch.

    Args:
        values: ``[dy, h, w]`` normalised values.
        valid: bool ``[h, w]``, True where the ground truth exists.
        is_gap: bool ``[h, w]``, True where a pixel is hidden.
        core: ``(r0, r1, c0, c1)`` query window; targets are its hidden valid pixels.
        max_context: cap on context pixels (nearest to the core).
        max_targets: cap on targets (a random subset; targets are independent given the context).
        rng: generator for the target subset.

    Returns:
        The task, or None when it has no context or no target.
    """
    r0, r1, c0, c1 = core
    hidden = np.zeros_like(valid)
    hidden[r0:r1, c0:c1] = (is_gap & valid)[r0:r1, c0:c1]
    tr, tc = np.nonzero(hidden)
    # rank context by the distance to the nearest target, as geonp.predict does at inference
    dist = ndimage.distance_transform_edt(~hidden) if tr.size else None
    cr, cc = nearest_context(valid & ~is_gap, core, max_context=max_context, query_distance=dist)
    if tr.size == 0 or cr.size == 0:
        return None
    if tr.size > max_targets:
        pick = rng.choice(tr.size, size=max_targets, replace=False)
        tr, tc = tr[pick], tc[pick]
    yc, yt, shift, scale = standardize(values[:, cr, cc].T, values[:, tr, tc].T)
    return Task(
        xc=np.stack([cr, cc], -1).astype(np.float32),
        yc=yc.astype(np.float32),
        xt=np.stack([tr, tc], -1).astype(np.float32),
        yt=yt.astype(np.float32),
        shift=shift,
        scale=scale,
    )


def collate(tasks: list[Task]) -> Batch:
    """Pad tasks to a common size; padding is marked invalid in ``context_valid``/``target_valid``."""
    b = len(tasks)
    nc = max(t.xc.shape[0] for t in tasks)
    nt = max(t.xt.shape[0] for t in tasks)
    dy = tasks[0].yc.shape[1]
    xc, yc = np.zeros((b, nc, 2), np.float32), np.zeros((b, nc, dy), np.float32)
    xt, yt = np.zeros((b, nt, 2), np.float32), np.zeros((b, nt, dy), np.float32)
    cv, tv = np.zeros((b, nc), bool), np.zeros((b, nt), bool)
    for i, t in enumerate(tasks):
        n, m = t.xc.shape[0], t.xt.shape[0]
        xc[i, :n], yc[i, :n], cv[i, :n] = t.xc, t.yc, True
        xt[i, :m], tv[i, :m] = t.xt, True
        if t.yt is not None:
            yt[i, :m] = t.yt
        # padded points sit on a real point so coordinate spans (bias tables) do not grow
        xc[i, n:], xt[i, m:] = t.xc[0], t.xt[0]
    has_y = all(t.yt is not None for t in tasks)
    return Batch(
        xc=torch.from_numpy(xc), yc=torch.from_numpy(yc), xt=torch.from_numpy(xt),
        yt=torch.from_numpy(yt) if has_y else None,
        context_valid=torch.from_numpy(cv), target_valid=torch.from_numpy(tv),
    )
