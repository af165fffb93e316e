"""Run a batch's files on a Dask cluster: one task per file, the manifest rewritten as each ends.

:func:`geonp.batch.jobs.fill_many` plans the files (what to fill, skip or fail at once); here each
file is a Dask task (:func:`fill_one`, which never raises) and :class:`BatchRun` submits them,
records their results, and on Ctrl-C stops them and removes what they left.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geonp.batch.manifest import (
    FileRecord,
    JobReport,
    Manifest,
)
from geonp.batch.options import Cluster
from geonp.errors import GeonpError, one_line
from geonp.filling.dask_client import dask_session
from geonp.filling.interrupts import DaskTaskGuard, TaskStopped, own_dask_worker
from geonp.io.partials import note_partials_left, partials_in, remove_stale_partials

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileTask:
    """Everything a worker needs to fill one file (picklable)."""

    name: str
    input: str
    output: str
    uncertainty: str
    model: str
    overwrite: bool
    options: tuple[tuple[str, Any], ...]
    per_file: tuple[tuple[str, Any], ...] = ()  # this file's own options (--neighbours references)


def fill_one(task: FileTask) -> dict[str, Any]:
    """Fill one file on a worker; never raises (a failure comes back as its one-line reason)."""
    t0 = time.perf_counter()
    try:
        from geonp.filling.inputs import Outputs
        from geonp.filling.raster import fill_raster
        from geonp.model_files.registry import cached_model

        Path(task.output).parent.mkdir(parents=True, exist_ok=True)
        # the fill ends (its partial files removed) once the batch is interrupted
        with DaskTaskGuard() as guard:
            report = fill_raster(task.input, Outputs(task.output, uncertainty=task.uncertainty),
                                 model=cached_model(task.model, "cpu"), overwrite=task.overwrite, workers=1,
                                 progress=guard.progress, **dict(task.options), **dict(task.per_file))
        return {"status": "done", "seconds": time.perf_counter() - t0,
                "filled_pixels": report.filled_pixels, "gap_pixels": report.gap_pixels,
                "tiles": report.tiles}
    except TaskStopped:
        reason = "stopped: the batch was interrupted"
    except GeonpError as err:
        reason = one_line(str(err)) or type(err).__name__
    except Exception as err:  # noqa: BLE001 - one bad file must not stop the batch
        reason = one_line(f"{type(err).__name__}: {err}")
    return {"status": "failed", "reason": reason, "seconds": time.perf_counter() - t0}


def remove_partials(path: Path) -> None:
    """Delete temporary files a killed run left for ``path``; those of live writers stay."""
    if path.parent.is_dir():
        for tmp in remove_stale_partials(path):
            logger.info("removed %s, left by an interrupted run", tmp)


def output_folders(tasks: Mapping[str, FileTask], manifest: Path) -> list[Path]:
    """The folders a batch writes in (one path in each, for :func:`remove_stale_partials`)."""
    paths = [manifest, *(Path(p) for t in tasks.values() for p in (t.output, t.uncertainty))]
    return list({p.parent: p for p in paths}.values())


#: Seconds an interrupted batch on an existing cluster (whose workers live on) gives its running
#: files to notice the cancellation and remove their partial files.
STOP_WAIT = 5.0


def left_by_interrupt(interrupt: BaseException, folders: list[Path], before: set[Path], *,
                       wait: float = 0.0) -> None:
    """After an interrupted batch's cluster is gone: remove its workers' partial files, say what remains.

    A local cluster's workers were ended, so their partial files are those of dead processes;
    an existing cluster's workers end their cancelled files themselves (``wait`` seconds are
    given to them). Files of other runs (there before this one) are not named.
    """
    deadline = time.monotonic() + wait
    while True:
        for path in folders:
            remove_partials(path)
        left = [p for path in folders for p in partials_in(path.parent) if p not in before]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for p in note_partials_left(interrupt, left):  # the CLI names them; a Python caller finds them here
        logger.info("%s was left by the interrupted batch; the next run writing there removes it", p)


def apply_result(rec: FileRecord, result: Mapping[str, Any]) -> None:
    """A file's task result onto its manifest record."""
    rec.status, rec.reason = result["status"], result.get("reason", "")
    rec.seconds = float(result.get("seconds", 0.0))
    rec.filled_pixels, rec.gap_pixels, rec.tiles = (int(result.get(k, 0)) for k in
                                                    ("filled_pixels", "gap_pixels", "tiles"))
    if rec.status == "failed":
        logger.info("%s failed: %s", rec.name, rec.reason)


