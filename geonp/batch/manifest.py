"""The batch's JSON manifest (``geonp_batch.json``) and the records it holds (backs ``geonp batch``).

One :class:`FileRecord` per input file, a :class:`JobReport` for the run, and :class:`Manifest`,
which rewrites the manifest atomically as files finish so that a killed run can resume.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from geonp.errors import GeonpError, OutputError

logger = logging.getLogger(__name__)

__all__ = ["MANIFEST_NAME", "FileRecord", "JobReport", "Manifest", "fingerprint", "load_manifest", "now",
           "outputs_complete"]

#: File name of the manifest written in the output directory.
MANIFEST_NAME = "geonp_batch.json"
MANIFEST_FORMAT = "geonp-batch-manifest"
MANIFEST_VERSION = 1


Status = Literal["done", "skipped", "failed"]


@dataclass
class FileRecord:
    """What happened to one input file.

    Attributes:
        name: the input's path relative to the input directory (POSIX separators).
        input: the input path.
        output: the filled raster path.
        uncertainty: the std raster path.
        status: ``done``, ``skipped`` (complete from an earlier run) or ``failed``.
        reason: one-line reason of a failure (empty otherwise).
        seconds: wall time of the fill (0 when skipped).
        filled_pixels: gap pixels that received a prediction.
        gap_pixels: missing pixels over all bands.
        tiles: tiles with gaps.
    """

    name: str
    input: Path
    output: Path
    uncertainty: Path
    status: Status
    reason: str = ""
    seconds: float = 0.0
    filled_pixels: int = 0
    gap_pixels: int = 0
    tiles: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values."""
        out = asdict(self)
        out.update(input=str(self.input), output=str(self.output), uncertainty=str(self.uncertainty))
        return out


@dataclass
class JobReport:
    """What a :func:`fill_many` run did.

    Attributes:
        input_dir: the input directory.
        output_dir: the output directory.
        manifest: path of the JSON manifest.
        records: one record per matched input file, sorted by name.
        scheduler: the Dask scheduler address used.
        dashboard_link: the Dask dashboard URL (None when no dashboard is served).
        workers: Dask workers available for the run.
        seconds: wall time of the run.
    """

    input_dir: Path
    output_dir: Path
    manifest: Path
    records: list[FileRecord] = field(default_factory=list)
    scheduler: str | None = None
    dashboard_link: str | None = None
    workers: int = 0
    seconds: float = 0.0

    def _with(self, status: Status) -> list[FileRecord]:
        return [r for r in self.records if r.status == status]

    @property
    def done(self) -> list[FileRecord]:
        """Files filled by this run."""
        return self._with("done")

    @property
    def skipped(self) -> list[FileRecord]:
        """Files complete from an earlier run."""
        return self._with("skipped")

    @property
    def failed(self) -> list[FileRecord]:
        """Files that could not be filled."""
        return self._with("failed")

    @property
    def ok(self) -> bool:
        """True when no file failed."""
        return not self.failed

    @property
    def counts(self) -> dict[str, int]:
        """Files per status."""
        return {s: len(self._with(s)) for s in ("done", "skipped", "failed")}

    @property
    def tiles(self) -> int:
        """Tiles filled by this run."""
        return sum(r.tiles for r in self.done)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values."""
        return {
            "input_dir": str(self.input_dir), "output_dir": str(self.output_dir),
            "manifest": str(self.manifest), "scheduler": self.scheduler,
            "dashboard_link": self.dashboard_link, "workers": self.workers,
            "seconds": round(self.seconds, 3), "ok": self.ok, "counts": self.counts,
            "files": [r.to_dict() for r in self.records],
        }

    def table(self, *, failed_only: bool = False) -> str:
        """A plain-text summary: one row per file (or per failed file), then the totals."""
        rows = self.failed if failed_only else self.records
        width = max([len("file")] + [len(r.name) for r in rows])
        lines = [f"{'status':<8} {'file':<{width}} {'seconds':>8} {'filled px':>10}  reason"] if rows else []
        for r in rows:
            secs = f"{r.seconds:.1f}" if r.status == "done" else ""
            filled = str(r.filled_pixels) if r.status == "done" else ""
            lines.append(f"{r.status:<8} {r.name:<{width}} {secs:>8} {filled:>10}  {r.reason}".rstrip())
        c = self.counts
        lines.append(f"{len(self.records)} file(s): {c['done']} done, {c['skipped']} skipped, "
                     f"{c['failed']} failed in {self.seconds:.1f} s; manifest {self.manifest}")
        return "\n".join(lines)


def fingerprint(path: Path) -> dict[str, int]:
    """An input's size and modification time: a rerun fills it again when they change."""
    st = path.stat()
    return {"input_size": st.st_size, "input_mtime_ns": st.st_mtime_ns}


def outputs_complete(output: Path, uncertainty: Path) -> bool:
    """Both outputs exist and open, on the same grid, from one run (atomic writes make them whole)."""
    from geonp.io.paths import unpaired_output
    from geonp.io.raster import open_raster

    try:
        with open_raster(output) as a, open_raster(uncertainty) as b:
            same_grid = (a.width, a.height, a.count) == (b.width, b.height, b.count)
    except GeonpError:
        return False
    return same_grid and unpaired_output(output, uncertainty) is None


def load_manifest(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The file entries of an earlier run's manifest, by name, and its fill options (empty if none or unreadable)."""
    if not path.exists():
        return {}, {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format is {data.get('format')!r}")
        return {e["name"]: e for e in data["files"]}, dict(data.get("options") or {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        logger.warning("ignoring unreadable manifest %s (%s); every file is filled again", path, err)
        return {}, {}


def now() -> str:
    """The time now, UTC, ISO 8601 to the second (manifest time stamps)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Manifest:
    """The batch's JSON manifest: file entries by name, rewritten atomically as files finish."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        """A manifest at ``path`` with the run's ``meta`` and no file entries yet."""
        self.path = path
        self.meta = meta
        # files of earlier runs not matched now are kept; their options tell what changed
        self.entries, self.earlier_options = load_manifest(path)

    def put(self, rec: FileRecord, **extra: Any) -> None:
        """Record a file's outcome (a skipped file keeps its earlier entry)."""
        if rec.status == "skipped" and rec.name in self.entries:
            self.entries[rec.name]["status"] = "skipped"
        else:
            self.entries[rec.name] = {**self.entries.get(rec.name, {}), **rec.to_dict(), **extra}

    def write(self, report: JobReport, *, final: bool) -> None:
        """Write the manifest; a failure is only a warning until the final write."""
        from geonp.io.atomic_file import atomic_write_text

        data = {**self.meta, **report.to_dict(), "updated": now(),
                "files": [self.entries[n] for n in sorted(self.entries)]}
        try:
            atomic_write_text(self.path, json.dumps(data, indent=1, default=str) + "\n")
        except (OutputError, OSError) as err:
            if final:
                raise
            logger.warning("could not update %s: %s", self.path, err)
