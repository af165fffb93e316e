"""Write outputs atomically: a hidden temporary file, read back, then moved onto its final name.

geonp never modifies its input and never leaves a half-written output: every file (rasters,
JSON reports, PNGs, model files) is written to a hidden temporary file in the output's directory
and moved onto its final name only when it is complete (``os.replace`` is atomic within one file
system); a raster is first read back in full (GDAL can report success for a file a full disk
truncated). Files that are not rasters (JSON, PNG, model files) go through
:mod:`geonp.io.atomic_file` (no GDAL, so saving a model needs none). A filled raster and
its std raster are written as one group (:class:`AtomicGroup`): both appear, or neither, the
filled raster last (see the group for the one window that remains between the two renames). A
killed run leaves at most a ``.<name>.geonp-partial-<host>-<pid>-*``
file, never a truncated OUTPUT, and the next run that writes to the same directory removes it.
An interrupt (Ctrl-C, or SIGTERM turned into one by the CLI) that passes a writer leaves the
writer's files removed and records on itself which partial files remain
(:func:`geonp.io.partials.note_partials_left`), for the CLI's message.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import rasterio
import rasterio.errors
import rasterio.shutil
from rasterio.io import DatasetWriter
from rasterio.windows import Window

from geonp.errors import OutputError
from geonp.io.atomic_file import fsync_dir, fsync_path
from geonp.io.formats import DIRECT_DRIVERS, output_driver, suffix_for
from geonp.io.partials import (
    note_partials_left,
    partial_path,
    remove_stale_partials,
    unlink_quietly,
)
from geonp.io.profiles import convert_raster, finalize_cog
from geonp.io.write_errors import (
    NEARLY_FULL,
    disk_full_message,
    free_bytes,
    is_disk_full,
    is_gdal_error,
    verify_failed,
    write_failed,
)

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

__all__ = ["AtomicGroup", "AtomicRasterWriter", "verify_raster_file"]


#: Bytes read at a time when a finished file is read back.
_VERIFY_CHUNK_BYTES = 32 * 2**20


def verify_raster_file(path: str | os.PathLike[str], profile: Mapping[str, Any]) -> None:
    """Read a just-written raster back, all of it, strip by strip.

    GDAL does not always report a failed write: on a full disk libtiff prints a message and
    ``close()`` returns normally, leaving a truncated file. Reading every block back (memory
    bounded by ``_VERIFY_CHUNK_BYTES``) catches that before the file gets its final name.

    Args:
        path: The finished file.
        profile: The profile it was written with (size, band count and type are checked).

    Raises:
        OutputError: If the file cannot be opened or read, or does not have the written shape.
    """
    name = os.fspath(path)
    try:
        with rasterio.open(name) as src:
            want = (int(profile["width"]), int(profile["height"]), int(profile["count"]))
            got = (src.width, src.height, src.count)
            if got != want:
                raise ValueError(f"it has {got[0]}x{got[1]} px and {got[2]} band(s), not "
                                 f"{want[0]}x{want[1]} and {want[2]}")
            block_h = max(1, src.block_shapes[0][0])
            row_bytes = src.width * src.count * np.dtype(src.dtypes[0]).itemsize
            rows = max(block_h, (_VERIFY_CHUNK_BYTES // max(row_bytes, 1)) // block_h * block_h)
            for r0 in range(0, src.height, rows):
                src.read(window=Window(0, r0, src.width, min(rows, src.height - r0)))
    except (rasterio.errors.RasterioError, OSError, ValueError) as err:
        raise verify_failed(path, err) from err


def _commit(tmp: Path, final: Path, *, overwrite: bool) -> None:
    """Move a finished temporary file onto its final name."""
    if overwrite:
        os.replace(tmp, final)
        return
    try:
        # A hard link fails if the target appeared meanwhile: no-clobber and atomic.
        os.link(tmp, final)
    except FileExistsError as err:
        raise OutputError(
            f"{final} already exists (it appeared while geonp was writing); pass --overwrite "
            "to replace it."
        ) from err
    except OSError:
        if final.exists():
            raise OutputError(f"{final} already exists; pass --overwrite to replace it.") from None
        os.replace(tmp, final)
        return
    tmp.unlink()


class AtomicGroup:
    r"""Rasters that appear together (a filled raster and its std raster), the primary one last.

    Writers made by :meth:`writer` keep their finished temporary files until the group's ``with``
    block ends without an error; then all are moved into place, in the order they finished,
    except that a writer made with ``primary=True`` is moved last. If the block fails, none
    appears.

    Two renames are not one atomic step, so a window remains: a process killed (SIGKILL, power
    loss) after the first rename and before the last leaves the files moved so far without the
    primary one. Moving the primary file last makes that state recognisable: a present primary
    file means the whole group was committed, and a std raster without its filled raster (or,
    after ``overwrite``, beside one of another run: their ``GEONP_RUN_ID`` tags differ) is a
    leftover of an interrupted run, which the next fill refuses without ``--overwrite``
    (:func:`geonp.io.paths.unpaired_output`). Everything before the first rename (writing,
    conversion, read-back, fsync) leaves only hidden partial files.

    Example:
        >>> with AtomicGroup() as group, \
        ...         group.writer("filled.tif", profile, overwrite=False, primary=True) as dst, \
        ...         group.writer("filled_std.tif", std_profile, overwrite=False) as dstd:
        ...     dst.write(data)
        ...     dstd.write(std)
    """

    def __init__(self) -> None:
        """An empty group."""
        self._finished: list[AtomicRasterWriter] = []
        self._primary: AtomicRasterWriter | None = None

    def writer(self, path: str | os.PathLike[str], profile: Mapping[str, Any], *, primary: bool = False,
               **options: Any) -> AtomicRasterWriter:
        """An :class:`AtomicRasterWriter` that commits with this group (same arguments).

        Args:
            path: Final output path.
            profile: rasterio profile.
            primary: Move this file into place after every other file of the group (at most one
                writer of a group is primary).
            **options: The other arguments of :class:`AtomicRasterWriter`.

        Raises:
            ValueError: A second primary writer.
        """
        w = AtomicRasterWriter(path, profile, group=self, **options)
        if primary:
            if self._primary is not None:
                raise ValueError(f"{self._primary.path} is already the group's primary file; "
                                 f"{w.path} cannot be too")
            self._primary = w
        return w

    def __enter__(self) -> Self:
        """The group itself."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        """Move every finished file into place (the primary last), or delete them all after an error."""
        finished, self._finished = self._finished, []
        if exc is not None:
            for w in finished:
                w._cleanup()
            _note_interrupt(exc)
            return False
        finished.sort(key=lambda w: w is self._primary)  # stable: the primary one last
        try:
            _commit_together(finished)
        except BaseException as err:
            for w in finished:
                w._cleanup()
            _note_interrupt(err)
            raise
        return False


class AtomicRasterWriter:
    r"""Write a raster to a temporary file and move it onto its final path when complete.

    On entering, a hidden file ``.<name>.geonp-partial-<host>-<pid>-<random>.tif`` is created
    in the output's directory and its rasterio writer is returned (temporary files that killed
    runs of this machine left for the same output are deleted first). On a clean exit the
    writer is closed, converted to COG if asked, read back in full (GDAL can silently truncate
    a file on a full disk), flushed to disk and moved onto the final path. On any exception,
    KeyboardInterrupt included, the temporary file is deleted and the exception propagates; a
    full disk becomes :class:`~geonp.errors.OutputError`. Either way no partial output
    remains. A ``.aux.xml`` sidecar GDAL writes for metadata the TIFF cannot hold is moved
    along with the raster.

    A writer of an :class:`AtomicGroup` waits for the group: its file is moved into place with
    the group's other files when the group's block ends, so files that belong together (a
    filled raster and its std raster) appear together or not at all.

    Example:
        >>> with AtomicRasterWriter("filled.tif", profile, overwrite=False) as dst:
        ...     dst.write(data)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        profile: Mapping[str, Any],
        *,
        overwrite: bool,
        cog: bool = False,
        creation_options: Mapping[str, str] | None = None,
        driver: str | None = None,
        overview_resampling: str | None = None,
        group: AtomicGroup | None = None,
    ) -> None:
        """Prepare the writer (nothing is created until the context is entered).

        Args:
            path: Final output path.
            profile: rasterio profile (see :func:`output_profile`).
            overwrite: Whether an existing file at ``path`` may be replaced.
            cog: Convert to a Cloud Optimized GeoTIFF before moving into place.
            creation_options: Parsed ``--co`` options for the COG conversion (only with
                ``cog=True``) or the conversion to another driver.
            driver: GDAL driver of the final file; default from the path's extension
                (:func:`output_driver`). Other drivers than GTiff are written as a GeoTIFF
                and converted when complete.
            overview_resampling: COG overview resampling (``"RMS"`` for std rasters).
            group: commit with this group (see :class:`AtomicGroup`) instead of on exit.
        """
        self.path = Path(os.fspath(path)).expanduser().absolute()
        self.profile = dict(profile)
        self.overwrite = overwrite
        self.cog = cog
        self.creation_options = dict(creation_options or {})
        self.driver = "COG" if cog else (driver or output_driver(self.path))
        self.overview_resampling = overview_resampling
        self.temp_path: Path | None = None
        self._dst: DatasetWriter | None = None
        self._extra_temps: list[Path] = []
        self._ready: Path | None = None
        self.group = group

    def __enter__(self) -> DatasetWriter:
        """Create the temporary file and return its open writer."""
        if not self.overwrite and self.path.exists():
            raise OutputError(f"{self.path} already exists; pass --overwrite to replace it.")
        if not self.path.parent.is_dir():
            raise OutputError(
                f"Output directory {self.path.parent} does not exist; create it first."
            )
        remove_stale_partials(self.path)
        self.temp_path = partial_path(self.path, ".tif")
        try:
            self._dst = rasterio.open(self.temp_path, "w", **self.profile)
        except Exception as err:
            self._cleanup()
            if is_disk_full(err):
                raise OutputError(disk_full_message(self.path)) from err
            raise
        return self._dst

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        """Commit the file (or hand it to its group) on success; delete it on failure."""
        dst, self._dst = self._dst, None
        if exc is not None:
            # Measured before the partial file is removed: afterwards the disk has room again.
            free = free_bytes(self.path.parent)
            if dst is not None:
                try:
                    dst.close()
                except Exception as close_err:  # noqa: BLE001 - the original error matters more
                    logger.debug("closing %s after an error failed: %s", self.temp_path, close_err)
            self._cleanup()
            _note_interrupt(exc)
            write_error = is_gdal_error(exc) and (
                "write failed" in str(exc).lower()
                or (self.temp_path is not None and self.temp_path.name in str(exc)))
            if is_disk_full(exc) or (write_error and free is not None and free < NEARLY_FULL):
                raise OutputError(disk_full_message(self.path)) from exc
            if write_error:
                raise write_failed(self.path, exc) from exc  # GDAL failed writing this file
            return False
        try:
            if dst is not None:
                dst.close()
            self._prepare()
            if self.group is not None:
                self.group._finished.append(self)  # committed (or deleted) with the group
                return False
            _commit_together([self])
        except BaseException as err:
            self._cleanup()
            _note_interrupt(err)
            if isinstance(err, OutputError) or not isinstance(err, Exception):
                raise
            raise write_failed(self.path, err) from err
        return False

    def _prepare(self) -> None:
        """Close-time work short of the rename: COG conversion, read-back check, fsync."""
        assert self.temp_path is not None, "AtomicRasterWriter used outside a with block"
        ready = self.temp_path
        if self.cog or self.driver not in DIRECT_DRIVERS:
            suffix = ".tif" if self.cog else (self.path.suffix or suffix_for(self.driver))
            converted = partial_path(self.path, suffix)
            self._extra_temps.append(converted)
            if self.cog:
                finalize_cog(self.temp_path, converted, self.creation_options,
                             resampling=self.overview_resampling)
            else:
                convert_raster(self.temp_path, converted, self.driver, self.creation_options)
            unlink_quietly(self.temp_path)
            unlink_quietly(_aux_path(self.temp_path))
            ready = converted
        try:
            verify_raster_file(ready, self.profile)
        except OutputError as err:  # name the output the user asked for, not the partial file
            raise verify_failed(self.path, err.__cause__ or err) from err
        fsync_path(ready)
        self._ready = ready

    def _move_into_place(self) -> None:
        assert self._ready is not None, "AtomicRasterWriter committed before it was prepared"
        _commit(self._ready, self.path, overwrite=self.overwrite)
        aux = _aux_path(self._ready)
        final_aux = _aux_path(self.path)
        if aux.exists():
            os.replace(aux, final_aux)
        elif final_aux.exists():
            # Left by the file just replaced: it would now describe the wrong raster.
            unlink_quietly(final_aux)

    def _cleanup(self) -> None:
        for path in [self.temp_path, *self._extra_temps]:
            if path is not None:
                unlink_quietly(path)
                unlink_quietly(_aux_path(path))


def _commit_together(writers: list[AtomicRasterWriter]) -> None:
    """Move prepared writers' files into place, in order; none clobbers a file that appeared."""
    if len(writers) > 1:
        for w in writers:  # no-clobber check before moving anything
            if not w.overwrite and w.path.exists():
                raise OutputError(f"{w.path} already exists (it appeared while geonp was "
                                  "writing); pass --overwrite to replace it.")
    done: list[AtomicRasterWriter] = []
    try:
        for w in writers:
            w._move_into_place()
            done.append(w)
    except BaseException:
        for w in done:  # best effort: take back the new files that did not replace any
            if not w.overwrite:
                unlink_quietly(w.path)
        raise
    for parent in {w.path.parent for w in writers}:
        fsync_dir(parent)


def _note_interrupt(exc: BaseException | None) -> None:
    """After a writer's cleanup, record on an interrupt which partial files remain."""
    if isinstance(exc, KeyboardInterrupt):
        note_partials_left(exc)


def _aux_path(path: Path) -> Path:
    return path.with_name(path.name + ".aux.xml")
