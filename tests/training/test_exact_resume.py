"""A run stopped and resumed continues exactly: weights, optimiser, LR schedule and data, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geonp.config import ModelConfig, TrainConfig
from geonp.model_files.train_state import load_training_state
from geonp.training.raster import train
from geonp.training.settings import TrainingData, TrainOutput, TrainRecipe, TrainRun
from geonp.training.windows import TaskShape
from tests.conftest import smooth_field, write_raster

SMALL = TrainRecipe(model=ModelConfig(dim=16, depth=1, num_heads=2, ff_dim=32), batch_size=4,
                    task_shape=TaskShape(patch_size=24, core_size=12, max_context=32, max_targets=16), val_tasks=16,
                    pool_size=30, training=TrainConfig(steps=6, val_every=3, warmup_steps=2, lr=3e-3, device="cpu"))


@pytest.fixture(scope="module")
def raster(tmp_path_factory):
    arr = np.stack([smooth_field((64, 128), seed=s) for s in (3, 4)]).astype("uint16")
    return write_raster(tmp_path_factory.mktemp("resume") / "scene.tif", arr)


class _Stop(Exception):
    pass


def _stop_after(step: int):
    def progress(done: int, total: int, loss: float) -> None:
        if done > step:  # the checkpoint of `step` is written; the next step is lost with the "crash"
            raise _Stop

    return progress


def _final_state(directory):
    weights, opt, progress = load_training_state(directory)
    return weights, opt, progress


def _assert_same(a, b):
    (wa, oa, pa), (wb, ob, pb) = a, b
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert oa["param_groups"] == ob["param_groups"]  # includes the last learning rate
    for pid in oa["state"]:
        for name, value in oa["state"][pid].items():
            other = ob["state"][pid][name]
            assert torch.equal(value, other) if torch.is_tensor(value) else value == other, (pid, name)
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in pa["history"]]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in pb["history"]]
    assert pa["step"] == pb["step"] and pa["best_val_nll"] == pb["best_val_nll"]


@pytest.mark.parametrize(("data_workers", "processes"), [(0, 1), (1, 1), (None, 2)])
def test_stop_and_resume_equals_a_straight_run_bit_for_bit(raster, tmp_path, data_workers, processes):
    """With a data worker (batches made ahead) or two data-parallel processes, too."""
    torch.set_num_threads(1)  # same reduction order in both runs
    data = TrainingData([raster], nodata=0)
    straight = train(data, tmp_path / "straight", SMALL, run=TrainRun(processes, data_workers=0))
    assert straight.steps == 6 and [r["step"] for r in straight.history] == [3, 6]
    with pytest.raises(_Stop):
        train(data, tmp_path / "resumed", SMALL, run=TrainRun(processes, data_workers, progress=_stop_after(3)))
    assert load_training_state(tmp_path / "resumed")[2]["step"] == 3
    resumed = train(data, TrainOutput(tmp_path / "resumed", resume=True), SMALL, run=TrainRun(processes, data_workers))
    assert [r["step"] for r in resumed.history] == [3, 6]
    _assert_same(_final_state(tmp_path / "straight"), _final_state(tmp_path / "resumed"))
    assert resumed.best_val_nll == straight.best_val_nll


def test_gradient_averager_applies_the_mean_of_the_processes_and_reports_failures():
    from geonp.training.parallel import GradientAverager, run_data_parallel, shard_size

    model = torch.nn.Linear(3, 2)
    averager = GradientAverager(model, 2)

    def run(rank):
        for p in model.parameters():
            p.grad = torch.full_like(p, float(rank + 1))  # rank 0: 1, rank 1: 2
        return averager.average(rank, 10.0 * rank)

    assert run_data_parallel(2, run, averager) == 5.0  # mean loss
    for p in model.parameters():
        assert torch.equal(p.grad, torch.full_like(p, 1.5))

    second = GradientAverager(model, 2)

    def failing(rank):
        if rank == 1:
            raise ValueError("boom in rank 1")
        return second.average(rank, 0.0)  # rank 0 waits for rank 1, which aborts the step

    with pytest.raises(RuntimeError, match="boom in rank 1"):
        run_data_parallel(2, failing, second)
    assert [shard_size(16, 3, r) for r in range(3)] == [6, 5, 5]


def test_processes_must_fit_the_batch(raster, tmp_path):
    with pytest.raises(Exception, match="processes=5 must be an integer from 1 to batch_size=4"):
        train(TrainingData([raster], nodata=0), tmp_path / "bad", SMALL, run=TrainRun(processes=5))
