"""What a file fill did: :class:`FillReport`, which counts every missing pixel by what became of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FillReport"]


@dataclass
class FillReport:
    """What a fill did (or, for a dry run, would do).

    Attributes:
        output: filled raster path.
        uncertainty: std raster path.
        model: model name.
        gap_pixels: missing pixels over all bands.
        filled_pixels: gap pixels that received a prediction.
        tiles: tiles with gaps (estimated before the run).
        seconds: wall time.
        dry_run: True when nothing was written.
        plan: dry-run details (blocks, context sizes, memory and time estimates).
        timings: seconds per stage summed over blocks and processes (``read``, ``context``,
            ``model``, ``blend``, ``cast``, ``write``).
        workers: processes that filled blocks.
        outside_pixels: missing pixels outside the data footprint (left nodata; not in
            ``gap_pixels``).
        outside_evidence: why those are outside (``--footprint``, the QA band's fill class, a
            straight collar edge: :mod:`geonp.io.footprint`).
        beyond_pixels: gap pixels left nodata because they lie beyond ``max_distance``.
        hints: advice for the user (for example an untagged nodata value).

    Every missing pixel is counted once: :attr:`missing_pixels` = :attr:`filled_pixels` +
    :attr:`outside_pixels` + :attr:`beyond_pixels` + :attr:`no_context_pixels`.
    """

    output: Path
    uncertainty: Path
    model: str
    gap_pixels: int = 0
    filled_pixels: int = 0
    tiles: int = 0
    seconds: float = 0.0
    dry_run: bool = False
    plan: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    workers: int = 1
    outside_pixels: int = 0
    outside_evidence: str = "none"
    beyond_pixels: int = 0
    hints: list[str] = field(default_factory=list)

    @property
    def missing_pixels(self) -> int:
        """Every missing pixel of the filled bands: gaps inside the footprint and outside it."""
        return self.gap_pixels + self.outside_pixels

    @property
    def unfilled_pixels(self) -> int:
        """Gap pixels inside the footprint left as nodata (beyond ``max_distance`` or any context)."""
        return self.gap_pixels - self.filled_pixels

    @property
    def no_context_pixels(self) -> int:
        """Gap pixels inside the footprint and within ``max_distance`` that found no context."""
        return self.unfilled_pixels - self.beyond_pixels

    def count_tags(self) -> dict[str, str]:
        """The counts as output tags: what became of every missing pixel."""
        return {"GEONP_MISSING_PIXELS": str(self.missing_pixels), "GEONP_GAP_PIXELS": str(self.gap_pixels),
                "GEONP_FILLED_PIXELS": str(self.filled_pixels),
                "GEONP_OUTSIDE_FOOTPRINT_PIXELS": f"{self.outside_pixels} ({self.outside_evidence})",
                "GEONP_BEYOND_MAX_DISTANCE_PIXELS": str(self.beyond_pixels),
                "GEONP_NO_CONTEXT_PIXELS": str(self.no_context_pixels)}

    def left_unfilled(self) -> list[str]:
        """One phrase per reason some missing pixels were left nodata, with the option that fills them."""
        left = []
        if self.outside_pixels:
            left.append(f"{self.outside_pixels} outside the data footprint ({self.outside_evidence}; "
                        "--fill-outside fills them)")
        if self.beyond_pixels:
            left.append(f"{self.beyond_pixels} beyond --max-distance (a larger --max-distance fills them)")
        if self.no_context_pixels:
            left.append(f"{self.no_context_pixels} with no observed pixel within --search-radius (a larger "
                        "--search-radius fills them)")
        return left
