"""Check output paths before any work: never the input, never a directory, never a silent overwrite."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from geonp.errors import OutputError

__all__ = ["check_output_path"]


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
