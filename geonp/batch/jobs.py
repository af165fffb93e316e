"""``fill_many``: fill every raster of a directory on a Dask cluster (backs ``geonp batch``).

Each file is one Dask task that calls :func:`geonp.filling.raster.fill_raster`, which writes its outputs
atomically, so a failed or killed task leaves no partial output. Workers load the model once per
process (:func:`geonp.model_files.registry.cached_model`) and reuse it for every file they get.

A JSON manifest, ``geonp_batch.json`` in the output directory, records every file's status, the
input's size and modification time and a key of the fill options. A rerun skips a file only when
the manifest says it is done for the same input and options *and* both outputs open; anything
else is filled again. A rerun with other fill options is refused while the folder holds files
filled with the earlier ones, unless it is asked to refill them (``Files(skip_existing=False)``
or ``overwrite``): a folder never mixes two runs' options. The manifest also records which
outputs the batch wrote itself: those may be replaced on a rerun, while files it did not write
are never replaced without ``overwrite``.

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
from collections.abc import Callable, Mapping
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
from geonp.batch.options import Cluster, Files, Neighbours
from geonp.batch.run import BatchRun, FileTask, remove_partials
from geonp.config import FillConfig
from geonp.errors import ConfigError, OutputError
from geonp.filling.inputs import refuse_moved

logger = logging.getLogger(__name__)

__all__ = ["fill_many"]  # its records (FileRecord, JobReport) are geonp.batch.manifest's

#: Options of each file's fill: the fields of FillConfig (``workers`` is the batch's own).
#: fill_many's keywords that are now fields of its option types.
BATCH_MOVED = {**{n: "geonp.Files" for n in ("pattern", "recursive", "skip_existing")},
               **{n: "geonp.Cluster" for n in ("scheduler", "workers", "threads_per_worker", "dashboard_address")},
               "on_cluster": "geonp.Cluster:on_ready",
               **{n: "geonp.Neighbours" for n in ("qa_kind", "max_days")}}
FILL_OPTIONS = tuple(f.name for f in dataclasses.fields(FillConfig) if f.name not in ("workers", "scheduler"))
_GEOTIFF_SUFFIXES = (".tif", ".tiff")


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
    from geonp.io.formats import OutputSpec, check_creation_options

    # Keys and keyword values by GDAL now, before any file; each file's types are checked by its
    # own fill.
    for options in (cfg.creation_options, cfg.std_creation_options):
        if options is not None:
            check_creation_options(parse_creation_options(options), OutputSpec("uint8", 1, None, cog=cfg.cog),
                                   names_only=True)
    passed = {k: v for k, v in dataclasses.asdict(cfg).items() if k in passed}
    effective = {**cfg.key_values(), "model": model_path}
    return model_path, passed, effective


def _options_key(effective: Mapping[str, Any]) -> str:
    keyed = dict(sorted(effective.items()))
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _refuse_other_options(manifest: Manifest, key: str, effective: Mapping[str, Any], out_dir: Path) -> None:
    """Refuse a run whose options differ from those of files an earlier run filled in ``out_dir``."""
    other = [e for e in manifest.entries.values()
             if e.get("status") in ("done", "skipped") and e.get("options_key") != key
             and any(Path(e[k]).exists() for k in ("output", "uncertainty") if e.get(k))]
    if not other:
        return
    now, then = json.loads(json.dumps(dict(effective), default=str)), manifest.earlier_options  # as stored
    changed = [f"{k} was {then.get(k)!r}, now {now.get(k)!r}" for k in sorted(set(now) | set(then))
               if now.get(k) != then.get(k)]
    raise ConfigError(f"OUTPUT_DIR {out_dir} holds {len(other)} file(s) filled with other options "
                      f"({'; '.join(changed) or 'those of an earlier run'}); give another OUTPUT_DIR, or refill them "
                      "with --no-skip-existing or --overwrite (Files(skip_existing=False) or overwrite=True)")


def _plan(report: JobReport, inputs: list[Path], manifest: Manifest, *, key: str, skip_existing: bool,
          overwrite: bool, model_path: str, passed: dict[str, Any],
          per_file: Mapping[Path, dict[str, Any]] | None = None) -> dict[str, FileTask]:
    """Decide for every input: skip it, fail it now (output clash or foreign output), or fill it."""
    tasks: dict[str, FileTask] = {}
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
        tasks[name] = FileTask(name, str(path), str(out), str(std), model_path, exists,
                                tuple(sorted(passed.items())), tuple((per_file or {}).get(path, {}).items()))
    return tasks


def _neighbour_plan(in_dir: Path, pattern: str, recursive: bool, k: int | str, qa_kind: str | None,
                    max_days: float | None = None) -> tuple[list[Path], dict[Path, dict[str, Any]]]:
    """``--neighbours K`` (or ``auto``): the dated rasters of the folder, each with its K nearest dates.

    The nearest same-grid dates that see ground (within ``max_days``; the rule of
    :func:`geonp.io.timeseries.nearest_dates`, as a cube's fill).
    """
    from geonp.filling.inputs import Gaps, Reference
    from geonp.io.reference_choice import coverage_rule
    from geonp.io.timeseries import neighbours_by_grid, scan_series

    if recursive:
        raise ConfigError("--neighbours pairs the dates of one folder; drop --recursive")
    series = scan_series(in_dir, pattern=pattern)
    if any(d.qa for d in series) and qa_kind is None:
        raise ConfigError("the folder holds QA files beside the rasters; say how to read them with --qa-kind")
    per_file: dict[Path, dict[str, Any]] = {}
    for raster, refs in neighbours_by_grid(series, coverage_rule(k) or int(k), max_days=max_days, qa_kind=qa_kind):
        read_qa = qa_kind is not None and (raster.qa is not None or any(r.qa is not None for r in refs))
        opts: dict[str, Any] = {"references": tuple(Reference(r.path, qa=r.qa if read_qa else None) for r in refs)}
        if read_qa:
            opts["gaps"] = Gaps(qa=raster.qa, qa_kind=qa_kind)
        per_file[Path(raster.path)] = opts
    return [Path(d.path) for d in series], per_file


def fill_many(
    input_dir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    files: Files | None = None,
    cluster: Cluster | None = None,
    neighbours: Neighbours | None = None,
    progress: Callable[[int, int], None] | None = None,
    **fill_options: Any,
) -> JobReport:
    """Fill every raster of a directory in parallel on a Dask cluster.

    Outputs mirror the inputs' relative paths under ``output_dir``: ``a/b.tif`` gives
    ``output_dir/a/b.tif`` and ``output_dir/a/b_std.tif``. A file that fails is reported and the
    others go on. The manifest ``geonp_batch.json`` in ``output_dir`` is rewritten (atomically)
    as files finish, so a killed run can be resumed by running it again.

    Example::

        fill_many("dates/", "filled/", files=Files(pattern="LE07*.tif"),
                  cluster=Cluster(scheduler="tcp://10.0.0.5:8786"),
                  neighbours=Neighbours(2, qa_kind="fmask"), nodata=0)

    Args:
        input_dir: directory holding the rasters.
        output_dir: where the outputs go; created if missing (its parent must exist).
        files: which files are filled (:class:`~geonp.batch.options.Files`: glob pattern,
            subdirectories, whether files done by an earlier run are skipped; None: ``Files()``).
        cluster: where (:class:`~geonp.batch.options.Cluster`: an existing Dask scheduler, or a
            local cluster's workers, threads and dashboard; None: ``Cluster()``, a local one).
        neighbours: fill each raster with its nearest dates of the same grid in the folder as
            references (:class:`~geonp.batch.options.Neighbours`; a multi-date model,
            ``multidate`` by default). None: each raster from its own pixels.
        progress: ``(files_finished, files_total)`` callback; skipped files count as finished.
        **fill_options: options of :func:`geonp.filling.raster.fill_raster`: ``model`` (a name or a
            directory), ``nodata``, ``bands``, ``device``, ``tile_size``, ``overlap``,
            ``max_context``, ``search_radius``, ``max_distance``, ``block_size``,
            ``creation_options``, ``cog``, ``overwrite`` (replace outputs this batch did not write).

    Returns:
        A :class:`JobReport`; ``report.ok`` is False when any file failed.

    Raises:
        ConfigError: the input directory is missing, no file matches, an option is invalid, the
            scheduler cannot be reached, or ``output_dir`` holds files filled with other options
            (refill them with ``Files(skip_existing=False)`` or ``overwrite=True``).
        OutputError: the output directory cannot be created, or the manifest cannot be written.
        CheckpointError: the model is missing or corrupt.
        KeyboardInterrupt: Ctrl-C (or a signal turned into it): the running files are stopped and
            their partial files removed; its ``partials_left`` attribute lists those that remain.
    """
    t0 = time.perf_counter()
    refuse_moved(fill_options, BATCH_MOVED, "fill_many")
    files, cluster = files or Files(), cluster or Cluster()
    for name, value, kind in (("files", files, Files), ("cluster", cluster, Cluster),
                              ("neighbours", neighbours, Neighbours)):
        if value is not None and not isinstance(value, kind):
            raise ConfigError(f"fill_many's {name}= must be a geonp.{kind.__name__}, got {type(value).__name__}; "
                              f"e.g. {name}=geonp.{kind.__name__}(...)")
    in_dir, out_dir = _check_dirs(input_dir, output_dir)
    inputs, per_file, broken = _inputs(in_dir, out_dir, files, neighbours)
    if neighbours is not None:
        fill_options = {**fill_options, "model": fill_options.get("model") or "multidate"}
    model_path, passed, effective = _fill_options(fill_options)
    if neighbours is not None:
        effective = {**effective, "neighbours": neighbours.count, "qa_kind": neighbours.qa_kind,
                     **({"max_days": neighbours.max_days} if neighbours.max_days is not None else {})}
    try:
        out_dir.mkdir(exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create OUTPUT_DIR {out_dir} ({err}); check its permissions.") from err
    report = JobReport(in_dir, out_dir, out_dir / MANIFEST_NAME)
    manifest = Manifest(report.manifest, {
        "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "geonp_version": __version__,
        "started": now(), "pattern": files.pattern, "recursive": files.recursive,
        "options": {k: v for k, v in effective.items() if k != "overwrite"}})
    key, overwrite = _options_key(effective), bool(fill_options.get("overwrite", False))
    if files.skip_existing and not overwrite:
        _refuse_other_options(manifest, key, effective, out_dir)
    tasks = _plan(report, inputs, manifest, key=key, skip_existing=files.skip_existing, overwrite=overwrite,
                  model_path=model_path, passed=passed, per_file=per_file)
    for path, reason in broken:
        name = path.relative_to(in_dir).as_posix()
        rec = FileRecord(name, path, *output_paths(out_dir, name), "failed", reason=reason)
        report.records.append(rec)
        manifest.put(rec)
    remove_partials(report.manifest)
    manifest.write(report, final=False)
    BatchRun(report, manifest, tasks, cluster, progress, t0).run()
    return report


def _inputs(in_dir: Path, out_dir: Path, files: Files, neighbours: Neighbours | None
            ) -> tuple[list[Path], dict[Path, dict[str, Any]], list[tuple[Path, str]]]:
    """The files to fill, each one's own options (its references) and the broken links among them."""
    inputs = find_inputs(in_dir, files.pattern, recursive=files.recursive, exclude=out_dir)
    broken = find_broken_links(in_dir, files.pattern, recursive=files.recursive, exclude=out_dir)
    if not inputs and not broken:
        where = "in or under" if files.recursive else "in"
        hint = "check --pattern" if files.recursive else "check --pattern, or add --recursive for subdirectories"
        raise ConfigError(f"no file {where} {in_dir} matches {files.pattern!r}; {hint}.")
    if neighbours is None:
        return inputs, {}, broken
    inputs, per_file = _neighbour_plan(in_dir, files.pattern, files.recursive, neighbours.count,
                                       neighbours.qa_kind, neighbours.max_days)
    return inputs, per_file, broken
