"""``data/tasks``: task scale and standardisation, window tasks, and padding into a Batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from geonp.data.tasks import (
    PRIOR_COUNT,
    STD_FLOOR,
    Task,
    TaskWindow,
    collate,
    standardize,
    task_scale,
    window_task,
)
from geonp.tasks.context import ContextSpec


def test_task_scale_shrinks_the_context_spread_towards_one():
    many = np.random.default_rng(0).normal(0.0, 3.0, (10_000, 1))
    assert task_scale(many)[0] == pytest.approx(many.std(), rel=1e-3)
    one = np.array([[0.4]])
    assert task_scale(one)[0] == pytest.approx(math.sqrt(PRIOR_COUNT / (1 + PRIOR_COUNT)))
    flat = np.zeros((10_000, 2))
    np.testing.assert_allclose(task_scale(flat), [STD_FLOOR, STD_FLOOR])  # open water: the floor
    yc = np.array([[1.0], [3.0]])  # N = 2, var = 1: sqrt((2 + k) / (2 + k)) = 1
    assert task_scale(yc)[0] == pytest.approx(1.0)


def test_standardize_uses_the_context_statistics_for_targets_too():
    yc = np.array([[1.0, 10.0], [3.0, 14.0], [5.0, 18.0]])
    yt = np.array([[7.0, 22.0]])
    zc, zt, shift, scale = standardize(yc, yt)
    np.testing.assert_allclose(shift, [3.0, 14.0])
    np.testing.assert_allclose(scale, task_scale(yc))
    np.testing.assert_allclose(zc * scale + shift, yc)
    np.testing.assert_allclose(zt * scale + shift, yt)
    assert standardize(yc, None)[1] is None


def test_window_task_targets_the_hidden_valid_pixels_of_the_core():
    values = np.arange(2 * 12 * 12, dtype=float).reshape(2, 12, 12) / 100
    valid = np.ones((12, 12), bool)
    valid[0, :] = False  # no ground truth: neither context nor target
    is_gap = np.zeros((12, 12), bool)
    is_gap[3:6, 4:8] = True  # inside the core
    is_gap[0:2, 0:2] = True  # outside the core: hidden but not a target
    core = (2, 8, 2, 10)
    task = window_task(TaskWindow(values, valid, is_gap), core=core, spec=ContextSpec(n_near=20), max_targets=100,
                       rng=np.random.default_rng(0))
    assert task is not None
    rows, cols = task.xt[:, 0] + core[0], task.xt[:, 1] + core[2]
    assert sorted(zip(rows.tolist(), cols.tolist(), strict=True)) == [
        (float(r), float(c)) for r in range(3, 6) for c in range(4, 8)]
    crow, ccol = (task.xc[:, 0] + core[0]).astype(int), (task.xc[:, 1] + core[2]).astype(int)
    assert task.xc.shape == (20, 2) and task.yc.shape == (20, 2) and task.yt.shape == (12, 2)
    assert (valid & ~is_gap)[crow, ccol].all()  # context: observed pixels only
    np.testing.assert_allclose(task.yc * task.scale + task.shift, values[:, crow, ccol].T, rtol=1e-6)
    capped = window_task(TaskWindow(values, valid, is_gap), core=core, spec=ContextSpec(n_near=20), max_targets=5,
                         rng=np.random.default_rng(0))
    assert capped is not None and capped.xt.shape == (5, 2)
    none_hidden = window_task(TaskWindow(values, valid, np.zeros_like(is_gap)), core=core, spec=ContextSpec(n_near=20),
                              max_targets=5, rng=np.random.default_rng(0))
    assert none_hidden is None


def test_collate_pads_on_a_real_point_and_marks_padding_invalid():
    a = Task(xc=np.array([[0, 0], [1, 2]], np.float32), yc=np.array([[1.0], [2.0]], np.float32),
             xt=np.array([[5, 5]], np.float32), yt=np.array([[3.0]], np.float32))
    b = Task(xc=np.array([[4, 4]], np.float32), yc=np.array([[7.0]], np.float32),
             xt=np.array([[6, 6], [7, 8], [9, 9]], np.float32), yt=np.array([[1.0], [2.0], [3.0]], np.float32))
    batch = collate([a, b])
    assert batch.xc.shape == (2, 2, 2) and batch.xt.shape == (2, 3, 2) and batch.yt.shape == (2, 3, 1)
    assert batch.context_valid.tolist() == [[True, True], [True, False]]
    assert batch.target_valid.tolist() == [[True, False, False], [True, True, True]]
    assert torch.equal(batch.xc[1, 1], batch.xc[1, 0])  # padding sits on a real point
    assert torch.equal(batch.xt[0, 2], batch.xt[0, 0])
    assert batch.yc[1, 1, 0] == 0 and batch.yt[0, 1, 0] == 0
    no_targets = collate([Task(a.xc, a.yc, a.xt, None), b])
    assert no_targets.yt is None
