"""The arrays of one block, as every fill driver hands them to :func:`geonp.filling.block.fill_block`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from geonp.tasks.tiling import Region

if TYPE_CHECKING:
    from geonp.data.tasks import ReferenceView

__all__ = ["BlockInput"]


@dataclass(frozen=True, eq=False)
class BlockInput:
    """The arrays of one block: its values and observed flags with the halo, and where it sits.

    The values (the block's and its references') are in whatever units the holder states: the
    bands' own from the fill drivers, normalised for the predictor
    (:meth:`~geonp.filling.predict.Predictor.predict`, :func:`~geonp.filling.tile_tasks.block_tasks`).

    Attributes:
        values: ``[bands, h, w]`` float64 values of the block with its halo (anything where not
            observed).
        observed: bool ``[bands, h, w]``, True where a value is observed.
        region: the block's own pixels within the arrays (the rest is context only).
        origin: the arrays' ``(row, col)`` offset in the raster (keeps tiles on the raster's grid).
        fillable: bool ``[h, w]``: where gaps may be filled (the data footprint); None = all.
        references: other dates on the same arrays (multi-date models), ``[bands, h, w]`` in the
            same units as ``values``.
        search_limit: the largest context search radius the halo holds (None: as far as the plan
            searches); a tile that needs more raises
            :class:`~geonp.tasks.context.HaloTooSmall`.
    """

    values: np.ndarray
    observed: np.ndarray
    region: Region
    origin: tuple[int, int] = (0, 0)
    fillable: np.ndarray | None = None
    references: tuple[ReferenceView, ...] = ()
    search_limit: int | None = None

    @property
    def core(self) -> tuple[slice, slice, slice]:
        """Index of the region in ``[bands, h, w]`` arrays."""
        return (slice(None), *self.region.slices)
