"""Write output rasters safely: checked paths, sensible profiles, atomic replacement.

geonp never modifies its input and never leaves a half-written output: every file is written
to a hidden temporary file in the output's directory and moved onto its final name only when
it is complete (``os.replace`` is atomic within one file system), after it has been read back in
full (GDAL can report success for a file a full disk truncated). A filled raster and its std
raster are written as one transaction: both appear, or neither. A killed run leaves at most a
``.<name>.geonp-partial-<host>-<pid>-*`` file, never a truncated OUTPUT, and the next run that
writes the same output removes it.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import logging
import os
import secrets
import socket
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import rasterio
import rasterio.errors
import rasterio.shutil
from rasterio.enums import ColorInterp
from rasterio.io import DatasetReader, DatasetWriter
from rasterio.windows import Window

from geonp.errors import ConfigError, OutputError
from geonp.io.raster import check_nodata_in_range

logger = logging.getLogger(__name__)

__all__ = [
    "AtomicRasterWriter",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output_path",
    "copy_metadata",
    "finalize_cog",
    "output_profile",
    "parse_creation_options",
    "remove_stale_partials",
    "verify_raster_file",
]

#: GTiff creation options accepted with ``--co`` (GDAL's GTiff driver documentation).
GTIFF_OPTIONS = frozenset(
    {
        "COMPRESS", "PREDICTOR", "ZLEVEL", "ZSTD_LEVEL", "TILED", "BLOCKXSIZE", "BLOCKYSIZE",
        "BIGTIFF", "NUM_THREADS", "INTERLEAVE", "PHOTOMETRIC", "SPARSE_OK", "JPEG_QUALITY",
        "LERC_MAXZERROR", "MAX_Z_ERROR", "WEBP_LEVEL", "WEBP_LOSSLESS", "NBITS",
        "GEOTIFF_VERSION",
    }
)
#: Options of GDAL's COG driver that the GTiff driver does not take (only with ``--cog``).
COG_ONLY_OPTIONS = frozenset(
    {
        "BLOCKSIZE", "LEVEL", "QUALITY", "OVERVIEWS", "OVERVIEW_RESAMPLING", "RESAMPLING",
        "OVERVIEW_COMPRESS", "OVERVIEW_PREDICTOR", "OVERVIEW_QUALITY",
    }
)
#: Compression methods GDAL's GTiff/COG drivers know.
COMPRESS_METHODS = frozenset(
    {
        "NONE", "LZW", "PACKBITS", "JPEG", "CCITTRLE", "CCITTFAX3", "CCITTFAX4", "DEFLATE",
        "LZMA", "ZSTD", "LERC", "LERC_DEFLATE", "LERC_ZSTD", "WEBP", "JXL",
    }
)
_YES_NO = frozenset({"YES", "NO", "TRUE", "FALSE", "ON", "OFF", "1", "0"})
_VALUE_CHOICES: dict[str, frozenset[str]] = {
    "COMPRESS": COMPRESS_METHODS,
    "OVERVIEW_COMPRESS": COMPRESS_METHODS,
    "TILED": _YES_NO,
    "SPARSE_OK": _YES_NO,
    "WEBP_LOSSLESS": _YES_NO,
    "BIGTIFF": frozenset({"YES", "NO", "IF_NEEDED", "IF_SAFER"}),
    "INTERLEAVE": frozenset({"PIXEL", "BAND"}),
    "PREDICTOR": frozenset({"1", "2", "3", "YES", "NO", "STANDARD", "FLOATING_POINT"}),
}
_INT_OPTIONS = frozenset(
    {"ZLEVEL", "ZSTD_LEVEL", "BLOCKXSIZE", "BLOCKYSIZE", "BLOCKSIZE", "JPEG_QUALITY", "LEVEL",
     "QUALITY", "WEBP_LEVEL", "NBITS"}
)
_DEFAULT_BLOCK = 256
_PARTIAL_TAG = ".geonp-partial-"


# --------------------------------------------------------------------------------------------
# Paths


def check_output_path(
    output: str | os.PathLike[str],
    *,
    inputs: Sequence[str | os.PathLike[str]],
    overwrite: bool,
    role: str = "OUTPUT",
) -> Path:
    """Check that an output can be written without harming anything.

    Args:
        output: Path of the file to write.
        inputs: Paths this run reads; the output must be none of them.
        overwrite: Whether an existing output may be replaced.
        role: What the output is, as error messages name it (``"OUTPUT"``, ``"--quicklook"``).

    Returns:
        The absolute output path.

    Raises:
        OutputError: If the output is an input, is a directory, exists without
            ``overwrite``, or its directory is missing or not writable.
    """
    out = Path(os.fspath(output)).expanduser()
    for inp in inputs:
        if _same_file(out, Path(os.fspath(inp)).expanduser()):
            raise OutputError(
                f"{role} {out} is the input {inp}; write to another path (geonp never "
                "modifies its input)."
            )
    if out.is_dir():
        raise OutputError(
            f"{role} {out} is a directory; give a file path such as {out / 'filled.tif'}."
        )
    parent = out.parent.resolve() if str(out.parent) else Path.cwd()
    if not parent.exists():
        raise OutputError(
            f"Output directory {parent} does not exist; create it first (mkdir -p {parent})."
        )
    if not parent.is_dir():
        raise OutputError(f"Output directory {parent} is not a directory; choose another path.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(
            f"Output directory {parent} is not writable; choose another directory or fix its "
            "permissions."
        )
    if out.exists() and not overwrite:
        raise OutputError(f"{out} already exists; pass --overwrite to replace it.")
    return parent / out.name


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


# --------------------------------------------------------------------------------------------
# Creation options and profiles


def parse_creation_options(items: Sequence[str]) -> dict[str, str]:
    """Parse ``--co KEY=VALUE`` creation options.

    Args:
        items: Strings such as ``"COMPRESS=ZSTD"``. Keys are case-insensitive.

    Returns:
        Options with upper-case keys (and upper-case values for keyword-valued options).

    Raises:
        ConfigError: If an item is not ``KEY=VALUE``, the key is not a GTiff/COG creation option
            geonp knows, or the value is not one the option takes.
    """
    known = GTIFF_OPTIONS | COG_ONLY_OPTIONS
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        key, value = key.strip().upper(), value.strip()
        if not sep or not key or not value:
            raise ConfigError(
                f"Creation option {item!r} is not KEY=VALUE; write it like --co COMPRESS=ZSTD."
            )
        if key not in known:
            raise ConfigError(
                f"Unknown creation option {key} in {item!r}; valid keys: "
                f"{', '.join(sorted(known))}."
            )
        if key in _VALUE_CHOICES:
            value = value.upper()
            if value not in _VALUE_CHOICES[key]:
                raise ConfigError(
                    f"--co {key}={value} is not valid; {key} takes one of "
                    f"{', '.join(sorted(_VALUE_CHOICES[key]))}."
                )
        if key in _INT_OPTIONS and not value.isdigit():
            raise ConfigError(f"--co {key}={value} is not valid; {key} takes a whole number.")
        if key in {"BLOCKXSIZE", "BLOCKYSIZE", "BLOCKSIZE"} and int(value) % 16:
            raise ConfigError(
                f"--co {key}={value} is not valid; tile sizes must be multiples of 16 "
                "(e.g. 256 or 512)."
            )
        options[key] = value
    return options


def _default_predictor(dtype: str) -> str | None:
    kind = np.dtype(dtype)
    if np.issubdtype(kind, np.integer):
        return "2"
    if np.issubdtype(kind, np.floating):
        return "3"
    return None


def output_profile(
    src_profile: Mapping[str, Any],
    *,
    count: int,
    dtype: str,
    nodata: float | None,
    creation_options: Mapping[str, str],
    cog: bool,
) -> dict[str, Any]:
    """Build the rasterio profile of a GeoTIFF output on the same grid as its source.

    Only the grid (size, CRS, transform) comes from the source; its compression, photometric
    and block layout do not, because they may not suit the output type (a JPEG-compressed RGB
    input cannot hold float values). Defaults: 256x256 tiles when the raster is at least that
    big in both directions, DEFLATE compression with the predictor that suits the type
    (horizontal differencing for integers, floating point for floats), BIGTIFF=IF_SAFER. The
    user's options override these; a user COMPRESS drops the default predictor.

    With ``cog=True`` the profile is for the temporary GTiff that :func:`finalize_cog` turns
    into a Cloud Optimized GeoTIFF; the user's options are then applied by
    :func:`finalize_cog`, not here.

    Args:
        src_profile: Profile of the source raster (needs width, height, crs, transform).
        count: Number of bands to write.
        dtype: Numpy name of the output data type.
        nodata: Nodata value to tag, or None.
        creation_options: Parsed ``--co`` options (see :func:`parse_creation_options`).
        cog: Whether the output will be converted to a COG.

    Returns:
        A profile for ``rasterio.open(path, "w", **profile)``.

    Raises:
        ConfigError: If ``nodata`` does not fit ``dtype``, a COG-only option is given without
            ``cog``, or PREDICTOR=3 is asked for an integer type.
    """
    if nodata is not None:
        check_nodata_in_range(nodata, dtype)
    width, height = int(src_profile["width"]), int(src_profile["height"])
    profile: dict[str, Any] = {
        "driver": "GTiff",
        "width": width,
        "height": height,
        "count": int(count),
        "dtype": dtype,
        "nodata": nodata,
        "crs": src_profile.get("crs"),
        "transform": src_profile.get("transform"),
        "bigtiff": "IF_SAFER",
    }
    predictor = _default_predictor(dtype)
    if cog:
        # A fast, compact scratch file; the COG driver re-tiles and recompresses it.
        profile.update(tiled=True, blockxsize=512, blockysize=512, compress="deflate", zlevel=1)
        if predictor:
            profile["predictor"] = predictor
        return profile

    cog_only = sorted(set(creation_options) & COG_ONLY_OPTIONS)
    if cog_only:
        raise ConfigError(
            f"Creation option {cog_only[0]} applies only to COG output; add --cog or drop it."
        )
    if width >= _DEFAULT_BLOCK and height >= _DEFAULT_BLOCK:
        profile.update(tiled=True, blockxsize=_DEFAULT_BLOCK, blockysize=_DEFAULT_BLOCK)
    user = {k.upper(): v for k, v in creation_options.items()}
    if "COMPRESS" not in user:
        profile["compress"] = "deflate"
        if predictor:
            profile["predictor"] = predictor
    if user.get("PREDICTOR") == "3" and not np.issubdtype(np.dtype(dtype), np.floating):
        raise ConfigError(
            f"--co PREDICTOR=3 (floating point) needs a float output, but it is {dtype}; "
            "use PREDICTOR=2."
        )
    if user.get("TILED", "YES") in {"NO", "FALSE", "OFF", "0"}:
        profile.pop("tiled", None)
        for key in ("blockxsize", "blockysize"):
            if key.upper() not in user:
                profile.pop(key, None)
    for key, value in user.items():
        profile[key.lower()] = value
    return profile


_COG_RENAMES = {"ZLEVEL": "LEVEL", "ZSTD_LEVEL": "LEVEL", "JPEG_QUALITY": "QUALITY",
                "WEBP_LEVEL": "QUALITY", "LERC_MAXZERROR": "MAX_Z_ERROR", "BLOCKXSIZE": "BLOCKSIZE"}
_COG_DROPPED = {"TILED", "BLOCKYSIZE", "INTERLEAVE", "PHOTOMETRIC", "SPARSE_OK", "NBITS",
                "GEOTIFF_VERSION"}
_COG_PREDICTOR = {"1": "NO", "2": "STANDARD", "3": "FLOATING_POINT"}


def cog_options(creation_options: Mapping[str, str]) -> dict[str, str]:
    """Translate GTiff-style ``--co`` options to the COG driver's names.

    Args:
        creation_options: Parsed ``--co`` options.

    Returns:
        Options for GDAL's COG driver (DEFLATE with a predictor unless COMPRESS is given).
    """
    options: dict[str, str] = {}
    for key, value in creation_options.items():
        key = key.upper()
        if key in _COG_DROPPED:
            logger.debug("creation option %s has no COG equivalent; ignored", key)
            continue
        if key == "PREDICTOR":
            value = _COG_PREDICTOR.get(value, value)
        options[_COG_RENAMES.get(key, key)] = value
    if "COMPRESS" not in options:
        options["COMPRESS"] = "DEFLATE"
        options.setdefault("PREDICTOR", "YES")
    options.setdefault("BIGTIFF", "IF_SAFER")
    return options


def finalize_cog(
    tmp_path: str | os.PathLike[str],
    final_path: str | os.PathLike[str],
    creation_options: Mapping[str, str],
) -> None:
    """Convert a finished GTiff into a Cloud Optimized GeoTIFF.

    ``final_path`` is written directly; :class:`AtomicRasterWriter` points it at a second
    temporary file and moves that into place.

    Args:
        tmp_path: The GTiff to convert (left in place).
        final_path: Where the COG goes.
        creation_options: Parsed ``--co`` options; see :func:`cog_options`.

    Raises:
        OutputError: If the disk fills up.
        rasterio.errors.RasterioError: If GDAL cannot write the COG for another reason.
    """
    options = cog_options(creation_options)
    try:
        rasterio.shutil.copy(os.fspath(tmp_path), os.fspath(final_path), driver="COG", **options)
    except Exception as err:
        if _is_disk_full(err):
            raise OutputError(_disk_full_message(final_path)) from err
        raise


# --------------------------------------------------------------------------------------------
# Atomic writes


def _is_disk_full(err: BaseException | None) -> bool:
    """Tell whether an error (or one it was raised from) means the disk is full."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(err).lower()
        if "no space left" in text or "free disk space" in text or "disk full" in text:
            return True
        err = err.__cause__ or err.__context__
    return False


