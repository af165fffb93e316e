"""The options of a batch (:func:`geonp.fill_many`), one type per concern.

:class:`Files` says which files of the input directory are filled, :class:`Cluster` where they
are filled, and :class:`Neighbours` which other dates of the folder are each file's references.
The fill options of every file are the :class:`~geonp.config.FillConfig` fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from geonp.errors import ConfigError

__all__ = ["Cluster", "Files", "Neighbours"]


@dataclass(frozen=True)
class Files:
    """Which rasters of the input directory a batch fills.

    Attributes:
        pattern: glob pattern of the input files, relative to the input directory.
        recursive: match ``pattern`` in subdirectories too.
        skip_existing: skip files that the manifest lists as done for the same input and options
            and whose outputs both open; a run with other options is refused while the output
            directory holds files filled with the earlier ones. False fills them again (replacing
            the batch's own outputs).
    """

    pattern: str = "*.tif"
    recursive: bool = False
    skip_existing: bool = True


@dataclass(frozen=True)
class Cluster:
    """Where a batch runs: an existing Dask scheduler, or a local cluster started for the run.

    Attributes:
        scheduler: address of an existing Dask scheduler (``tcp://host:8786``); None starts a
            local cluster for the run and closes it at the end.
        workers: local cluster worker processes (default: CPU count // ``threads_per_worker``).
        threads_per_worker: files filled at once by each local worker.
        dashboard_address: local cluster dashboard address (None: no dashboard).
        on_ready: called with the dashboard link (or None) once the cluster is up.
    """

    scheduler: str | None = None
    workers: int | None = None
    threads_per_worker: int = 1
    dashboard_address: str | None = ":8787"
    on_ready: Callable[[str | None], None] | None = None


@dataclass(frozen=True)
class Neighbours:
    """A multi-date batch: each raster filled with its nearest dates of the same grid as references.

    QA files beside the rasters (``<raster>_fmask.tif``, ``_qa``, ``_QA_PIXEL``, ``_SCL``) give each
    date's clouds and are not filled themselves.

    Attributes:
        count: references per raster: the dates nearest to it in time that see ground; or
            ``"auto"``: the nearest dates until every gap of the raster is seen clear by 2 of
            them, at most 4 (:class:`~geonp.io.reference_choice.CoverageRule`, as a cube's
            ``neighbours="auto"``).
        qa_kind: how those QA files are read (needed when there are any).
        max_days: take only dates at most this many days away (None: any); a raster without such
            a date is filled from its own pixels (by the same model).
    """

    count: int | str = 2
    qa_kind: str | None = None
    max_days: float | None = None

    def __post_init__(self) -> None:
        """Refuse a count below 1 (or another string than ``"auto"``) and a negative or non-finite ``max_days``."""
        if self.count != "auto" and (isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1):
            raise ConfigError(f"--neighbours {self.count!r} must be an integer >= 1 or 'auto'")
        if self.max_days is not None and not (math.isfinite(self.max_days) and self.max_days >= 0):
            raise ConfigError(f"--max-days {self.max_days!r} must be a number of days >= 0")
