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
The table stops at the bias's reach, the distance beyond which every basis has decayed below
``REACH_TOLERANCE``: a far context point (hundreds of pixels away) reads the last entry instead
of growing the table to millions of entries (which cost more than the rest of the model).
Scattered (off-grid) coordinates use the direct path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import torch
from torch import nn

from geonp.models.attention.gather import gather_table

# Largest squared-distance table the grid path builds (entries per head); beyond it the direct
# path is used. 4M entries x 4 heads x 4 bytes = 64 MB.
_MAX_TABLE = 4_000_000
# Most bytes of squared-distance tiles kept per forward pass (beyond it tiles are recomputed).
_MAX_CACHE_BYTES = 256 * 2**20
# The bias is treated as constant beyond the distance where every basis has decayed below this
# (logit units): far pairs then share the table's last entry instead of growing the table.
REACH_TOLERANCE = 1e-6
_MISSING = object()
_T = TypeVar("_T")


class DistanceCache:
    """What the layers of one forward pass share: integer positions, squared distances, tables.

    Every layer of a forward pass asks for the bias between the same position tensors, so a
    model's ``encode_context`` creates one cache and hands it to every layer (and its decoding,
    through the context state). Entries are keyed by the position tensors' storage and shape;
    the cache keeps a reference to each key tensor, so no key can be reused by another tensor
    while the cache lives. Squared-distance tiles are bounded by ``max_bytes`` (oldest dropped
    first): scan attention keeps its linear memory on large contexts, while query chunks,
    decoded one after the other through all layers, still hit.

    ``groups``: the pass's batch is that many equal runs of one geometry (the bands of a tile
    that share a gap pattern, laid band after band): each run has the positions and padding of
    the first, so a kernel may work out the bias for the first run alone and read it for all
    (:class:`~geonp.models.attention.scan.ScanAttention`). A hint: a kernel that ignores it
    computes the same numbers.
    """

    def __init__(self, max_bytes: int | None = None, *, groups: int = 1) -> None:
        """An empty cache keeping at most ``max_bytes`` of tiles (default 256 MiB)."""
        if groups < 1:
            raise ValueError(f"groups={groups} (>= 1)")
        self.groups = groups
        self.max_bytes = _MAX_CACHE_BYTES if max_bytes is None else max_bytes
        self.entries: dict[tuple, object] = {}
        self.tile_bytes: dict[tuple, int] = {}  # insertion-ordered: oldest first
        self.bytes = 0
        self._pinned: dict[int, torch.Tensor] = {}

    def key(self, *parts: object) -> tuple:
        """A key from tensors (by storage, shape and stride; the tensor is pinned) and values."""
        out: list[object] = []
        for part in parts:
            if isinstance(part, torch.Tensor):
                self._pinned.setdefault(id(part), part)
                out.append((part.data_ptr(), tuple(part.shape), part.stride()))
            else:
                out.append(part)
        return tuple(out)

    def get(self, key: tuple, default: object = None) -> object:
        """The value stored under ``key``, else ``default``."""
        return self.entries.get(key, default)

    def put(self, key: tuple, value: object) -> None:
        """Keep a value for the rest of the pass (small entries: positions, tables, maxima)."""
        self.entries[key] = value

    def put_tile(self, key: tuple, tile: torch.Tensor) -> None:
        """Keep a tile, dropping the oldest tiles beyond the byte budget."""
        size = tile.numel() * tile.element_size()
        if size > self.max_bytes:
            return
        while self.tile_bytes and self.bytes + size > self.max_bytes:
            old = next(iter(self.tile_bytes))
            self.bytes -= self.tile_bytes.pop(old)
            del self.entries[old]
        self.tile_bytes[key] = size
        self.entries[key] = tile
        self.bytes += size


def cached(cache: DistanceCache | None, key_parts: tuple, compute: Callable[[], _T], *,
           tile: bool = False) -> _T:
    """``compute()``, or its value for ``key_parts`` from ``cache`` (computed once per pass).

    With ``tile``, ``compute`` must return a tensor (kept by :meth:`DistanceCache.put_tile`).
    """
    if cache is None:
        return compute()
    key = cache.key(*key_parts)
    found = cache.get(key, _MISSING)
    if found is not _MISSING:
        return cast(_T, found)  # stored under this key by compute() in this pass
    value = compute()
    if tile:
        cache.put_tile(key, cast(torch.Tensor, value))
    else:
        cache.put(key, value)
    return value


def _grid_sq(qi: torch.Tensor, ki: torch.Tensor, key_valid: torch.Tensor | None, qs: slice, ks: slice) -> torch.Tensor:
    """Squared distances plus one, ``[B, Qc, Kc]`` (the positions' integer type); invalid keys are 0.

    Index 0 of a bias table is -inf (the key mask folded into the lookup), index ``d² + 1`` the
    bias at squared distance ``d²``.
    """
    # per coordinate, not a sum over a trailing axis of 2: several times faster on the CPU
    dr = qi[:, qs, None, 0] - ki[:, None, ks, 0]
    dc = qi[:, qs, None, 1] - ki[:, None, ks, 1]
    sq = dr * dr + dc * dc + 1
    if key_valid is not None:
        sq = sq.masked_fill(~key_valid[:, None, ks], 0)
    return sq


