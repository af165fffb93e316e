"""Check output paths before any work: never the input, never a directory, never a silent overwrite.

Also choose the std raster's default path (:func:`default_uncertainty_path`), refuse a std path
that is an input (:func:`check_std_path`), and tell a std raster that an interrupted fill left
behind (:func:`unpaired_output`).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from geonp.errors import ConfigError, OutputError

__all__ = [
    "RUN_ID_TAG",
    "check_output_path",
    "check_quicklook_path",
    "check_std_path",
    "default_uncertainty_path",
    "unpaired_output",
]

#: Dataset tag naming the fill run that wrote a filled raster and its std raster (both carry it).
RUN_ID_TAG = "GEONP_RUN_ID"


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
            f"Output directory {parent} does not exist; create it first "
            f"(mkdir -p {shlex.quote(str(parent))})."
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


def default_uncertainty_path(
    output: str | os.PathLike[str], format: str | None = None
) -> Path:
    """The std raster's path when none is given: ``<OUTPUT stem>_std`` beside OUTPUT.

    It keeps OUTPUT's extension (and so its format) when that format can hold the float32 std
    (GeoTIFF, netCDF, ERDAS .img...); otherwise (PNG, JPEG, GIF, WebP...) the std raster is a
    GeoTIFF, ``<OUTPUT stem>_std.tif``.

    Args:
        output: The filled raster's path.
        format: OUTPUT's GDAL driver (``-f/--format``), or None to go by its extension.

    Returns:
        The std raster's path.

    Raises:
        ConfigError: If OUTPUT's format cannot be told from its extension or ``format``.
    """
    from geonp.io.formats import holds_float32, output_driver

    out = Path(os.fspath(output))
    keep = out.suffix and holds_float32(output_driver(out, format))
    return out.with_name(f"{out.stem}_std{out.suffix if keep else '.tif'}")


def check_std_path(
    std: str | os.PathLike[str],
    *,
    output: str | os.PathLike[str],
    inputs: Sequence[str | os.PathLike[str]],
    overwrite: bool,
    given: bool,
) -> None:
    """Refuse a std raster path that is an input or a leftover of an interrupted fill.

    Checked before :func:`check_output_path`, so that ``geonp fill a_std.tif a.tif`` (whose
    default std path is the input) says so, and not that the input looks like a leftover.

    Args:
        std: The std raster's path.
        output: The filled raster's path.
        inputs: Paths this run reads.
        overwrite: Whether existing outputs may be replaced (a leftover is then replaced).
        given: Whether the user gave ``std`` (``--uncertainty``) or it is the default path.

    Raises:
        OutputError: If ``std`` is an input, or is an unpaired std raster and not ``overwrite``.
    """
    path = Path(os.fspath(std)).expanduser()
    for inp in inputs:
        if _same_file(path, Path(os.fspath(inp)).expanduser()):
            what = (
                f"--uncertainty {path}"
                if given
                else f"The std raster's default path {path} (<OUTPUT stem>_std)"
            )
            raise OutputError(
                f"{what} is the input {inp}: writing the std raster there would overwrite the "
                "input; choose another std path with --uncertainty PATH (geonp never modifies "
                "its input)."
            )
    leftover = None if overwrite else unpaired_output(output, std)
    if leftover is not None:
        raise OutputError(
            f"{std} already exists, left by an interrupted run ({leftover}); pass --overwrite "
            "to replace it."
        )


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def unpaired_output(output: str | os.PathLike[str], std: str | os.PathLike[str]) -> str | None:
    """Why the std raster at ``std`` is a leftover of an interrupted fill, or None if it is not.

    A fill moves its std raster into place first and its filled raster last
    (:class:`geonp.io.atomic.AtomicGroup`), and tags both with one :data:`RUN_ID_TAG`. A run
    killed between the two renames leaves the std raster without the filled raster, or (with
    ``--overwrite``) beside the filled raster of an earlier run, whose run id differs. Rasters
    without the tag (written by an older geonp, or by other software) are not judged.

    Args:
        output: The filled raster's path.
        std: The std raster's path.

    Returns:
        What gives the leftover away (for an error message), or None.
    """
    out, std_path = Path(os.fspath(output)), Path(os.fspath(std))
    if not std_path.is_file():
        return None
    if not out.exists():
        return f"{out.name} is missing"
    ids = [_run_id(p) for p in (out, std_path)]
    if None not in ids and ids[0] != ids[1]:
        return f"its {RUN_ID_TAG} {ids[1]} is not {out.name}'s {ids[0]}"
    return None


def _run_id(path: Path) -> str | None:
    """The raster's :data:`RUN_ID_TAG`, or None when it has none or cannot be read."""
    import rasterio
    import rasterio.errors

    try:
        with rasterio.open(path) as src:
            return src.tags().get(RUN_ID_TAG)
    except (rasterio.errors.RasterioError, OSError):
        return None


def check_quicklook_path(png: str | os.PathLike[str]) -> None:
    """Refuse a quicklook path that does not end in ``.png`` (the file is a PNG whatever its name).

    Raises:
        ConfigError: If the extension is not ``.png``.
    """
    if Path(os.fspath(png)).suffix.lower() != ".png":
        raise ConfigError(f"--quicklook writes a PNG; give a path ending in .png, not {os.fspath(png)}.")
