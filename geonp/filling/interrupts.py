"""Stop a run's worker processes at once when it is interrupted, and never let them outlive it.

A fill spreads its blocks over a pool of worker processes (:func:`geonp.filling.engine.run_blocks`).
Ctrl-C, SIGTERM or an error in the main process must end them within seconds, not after the
blocks they are working on, and a main process killed outright (SIGKILL, the OOM killer) must
not leave them running on as orphans. Each worker therefore calls :func:`guard_worker` when it
starts, and the main process ends the pool with :func:`stop_pool` whenever a run does not
finish normally. A batch's files are Dask tasks: :class:`DaskTaskGuard` ends a task's fill
(its writers removing their partial files) when the batch is interrupted.
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait as mp_wait
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

__all__ = ["DaskTaskGuard", "TaskStopped", "guard_worker", "leave_ctrl_c_to_parent", "own_dask_worker", "stop_pool"]

#: prctl(2) option: the signal a process gets when the thread that created it ends.
_PR_SET_PDEATHSIG = 1
#: Seconds between two looks at the parent, where the kernel cannot watch it for us.
WATCH_INTERVAL = 0.5
#: Seconds a worker gets to end on SIGTERM before it is killed.
STOP_GRACE = 2.0


def guard_worker(parent_pid: int) -> None:
    """In a worker process: end with the parent, and leave Ctrl-C to the parent.

    On Linux the kernel sends the worker SIGKILL when its parent ends (``PR_SET_PDEATHSIG``);
    elsewhere a daemon thread looks at the parent every :data:`WATCH_INTERVAL` seconds. A
    terminal's Ctrl-C reaches every process of the foreground group: the workers ignore it,
    and the parent, which cleans up the outputs, stops them.

    Args:
        parent_pid: the pid of the process that started the worker.
    """
    leave_ctrl_c_to_parent()
    if not _die_with_parent():
        threading.Thread(target=_watch_parent, args=(parent_pid,), name="geonp-parent-watch",
                         daemon=True).start()
    if os.getppid() != parent_pid:  # the parent ended before the guard was set
        os._exit(1)


def leave_ctrl_c_to_parent() -> None:
    """Ignore SIGINT in this worker: a terminal's Ctrl-C reaches it too, but the parent stops the run.

    Without this, every worker prints its own KeyboardInterrupt traceback (Dask's workers one each)
    and stops by itself, in whatever state its files are. Only the main thread can set a handler.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class _SchedulerGoneFirst(logging.Filter):
    """Drops a worker's report that its heartbeat found the scheduler gone.

    When geonp closes its own local cluster (at the end, or on Ctrl-C) the scheduler may close
    before a worker notices, and the worker logs that race as an error with a traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "during heartbeat" not in record.getMessage()


_SCHEDULER_GONE_FIRST = _SchedulerGoneFirst()


def own_dask_worker() -> None:
    """Set up a worker of geonp's own local Dask cluster (run on each by ``client.run``).

    Ctrl-C is left to the parent (:func:`leave_ctrl_c_to_parent`), and the scheduler closing first
    at the cluster's end is not reported as an error (it printed a traceback after "Interrupted").
    """
    leave_ctrl_c_to_parent()
    logging.getLogger("distributed.worker").addFilter(_SCHEDULER_GONE_FIRST)


def _die_with_parent() -> bool:
    """Ask the kernel for SIGKILL when the parent ends (Linux); False where that is not possible.

    The "parent" of ``PR_SET_PDEATHSIG`` is the thread that started the process: the pool's
    workers are started by the thread that submits blocks to it, which outlives the pool.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCH_INTERVAL)
    os._exit(1)  # the parent is gone: no one would read this worker's results


