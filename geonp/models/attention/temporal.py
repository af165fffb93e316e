"""A space-time kernel bias: the spatial RBF bias plus an RBF network on the date difference.

Multi-date models (issue: other dates as references) see context points of other dates. Their
coordinates carry a third entry, the date offset ``t`` in days from the date being filled (0 for
the target date and for every query). The bias of the TNP-KR paper (Jenson et al.) §3.2 is a sum of kernels over any
metadata, so the time kernel sits beside the space kernel::

    K(s_q, s_k) = K_space(|x_q - x_k|) + K_time(|t_q - t_k|)

each an RBF network with its own weights per head. Both depend on differences only, so the model
stays invariant to a shift of all positions and of all dates.

Dates are whole days, so ``|Δt|`` takes few integer values: the time bias is evaluated once on
the table ``0..max |Δt|`` and gathered per tile, like the spatial grid path; where the spatial
grid path runs too, both are read from one joint table (:func:`_joint_tiles`). When no point of a
batch has a date offset (a single-date fill), the time bias is a constant per head, which softmax
ignores; it is then skipped, so a multi-date model fills single dates at the spatial model's cost.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from geonp.models.attention.bias import (
    BiasTiles,
    DistanceCache,
    RBFNetworkBias,
    _gather,
    _versions,
    cached,
)
from geonp.models.attention.gather import gather_table

# Largest |Δt| (days) of the table path; beyond it the direct path is used.
_MAX_DAYS = 100_000
# Largest joint space-time table (entries per head, 8 MB): beyond it the two tables are read apart.
_MAX_JOINT = 2**21
# Time and joint tables kept between inference passes, at most (then all are dropped).
_KEPT = 16


class _Kept:
    """Tables kept between inference passes, keyed by what they are built from.

    Keys hold the storage, length and parameter versions behind a table, so a pass reads the
    tables of the previous one; at most :data:`_KEPT` are kept, then all are dropped.
    """

    def __init__(self) -> None:
        self.tables: dict[tuple, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.tables)

    def get(self, key: tuple, build: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The table kept under ``key``, else ``build()`` (without gradients), kept."""
        table = self.tables.get(key)
        if table is None:
            if len(self.tables) >= _KEPT:
                self.tables.clear()
            with torch.no_grad():
                table = self.tables[key] = build()
        return table


