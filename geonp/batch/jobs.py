"""``fill_many``: fill every raster of a directory on a Dask cluster (backs ``geonp batch``).

Each file is one Dask task that calls :func:`geonp.filling.raster.fill_raster`, which writes its outputs
atomically, so a failed or killed task leaves no partial output. Workers load the model once per
process (:func:`geonp.model_files.registry.cached_model`) and reuse it for every file they get.

A JSON manifest, ``geonp_batch.json`` in the output directory, records every file's status, the
input's size and modification time and a key of the fill options. A rerun skips a file only when
the manifest says it is done for the same input and options *and* both outputs open; anything
else is filled again. The manifest also records which outputs the batch wrote itself: those may
be replaced on a rerun, while files it did not write are never replaced without ``overwrite``.

Inputs and outputs must be on a file system that every worker sees under the same paths.

Ctrl-C or SIGTERM stops a batch within seconds: a running file's fill ends once its worker
closes or its task is cancelled, its writers removing their partial files
(:class:`geonp.filling.interrupts.DaskTaskGuard`); once the local cluster is closed the main process
removes what killed workers left and records on the interrupt which partial files remain
(:func:`geonp.io.partials.note_partials_left`).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import os
import shlex
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geonp._version import __version__
from geonp.batch.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MANIFEST_VERSION,
    FileRecord,
    JobReport,
    Manifest,
    fingerprint,
    now,
    outputs_complete,
)
from geonp.config import FillConfig
from geonp.errors import ConfigError, GeonpError, OutputError, one_line
from geonp.filling.dask_client import dask_session
from geonp.filling.interrupts import DaskTaskGuard, TaskStopped, leave_ctrl_c_to_parent
from geonp.io.partials import note_partials_left, partials_in, remove_stale_partials

logger = logging.getLogger(__name__)

__all__ = ["fill_many"]  # its records (FileRecord, JobReport) are geonp.batch.manifest's

#: Options of each file's fill: the fields of FillConfig (``workers`` is the batch's own).
FILL_OPTIONS = tuple(f.name for f in dataclasses.fields(FillConfig) if f.name != "workers")
_GEOTIFF_SUFFIXES = (".tif", ".tiff")


@dataclass(frozen=True)
class _FileTask:
    """Everything a worker needs to fill one file (picklable)."""

    name: str
    input: str
    output: str
    uncertainty: str
    model: str
    overwrite: bool
    options: tuple[tuple[str, Any], ...]
    per_file: tuple[tuple[str, Any], ...] = ()  # this file's own options (--neighbours references)


def _fill_one(task: _FileTask) -> dict[str, Any]:
    """Fill one file on a worker; never raises (a failure comes back as its one-line reason)."""
    t0 = time.perf_counter()
    try:
        from geonp.filling.raster import fill_raster
        from geonp.model_files.registry import cached_model

        Path(task.output).parent.mkdir(parents=True, exist_ok=True)
        # the fill ends (its partial files removed) once the batch is interrupted
        with DaskTaskGuard() as guard:
            report = fill_raster(task.input, task.output, uncertainty=task.uncertainty,
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


def output_paths(output_dir: Path, name: str) -> tuple[Path, Path]:
    """The filled and std paths of input ``name`` (relative to the input directory).

    GeoTIFF inputs keep their file name; other formats get a ``.tif`` suffix, since geonp writes
    GeoTIFFs. The std raster is ``<stem>_std.tif`` beside the filled one.
    """
    rel = Path(name)
    if rel.suffix.lower() not in _GEOTIFF_SUFFIXES:
        rel = rel.with_suffix(".tif")
    out = output_dir / rel
    return out, out.with_name(f"{out.stem}_std{out.suffix}")


def find_inputs(input_dir: Path, pattern: str, *, recursive: bool, exclude: Path | None = None) -> list[Path]:
    """Files of ``input_dir`` matching ``pattern``, sorted; hidden files and ``exclude`` left out."""
    found = input_dir.rglob(pattern) if recursive else input_dir.glob(pattern)
    skip = exclude.resolve() if exclude is not None else None
    out = []
    for path in found:
        rel = path.relative_to(input_dir)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        if skip is not None and path.resolve().is_relative_to(skip):
            continue
        out.append(path)
    return sorted(out)


def find_broken_links(input_dir: Path, pattern: str, *, recursive: bool,
                      exclude: Path | None = None) -> list[tuple[Path, str]]:
    """Symbolic links among the matching names that lead nowhere: dangling links and loops.

    :func:`find_inputs` cannot use them; they are reported as failed files in the summary
    instead of being skipped silently.

    Returns:
        ``(path, reason)`` pairs, sorted by path.
    """
    found = input_dir.rglob(pattern) if recursive else input_dir.glob(pattern)
    skip = exclude.absolute() if exclude is not None else None
    out = []
    for path in found:
        rel = path.relative_to(input_dir)
        if any(part.startswith(".") for part in rel.parts) or not path.is_symlink():
            continue
        if skip is not None and path.absolute().is_relative_to(skip):
            continue
        try:
            path.resolve(strict=True)
        except RuntimeError:  # Python < 3.13 reports a loop this way
            out.append((path, f"it is a symbolic link loop ({os.readlink(path)}); fix or remove the link"))
        except OSError as err:
            if err.errno == errno.ELOOP:
                out.append((path, f"it is a symbolic link loop ({os.readlink(path)}); fix or remove the link"))
            else:
                out.append((path, (f"it is a dangling symbolic link to {os.readlink(path)} (no such file); "
                                   "fix or remove the link")))
    return sorted(out)


def _check_dirs(input_dir: str | os.PathLike[str], output_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    in_dir = Path(input_dir).expanduser().absolute()
    out_dir = Path(output_dir).expanduser().absolute()
    if not in_dir.exists():
        raise ConfigError(f"INPUT_DIR {in_dir} does not exist; give the directory that holds the rasters.")
    if not in_dir.is_dir():
        raise ConfigError(f"INPUT_DIR {in_dir} is a file, not a directory; use `geonp fill` for one raster.")
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"OUTPUT_DIR {out_dir} is a file; give a directory.")
    if out_dir.resolve() == in_dir.resolve():
        raise ConfigError(f"OUTPUT_DIR {out_dir} is INPUT_DIR; give another directory (geonp never "
                          "modifies its input).")
    if not out_dir.exists() and not out_dir.parent.is_dir():
        raise OutputError(f"The parent of OUTPUT_DIR {out_dir} does not exist; create it first "
                          f"(mkdir -p {shlex.quote(str(out_dir.parent))}).")
    return in_dir, out_dir


def _fill_options(fill_options: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Check the fill options; returns the model path, the options to pass, all effective values."""
    from geonp.io.profiles import parse_creation_options
    from geonp.model_files.registry import load_model, resolve_model_path

    unknown = sorted(set(fill_options) - set(FILL_OPTIONS))
    if unknown:
        raise ConfigError(f"fill_many got unknown option(s) {', '.join(unknown)}; valid fill options: "
                          f"{', '.join(FILL_OPTIONS)}.")
    model = fill_options.get("model") or "default"
    if not isinstance(model, str | os.PathLike):
        raise ConfigError("fill_many needs the model as a built-in name or a model directory, not a "
                          "loaded model object (each Dask worker loads it once).")
    model_path = str(resolve_model_path(model).resolve())
    load_model(model_path)  # a corrupt model fails here, once, not once per file
    passed = {k: v for k, v in fill_options.items() if k not in ("model", "overwrite")}
    cfg = FillConfig.of(**passed)  # checks every value once, before any file
    from geonp.io.formats import check_creation_options

    # Keys and keyword values by GDAL now, before any file; each file's types are checked by its
    # own fill.
    for options in (cfg.creation_options, cfg.std_creation_options):
        if options is not None:
            check_creation_options(parse_creation_options(options), dtype="uint8", count=1, nodata=None,
                                   cog=cfg.cog, names_only=True)
    passed = {k: v for k, v in dataclasses.asdict(cfg).items() if k in passed}
    effective = {**cfg.key_values(), "model": model_path}
    return model_path, passed, effective


