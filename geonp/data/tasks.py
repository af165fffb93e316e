"""Raster windows to neural-process tasks (numpy), and padding of tasks into a :class:`Batch`.

A task mirrors what ``geonp fill`` does on a tile: targets are the gap pixels of a query window,
context is chosen by :func:`geonp.context.select_context` (the nearest observed pixels plus,
with ``n_far``, pixels spread over distance and direction), and coordinates are (row, col) in
pixels relative to the query window's corner.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from geonp.context import ContextSpec, select_context
from geonp.data.batch import Batch

# Floor of the context std used to standardise a task, in globally normalised units: a tile of
# near-constant context (open water) must not blow its small noise up to unit variance.
STD_FLOOR = 0.05
# Weight (in context pixels) of the band's global std, 1 in normalised units, in a task's scale:
# a handful of context pixels says little about the local spread, so their scale shrinks towards
# the global one; with one pixel it is sqrt(PRIOR_COUNT / (1 + PRIOR_COUNT)) of it, never ~0.
PRIOR_COUNT = 2.0


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


def task_scale(yc: np.ndarray) -> np.ndarray:
    """Scale ``[dy]`` of a task with context values ``[N, dy]`` in globally normalised units.

    ``sqrt((N s² + k) / (N + k))`` with ``s`` the context std and ``k = PRIOR_COUNT``: the
    context's spread shrunk towards the band's global std (1), floored at ``STD_FLOOR``. With many
    context pixels it is ``s``; with one it is ``sqrt(k / (1 + k))``, so a prediction from a
    single observed pixel keeps a std of the order of the band's spread.
    """
    n = yc.shape[0]
    var = yc.var(0) if n else np.zeros(yc.shape[1])
    return np.maximum(np.sqrt((n * var + PRIOR_COUNT) / (n + PRIOR_COUNT)), STD_FLOOR)


def standardize(yc: np.ndarray, yt: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """Standardise context (and target) values ``[N, dy]`` by the context mean and :func:`task_scale`.

    Values must be in globally normalised units (band mean 0, std 1), as training and filling
    both pass them.
    """
    shift = yc.mean(0)
    scale = task_scale(yc)
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
    """Build a training task from a patch with the near-context rule only (geonp 0.1 tasks).

    Same as :func:`window_task` with ``ContextSpec(n_near=max_context)``, except that coordinates
    are the patch's own pixels.
    """
    task = window_task(values, valid, is_gap, core=core, spec=ContextSpec(n_near=max_context),
                       max_targets=max_targets, rng=rng)
    if task is not None:
        task.xc += np.array([core[0], core[2]], np.float32)
        task.xt += np.array([core[0], core[2]], np.float32)
    return task


def window_task(
    values: np.ndarray,
    valid: np.ndarray,
    is_gap: np.ndarray,
    *,
    core: tuple[int, int, int, int],
    spec: ContextSpec,
    max_targets: int,
    rng: np.random.Generator,
    origin: tuple[int, int] = (0, 0),
) -> Task | None:
    """Build a training task from a window, as ``geonp fill`` builds one from a tile.

    Args:
        values: ``[dy, h, w]`` values in globally normalised units.
        valid: bool ``[h, w]``, True where the ground truth exists (outside = neither context
            nor target).
        is_gap: bool ``[h, w]``, True where a pixel is hidden.
        core: ``(r0, r1, c0, c1)`` query window; targets are its hidden valid pixels.
        spec: context geometry (:func:`geonp.context.select_context`).
        max_targets: cap on targets (a random subset; targets are independent given the context).
        rng: generator for the target subset.
        origin: the window's offset in its raster (positions are hashed absolutely).

    Returns:
        The task (coordinates relative to the query window's corner), or None when it has no
        context or no target.
    """
    r0, r1, c0, c1 = core
    hidden = np.zeros_like(valid)
    hidden[r0:r1, c0:c1] = (is_gap & valid)[r0:r1, c0:c1]
    if not hidden.any():
        return None
    cr, cc = select_context(valid & ~is_gap, hidden, core, spec, origin=origin)
    if cr.size == 0:
        return None
    tr, tc = np.nonzero(hidden)
    if tr.size > max_targets:
        pick = rng.choice(tr.size, size=max_targets, replace=False)
        tr, tc = tr[pick], tc[pick]
    yc, yt, shift, scale = standardize(values[:, cr, cc].T, values[:, tr, tc].T)
    corner = np.array([r0, c0])
    return Task(
        xc=(np.stack([cr, cc], -1) - corner).astype(np.float32),
        yc=yc.astype(np.float32),
        xt=(np.stack([tr, tc], -1) - corner).astype(np.float32),
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