class BatchRun:
    """The files of a batch filled on the cluster, the manifest rewritten as each finishes."""

    def __init__(self, report: JobReport, manifest: Manifest, tasks: dict[str, FileTask], cluster: Cluster,
                 progress: Callable[[int, int], None] | None, t0: float) -> None:
        """The run of ``tasks`` (files not yet counted as finished in ``report``) on ``cluster``."""
        self.report, self.manifest, self.tasks, self.cluster, self.progress = report, manifest, tasks, cluster, progress
        self.t0, self.total = t0, len(report.records)
        self.finished = self.total - len(tasks)

    def _tick(self) -> None:
        if self.progress is not None:
            self.progress(self.finished, self.total)

    def run(self) -> None:
        """Fill every task; on Ctrl-C stop them, write the manifest and clean up what they left."""
        if not self.tasks:
            self._tick()
        folders = output_folders(self.tasks, self.report.manifest)
        before: set[Path] = set()
        interrupted: KeyboardInterrupt | None = None
        try:
            if self.tasks:
                for task in self.tasks.values():
                    remove_partials(Path(task.output))
                    remove_partials(Path(task.uncertainty))
                before = {p for path in folders for p in partials_in(path.parent)}  # other runs' live writers
                self._on_cluster()
        except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM turned into one by the CLI
            interrupted = err
            raise
        finally:
            self.report.seconds = time.perf_counter() - self.t0
            self.manifest.write(self.report, final=True)
            if interrupted is not None:
                # the local cluster is closed here (its workers ended): clean up after them
                left_by_interrupt(interrupted, folders, before,
                                   wait=STOP_WAIT if self.cluster.scheduler is not None else 0.0)

    def _on_cluster(self) -> None:
        """Start (or join) the cluster and fill the tasks on it, as they complete."""
        c, report = self.cluster, self.report
        with dask_session(c.scheduler, c.workers, c.threads_per_worker, c.dashboard_address) as (client, link,
                                                                                                  address):
            report.scheduler, report.dashboard_link = address, link
            if c.scheduler is None:  # our own workers: Ctrl-C is for this process, which stops them
                try:
                    client.run(own_dask_worker)
                except Exception as err:  # noqa: BLE001 - only Ctrl-C's tracebacks are at stake
                    logger.debug("the workers keep Ctrl-C: %s", err)
            report.workers = len(client.nthreads())
            logger.info("Dask scheduler %s with %d worker(s); dashboard: %s", address, report.workers,
                        link or "none")
            if c.on_ready is not None:
                c.on_ready(link)
            self._tick()
            if report.workers == 0:
                logger.warning("the Dask cluster at %s has no workers; the files wait until one joins", address)
            self._collect(client)

    def _collect(self, client: Any) -> None:
        """Submit one Dask task per file; record each result as it completes."""
        from distributed import as_completed

        run_id = uuid.uuid4().hex[:8]
        names = list(self.tasks)
        futures = client.map(fill_one, [self.tasks[n] for n in names], pure=False,
                             key=[f"geonp-fill-{run_id}-{i}" for i in range(len(names))])
        by_key = {f.key: n for f, n in zip(futures, names, strict=True)}
        records = {r.name: r for r in self.report.records}
        for future in as_completed(futures):
            rec = records[by_key[future.key]]
            try:
                result = future.result()
            except Exception as err:  # noqa: BLE001 - a lost worker fails only its file
                result = {"status": "failed", "reason": one_line(f"{type(err).__name__}: {err}")}
            apply_result(rec, result)
            self.manifest.put(rec)
            self.finished += 1
            self.report.seconds = time.perf_counter() - self.t0
            self.manifest.write(self.report, final=False)
            self._tick()
