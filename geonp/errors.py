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


class NoValidPixelsError(InputRasterError):
    """A raster has no observed pixels to learn from or condition on."""


class OutputError(GeonpError):
    """An output cannot be written (exists, same as input, directory missing, disk full)."""


class CheckpointError(GeonpError):
    """A model file is missing, corrupt, or does not match this geonp."""


class MissingDependencyError(GeonpError, ImportError):
    """An optional dependency is not installed."""


def one_line(what: object, *, causes: bool = False) -> str:
    """Fold a message or an exception's text into one line (every run of whitespace to a space).

    The one rule for the one-line messages the CLI, batch reports and raster errors print.

    Args:
        what: A message, or an exception (its text; its type name when the text is empty).
        causes: For an exception, also append the errors it was raised from (``__cause__`` or
            ``__context__``, at most three texts in all, ``": "``-joined), skipping repeats and
            GDAL's "See previous exception" placeholders: GDAL's underlying reason often sits
            one level down.

    Returns:
        The one-line text.
    """
    if not isinstance(what, BaseException):
        return " ".join(str(what).split())
    if not causes:
        return " ".join(str(what).split()) or type(what).__name__
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = what
    while current is not None and id(current) not in seen and len(parts) < 3:
        seen.add(id(current))
        text = " ".join(str(current).split())
        if text and "See previous exception" not in text and not any(text in p for p in parts):
            parts.append(text)
        current = current.__cause__ or current.__context__
    return ": ".join(parts) or type(what).__name__
