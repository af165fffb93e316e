"""One way to reach a Dask scheduler, shared by ``fill --scheduler`` and ``geonp batch``."""

from __future__ import annotations

from typing import Any

from geonp.errors import ConfigError, MissingDependencyError, one_line


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
