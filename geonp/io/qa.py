"""Decode quality bands and generic masks into gaps.

A quality band says, per pixel, what the processor found there: cloud, cloud shadow, cirrus,
snow, water, or no data at all. geonp turns the classes a user counts as gaps into a boolean
gap mask, on the quality band's own grid (resampling comes after decoding: the maximum of two
bit fields is not a class).

Kinds (``--qa-kind``) and their classes; the defaults are marked *:

- ``landsat-c2``: Landsat Collection 2 ``QA_PIXEL`` bits: fill* (bit 0), dilated_cloud*
  (1), cirrus* (2), cloud* (3), shadow* (4), snow (5), water (7).
- ``sentinel2-scl``: Sentinel-2 L2A scene classification values: fill* (0), saturated* (1),
  dark (2), shadow* (3), water (6), unclassified (7), cloud_medium* (8), cloud_high* (9),
  cirrus* (10), snow (11); ``cloud`` stands for cloud_medium and cloud_high.
- ``fmask``: Fmask values: shadow* (2), snow (3), cloud* (4), fill* (255); clear land (0)
  and water (1) are never gaps unless named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from geonp.errors import ConfigError, UnknownNameError

__all__ = ["QA_KINDS", "QAKind", "decode_gaps", "parse_int_list", "qa_kind", "resolve_classes"]

@dataclass(frozen=True)
class QAKind:
    """How one kind of quality band says which pixels are what.

    Attributes:
        classes: class name -> ``("bits", bit numbers)`` (any of them set means the class) or
            ``("values", values)`` (any of them means the class).
        defaults: the classes counted as gaps when none are named.
    """

    classes: Mapping[str, tuple[str, tuple[int, ...]]]
    defaults: tuple[str, ...]


#: The QA kinds (``--qa-kind``), by name; :data:`geonp.config.QA_KINDS` lists the same names.
QA_KINDS: dict[str, QAKind] = {
    "landsat-c2": QAKind(
        classes={
            "fill": ("bits", (0,)),
            "dilated_cloud": ("bits", (1,)),
            "cirrus": ("bits", (2,)),
            "cloud": ("bits", (3,)),
            "shadow": ("bits", (4,)),
            "snow": ("bits", (5,)),
            "water": ("bits", (7,)),
        },
        defaults=("fill", "dilated_cloud", "cirrus", "cloud", "shadow"),
    ),
    "sentinel2-scl": QAKind(
        classes={
            "fill": ("values", (0,)),
            "saturated": ("values", (1,)),
            "dark": ("values", (2,)),
            "shadow": ("values", (3,)),
            "water": ("values", (6,)),
            "unclassified": ("values", (7,)),
            "cloud_medium": ("values", (8,)),
            "cloud_high": ("values", (9,)),
            "cloud": ("values", (8, 9)),
            "cirrus": ("values", (10,)),
            "snow": ("values", (11,)),
        },
        defaults=("fill", "saturated", "shadow", "cloud", "cirrus"),
    ),
    "fmask": QAKind(
        classes={
            "shadow": ("values", (2,)),
            "snow": ("values", (3,)),
            "cloud": ("values", (4,)),
            "fill": ("values", (255,)),
        },
        defaults=("fill", "shadow", "cloud"),
    ),
}


def qa_kind(name: str) -> QAKind:
    """The QA kind called ``name``.

    Raises:
        UnknownNameError: ``name`` is not one of :data:`QA_KINDS` (the message lists them).
    """
    UnknownNameError.check("qa_kind", name, QA_KINDS)
    return QA_KINDS[name]


def resolve_classes(kind: str, classes: Iterable[str] | str | None) -> tuple[str, ...]:
    """Check a QA kind and the classes counted as gaps; None gives the kind's defaults.

    Args:
        kind: One of :data:`QA_KINDS`.
        classes: Class names (or one comma-separated string), or None.

    Returns:
        The class names, lower case, in the order given.

    Raises:
        ConfigError: If the kind or a class is unknown (the message lists the valid ones).
    """
    known = qa_kind(kind)
    if classes is None:
        return known.defaults
    if isinstance(classes, str):
        classes = classes.split(",")
    names = tuple(c.strip().lower().replace("-", "_") for c in classes if c.strip())
    if not names:
        raise ConfigError(
            f"--qa-classes is empty; name classes of {kind}: {', '.join(known.classes)}."
        )
    unknown = [n for n in names if n not in known.classes]
    if unknown:
        raise ConfigError(
            f"--qa-classes {unknown[0]!r} is not a class of {kind}; valid classes: "
            f"{', '.join(known.classes)} (default {','.join(known.defaults)})."
        )
    return names


def parse_int_list(
    text: str | Sequence[int] | None, *, option: str, low: int = 0, high: int | None = None
) -> tuple[int, ...] | None:
    """Parse ``"1,2,8"`` (or a sequence) into whole numbers for ``--mask-values``/``--mask-bits``.

    Args:
        text: The option's value, or None.
        option: The option's name for messages.
        low: Smallest allowed number.
        high: Largest allowed number, or None.

    Returns:
        The numbers, or None when ``text`` is None.

    Raises:
        ConfigError: If an item is not a whole number in range.
    """
    if text is None:
        return None
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for item in items:
        s = str(item).strip()
        try:
            value = int(s)
        except ValueError:
            raise ConfigError(
                f"{option} {s!r} is not a whole number; write e.g. {option} 1,2,8."
            ) from None
        if value < low or (high is not None and value > high):
            rng = f"{low}..{high}" if high is not None else f">= {low}"
            raise ConfigError(f"{option} {value} is out of range ({rng}).")
        out.append(value)
    if not out:
        raise ConfigError(f"{option} is empty; write e.g. {option} 1,2,8.")
    return tuple(out)


def _bits_set(values: np.ndarray, bits: Iterable[int]) -> np.ndarray:
    ints = np.where(np.isfinite(values), values, 0).astype(np.int64)
    flag = 0
    for bit in bits:
        flag |= 1 << int(bit)
    return (ints & flag) != 0


def decode_gaps(
    values: np.ndarray,
    *,
    kind: str | None = None,
    classes: Sequence[str] | None = None,
    mask_values: Sequence[int] | None = None,
    mask_bits: Sequence[int] | None = None,
) -> np.ndarray:
    """Turn quality or mask values into gaps (True = gap), on their own grid.

    Exactly one way of reading is used: a QA ``kind`` (with its ``classes``), a list of
    ``mask_values`` that mean a gap, or a list of ``mask_bits`` any of which set means a gap.

    Args:
        values: Mask or QA values (float64 as read; NaN is never a gap).
        kind: QA kind (see :data:`QA_KINDS`).
        classes: Classes of ``kind`` counted as gaps (default: the kind's defaults).
        mask_values: Values meaning a gap.
        mask_bits: Bit numbers (0 = least significant) meaning a gap.

    Returns:
        Boolean array shaped like ``values``.

    Raises:
        ConfigError: If no or more than one way is given, or classes are unknown.
    """
    given = [x is not None for x in (kind, mask_values, mask_bits)]
    if sum(given) != 1:
        raise ConfigError("give exactly one of --qa-kind, --mask-values and --mask-bits for a mask")
    finite = np.isfinite(values)
    if mask_values is not None:
        return finite & np.isin(values, np.asarray(mask_values, dtype=np.float64))
    if mask_bits is not None:
        return finite & _bits_set(values, mask_bits)
    assert kind is not None, "decode_gaps needs a kind here"
    gap = np.zeros(values.shape, dtype=bool)
    for name in resolve_classes(kind, classes):
        how, numbers = QA_KINDS[kind].classes[name]
        if how == "bits":
            gap |= finite & _bits_set(values, numbers)
        else:
            gap |= finite & np.isin(values, np.asarray(numbers, dtype=np.float64))
    return gap