def _disk_full_message(path: str | os.PathLike[str]) -> str:
    return (
        f"No space left on device while writing {os.fspath(path)}; free space or write "
        "elsewhere. No file was written."
    )


def _host_tag() -> str:
    """Six hex digits naming this machine (partial files on shared disks name their writer)."""
    return hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:6]


def _partial_path(final: Path, suffix: str) -> Path:
    """``.<name>.geonp-partial-<host>-<pid>-<random><suffix>`` beside ``final``."""
    owner = f"{_host_tag()}-{os.getpid()}"
    return final.with_name(f".{final.name}{_PARTIAL_TAG}{owner}-{secrets.token_hex(6)}{suffix}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    except OSError:
        return True
    return True


def remove_stale_partials(final: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files that killed runs left for ``final``.

    Only files written by a process of this machine that no longer runs are removed, so a
    run that is writing the same output right now (or one on another machine sharing the
    disk) keeps its file.

    Args:
        final: The output path whose ``.<name>.geonp-partial-*`` files to look for.

    Returns:
        The paths removed.
    """
    path = Path(os.fspath(final)).expanduser().absolute()
    if not path.parent.is_dir():
        return []
    removed = []
    host = _host_tag()
    for tmp in path.parent.glob(f".{glob.escape(path.name)}{_PARTIAL_TAG}*"):
        rest = tmp.name[len(f".{path.name}{_PARTIAL_TAG}"):]
        parts = rest.split("-")
        if len(parts) < 3 or parts[0] != host or not parts[1].isdigit():
            continue
        if _pid_alive(int(parts[1])):
            continue
        _unlink_quietly(tmp)
        if not tmp.exists():
            logger.info("removed %s, left by an interrupted run", tmp)
            removed.append(tmp)
    return removed


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Make a rename durable; best effort (not every platform can open directories)."""
    try:
        _fsync_path(path)
    except OSError:
        pass


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as err:
        logger.warning("could not remove temporary file %s: %s", path, err)


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
        raise _verify_failed(path, err) from err


def _free_bytes(directory: Path) -> int | None:
    try:
        st = os.statvfs(directory)
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def _verify_failed(path: str | os.PathLike[str], err: BaseException) -> OutputError:
    """The error for a written file that does not read back (most often a full disk)."""
    return _write_failed(path, err, what="the file could not be read back")


def _is_gdal_error(err: BaseException) -> bool:
    """Tell whether an exception is rasterio's or GDAL's own (``RasterioIOError``, ``CPLE_*``)."""
    return type(err).__module__.startswith("rasterio")


def _write_failed(path: str | os.PathLike[str], err: BaseException, *, what: str = "") -> OutputError:
    """One-line error for a failed write; a full disk (or nearly full) is named as such.

    GDAL often reports a full disk only indirectly ("IO error writing tag data", or a file
    that will not open afterwards), so little free space left counts as a full disk too.
    """
    free = _free_bytes(Path(os.fspath(path)).parent)
    if _is_disk_full(err) or (free is not None and free < 4 * 2**20):
        return OutputError(_disk_full_message(path))
    text = " ".join(str(err).split()) or type(err).__name__
    return OutputError(
        f"Writing {os.fspath(path)} failed: {what + ' ' if what else ''}({text}); check the disk "
        "and the path, and run again. No file was written."
    )


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


#: The AtomicRasterWriters open in each thread, outermost first (nested writers commit together).
_OPEN_WRITERS = threading.local()


def _open_writers() -> list[AtomicRasterWriter]:
    stack = getattr(_OPEN_WRITERS, "stack", None)
    if stack is None:
        stack = _OPEN_WRITERS.stack = []
    return stack


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

    Writers nested in one thread form one transaction: an inner writer that finishes while an
    outer one is still open keeps its finished temporary file until the outer one finishes,
    then both are moved into place (inner ones first); if the outer one fails, neither
    appears. So a filled raster and its std raster appear together or not at all.

    Example:
        >>> with AtomicRasterWriter("filled.tif", profile, overwrite=False) as dst, \
        ...         AtomicRasterWriter("filled_std.tif", std_profile, overwrite=False) as dstd:
        ...     dst.write(data)
        ...     dstd.write(std)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        profile: Mapping[str, Any],
        *,
        overwrite: bool,
        cog: bool = False,
        creation_options: Mapping[str, str] | None = None,
    ) -> None:
        """Prepare the writer (nothing is created until the context is entered).

        Args:
            path: Final output path.
            profile: rasterio profile (see :func:`output_profile`).
            overwrite: Whether an existing file at ``path`` may be replaced.
            cog: Convert to a Cloud Optimized GeoTIFF before moving into place.
            creation_options: Parsed ``--co`` options for the COG conversion (only with
                ``cog=True``).
        """
        self.path = Path(os.fspath(path)).expanduser().absolute()
        self.profile = dict(profile)
        self.overwrite = overwrite
        self.cog = cog
        self.creation_options = dict(creation_options or {})
        self.temp_path: Path | None = None
        self._dst: DatasetWriter | None = None
        self._extra_temps: list[Path] = []
        self._ready: Path | None = None
        self._pending: list[AtomicRasterWriter] = []

    def __enter__(self) -> DatasetWriter:
        """Create the temporary file and return its open writer."""
        if not self.overwrite and self.path.exists():
            raise OutputError(f"{self.path} already exists; pass --overwrite to replace it.")
        if not self.path.parent.is_dir():
            raise OutputError(
                f"Output directory {self.path.parent} does not exist; create it first."
            )
        remove_stale_partials(self.path)
        self.temp_path = _partial_path(self.path, ".tif")
        try:
            self._dst = rasterio.open(self.temp_path, "w", **self.profile)
        except Exception as err:
            self._cleanup()
            if _is_disk_full(err):
                raise OutputError(_disk_full_message(self.path)) from err
            raise
        _open_writers().append(self)
        return self._dst

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        """Commit the file (with the nested writers' files) on success; delete them on failure."""
        stack = _open_writers()
        if self in stack:
            stack.remove(self)
        outer = stack[-1] if stack else None
        dst, self._dst = self._dst, None
        if exc is not None:
            if dst is not None:
                try:
                    dst.close()
                except Exception as close_err:  # the original error matters more
                    logger.debug("closing %s after an error failed: %s", self.temp_path, close_err)
            self._cleanup()
            if _is_disk_full(exc):
                raise OutputError(_disk_full_message(self.path)) from exc
            if _is_gdal_error(exc) and self.temp_path is not None and self.temp_path.name in str(exc):
                raise _write_failed(self.path, exc) from exc  # GDAL failed writing this file
            return False
        try:
            if dst is not None:
                dst.close()
            self._prepare()
            if outer is not None:
                outer._pending.append(self)  # committed (or deleted) with the outer writer
                return False
            self._commit_all()
        except BaseException as err:
            self._cleanup()
            if isinstance(err, OutputError) or not isinstance(err, Exception):
                raise
            raise _write_failed(self.path, err) from err
        return False

    def _prepare(self) -> None:
        """Close-time work short of the rename: COG conversion, read-back check, fsync."""
        assert self.temp_path is not None, "AtomicRasterWriter used outside a with block"
        ready = self.temp_path
        if self.cog:
            cog_path = _partial_path(self.path, ".tif")
            self._extra_temps.append(cog_path)
            finalize_cog(self.temp_path, cog_path, self.creation_options)
            _unlink_quietly(self.temp_path)
            _unlink_quietly(_aux_path(self.temp_path))
            ready = cog_path
        verify_raster_file(ready, self.profile)
        _fsync_path(ready)
        self._ready = ready

    def _writers(self) -> list[AtomicRasterWriter]:
        """This writer's nested writers (depth first), then itself: the commit order."""
        out: list[AtomicRasterWriter] = []
        for inner in self._pending:
            out.extend(inner._writers())
        out.append(self)
        return out

    def _commit_all(self) -> None:
        writers = self._writers()
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
                    _unlink_quietly(w.path)
            raise
        for parent in {w.path.parent for w in writers}:
            _fsync_dir(parent)

    def _move_into_place(self) -> None:
        assert self._ready is not None, "AtomicRasterWriter committed before it was prepared"
        _commit(self._ready, self.path, overwrite=self.overwrite)
        aux = _aux_path(self._ready)
        final_aux = _aux_path(self.path)
        if aux.exists():
            os.replace(aux, final_aux)
        elif final_aux.exists():
            # Left by the file just replaced: it would now describe the wrong raster.
            _unlink_quietly(final_aux)

    def _cleanup(self) -> None:
        for inner in self._pending:
            inner._cleanup()
        self._pending = []
        for path in [self.temp_path, *self._extra_temps]:
            if path is not None:
                _unlink_quietly(path)
                _unlink_quietly(_aux_path(path))


def _aux_path(path: Path) -> Path:
    return path.with_name(path.name + ".aux.xml")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write bytes to a file atomically (temporary file in the same directory, then replace).

    Args:
        path: Final path; an existing file is replaced.
        data: The content.

    Raises:
        OutputError: If the disk is full (no file is left behind).
    """
    final = Path(os.fspath(path)).expanduser().absolute()
    tmp = _partial_path(final, ".tmp")
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException as err:
        _unlink_quietly(tmp)
        if _is_disk_full(err):
            raise OutputError(_disk_full_message(final)) from err
        raise
    _fsync_dir(final.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 text to a file atomically (see :func:`atomic_write_bytes`).

    Args:
        path: Final path; an existing file is replaced.
        text: The content.

    Raises:
        OutputError: If the disk is full (no file is left behind).
    """
    atomic_write_bytes(path, text.encode("utf-8"))


# --------------------------------------------------------------------------------------------
# Metadata

#: Band tags that describe the old pixel values and would be wrong after filling.
_STALE_TAG_PREFIXES = ("STATISTICS_",)
#: Colour interpretations not copied: alpha would hide the filled pixels, palette needs a
#: colour table that a filled band no longer matches.
_SKIPPED_COLORINTERP = frozenset({ColorInterp.alpha, ColorInterp.palette})


def copy_metadata(src: DatasetReader, dst: DatasetWriter, *, bands: Sequence[int]) -> None:
    """Copy descriptive metadata from the input to an output of the selected bands.

    Copies dataset tags, ground control points and RPCs (a raster georeferenced by GCPs has
    no CRS or transform of its own), and per band: description, tags (except
    ``STATISTICS_*``, which the fill makes stale), scale, offset, unit and colour
    interpretation (except alpha and palette). Output band ``i`` (1-based) receives the
    metadata of source band ``bands[i-1]``. A source without any georeferencing is logged as
    a warning: geonp fills it in pixel units, and the output has none either.

    Args:
        src: The open input.
        dst: The open output (mode "w"), with ``len(bands)`` bands.
        bands: 1-based source band indexes, in output order.
    """
    dst.update_tags(**src.tags())
    gcps, gcp_crs = src.gcps
    if gcps:
        dst.gcps = (gcps, gcp_crs)
    if src.rpcs is not None:
        dst.rpcs = src.rpcs
    if src.crs is None and not gcps and src.rpcs is None:
        logger.warning(
            "%s has no CRS; it is filled in pixel units and the output has no CRS either "
            "(assign one with gdal_edit.py -a_srs EPSG:<code>)", src.name
        )
    for out_band, band in enumerate(bands, start=1):
        description = src.descriptions[band - 1]
        if description:
            dst.set_band_description(out_band, description)
        tags = {
            k: v for k, v in src.tags(band).items() if not k.startswith(_STALE_TAG_PREFIXES)
        }
        if tags:
            dst.update_tags(out_band, **tags)
    dst.scales = tuple(src.scales[b - 1] for b in bands)
    dst.offsets = tuple(src.offsets[b - 1] for b in bands)
    units = tuple(src.units[b - 1] or "" for b in bands)
    if any(units):
        dst.units = units
    interp = [src.colorinterp[b - 1] for b in bands]
    if not any(ci in _SKIPPED_COLORINTERP for ci in interp) and interp != list(dst.colorinterp):
        try:
            dst.colorinterp = interp
        except (rasterio.errors.RasterioError, ValueError) as err:
            logger.debug("colour interpretation %s not copied: %s", interp, err)
