"""Exceptions raised by geonp.

Every message says what went wrong, why, and what to do about it, with the offending values.
The CLI prints ``str(err)`` as a one-line message and exits non-zero.
"""

from __future__ import annotations

from collections.abc import Iterable


class GeonpError(Exception):
    """Root of all geonp errors."""


class ConfigError(GeonpError, ValueError):
    """An option or configuration value is invalid."""


class UnknownNameError(ConfigError):
    """A name that is not in a registry (an attention kernel, a model family, a gap or QA kind).

    The one message of every registry: ``"{what}={name!r} is not one of [valid names]"``, then an
    optional hint.

    Args:
        what: the option or keyword that took the name (``"attention"``, ``"qa_kind"``).
        name: the name given.
        valid: the registry's names, in its order.
        hint: what else to do, appended after ``"; "``.
    """

    def __init__(self, what: str, name: object, valid: Iterable[str], hint: str = "") -> None:
        """Keep the fields and build the message from them."""
        self.what, self.name, self.valid, self.hint = what, name, tuple(valid), hint
        super().__init__(f"{what}={name!r} is not one of {list(self.valid)}" + (f"; {hint}" if hint else ""))

    def __reduce__(self) -> tuple[type, tuple[str, object, tuple[str, ...], str]]:
        """Rebuild from the fields, so the error crosses process pools intact."""
        return type(self), (self.what, self.name, self.valid, self.hint)

    @classmethod
    def check(cls, what: str, name: object, valid: Iterable[str], hint: str = "") -> None:
        """Raise unless ``name`` is one of ``valid`` (a registry, or its names)."""
        names = tuple(valid)
        if name not in names:
            raise cls(what, name, names, hint)


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