def _options_key(effective: Mapping[str, Any]) -> str:
    keyed = dict(sorted(effective.items()))
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _remove_partials(path: Path) -> None:
    """Delete temporary files a killed run left for ``path``; those of live writers stay."""
    if path.parent.is_dir():
        for tmp in remove_stale_partials(path):
            logger.info("removed %s, left by an interrupted run", tmp)


def _output_folders(tasks: Mapping[str, _FileTask], manifest: Path) -> list[Path]:
    """The folders a batch writes in (one path in each, for :func:`remove_stale_partials`)."""
    paths = [manifest, *(Path(p) for t in tasks.values() for p in (t.output, t.uncertainty))]
    return list({p.parent: p for p in paths}.values())


#: Seconds an interrupted batch on an existing cluster (whose workers live on) gives its running
#: files to notice the cancellation and remove their partial files.
STOP_WAIT = 5.0


def _left_by_interrupt(interrupt: BaseException, folders: list[Path], before: set[Path], *,
                       wait: float = 0.0) -> None:
    """After an interrupted batch's cluster is gone: remove its workers' partial files, say what remains.

    A local cluster's workers were ended, so their partial files are those of dead processes;
    an existing cluster's workers end their cancelled files themselves (``wait`` seconds are
    given to them). Files of other runs (there before this one) are not named.
    """
    deadline = time.monotonic() + wait
    while True:
        for path in folders:
            _remove_partials(path)
        left = [p for path in folders for p in partials_in(path.parent) if p not in before]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for p in note_partials_left(interrupt, left):  # the CLI names them; a Python caller finds them here
        logger.info("%s was left by the interrupted batch; the next run writing there removes it", p)


