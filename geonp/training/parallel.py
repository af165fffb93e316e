"""Data-parallel training on the CPU: several forked processes share each step's batch.

On a CPU with few cores, one training process per core, each with one thread, trains faster than
one process with several threads: the model's operations are too small to split well across
threads, and each process also cuts its own share of the tasks (numpy, single-threaded).

Each process computes the gradients of its shard of the batch; :class:`GradientAverager` sums
them through a shared-memory buffer in a fixed rank order, so every process applies the same
average, bit for bit, and the copies of the model never drift apart. Rank 0 is the calling
process: it validates, saves and reports; the others only train. Processes are forked (they
inherit the model, the windows and the validation batches without pickling).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from geonp.training.prefetch import guard_child

logger = logging.getLogger(__name__)

__all__ = ["GradientAverager", "run_data_parallel", "shard_size"]

T = TypeVar("T")

# Seconds a process waits for the others at a step before it gives up (a crashed peer).
_STEP_TIMEOUT = 1800.0


def shard_size(batch_size: int, world: int, rank: int) -> int:
    """Tasks of rank ``rank`` when ``world`` processes share a batch of ``batch_size`` tasks."""
    return batch_size // world + (1 if rank < batch_size % world else 0)


class GradientAverager:
    """Average gradients (and the loss) over ``world`` forked processes, identically in each.

    Create it before forking; each process then calls ``average(rank, model, loss)`` after its
    backward pass.
    """

    def __init__(self, model: nn.Module, world: int) -> None:
        """A shared buffer of ``world`` rows of the model's parameter count, plus the loss."""
        self.world = world
        self.params = [p for p in model.parameters() if p.requires_grad]
        size = sum(p.numel() for p in self.params) + 1
        self.buffer = torch.zeros(world, size).share_memory_()  # [world, params + loss]
        self.barrier = mp.get_context("fork").Barrier(world)

    def average(self, rank: int, loss: float) -> float:
        """Replace each parameter's gradient by the mean over processes; return the mean loss."""
        row = self.buffer[rank]
        offset = 0
        for p in self.params:
            n = p.numel()
            row[offset:offset + n].copy_(p.grad.reshape(-1) if p.grad is not None else torch.zeros(n))
            offset += n
        row[offset] = loss
        self.barrier.wait(_STEP_TIMEOUT)
        mean = self.buffer.sum(0) / self.world  # same rows, same order in every process: same numbers
        self.barrier.wait(_STEP_TIMEOUT)  # nobody writes the next step's row before all have read
        offset = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.copy_(mean[offset:offset + n].view_as(p))
            offset += n
        return float(mean[offset])

    def abort(self) -> None:
        """Release the processes waiting at a step (one has failed)."""
        self.barrier.abort()


def run_data_parallel(world: int, run: Callable[[int], T], averager: GradientAverager) -> T:
    """Run ``run(rank)`` for ranks ``1..world-1`` in forked processes and rank 0 here.

    Returns rank 0's result. A failure in any process stops all of them and is raised here.
    """
    ctx = mp.get_context("fork")
    errors = ctx.Queue()
    procs = []
    for rank in range(1, world):
        proc = ctx.Process(target=_child, args=(run, rank, averager, errors, os.getpid()), daemon=True)
        proc.start()
        procs.append(proc)
    try:
        result = run(0)
    except BaseException as err:
        averager.abort()
        _join(procs)
        if isinstance(err, threading.BrokenBarrierError):
            if not errors.empty():
                rank, text = errors.get()
                raise RuntimeError(f"training process {rank} failed:\n{text}") from err
            raise RuntimeError("a training process stopped without a report (killed for memory?), "  # noqa: TRY004
                               f"or waited over {_STEP_TIMEOUT:.0f} s for the others") from err
        raise
    _join(procs)
    return result


def _join(procs: list[Any]) -> None:
    for proc in procs:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.terminate()
            proc.join()


def _child(run: Callable[[int], Any], rank: int, averager: GradientAverager, errors: Any, parent_pid: int) -> None:
    guard_child(parent_pid)  # an interrupt is rank 0's to handle: it aborts the barrier the others wait at
    torch.set_num_threads(1)
    logging.disable(logging.CRITICAL)  # rank 0 reports
    code = 0
    try:
        run(rank)
    except BaseException:  # noqa: BLE001 - reported to rank 0, which raises it
        averager.abort()
        errors.put((rank, traceback.format_exc()))
        code = 1
    finally:
        errors.close()
        errors.join_thread()
        os._exit(code)  # skip the parent's atexit handlers and finalizers (forked copy)