class SpaceTimeBias(nn.Module):
    """Spatial RBF bias on coordinates ``[..., :-1]`` plus a temporal one on ``[..., -1]`` (days).

    Args:
        num_heads: attention heads.
        num_basis: basis functions of each RBF network.
        length_scale: typical distance (pixels), initialises the spatial network.
        time_length_scale: typical date difference (days), initialises the temporal network.
    """

    def __init__(self, num_heads: int, *, num_basis: int = 5, length_scale: float = 4.0,
                 time_length_scale: float = 32.0) -> None:
        """Build the module; the arguments are described in the class docstring."""
        super().__init__()
        self.space = RBFNetworkBias(num_heads, num_basis=num_basis, length_scale=length_scale)
        self.time = RBFNetworkBias(num_heads, num_basis=num_basis, length_scale=time_length_scale,
                                   grid_fast_path=False)
        with torch.no_grad():  # starts as the spatial bias alone: a spatial model's weights carry over
            self.time.a.zero_()
        self._days_kept = _Kept()  # inference: time tables by length and version
        self._joint_kept = _Kept()  # and the joint tables built from them

    def _day_table(self, params: tuple[torch.Tensor, ...], max_dt: int, like: torch.Tensor, keep: bool) -> torch.Tensor:
        """The time bias at ``|Δt| = 0..max_dt``, ``[H, max_dt + 1]``.

        With ``keep`` (inference) the same tensor from pass to pass until a parameter changes, so
        that the joint table built from it is kept too (:func:`_joint_tiles`; rebuilt per layer
        and pass, it was a tenth of a 61x61 multi-date fill).
        """
        days = torch.arange(max_dt + 1, device=like.device, dtype=like.dtype)
        if not keep:
            return RBFNetworkBias.evaluate(params, days)
        return self._days_kept.get((like.device, like.dtype, max_dt, *_versions(params)),
                                   lambda: RBFNetworkBias.evaluate(params, days))

    def tiles(self, q_pos: torch.Tensor, k_pos: torch.Tensor, key_valid: torch.Tensor | None = None,
              *, cache: DistanceCache | None = None) -> BiasTiles:
        """The bias between ``q_pos [B, Nq, P+1]`` and ``k_pos [B, Nk, P+1]`` (last entry: days)."""
        space = self.space.tiles(q_pos[..., :-1], k_pos[..., :-1], key_valid, cache=cache)
        qt, kt = q_pos[..., -1], k_pos[..., -1]
        max_dt = cached(cache, ("max_dt", qt, kt), lambda: _max_abs_dt(qt, kt))
        if max_dt == 0:
            return space
        params = (self.time.a, self.time.b, self.time.c)
        if max_dt is not None and max_dt <= _MAX_DAYS:
            keep = cache is not None and not (torch.is_grad_enabled() and self.time.a.requires_grad)
            time_tensors: tuple[torch.Tensor, ...] = (self._day_table(params, max_dt, q_pos, keep),)  # [H, T]

            def day_index(qs: slice, ks: slice) -> torch.Tensor:
                return cached(cache, ("days", qt, kt, qs.start, qs.stop, ks.start, ks.stop),
                              lambda: (qt[:, qs, None] - kt[:, None, ks]).abs().round().int(), tile=True)

            if space.index is not None and space.tensors[0].shape[1] * (max_dt + 1) <= _MAX_JOINT:
                kept = None
                if keep:  # by the tables' storage and the versions of every parameter they come from
                    version = _versions((self.space.a, self.space.b, self.space.c, *params))
                    kept = (self._joint_kept, version)
                return _joint_tiles(space, time_tensors[0], day_index, cache, kept)

            def time_tile(tensors: tuple[torch.Tensor, ...], qs: slice, ks: slice) -> torch.Tensor:
                return _gather(tensors[0], day_index(qs, ks))
        else:
            time_tensors = params

            def time_tile(tensors: tuple[torch.Tensor, ...], qs: slice, ks: slice) -> torch.Tensor:
                dt = (qt[:, qs, None] - kt[:, None, ks]).abs()
                return RBFNetworkBias.evaluate(tensors, dt).permute(1, 0, 2, 3)

        n = len(space.tensors)

        def both(tensors: tuple[torch.Tensor, ...], qs: slice, ks: slice) -> torch.Tensor:
            return space.fn(tensors[:n], qs, ks) + time_tile(tensors[n:], qs, ks)

        return BiasTiles(space.tensors + time_tensors, both, masks_keys=space.masks_keys)


def _joint_tiles(space: BiasTiles, time_table: torch.Tensor, day_index: Callable[[slice, slice], torch.Tensor],
                 cache: DistanceCache | None, kept: tuple[_Kept, tuple] | None = None) -> BiasTiles:
    """Space and time biases read from one joint table: one gather per pair instead of two and a sum.

    Entry ``s * T + t`` of the joint table ``[H, S * T]`` is the space table's entry ``s`` plus the
    time table's entry ``t``: the same float sum a pair's two lookups made, so the tiles are the
    same bit for bit (-inf at a masked key too), at the cost of a table ``T`` times longer.
    ``kept`` (inference): the joint tables kept between passes, and the versions of the
    parameters behind the two tables (both are themselves kept until a parameter changes).
    """
    n_days, space_index = time_table.shape[1], space.index
    if space_index is None:
        raise ValueError("a joint space-time table needs the spatial grid path's index")

    def joint_table(tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
        space_table, days_table = tensors
        return (space_table[:, :, None] + days_table[:, None, :]).reshape(space_table.shape[0], -1)

    def joint(tensors: tuple[torch.Tensor, ...], qs: slice, ks: slice) -> torch.Tensor:
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        if needs_grad or cache is None:
            table = joint_table(tensors)
        elif kept is not None:
            tables, version = kept
            key = (*((t.data_ptr(), tuple(t.shape)) for t in tensors), version)
            table = tables.get(key, lambda: joint_table(tensors))
        else:
            table = cached(cache, ("joint", *tensors), lambda: joint_table(tensors))
        return gather_table(table, space_index(qs, ks) * n_days + day_index(qs, ks))

    return BiasTiles((space.tensors[0], time_table), joint, masks_keys=space.masks_keys)


def _max_abs_dt(qt: torch.Tensor, kt: torch.Tensor) -> int | None:
    """Largest ``|Δt|`` when all dates are whole days (0 when none differs), else None (a host sync)."""
    if qt.numel() == 0 or kt.numel() == 0:
        return 0
    lo = torch.minimum(qt.min(), kt.min())
    hi = torch.maximum(qt.max(), kt.max())
    whole = torch.equal(qt, qt.round()) and torch.equal(kt, kt.round())
    return round(float(hi - lo)) if whole else None