def stop_pool(pool: cf.ProcessPoolExecutor, *, grace: float = STOP_GRACE) -> list[int]:
    """End a process pool now: drop its queued work and end its processes (SIGTERM, then SIGKILL).

    Unlike ``pool.shutdown()``, which waits for the blocks the workers are on, this returns
    within about ``grace`` seconds. The pool cannot be used afterwards.

    Args:
        pool: the pool to stop.
        grace: seconds the processes get to end on SIGTERM before they are killed.

    Returns:
        The pids of the processes that were still running when it was called.
    """
    # ProcessPoolExecutor has no public way to end its workers before Python 3.14
    # (terminate_workers); _processes maps their pids to the multiprocessing.Process objects.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    running = [p for p in processes if p.is_alive()]
    for p in running:
        p.terminate()
    # a process has ended when its sentinel is ready (the pool's own thread may reap it first)
    left = _not_ended(running, grace)
    for p in left:
        logger.debug("worker %s did not end on SIGTERM; killing it", p.pid)
        p.kill()
    if _not_ended(left, grace):
        logger.warning("worker process(es) %s did not end on SIGKILL", ", ".join(str(p.pid) for p in left))
    return [p.pid for p in running if p.pid is not None]


def _not_ended(processes: list[Any], timeout: float) -> list[Any]:
    """The processes still running after waiting up to ``timeout`` seconds for all to end."""
    left = list(processes)
    deadline = time.monotonic() + timeout
    while left:
        ready = set(mp_wait([p.sentinel for p in left], max(0.0, deadline - time.monotonic())))
        left = [p for p in left if p.sentinel not in ready]
        if time.monotonic() >= deadline:
            break
    return left


class TaskStopped(BaseException):
    """The batch no longer wants the file this Dask task fills: its worker closes, or it was cancelled.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way turns
    it into a failure: the fill's writers remove their partial files and let it pass.
    """


#: Dask worker states in which the running task will not be waited for much longer.
_CLOSING = ("closing", "closing_gracefully", "closed", "failed")


class DaskTaskGuard:
    """End the fill of the running Dask task as soon as the batch no longer wants it.

    A cancelled task (the client went away: Ctrl-C on an existing cluster) runs on by itself;
    :attr:`progress`, the fill's progress callback, raises :class:`TaskStopped` at the fill's
    next step. A closing worker (Ctrl-C on a local cluster) waits 4 s for its task and is then
    killed, which leaves the task's partial files behind; a watcher thread raises
    :class:`TaskStopped` in the task's thread as soon as the worker closes, so the fill's own
    cleanup runs instead of a SIGKILL. Outside a Dask task it does nothing (``progress`` None).

    Example:
        >>> with DaskTaskGuard() as guard:
        ...     fill_raster(src, dst, progress=guard.progress)
    """

    def __init__(self) -> None:
        """Find the Dask worker and task this thread runs (if any)."""
        self.progress: Callable[[int, int], None] | None = None
        self._worker: Any = None
        try:
            from distributed import get_worker

            self._worker = get_worker()
            self._key = self._worker.get_current_task()
        except (ImportError, ValueError, KeyError):  # not in a Dask task
            self._worker = None
            return
        self.progress = self._check
        self._thread_id = threading.get_ident()
        self._lock = threading.Lock()
        self._done = False
        self._fired = False
        self._stop = threading.Event()

    def _cancelled(self) -> bool:
        ts = self._worker.state.tasks.get(self._key)
        return ts is None or ts.state in ("cancelled", "released", "forgotten")

    def _closing(self) -> bool:
        return getattr(self._worker.status, "value", str(self._worker.status)) in _CLOSING

    def _check(self, done: int, total: int) -> None:
        if self._closing() or self._cancelled():
            raise TaskStopped("the batch was interrupted")

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL):
            if self._closing():
                with self._lock:
                    if not self._done:
                        # the exception reaches the task's thread at its next Python step
                        _set_async_exc(self._thread_id, TaskStopped)
                        self._fired = True
                return

    def __enter__(self) -> Self:
        """Start watching the worker."""
        if self._worker is not None:
            threading.Thread(target=self._watch, name="geonp-task-watch", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        """Stop watching; an exception the watcher raised and the thread has not met yet is dropped."""
        if self._worker is not None:
            with self._lock:
                self._done = True
                if self._fired:
                    _set_async_exc(self._thread_id, None)
            self._stop.set()
        return False


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in another thread at its next Python step (None: take back one not raised yet)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exc) if exc is not None else None)