def _plan(report: JobReport, inputs: list[Path], manifest: Manifest, *, key: str, skip_existing: bool,
          overwrite: bool, model_path: str, passed: dict[str, Any],
          per_file: Mapping[Path, dict[str, Any]] | None = None) -> dict[str, _FileTask]:
    """Decide for every input: skip it, fail it now (output clash or foreign output), or fill it."""
    tasks: dict[str, _FileTask] = {}
    claimed = {p.resolve(): p.relative_to(report.input_dir).as_posix() for p in inputs}
    for path in inputs:
        name = path.relative_to(report.input_dir).as_posix()
        out, std = output_paths(report.output_dir, name)
        rec = FileRecord(name, path, out, std, "failed")
        report.records.append(rec)
        clash = [claimed[p.resolve()] for p in (out, std) if p.resolve() in claimed]
        if clash:
            rec.reason = f"its output would overwrite {clash[0]} (an input or another file's output); rename one"
            manifest.put(rec)
            continue
        claimed.update({out.resolve(): name, std.resolve(): name})
        fp = fingerprint(path)
        prev = manifest.entries.get(name, {})
        fresh = (prev.get("status") in ("done", "skipped") and prev.get("options_key") == key
                 and all(prev.get(k) == v for k, v in fp.items()))
        if skip_existing and fresh and outputs_complete(out, std):
            rec.status = "skipped"
            rec.filled_pixels, rec.gap_pixels, rec.tiles = (int(prev.get(k, 0)) for k in
                                                            ("filled_pixels", "gap_pixels", "tiles"))
            manifest.put(rec)
            continue
        exists = out.exists() or std.exists()
        if exists and not (overwrite or prev.get("owned")):
            rec.reason = (f"{out if out.exists() else std} already exists and was not written by this "
                          "batch; pass --overwrite to replace it")
            manifest.put(rec)
            continue
        # "running" until the task reports back: a killed run leaves it so, and the next run
        # fills the file again, replacing what it may have written (owned).
        rec.reason = "interrupted before it finished"
        manifest.put(rec, status="running", owned=True, options_key=key, **fp)
        tasks[name] = _FileTask(name, str(path), str(out), str(std), model_path, exists,
                                tuple(sorted(passed.items())), tuple((per_file or {}).get(path, {}).items()))
    return tasks


def _neighbour_plan(in_dir: Path, pattern: str, recursive: bool, k: int, qa_kind: str | None,
                    max_days: float | None = None) -> tuple[list[Path], dict[Path, dict[str, Any]]]:
    """``--neighbours K``: the dated rasters of the folder, each with its K nearest same-grid dates
    that see ground (within ``max_days``; the rule of :func:`geonp.io.timeseries.nearest_dates`, as
    a cube's fill)."""
    from geonp.io.timeseries import neighbours_by_grid, scan_series

    if recursive:
        raise ConfigError("--neighbours pairs the dates of one folder; drop --recursive")
    series = scan_series(in_dir, pattern=pattern)
    if any(d.qa for d in series) and qa_kind is None:
        raise ConfigError("the folder holds QA files beside the rasters; say how to read them with --qa-kind")
    per_file: dict[Path, dict[str, Any]] = {}
    for raster, refs in neighbours_by_grid(series, k, max_days=max_days, qa_kind=qa_kind):
        opts: dict[str, Any] = {"references": tuple(r.path for r in refs)}
        if qa_kind is not None:
            opts.update(qa=raster.qa, qa_kind=qa_kind, reference_qa=tuple(r.qa for r in refs))
        per_file[Path(raster.path)] = opts
    return [Path(d.path) for d in series], per_file


