"""Training speed (tasks per second) of today's kernels and data path against the new ones, in one run.

At the default model's recipe (geonp/training/recipes/default.yaml: TNP-KR with scan attention,
dim 64, depth 4, 4 heads, ff 128; 256 near + 96 far context, 128 targets, batch 16):

- ``old``: the training path before issue 28: the bias gathered by advanced indexing (autograd's
  accumulating ``index_put`` backward) and scan attention's FlashAttention-style backward, which
  recomputes every tile; tasks cut in the trainer's process.
- ``new``: ``gather_table`` (index_add_ backward), the one-tile training path (saved
  probabilities), and tasks cut by a data worker process (``geonp.training.prefetch``); then
  the same in two data-parallel processes, each cutting and training on 8 of the 16 tasks
  (``geonp.training.parallel``, ``geonp train --processes 2``). The new path also keeps freed
  memory in the process (``geonp.training.allocator``), as ``geonp.train`` does.

All run :func:`geonp.training.loop.fit` on the same tasks from the same weights, with the
trainers on one thread each (``torch.set_num_threads(1)``); the machine's load is printed, since a
shared machine's timings vary: compare the ratio, within one run.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/train_speed.py [RASTER ...] [--steps 8]
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np
import torch

from geonp.config import ModelConfig, TrainConfig, load_recipe
from geonp.data.datasets import ColumnSplit
from geonp.data.gaps import WINDOW_KIND_WEIGHTS
from geonp.models import build_model
from geonp.models.attention import bias as bias_module
from geonp.models.attention import scan as scan_module
from geonp.models.attention.gather import gather_table_reference
from geonp.models.heads import gaussian_nll
from geonp.training.allocator import keep_freed_memory
from geonp.training.loop import FitHooks, fit
from geonp.training.parallel import GradientAverager, run_data_parallel, shard_size
from geonp.training.prefetch import PrefetchedBatches
from geonp.training.windows import (
    PoolOptions,
    TaskRecipe,
    TaskShape,
    gp_tasks,
    make_batch,
    raster_tasks,
    window_groups,
)

DEFAULT_RASTERS = ["../shared/data/landsat8_224078_20200518_b234.tif", "sample_data/landsat8_cloudy.tif"]


def old_kernels() -> ExitStack:
    """Patch in the pre-issue-28 training kernels (advanced-index gather, recomputing scan backward)."""

    def scan_backward(q, k, v, tiles, key_valid):  # type: ignore[no-untyped-def]
        tensors = tiles.tensors if tiles is not None else ()
        return scan_module._ScanAttentionFn.apply(q, k, v, key_valid, tiles, 1024, 1024, *tensors)

    stack = ExitStack()
    stack.enter_context(mock.patch.object(bias_module, "gather_table", gather_table_reference))
    stack.enter_context(mock.patch.object(scan_module, "_one_tile_attention", scan_backward))
    return stack


def model_step_seconds(model: torch.nn.Module, batches: list, opt: torch.optim.Optimizer) -> float:
    """Mean seconds of forward + backward + optimiser step over ``batches`` (after one warm-up)."""
    times = []
    for b in batches:
        t0 = time.perf_counter()
        mean, std = model(b.xc, b.yc, b.xt, b.context_valid)
        loss = gaussian_nll(mean, std, b.yt, b.target_valid)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return float(np.mean(times[1:]))


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rasters", nargs="*")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rasters = args.rasters or [next(p for p in DEFAULT_RASTERS if Path(p).exists())]
    recipe = load_recipe("default")
    data = recipe["data"]
    shape = TaskShape(**{k: data[k] for k in ("patch_size", "core_size", "max_context", "max_targets", "n_far",
                                               "search_radius", "sectors", "tasks_per_window")})
    pools = PoolOptions(data.get("nodata"), None, ColumnSplit(0.15, 0.2), pool_size=128, val_count=16,
                        pool_megabytes=128)
    train_groups, _ = window_groups(rasters, shape, pools, seed=0)
    task_recipe = TaskRecipe(shape, dict(WINDOW_KIND_WEIGHTS), None)
    batch_size, gp_fraction = data["batch_size"], data["gp_fraction"]

    def draw(r: np.random.Generator):  # type: ignore[no-untyped-def]
        return gp_tasks(task_recipe, r) if r.random() < gp_fraction else raster_tasks(train_groups, task_recipe, r)

    def sample_for(rank: int, world: int):  # type: ignore[no-untyped-def]
        def sample(step: int):  # type: ignore[no-untyped-def]
            seed = [1, step] if world == 1 else [1, step, rank]
            return make_batch(draw, shard_size(batch_size, world, rank), np.random.default_rng(seed))

        return sample

    sample = sample_for(0, 1)

    t0 = time.perf_counter()
    batches = [sample(s) for s in range(args.steps)]
    gen = (time.perf_counter() - t0) / args.steps
    mcfg = ModelConfig(**recipe["model"])
    tcfg = TrainConfig(steps=args.steps, val_every=10**6, lr=3e-4, warmup_steps=1, device="cpu")
    print(f"load average {os.getloadavg()}; torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"batch: {batch_size} tasks, context {tuple(batches[0].xc.shape)}, targets {tuple(batches[0].xt.shape)}")
    print(f"task generation: {gen:.3f} s per batch ({batch_size / gen:.1f} tasks/s in one process)")
    rates = {}
    for name, workers, processes in (("old", 0, 1), ("new", args.workers, 1), ("new", 0, 2)):
        torch.manual_seed(0)
        model = build_model(mcfg)
        if name == "new":
            keep_freed_memory()  # as geonp.train does (process-wide: the old path ran before it)
        with old_kernels() if name == "old" else ExitStack():
            step = model_step_seconds(model, batches[:4], torch.optim.AdamW(model.parameters(), lr=3e-4))
            torch.manual_seed(0)
            model = build_model(mcfg)
            t0 = time.perf_counter()
            train_steps(model, sample_for, tcfg, workers, processes)
            wall = time.perf_counter() - t0
        label = f"{name}, {processes} process(es), {workers} data worker(s)"
        rates[label] = args.steps * batch_size / wall
        print(f"{label}: model step (batch {batch_size}, 1 process) {step:.3f} s; training {wall / args.steps:.3f} s "
              f"per step -> {rates[label]:.1f} tasks/s ({rates[label] / next(iter(rates.values())):.2f}x old)")


def train_steps(model: torch.nn.Module, sample_for, tcfg: TrainConfig, workers: int, processes: int) -> None:  # type: ignore[no-untyped-def]
    """``tcfg.steps`` steps of :func:`fit`, in ``processes`` data-parallel processes."""
    if processes == 1:
        with PrefetchedBatches(sample_for(0, 1), range(tcfg.steps), workers) as batches_of:
            fit(model, batches_of, [], tcfg)
        return
    averager = GradientAverager(model, processes)

    def run(rank: int) -> None:
        with PrefetchedBatches(sample_for(rank, processes), range(tcfg.steps), workers) as batches_of:
            fit(model, batches_of, [], tcfg, hooks=FitHooks(average_gradients=partial(averager.average, rank)))

    run_data_parallel(processes, run, averager)


if __name__ == "__main__":
    main()
