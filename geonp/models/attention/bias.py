"""Kernel attention biases: functions of query and key coordinates added to attention logits.

Seed 002 §3.2/§4: ``softmax(q·k/√d + K(s_q, s_k))`` with ``K`` an RBF network of TISA form on the
Euclidean distance, ``K(d) = Σ_k a_k exp(-|b_k| (d - c_k)²)``, with its own ``(a, b, c)`` per head.

A bias is never materialised for all ``Nq × Nk`` pairs by the scan kernel: :meth:`tiles` returns a
:class:`BiasTiles`, a recipe that evaluates any ``(query slice, key slice)`` tile on demand.

On a pixel grid, squared distances between pixel centres are integers, take few distinct values, and
are the same in every tile. There the bias is evaluated once on the table of distinct squared
distances and *gathered* per tile: exact, and an order of magnitude cheaper on the CPU than
evaluating ~30 elementwise operations per pair, per head (measured on a 2-core CPU: the gather
is a single index lookup per pair, the direct path an exp and four products per basis).
Scattered (off-grid) coordinates use the direct path.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

# Largest squared-distance table the grid path builds (entries per head); beyond it the direct
# path is used. 4M entries x 4 heads x 4 bytes = 64 MB.
_MAX_TABLE = 4_000_000
# Most bytes of squared-distance tiles kept per forward pass (beyond it tiles are recomputed).
_MAX_CACHE_BYTES = 256 * 2**20


# Squared pixel distances of a tile are the same in every layer; a model's forward pass opens a
# cache so that each (positions, tile) pair is computed once rather than once per layer.
_SQ_CACHE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("geonp_sq_cache", default=None)


@contextlib.contextmanager
def shared_distances() -> Iterator[None]:
    """Within this context, grid squared distances are computed once per tile and reused."""
    token = _SQ_CACHE.set({})
    try:
        yield
    finally:
        _SQ_CACHE.reset(token)


def _grid_sq(
    qi: torch.Tensor, ki: torch.Tensor, key_valid: torch.Tensor | None, sentinel: int, qs: slice, ks: slice
) -> torch.Tensor:
    """Squared distances ``[B, Qc, Kc]`` (int64); invalid keys point at the ``sentinel`` entry.

    Every layer of a forward pass asks for the same tiles, so they are cached for the pass; the
    cache is bounded (oldest tiles dropped first), which keeps scan attention's linear memory on
    large contexts while query chunks, decoded one after the other through all layers, still hit.
    """
    cache = _SQ_CACHE.get()
    kv_ptr = None if key_valid is None else key_valid.data_ptr()
    key = (qi.data_ptr(), ki.data_ptr(), kv_ptr, sentinel, tuple(qi.shape), tuple(ki.shape),
           qs.start, qs.stop, ks.start, ks.stop)
    if cache is not None and key in cache:
        return cache[key]
    # per coordinate, not a sum over a trailing axis of 2: several times faster on the CPU
    dr = qi[:, qs, None, 0] - ki[:, None, ks, 0]
    dc = qi[:, qs, None, 1] - ki[:, None, ks, 1]
    sq = (dr * dr + dc * dc).long()  # [B, Qc, Kc]
    if key_valid is not None:
        sq = sq.masked_fill(~key_valid[:, None, ks], sentinel)
    if cache is not None:
        _remember(cache, key, sq)
    return sq


def _remember(cache: dict, key: tuple, sq: torch.Tensor) -> None:
    """Cache a tile of squared distances, dropping the oldest tiles beyond the byte budget."""
    size = sq.numel() * sq.element_size()
    if size > _MAX_CACHE_BYTES:
        return
    tiles = cache.setdefault("tiles", {})  # insertion-ordered: oldest first
    while tiles and cache.get("bytes", 0) + size > _MAX_CACHE_BYTES:
        old = next(iter(tiles))
        cache["bytes"] -= tiles.pop(old)
        del cache[old]
    tiles[key] = size
    cache[key] = sq
    cache["bytes"] = cache.get("bytes", 0) + size


def _gather(table: torch.Tensor, sq: torch.Tensor) -> torch.Tensor:
    """``table [H, T]`` at squared distances ``sq [B, Qc, Kc]``: the bias tile ``[B, H, Qc, Kc]``.

    Without gradients each head is one ``index_select`` into a contiguous ``[H, B, Qc, Kc]``
    buffer (a permuted view of which is returned), about 3x faster on the CPU than advanced
    indexing; with gradients (training) advanced indexing, whose backward autograd knows.
    """
    if torch.is_grad_enabled() and table.requires_grad:
        return table[:, sq].permute(1, 0, 2, 3)
    out = table.new_empty((table.shape[0], *sq.shape))
    flat = sq.reshape(-1)
    for h in range(table.shape[0]):
        torch.index_select(table[h], 0, flat, out=out[h].view(-1))
    return out.permute(1, 0, 2, 3)


@dataclass
class BiasTiles:
    """A bias evaluated tile by tile.

    Attributes:
        tensors: tensors the tiles depend on that may need gradients (parameters or a table).
        fn: ``fn(tensors, q_slice, k_slice) -> [B, H, Qc, Kc]``.
        masks_keys: the tiles are already -inf at invalid keys (the grid path folds the key mask
            into its index, which saves a pass over every tile in every layer).
    """

    tensors: tuple[torch.Tensor, ...]
    fn: Callable[[tuple[torch.Tensor, ...], slice, slice], torch.Tensor]
    masks_keys: bool = False  # True when tiles already hold -inf at invalid keys

    def tile(self, q_slice: slice, k_slice: slice) -> torch.Tensor:
        """Evaluate one tile ``[B, H, Qc, Kc]``."""
        return self.fn(self.tensors, q_slice, k_slice)

    def full(self) -> torch.Tensor:
        """Materialise every pair (dense oracle only)."""
        return self.fn(self.tensors, slice(None), slice(None))


def _pairwise_sq_dist(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    # Difference-based (not the |a|²+|b|²-2ab expansion) so that grid distances stay exact.
    diff = q_pos[:, :, None, :] - k_pos[:, None, :, :]  # [B, Qc, Kc, P]
    return (diff * diff).sum(-1)  # [B, Qc, Kc]


class RBFNetworkBias(nn.Module):
    """TISA-style RBF network on the distance between coordinates, per head.

    ``K_h(d) = Σ_k a_hk exp(-|b_hk| (d - c_hk)²)``; translation, rotation and reflection invariant.

    Args:
        num_heads: attention heads, each with its own basis weights.
        num_basis: basis functions per head (5 in seed 002).
        length_scale: typical distance in coordinate units, used only to initialise the centres
            ``c`` (spread over ``[0, 2·length_scale]``) and widths ``b``.
        grid_fast_path: gather from a table of squared distances when coordinates are integers.
    """

    def __init__(
        self,
        num_heads: int,
        *,
        num_basis: int = 5,
        length_scale: float = 4.0,
        grid_fast_path: bool = True,
    ) -> None:
        super().__init__()
        centres = torch.linspace(0.0, 2.0 * length_scale, num_basis)
        self.a = nn.Parameter(torch.full((num_heads, num_basis), 0.5))
        self.b = nn.Parameter(torch.full((num_heads, num_basis), 1.0 / length_scale**2))
        self.c = nn.Parameter(centres.repeat(num_heads, 1))
        self.grid_fast_path = grid_fast_path

    @staticmethod
    def evaluate(params: tuple[torch.Tensor, ...], dist: torch.Tensor) -> torch.Tensor:
        """Evaluate the RBF network on distances ``dist [...]``; returns ``[H, ...]``."""
        a, b, c = params
        shape = (a.shape[0],) + (1,) * dist.dim()
        out = dist.new_zeros((a.shape[0], *dist.shape))
        for i in range(a.shape[1]):  # a loop over 5 bases keeps peak memory at one [H, ...] tensor
            ai, bi, ci = (t[:, i].reshape(shape) for t in (a, b, c))
            out = out + ai * torch.exp(-bi.abs() * (dist - ci) ** 2)
        return out

    def _table(self, params: tuple[torch.Tensor, ...], max_sq: int, like: torch.Tensor) -> torch.Tensor:
        """The bias at every squared distance ``0..max_sq``, plus a -inf sentinel: ``[H, max_sq + 2]``.

        Without gradients (inference) it is computed once per forward pass and layer.
        """
        cache = _SQ_CACHE.get()
        key = ("table", id(self), max_sq, like.device, like.dtype)
        cacheable = cache is not None and not (torch.is_grad_enabled() and self.a.requires_grad)
        if cacheable and key in cache:
            return cache[key]
        dist = torch.arange(max_sq + 1, device=like.device, dtype=like.dtype).sqrt()
        table = self.evaluate(params, dist)  # [H, T]
        table = torch.cat([table, table.new_full((table.shape[0], 1), float("-inf"))], 1)
        if cacheable:
            cache[key] = table
        return table

    def tiles(
        self, q_pos: torch.Tensor, k_pos: torch.Tensor, key_valid: torch.Tensor | None = None
    ) -> BiasTiles:
        """Return the bias between ``q_pos [B, Nq, P]`` and ``k_pos [B, Nk, P]`` as tiles.

        With ``key_valid [B, Nk]`` the grid path also puts -inf at invalid keys
        (``masks_keys=True``); the direct path leaves masking to the kernel.
        """
        params = (self.a, self.b, self.c)
        if self.grid_fast_path:
            max_sq = _max_sq_dist(q_pos, k_pos)
            if max_sq is not None and max_sq < _MAX_TABLE:
                sentinel = max_sq + 1  # entry T: -inf, where invalid keys point
                table = self._table(params, max_sq, q_pos)  # [H, T + 1]
                qi, ki = _as_int(q_pos), _as_int(k_pos)

                def gather(tensors: tuple[torch.Tensor, ...], qs: slice, ks: slice) -> torch.Tensor:
                    return _gather(tensors[0], _grid_sq(qi, ki, key_valid, sentinel, qs, ks))

                return BiasTiles((table,), gather, masks_keys=key_valid is not None)

        def direct(tensors: tuple[torch.Tensor, ...], qs: slice, ks: slice) -> torch.Tensor:
            # clamp before sqrt: d/dx sqrt(x) is infinite at 0 (a query on top of a key)
            sq = _pairwise_sq_dist(q_pos[:, qs], k_pos[:, ks])
            dist = sq.clamp_min(1e-12).sqrt() * (sq > 0)
            return self.evaluate(tensors, dist).permute(1, 0, 2, 3)  # [B, H, Qc, Kc]

        return BiasTiles(params, direct)


def _as_int(pos: torch.Tensor) -> torch.Tensor:
    """Integer coordinates as int32, cached per tensor so the cache keys above stay stable."""
    cache = _SQ_CACHE.get()
    if cache is None:
        return pos.round().to(torch.int32)
    key = ("int", pos.data_ptr(), tuple(pos.shape))
    if key not in cache:
        cache[key] = pos.round().to(torch.int32)
    return cache[key]


def _max_sq_dist(q_pos: torch.Tensor, k_pos: torch.Tensor) -> int | None:
    """Largest squared distance if all coordinates are integers, else None.

    It reads values back to the host (a device sync), so within a forward pass it is computed once
    per pair of position tensors, not once per layer.
    """
    cache = _SQ_CACHE.get()
    key = ("max_sq", q_pos.data_ptr(), k_pos.data_ptr(), tuple(q_pos.shape), tuple(k_pos.shape))
    if cache is not None and key in cache:
        return cache[key]
    out = _compute_max_sq(q_pos, k_pos)
    if cache is not None:
        cache[key] = out
    return out


def _compute_max_sq(q_pos: torch.Tensor, k_pos: torch.Tensor) -> int | None:
    if q_pos.numel() == 0 or k_pos.numel() == 0:
        return None
    if not (torch.equal(q_pos, q_pos.round()) and torch.equal(k_pos, k_pos.round())):
        return None
    lo = torch.minimum(q_pos.amin(dim=(0, 1)), k_pos.amin(dim=(0, 1)))
    hi = torch.maximum(q_pos.amax(dim=(0, 1)), k_pos.amax(dim=(0, 1)))
    span = (hi - lo).double()
    return int(math.ceil(float((span * span).sum())))


BIASES = {"rbf": RBFNetworkBias}