def _apply(rec: FileRecord, result: Mapping[str, Any]) -> None:
    rec.status, rec.reason = result["status"], result.get("reason", "")
    rec.seconds = float(result.get("seconds", 0.0))
    rec.filled_pixels, rec.gap_pixels, rec.tiles = (int(result.get(k, 0)) for k in
                                                    ("filled_pixels", "gap_pixels", "tiles"))
    if rec.status == "failed":
        logger.info("%s failed: %s", rec.name, rec.reason)


def fill_many(
    input_dir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    pattern: str = "*.tif",
    recursive: bool = False,
    skip_existing: bool = True,
    scheduler: str | None = None,
    workers: int | None = None,
    threads_per_worker: int = 1,
    dashboard_address: str | None = ":8787",
    progress: Callable[[int, int], None] | None = None,
    on_cluster: Callable[[str | None], None] | None = None,
    neighbours: int = 0,
    qa_kind: str | None = None,
    max_days: float | None = None,
    **fill_options: Any,
) -> JobReport:
    """Fill every raster of a directory in parallel on a Dask cluster.

    Outputs mirror the inputs' relative paths under ``output_dir``: ``a/b.tif`` gives
    ``output_dir/a/b.tif`` and ``output_dir/a/b_std.tif``. A file that fails is reported and the
    others go on. The manifest ``geonp_batch.json`` in ``output_dir`` is rewritten (atomically)
    as files finish, so a killed run can be resumed by running it again.

    Args:
        input_dir: directory holding the rasters.
        output_dir: where the outputs go; created if missing (its parent must exist).
        pattern: glob pattern of the input files, relative to ``input_dir``.
        recursive: match ``pattern`` in subdirectories too.
        skip_existing: skip files that the manifest lists as done for the same input and options
            and whose outputs both open. False fills them again (replacing the batch's own outputs).
        scheduler: address of an existing Dask scheduler (``tcp://host:8786``); None starts a local
            cluster for the run and closes it at the end.
        workers: local cluster worker processes (default: CPU count // ``threads_per_worker``).
        threads_per_worker: files filled at once by each local worker.
        dashboard_address: local cluster dashboard address (None: no dashboard).
        progress: ``(files_finished, files_total)`` callback; skipped files count as finished.
        on_cluster: called with the dashboard link (or None) once the cluster is up.
        neighbours: fill each raster with the ``neighbours`` dates of the same grid in the folder
            nearest to it in time as references (a multi-date model, ``multidate`` by default);
            QA files beside the rasters (``<raster>_fmask.tif``, ``_qa``, ``_QA_PIXEL``, ``_SCL``)
            give each date's clouds and are not filled themselves.
        qa_kind: how those QA files are read (needed when there are any).
        max_days: with ``neighbours``, take only dates at most this many days away (None: any);
            a raster without such a date is filled from its own pixels (by the same model).
        **fill_options: options of :func:`geonp.filling.raster.fill_raster`: ``model`` (a name or a
            directory), ``nodata``, ``bands``, ``device``, ``tile_size``, ``overlap``,
            ``max_context``, ``search_radius``, ``max_distance``, ``block_size``,
            ``creation_options``, ``cog``, ``overwrite`` (replace outputs this batch did not write).

    Returns:
        A :class:`JobReport`; ``report.ok`` is False when any file failed.

    Raises:
        ConfigError: the input directory is missing, no file matches, an option is invalid, or
            the scheduler cannot be reached.
        OutputError: the output directory cannot be created, or the manifest cannot be written.
        CheckpointError: the model is missing or corrupt.
        KeyboardInterrupt: Ctrl-C (or a signal turned into it): the running files are stopped and
            their partial files removed; its ``partials_left`` attribute lists those that remain.
    """
    t0 = time.perf_counter()
    in_dir, out_dir = _check_dirs(input_dir, output_dir)
    inputs = find_inputs(in_dir, pattern, recursive=recursive, exclude=out_dir)
    broken = find_broken_links(in_dir, pattern, recursive=recursive, exclude=out_dir)
    if not inputs and not broken:
        where = "in or under" if recursive else "in"
        hint = "check --pattern" if recursive else "check --pattern, or add --recursive for subdirectories"
        raise ConfigError(f"no file {where} {in_dir} matches {pattern!r}; {hint}.")
    per_file: dict[Path, dict[str, Any]] = {}
    if neighbours:
        inputs, per_file = _neighbour_plan(in_dir, pattern, recursive, neighbours, qa_kind, max_days)
        fill_options = {**fill_options, "model": fill_options.get("model") or "multidate"}
    model_path, passed, effective = _fill_options(fill_options)
    if neighbours:
        effective = {**effective, "neighbours": neighbours, "qa_kind": qa_kind,
                     **({"max_days": max_days} if max_days is not None else {})}
    try:
        out_dir.mkdir(exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create OUTPUT_DIR {out_dir} ({err}); check its permissions.") from err
    key = _options_key(effective)
    report = JobReport(in_dir, out_dir, out_dir / MANIFEST_NAME)
    manifest = Manifest(report.manifest, {
        "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "geonp_version": __version__,
        "started": now(), "pattern": pattern, "recursive": recursive,
        "options": {k: v for k, v in effective.items() if k != "overwrite"}})
    tasks = _plan(report, inputs, manifest, key=key, skip_existing=skip_existing,
                  overwrite=bool(fill_options.get("overwrite", False)), model_path=model_path, passed=passed,
                  per_file=per_file)
    for path, reason in broken:
        name = path.relative_to(in_dir).as_posix()
        rec = FileRecord(name, path, *output_paths(out_dir, name), "failed", reason=reason)
        report.records.append(rec)
        manifest.put(rec)
    total, finished = len(report.records), len(report.records) - len(tasks)
    _remove_partials(report.manifest)
    manifest.write(report, final=False)
    if progress is not None and not tasks:
        progress(finished, total)
    folders = _output_folders(tasks, report.manifest)
    before: set[Path] = set()
    interrupted: KeyboardInterrupt | None = None
    try:
        if tasks:
            for task in tasks.values():
                _remove_partials(Path(task.output))
                _remove_partials(Path(task.uncertainty))
            before = {p for path in folders for p in partials_in(path.parent)}  # other runs' live writers
            with dask_session(scheduler, workers, threads_per_worker, dashboard_address) as (client, link, address):
                from distributed import as_completed

                report.scheduler, report.dashboard_link = address, link
                if scheduler is None:  # our own workers: Ctrl-C is for this process, which stops them
                    try:
                        client.run(leave_ctrl_c_to_parent)
                    except Exception as err:  # noqa: BLE001 - only Ctrl-C's tracebacks are at stake
                        logger.debug("the workers keep Ctrl-C: %s", err)
                report.workers = len(client.nthreads())
                logger.info("Dask scheduler %s with %d worker(s); dashboard: %s", address, report.workers,
                            link or "none")
                if on_cluster is not None:
                    on_cluster(link)
                if progress is not None:
                    progress(finished, total)
                if report.workers == 0:
                    logger.warning("the Dask cluster at %s has no workers; the files wait until one joins",
                                   address)
                run_id = uuid.uuid4().hex[:8]
                names = list(tasks)
                futures = client.map(_fill_one, [tasks[n] for n in names], pure=False,
                                     key=[f"geonp-fill-{run_id}-{i}" for i in range(len(names))])
                by_key = {f.key: n for f, n in zip(futures, names, strict=True)}
                records = {r.name: r for r in report.records}
                for future in as_completed(futures):
                    rec = records[by_key[future.key]]
                    try:
                        result = future.result()
                    except Exception as err:  # noqa: BLE001 - a lost worker fails only its file
                        result = {"status": "failed", "reason": one_line(f"{type(err).__name__}: {err}")}
                    _apply(rec, result)
                    manifest.put(rec)
                    finished += 1
                    report.seconds = time.perf_counter() - t0
                    manifest.write(report, final=False)
                    if progress is not None:
                        progress(finished, total)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM turned into one by the CLI
        interrupted = err
        raise
    finally:
        report.seconds = time.perf_counter() - t0
        manifest.write(report, final=True)
        if interrupted is not None:
            # the local cluster is closed here (its workers ended): clean up after them
            _left_by_interrupt(interrupted, folders, before, wait=STOP_WAIT if scheduler is not None else 0.0)
    return report
