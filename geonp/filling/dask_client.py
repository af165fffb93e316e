"""One way to reach a Dask scheduler, shared by ``fill --scheduler`` and ``geonp batch``.

:func:`connect` reaches a running scheduler; :func:`dask_session` also starts (and closes) a
local cluster when none is given, as ``geonp batch`` does.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from geonp.errors import ConfigError, MissingDependencyError, one_line

logger = logging.getLogger(__name__)

__all__ = ["connect", "dask_session"]


def connect(scheduler: str) -> Any:
    """A ``distributed.Client`` on the scheduler at ``scheduler`` (``tcp://host:8786``).

    Raises:
        ConfigError: the scheduler cannot be reached.
        MissingDependencyError: ``distributed`` is not installed.
    """
    try:
        from distributed import Client
    except ImportError as err:  # pragma: no cover - distributed is a core dependency
        raise MissingDependencyError("dask.distributed is not installed; pip install 'dask[distributed]'") from err
    try:
        return Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as err:
        raise ConfigError(f"cannot reach the Dask scheduler at {scheduler} ({one_line(str(err))}); "
                          "check the address (tcp://host:8786) and that the scheduler runs") from err


@contextmanager
def dask_session(scheduler: str | None, workers: int | None, threads_per_worker: int,
                 dashboard_address: str | None) -> Iterator[tuple[Any, str | None, str]]:
    """A Dask client on the given scheduler, or on a local cluster started (and closed) here.

    The local cluster's workers do not run the caller's script again (:func:`_workers_skip_main`),
    so that ``fill_many`` works at a script's top level too.

    Args:
        scheduler: address of a running scheduler, or None for a local cluster.
        workers: local cluster worker processes (default: CPU count // ``threads_per_worker``).
        threads_per_worker: tasks run at once by each local worker.
        dashboard_address: local cluster dashboard address (None: no dashboard).

    Yields:
        ``(client, dashboard link or None, scheduler address)``.

    Raises:
        ConfigError: the scheduler cannot be reached, or a worker count below 1.
    """
    from dask.system import CPU_COUNT
    from distributed import Client, LocalCluster

    if scheduler is not None:
        client = connect(scheduler)
        try:
            yield client, client.dashboard_link, scheduler
        finally:
            client.close()
        return
    if threads_per_worker < 1 or (workers is not None and workers < 1):
        raise ConfigError(f"workers={workers} and threads_per_worker={threads_per_worker} must be >= 1")
    n = workers or max(1, CPU_COUNT // threads_per_worker)  # CPU_COUNT honours affinity and cgroups
    with _workers_skip_main():  # while the cluster lives: it may spawn a worker again
        cluster = LocalCluster(n_workers=n, threads_per_worker=threads_per_worker, processes=True,
                               dashboard_address=dashboard_address)
        try:
            client = Client(cluster)
            try:
                served = dashboard_address is not None and importlib.util.find_spec("bokeh") is not None
                if dashboard_address is not None and not served:
                    logger.info("no Dask dashboard: install bokeh to get one")
                yield client, client.dashboard_link if served else None, cluster.scheduler_address
            finally:
                client.close()
        finally:
            cluster.close()


@contextmanager
def _workers_skip_main() -> Iterator[None]:
    """Worker processes spawned meanwhile do not import the caller's ``__main__`` again.

    multiprocessing's spawn runs a script's top level again in every new process, where a
    ``fill_many`` not under ``if __name__ == "__main__":`` would start a cluster of its own and
    fail. The workers run only geonp's code, so they skip it, as they do for ``python -c`` or a
    notebook (a ``__main__`` spec named ``__main__`` tells spawn so).
    """
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = spec
