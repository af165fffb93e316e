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

import contextlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import rasterio
import rasterio.errors
import rasterio.shutil
from rasterio.io import DatasetWriter

from geonp.errors import OutputError
from geonp.io.atomic_file import fsync_dir, fsync_path
from geonp.io.formats import DIRECT_DRIVERS, output_driver, suffix_for
from geonp.io.partials import (
    note_partials_left,
    partial_path,
    remove_stale_partials,
    unlink_quietly,
    with_sidecars,
)
from geonp.io.profiles import convert_raster, finalize_cog
from geonp.io.readback import verify_raster_file
from geonp.io.write_errors import (
    NEARLY_FULL,
    disk_full_message,
    free_bytes,
    is_disk_full,
    is_gdal_error,
    quiet_libtiff,
    verify_failed,
    write_failed,
)

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

__all__ = ["AtomicGroup", "AtomicRasterWriter"]


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
    remains. Every file GDAL wrote beside the raster (a ``.aux.xml`` for metadata the format
    cannot hold, the ``.hdr`` and ``.prj`` of EHdr or ENVI) is moved along with it, and the
    output must open under its final name, or it is removed again and the write fails. While
    the writer is open, libtiff prints nothing to stderr (:func:`quiet_libtiff`): a failure is
    geonp's one-line error.

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
        self._moved: list[Path] = []
        self._quiet = contextlib.ExitStack()
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
        self._quiet.enter_context(quiet_libtiff())
        try:
            self._dst = rasterio.open(self.temp_path, "w", **self.profile)
        except Exception as err:
            self._quiet.close()
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
        with self._quiet:
            return self._finish(exc)

    def _finish(self, exc: BaseException | None) -> bool:
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
            for path in with_sidecars(self.temp_path):
                unlink_quietly(path)
            ready = converted
        try:
            verify_raster_file(ready, self.profile)
        except OutputError as err:  # name the output the user asked for, not the partial file
            raise verify_failed(self.path, err.__cause__ or err) from err
        for path in with_sidecars(ready):
            fsync_path(path)
        self._ready = ready

    def _move_into_place(self) -> None:
        """Move the raster and its sidecars onto their final names; check that it opens there."""
        ready = self._ready
        assert ready is not None, "AtomicRasterWriter committed before it was prepared"
        sidecars = [(f, self.path.with_name(_final_name(f.name, ready, self.path)))
                    for f in with_sidecars(ready) if f != ready]
        for _, final in sidecars:
            # o.hdr may belong to another raster (o.img beside o.bil); o.bil.aux.xml is ours
            if not self.overwrite and final.exists() and not final.name.startswith(self.path.name):
                raise OutputError(f"{final} already exists and writing {self.path.name} as {self.driver} "
                                  "would replace it; pass --overwrite, or choose another OUTPUT name.")
        _commit(ready, self.path, overwrite=self.overwrite)
        self._moved = [self.path]
        for tmp, final in sidecars:
            os.replace(tmp, final)
            self._moved.append(final)
        final_aux = _aux_path(self.path)
        if final_aux not in self._moved and final_aux.exists():
            # Left by the file just replaced: it would now describe the wrong raster.
            unlink_quietly(final_aux)
        got: tuple[int, int, int] | str  # the raster's size, or why it does not open
        try:
            with rasterio.open(self.path) as src:
                got = (src.width, src.height, src.count)
        except (rasterio.errors.RasterioError, OSError) as err:
            got = " ".join(str(err).split())
        if got != (int(self.profile["width"]), int(self.profile["height"]), int(self.profile["count"])):
            for path in self._moved:
                unlink_quietly(path)
            raise OutputError(f"{self.path} does not open as the raster written ({got}) once moved into place "
                              f"as {self.driver}; write a GeoTIFF (.tif, or -f GTiff) instead. No file was written.")

    def _cleanup(self) -> None:
        for path in [self.temp_path, *self._extra_temps]:
            if path is not None:
                for file in with_sidecars(path):
                    unlink_quietly(file)


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
                for path in w._moved:
                    unlink_quietly(path)
        raise
    for parent in {w.path.parent for w in writers}:
        fsync_dir(parent)


def _note_interrupt(exc: BaseException | None) -> None:
    """After a writer's cleanup, record on an interrupt which partial files remain."""
    if isinstance(exc, KeyboardInterrupt):
        note_partials_left(exc)


def _aux_path(path: Path) -> Path:
    return path.with_name(path.name + ".aux.xml")


def _final_name(name: str, ready: Path, final: Path) -> str:
    """The final name of a file GDAL wrote beside the partial raster ``ready``.

    ``.o.bil.geonp-partial-X.bil.aux.xml`` becomes ``o.bil.aux.xml``, ``.o.bil.geonp-partial-X.hdr``
    becomes ``o.hdr`` (the name GDAL looks for beside ``o.bil``).
    """
    if name.startswith(ready.name):
        return final.name + name[len(ready.name):]
    return final.stem + name[len(ready.stem):]
