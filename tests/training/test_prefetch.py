"""Batches made ahead in worker processes are the batches of the step, in order; errors reach the trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geonp.data.batch import Batch
from geonp.training.prefetch import PrefetchedBatches


def _sample(step: int) -> Batch:
    g = torch.Generator().manual_seed(step)
    if step == 7:
        raise ValueError("no tasks at step 7")
    return Batch(xc=torch.rand(2, 5, 2, generator=g), yc=torch.rand(2, 5, 1, generator=g),
                 xt=torch.rand(2, 3, 2, generator=g), yt=None,
                 context_valid=torch.ones(2, 5, dtype=torch.bool), target_valid=None)


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_prefetched_batches_equal_the_sampler(workers):
    with PrefetchedBatches(_sample, range(3, 7), workers) as batches:
        for step in range(3, 7):
            got, want = batches(step), _sample(step)
            assert torch.equal(got.xc, want.xc) and torch.equal(got.yc, want.yc) and got.yt is None
            assert got.context_valid.dtype == torch.bool and got.context_valid.all()


def test_a_worker_error_reaches_the_trainer_and_order_is_checked():
    with PrefetchedBatches(_sample, range(5, 9), 1) as batches:
        assert np.isfinite(batches(5).xc.numpy()).all()
        batches(6)
        with pytest.raises(ValueError, match="no tasks at step 7"):
            batches(7)
    with PrefetchedBatches(_sample, range(4), 1) as batches, pytest.raises(RuntimeError, match="in order"):
        batches(1)
