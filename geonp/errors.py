"""Exceptions raised by geonp.

Every message says what went wrong, why, and what to do about it, with the offending values.
The CLI prints ``str(err)`` as a one-line message and exits non-zero.
"""

from __future__ import annotations


class GeonpError(Exception):
    """Root of all geonp errors."""


class ConfigError(GeonpError, ValueError):
    """An option or configuration value is invalid."""


class InputRasterError(GeonpError, ValueError):
    """An input raster (or mask) cannot be used."""


class MissingCRSError(InputRasterError):
    """An input raster has no coordinate reference system."""


class NoValidPixelsError(InputRasterError):
    """A raster has no observed pixels to learn from or condition on."""


class OutputError(GeonpError):
    """An output cannot be written (exists, same as input, directory missing, disk full)."""


class CheckpointError(GeonpError):
    """A model file is missing, corrupt, or does not match this geonp."""


class MissingDependencyError(GeonpError, ImportError):
    """An optional dependency is not installed."""


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) folded into one space."""
    return " ".join(str(text).split())