def _gather(table: torch.Tensor, index: torch.Tensor, *, clamp: bool = False) -> torch.Tensor:
    """``table [H, T]`` at ``index [B, Qc, Kc]``; with ``clamp``, indices beyond ``T - 1`` read the last entry.

    Returns the bias tile ``[B, H, Qc, Kc]`` through :func:`~geonp.models.attention.gather.gather_table`:
    one ``index_select`` per head (about 3x faster on the CPU than advanced indexing), and with
    gradients (training) one ``index_add_`` per head in the backward.
    """
    if clamp:
        index = index.clamp_max(table.shape[1] - 1)
    return gather_table(table, index)


@dataclass
class BiasTiles:
    """A bias evaluated tile by tile.

    Attributes:
        tensors: tensors the tiles depend on that may need gradients (parameters or a table).
        fn: ``fn(tensors, q_slice, k_slice) -> [B, H, Qc, Kc]``.
        masks_keys: the tiles are already -inf at invalid keys (the grid path folds the key mask
            into its index, which saves a pass over every tile in every layer).
        index: the grid path's table positions of a tile (None on the direct path).
    """

    tensors: tuple[torch.Tensor, ...]
    fn: Callable[[tuple[torch.Tensor, ...], slice, slice], torch.Tensor]
    masks_keys: bool = False  # True when tiles already hold -inf at invalid keys
    #: The grid path's table positions of a tile, ``index(q_slice, k_slice) -> [B, Qc, Kc]`` (the
    #: tile is ``tensors[0]`` read there), so that a space-time bias can read one joint table.
    index: Callable[[slice, slice], torch.Tensor] | None = None

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
        num_basis: basis functions per head (5 in the TNP-KR paper).
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
        """Build the module; the arguments are described in the class docstring."""
        super().__init__()
        centres = torch.linspace(0.0, 2.0 * length_scale, num_basis)
        self.a = nn.Parameter(torch.full((num_heads, num_basis), 0.5))
        self.b = nn.Parameter(torch.full((num_heads, num_basis), 1.0 / length_scale**2))
        self.c = nn.Parameter(centres.repeat(num_heads, 1))
        self.grid_fast_path = grid_fast_path
        self._reach_memo: tuple[tuple, float] | None = None
        self._tables_kept: dict[tuple, tuple[tuple, torch.Tensor]] = {}

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

    def reach(self, tolerance: float = REACH_TOLERANCE) -> float:
        """A distance beyond which ``|K_h(d)| <= tolerance`` for every head (inf if none).

        Beyond its centre a basis only decays, so ``|K(d)| <= Σ_k |a_k| exp(-|b_k| (d - c_k)²)``;
        each term is below ``tolerance / num_basis`` from ``c_k + sqrt(ln(num_basis |a_k| /
        tolerance) / |b_k|)`` on. Computed from the current parameters (no gradient); reading it
        is a host sync, so it is remembered until a parameter changes (an optimiser step, a load).
        """
        params = (self.a, self.b, self.c)
        key = (tolerance, *_versions(params))
        if self._reach_memo is not None and self._reach_memo[0] == key:
            return self._reach_memo[1]
        with torch.no_grad():
            a, b, c = (t.detach().double() for t in params)
            need = (a.shape[1] * a.abs() / tolerance).clamp_min(1.0).log()
            width = torch.where(need > 0, (need / b.abs()).sqrt(), torch.zeros_like(need))
            value = float((c + width).max().clamp_min(c.max()).clamp_min(0.0))
        self._reach_memo = (key, value)
        return value

    def _table(self, params: tuple[torch.Tensor, ...], last_sq: int, like: torch.Tensor) -> torch.Tensor:
        """``[H, last_sq + 2]``: -inf (masked keys) at index 0, then the bias at squared distances ``0..last_sq``."""
        dist = torch.arange(last_sq + 1, device=like.device, dtype=like.dtype).sqrt()
        table = self.evaluate(params, dist)  # [H, T]
        return torch.cat([table.new_full((table.shape[0], 1), float("-inf")), table], 1)

    def _kept_table(self, params: tuple[torch.Tensor, ...], last_sq: int, like: torch.Tensor) -> torch.Tensor:
        """:meth:`_table` to ``last_sq``, remembered between forward passes (inference only).

        Evaluating the table (an exp per basis, head and entry) cost a quarter of a fill of
        dropped pixels when it was rebuilt in every pass; the entries are the same numbers.
        """
        where = (like.device, like.dtype)
        version = _versions(params)
        kept = self._tables_kept.get(where)
        if kept is None or kept[0] != version or kept[1].shape[1] < last_sq + 2:
            with torch.no_grad():
                kept = self._tables_kept[where] = (version, self._table(params, last_sq, like))
        return kept[1][:, :last_sq + 2]  # the longest table built so far, read to last_sq

    def tiles(
        self,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        key_valid: torch.Tensor | None = None,
        *,
        cache: DistanceCache | None = None,
    ) -> BiasTiles:
        """Return the bias between ``q_pos [B, Nq, P]`` and ``k_pos [B, Nk, P]`` as tiles.

        With ``key_valid [B, Nk]`` the grid path also puts -inf at invalid keys
        (``masks_keys=True``); the direct path leaves masking to the kernel. On the grid path the
        table stops at :meth:`reach` (rounded up to a power of two in squared pixels): farther
        pairs read its last entry, which equals the bias there within ``REACH_TOLERANCE``. A
        ``cache`` shares integer positions and squared distances between the layers of a pass.
        """
        params = (self.a, self.b, self.c)
        if self.grid_fast_path:
            max_sq = cached(cache, ("max_sq", q_pos, k_pos), lambda: _compute_max_sq(q_pos, k_pos))
            reach_sq = _reach_sq(self.reach())
            last_sq = None if max_sq is None else min(max_sq, reach_sq)
            if last_sq is not None and last_sq < _MAX_TABLE:
                assert max_sq is not None  # last_sq is None whenever max_sq is
                needs_grad = torch.is_grad_enabled() and self.a.requires_grad
                if needs_grad or cache is None:
                    table = self._table(params, last_sq, q_pos)
                else:
                    # inference: tables of power-of-two lengths, kept across passes until a parameter
                    # changes (short ones too: a multi-date table multiplies the length by the days).
                    # A basis as wide as the raster (a reach of 1,800 px) needs one to the far
                    # context's farthest pair (at most 2**22 entries): rebuilt in every pass, it
                    # was 70 % of a cloud fill's time.
                    last_sq = min(reach_sq, 1 << max_sq.bit_length())
                    table = self._kept_table(params, last_sq, q_pos)
                # int32 halves the memory traffic; int64 where a squared distance could overflow it
                idtype = torch.int32 if max_sq < 2**30 else torch.int64
                qi = cached(cache, ("int", q_pos, idtype), lambda: q_pos.round().to(idtype))
                ki = cached(cache, ("int", k_pos, idtype), lambda: k_pos.round().to(idtype))
                clamp = max_sq > last_sq

                def index(qs: slice, ks: slice) -> torch.Tensor:
                    sq = cached(cache, ("sq", qi, ki, key_valid, qs.start, qs.stop, ks.start, ks.stop),
                                lambda: _grid_sq(qi, ki, key_valid, qs, ks), tile=True)
                    return sq.clamp_max(table.shape[1] - 1) if clamp else sq

                def gather(tensors: tuple[torch.Tensor, ...], qs: slice, ks: slice) -> torch.Tensor:
                    return gather_table(tensors[0], index(qs, ks))

                return BiasTiles((table,), gather, masks_keys=key_valid is not None, index=index)

        def direct(tensors: tuple[torch.Tensor, ...], qs: slice, ks: slice) -> torch.Tensor:
            # clamp before sqrt: d/dx sqrt(x) is infinite at 0 (a query on top of a key)
            sq = _pairwise_sq_dist(q_pos[:, qs], k_pos[:, ks])
            dist = sq.clamp_min(1e-12).sqrt() * (sq > 0)
            return self.evaluate(tensors, dist).permute(1, 0, 2, 3)  # [B, H, Qc, Kc]

        return BiasTiles(params, direct)


