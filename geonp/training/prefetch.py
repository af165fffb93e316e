"""Task generation in worker processes, ahead of the training step that needs it.

Cutting a step's tasks (gap masks, context selection, in numpy) costs about as much CPU time as
the model step itself at the default recipe's shape. :class:`PrefetchedBatches` runs
``sample(step)`` in forked worker processes, step ``s`` on worker ``s % workers``, so the
trainer only waits when the workers fall behind. A batch depends only on its step (the sampler
seeds its generator with ``(seed, step)``), so the batches, and the training, are the same with
any number of workers, or none.

Workers are forked (they inherit the training windows without pickling them); where ``fork`` is
unavailable, batches are made in the trainer's process. A worker leaves Ctrl-C to the trainer,
ends at once on SIGTERM and ends with the trainer (:func:`guard_child`): an interrupted run
stops within seconds and leaves no process behind.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import signal
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from geonp.data.batch import Batch
from geonp.filling.interrupts import guard_worker

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

__all__ = ["PrefetchedBatches", "default_workers", "guard_child"]

# Batches a worker makes ahead of the trainer (each a few hundred KB at the default shape).
_AHEAD = 3


def default_workers() -> int:
    """One data worker where the process may use two or more cores, else none."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return 1 if cores >= 2 else 0


def _to_numpy(batch: Batch) -> dict[str, Any]:
    """Plain arrays for the queue: tensors would travel as shared-memory handles, which die with the worker."""
    return {f.name: None if getattr(batch, f.name) is None else getattr(batch, f.name).numpy()
            for f in fields(batch)}


def _from_numpy(arrays: dict[str, Any]) -> Batch:
    import torch

    tensors: dict[str, Any] = {k: None if v is None else torch.from_numpy(v) for k, v in arrays.items()}
    return Batch(**tensors)


def guard_child(parent_pid: int) -> None:
    """In a process forked by a training run: SIGTERM and SIGHUP end it, Ctrl-C is the parent's.

    A fork inherits the CLI's handlers, which turn those signals into KeyboardInterrupt: a worker
    stopped by its trainer then printed a traceback and hung on its queue, and the trainer with
    it. The process also ends with the parent (:func:`geonp.filling.interrupts.guard_worker`).

    Args:
        parent_pid: the pid of the training process that forked it.
    """
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    guard_worker(parent_pid)


def _work(sample: Callable[[int], Batch], steps: range, out: Any, parent_pid: int) -> None:
    import torch

    guard_child(parent_pid)
    torch.set_num_threads(1)  # numpy work; keep torch from spinning up threads beside the trainer
    step = steps.start
    try:
        for step in steps:
            out.put((step, _to_numpy(sample(step))))
    except BaseException as err:  # noqa: BLE001 - forwarded to the trainer, which re-raises it
        out.put((step, err))


class PrefetchedBatches:
    """``step -> Batch`` for ``steps`` in order, made by ``workers`` forked processes.

    Use as a context manager (workers stop on exit); ask for the steps in increasing order.
    With ``workers=0`` (or no ``fork``) it calls ``sample`` directly.
    """

    def __init__(self, sample: Callable[[int], Batch], steps: range, workers: int) -> None:
        """Plan the workers; they start on ``__enter__``."""
        self.sample = sample
        self.steps = steps
        self.workers = workers if "fork" in mp.get_all_start_methods() and len(steps) > 1 else 0
        self._procs: list[Any] = []
        self._queues: list[Any] = []

    def __enter__(self) -> Self:
        """Start the workers."""
        if self.workers:
            ctx = mp.get_context("fork")
            for w in range(self.workers):
                batches = ctx.Queue(maxsize=_AHEAD)
                proc = ctx.Process(target=_work, args=(self.sample, self.steps[w::self.workers], batches, os.getpid()),
                                   daemon=True)
                proc.start()
                self._procs.append(proc)
                self._queues.append(batches)
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the workers (a run may stop early: validation NaN, an interrupt)."""
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(timeout=5)
        for batches in self._queues:
            batches.close()
        self._procs, self._queues = [], []

    def __call__(self, step: int) -> Batch:
        """The batch of ``step``."""
        if not self._procs:
            return self.sample(step)
        index = self.steps.index(step)
        w = index % self.workers
        while True:
            try:
                got, batch = self._queues[w].get(timeout=5)
                break
            except queue.Empty:
                if not self._procs[w].is_alive():
                    raise RuntimeError(f"data worker {w} stopped (exit code {self._procs[w].exitcode}) "
                                       f"before step {step}; was it killed for memory?") from None
        if got != step:
            raise RuntimeError(f"data worker {w} sent step {got} when step {step} was asked for; "
                               "steps must be asked for in order")
        if isinstance(batch, BaseException):
            raise batch
        return _from_numpy(batch)
