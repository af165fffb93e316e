"""Check output paths before any work: never the input, never a directory, never a silent overwrite.

Also tell a std raster that an interrupted fill left behind (:func:`unpaired_output`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from geonp.errors import OutputError

__all__ = ["RUN_ID_TAG", "check_output_path", "unpaired_output"]

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