def _versions(params: tuple[torch.Tensor, ...]) -> tuple[tuple[int, int], ...]:
    """Storage and in-place version of each parameter: changes with an optimiser step or a load."""
    return tuple((t.data_ptr(), t._version) for t in params)


def _reach_sq(reach: float) -> int:
    """The squared reach, rounded up to a power of two (so a table is rebuilt only when it doubles)."""
    if not math.isfinite(reach):
        return _MAX_TABLE
    return 1 << max(math.ceil(reach) ** 2, 1).bit_length()


def _compute_max_sq(q_pos: torch.Tensor, k_pos: torch.Tensor) -> int | None:
    """Largest squared distance if all coordinates are integers, else None (a host sync)."""
    if q_pos.numel() == 0 or k_pos.numel() == 0:
        return None
    if not (torch.equal(q_pos, q_pos.round()) and torch.equal(k_pos, k_pos.round())):
        return None
    lo = torch.minimum(q_pos.amin(dim=(0, 1)), k_pos.amin(dim=(0, 1)))
    hi = torch.maximum(q_pos.amax(dim=(0, 1)), k_pos.amax(dim=(0, 1)))
    span = (hi - lo).double()
    return math.ceil(float((span * span).sum()))


BIASES = {"rbf": RBFNetworkBias}
