"""How a training run keeps its progress, and what an interrupted run says it kept.

The best model and the training state are saved whole at each validation (:class:`BestSaver`,
interrupts held meanwhile: :func:`signals_held`); :func:`stopped_message` says where a run stopped.
"""

from __future__ import annotations

import logging
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from geonp.config import ModelConfig
from geonp.model_files.card import ModelCard
from geonp.model_files.checkpoint import save_model
from geonp.model_files.train_state import save_training_state, training_state_step
from geonp.tasks.normalize import Normalizer
from geonp.training.loop import FitResult, MetricsWriter

logger = logging.getLogger(__name__)

__all__ = ["BestSaver", "Reached", "SeriesSaver", "series_stopped_message", "signals_held", "stopped_message"]


@dataclass
class Reached:
    """How far a run got: its last step (None before the first) and whether a checkpoint of it is on disk."""

    saved: bool
    step: int | None = None


def stopped_message(out: Path, total: int, reached: Reached, *, created: bool) -> str:
    """Where an interrupted run stopped and what it keeps; its directory goes if it made it and saved nothing."""
    at = "before its first step" if reached.step is None else f"at step {reached.step} of {total}"
    step = training_state_step(out) if reached.saved else None
    if step is not None:
        return f"training stopped {at}; its last checkpoint (step {step}) is in {out}: rerun with --resume to continue"
    if created:
        shutil.rmtree(out, ignore_errors=True)
    return f"training stopped {at}{'' if reached.step is None else ', before its first checkpoint'}: nothing was saved"


@dataclass
class BestSaver:
    """``fit``'s validation callback: records each validation, saves the best model and the state."""

    out: Path
    module: torch.nn.Module
    mcfg: ModelConfig
    norm: Normalizer
    history: list[dict[str, float]]
    started: float
    world: int
    metrics: MetricsWriter
    card: ModelCard
    reached: Reached
    before: float = field(init=False, default=0.0)  # seconds the run had when resumed

    def __post_init__(self) -> None:
        """The run's clock goes on from a resumed history's last record."""
        self.before = float(self.history[-1]["seconds"]) if self.history else 0.0

    def __call__(self, record: dict[str, float], is_best: bool, result: FitResult) -> None:
        """Append ``record`` to the history and metrics; save the model if best, and the state."""
        seconds = self.before + time.perf_counter() - self.started  # the whole run's, resumes included
        record = {**record, "seconds": seconds}
        with signals_held():  # an interrupt waits: the model and its state are saved whole, together
            self.history.append(record)
            self.metrics.write(record)
            if is_best:
                self.card = replace(self.card, best_val_nll=record["val_nll"], best_step=int(record["step"]),
                                    training_seconds=round(seconds, 1))
                save_model(self.out, self.module, self.mcfg, normalizer=self.norm.to_dict(), card=self.card)
            save_training_state(self.out, self.module, result.optimizer_state or {"state": {}, "param_groups": []},
                                {"step": result.step, "best_val_nll": result.best_val_nll,
                                 "history": self.history, "processes": self.world})
            self.reached.saved = True


#: Signals that interrupt a run (as KeyboardInterrupt, :mod:`geonp_cli.main`): held while it saves.
HELD_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP until the block ends, then deliver the first one that came.

    An interrupt between the files of a checkpoint would leave weights of one step with the
    state of another. Only the main thread can set handlers; elsewhere nothing is held.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in HELD_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: a handler not set from Python, which cannot be restored
                signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])


def series_stopped_message(out: Path, best_step: int, *, created: bool) -> str:
    """What an interrupted multi-date run kept: its best model so far, or nothing (its new folder goes)."""
    if best_step >= 0:
        return f"training stopped; the best model so far (step {best_step}) is in {out}"
    if created:
        shutil.rmtree(out, ignore_errors=True)
    return "training stopped before its first validation: nothing was saved"


@dataclass
class SeriesSaver:
    """A multi-date run's validation callback: logs and records each validation, saves the best model."""

    out: Path
    module: torch.nn.Module
    mcfg: ModelConfig
    norm: Normalizer
    card: ModelCard
    started: float
    metrics: MetricsWriter
    best_step: int = -1

    def __call__(self, record: dict[str, float], is_best: bool, result: FitResult) -> None:
        """Write ``record`` to the metrics; save the model if it is the best so far."""
        logger.info("step %d val_nll %.4f", record["step"], record["val_nll"])
        self.metrics.write(record)
        if is_best:
            self.best_step = int(record["step"])
            self.card = replace(self.card, best_val_nll=record["val_nll"], best_step=int(record["step"]),
                                training_seconds=round(time.perf_counter() - self.started, 1))
            save_model(self.out, self.module, self.mcfg, normalizer=self.norm.to_dict(), card=self.card)
