"""Fused grid attention: FlexAttention with the kernel bias looked up inside the kernel.

Today's inference path (:mod:`.bias` then :func:`.scan.scan_attention`) writes the bias of every
(query, key) pair and head to memory, ``[B, H, Nq, Nk]`` floats gathered from a table of squared
distances, and then reads it back in the attention. Here the same table is read *inside* the
attention: ``torch.nn.attention.flex_attention``, compiled by ``torch.compile`` (a C++ kernel on
the CPU, Triton on CUDA), calls a ``score_mod`` per logit that computes the squared pixel distance
from the two points' packed integer coordinates and adds the table entry.

This module decides where the fused path applies and prepares its inputs (packed positions, the
bias table); the compiled kernel itself, how positions are packed and how it is compiled are in
:mod:`.flex_kernel`.

Where it applies: inference (no gradient), float32, a spatial :class:`RBFNetworkBias` on integer
coordinates (or a :class:`SpaceTimeBias` whose batch has no date offset, which is the spatial bias
alone), at least 2 of every size. The backward pass of FlexAttention is not supported on the CPU
(torch 2.13: "torch.compile on CPU only supports inference"); training keeps scan attention's own
backward. The old path stays the oracle: ``tests/models/test_flex_attention.py`` ties them.

Switch: ``ScanAttention(fused=...)`` or the environment variable ``GEONP_FUSED_ATTENTION``
(``auto``, ``flex`` or ``off``; the argument wins over the variable, which wins over ``auto``).
``auto`` picks the faster path measured for the device (:data:`AUTO`).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from geonp.models.attention.bias import (
    DistanceCache,
    RBFNetworkBias,
    _compute_max_sq,
    _reach_sq,
    cached,
)
from geonp.models.attention.flex_kernel import (
    COMPILED,
    LAST_SQ,
    SENTINEL,
    SHIFT,
    TABLE_LEN,
    _fold,  # noqa: F401 - benchmarks/attention.py calls flex._fold
    compile_seconds,
    flat_table,
    lookup_attention,
)

FUSED_ENV = "GEONP_FUSED_ATTENTION"
MODES = ("auto", "flex", "off")
#: What ``auto`` means per device type. Measured on a 2-core CPU, torch 2.13 (busy machine): with 2
#: torch threads the fused kernel takes 0.5x the old path's time per call at fill shapes and a
#: whole 512² fill 0.8x (and 100-250 MB less peak RSS); with 1 thread (a fill's worker processes)
#: it is level with the old path per call and a whole fill 1.05x (its ~4 s compile not recovered).
#: The old path stays the default on the CPU; CUDA is unmeasured (no GPU here), so ``off`` too.
AUTO = {"cpu": "off", "cuda": "off"}

_MAX_SPAN = 2**13  # rows and columns of a batch span fewer pixels than this


def resolve_mode(requested: str | None, device: torch.device) -> str:
    """``flex`` or ``off`` for a call on ``device``: the argument, else the variable, else ``auto``.

    Raises:
        ValueError: a mode other than ``auto``, ``flex``, ``off``.
    """
    mode = requested if requested not in (None, "auto") else os.environ.get(FUSED_ENV, "auto").strip().lower()
    if mode not in MODES:
        raise ValueError(f"fused attention mode {mode!r} (from the argument or ${FUSED_ENV}); valid: {list(MODES)}")
    if mode == "auto":
        return AUTO.get(device.type, "off")
    return mode


# ----------------------------------------------------------------------------------------------
# Geometry and table: the inputs of the kernel, from positions and a bias module.


def pack_positions(q_pos: torch.Tensor, k_pos: torch.Tensor, key_valid: torch.Tensor | None,
                   cache: DistanceCache | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Packed int32 positions ``([B, Nq], [B, Nk])``, or ``None`` off the grid or beyond the span.

    ``q_pos [B, Nq, 2]`` and ``k_pos [B, Nk, 2]`` must hold integers (pixel coordinates); the
    batch's rows and columns must span fewer than ``2**13`` pixels.
    """
    if q_pos.shape[-1] != 2 or k_pos.shape[-1] != 2:
        return None
    max_sq = cached(cache, ("max_sq", q_pos, k_pos), lambda: _compute_max_sq(q_pos, k_pos))
    if max_sq is None:  # not all integers (or empty)
        return None
    lo = torch.minimum(q_pos.amin(dim=(0, 1)), k_pos.amin(dim=(0, 1)))  # [2]
    hi = torch.maximum(q_pos.amax(dim=(0, 1)), k_pos.amax(dim=(0, 1)))
    if float((hi - lo).max()) >= _MAX_SPAN:
        return None

    def pack(pos: torch.Tensor) -> torch.Tensor:
        rc = (pos - lo).round().to(torch.int32)  # [B, N, 2], in [0, 2**13)
        return (rc[..., 0] << SHIFT) | rc[..., 1]  # [B, N]

    q_packed = pack(q_pos).contiguous()
    k_packed = pack(k_pos)
    if key_valid is not None:
        k_packed = torch.where(key_valid, k_packed, SENTINEL << SHIFT | SENTINEL)
    return q_packed, k_packed.contiguous()


def lookup_table(bias: RBFNetworkBias, like: torch.Tensor) -> torch.Tensor | None:
    """``[H, TABLE_LEN]``: the bias by squared distance, clamped at its reach, -inf last; or ``None``.

    Entry ``s`` equals the old table's entry for squared distance ``s`` (the same evaluation,
    clamped at the same ``last_sq`` when the reach is shorter than the batch); ``None`` when the
    bias's reach needs more than ``2**18`` squared pixels (about 512 px).
    """
    reach_sq = _reach_sq(bias.reach())
    if reach_sq > LAST_SQ:
        return None
    params = (bias.a, bias.b, bias.c)
    dist = torch.arange(reach_sq + 1, device=like.device, dtype=like.dtype).sqrt()
    values = RBFNetworkBias.evaluate(params, dist)  # [H, reach_sq + 1]
    table = values.new_empty((values.shape[0], TABLE_LEN))
    table[:, : reach_sq + 1] = values
    table[:, reach_sq + 1 :] = values[:, -1:]  # beyond the reach: the reach's value (the old clamp)
    table[:, -1] = float("-inf")  # invalid keys
    return table


class LookupTables:
    """Tables of one attention module, kept while its bias parameters do not change (inference)."""

    def __init__(self) -> None:
        """An empty memo."""
        self._memo: tuple[tuple, torch.Tensor | None] | None = None

    def get(self, bias: RBFNetworkBias, like: torch.Tensor) -> torch.Tensor | None:
        """:func:`lookup_table` of ``bias`` on ``like``'s device, flat (``[H·TABLE_LEN]``).

        The table is remembered until a parameter of ``bias`` changes.
        """
        params = (bias.a, bias.b, bias.c)
        key = (like.device, like.dtype, *((t.data_ptr(), t._version) for t in params))
        if self._memo is None or self._memo[0] != key:
            with torch.inference_mode():  # the kernel's inputs are inference tensors (see _fold)
                table = lookup_table(bias, like)
                self._memo = (key, None if table is None else flat_table(table))
        return self._memo[1]


def spatial_bias(bias: Any, q_pos: torch.Tensor, k_pos: torch.Tensor,
                 cache: DistanceCache | None) -> tuple[RBFNetworkBias, torch.Tensor, torch.Tensor] | None:
    """The spatial RBF bias and the spatial positions, or ``None`` where the fused path does not apply.

    A :class:`SpaceTimeBias` qualifies when no point of the batch has a date offset (then its bias
    is the spatial one, as in :meth:`SpaceTimeBias.tiles`); with dates the old path runs.
    """
    from geonp.models.attention.temporal import SpaceTimeBias, _max_abs_dt

    if isinstance(bias, SpaceTimeBias):
        qt, kt = q_pos[..., -1], k_pos[..., -1]
        if cached(cache, ("max_dt", qt, kt), lambda: _max_abs_dt(qt, kt)) != 0:
            return None
        return bias.space, q_pos[..., :-1], k_pos[..., :-1]
    if type(bias) is RBFNetworkBias and bias.grid_fast_path:
        return bias, q_pos, k_pos
    return None


def fused_grid_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, bias: Any,
                         q_pos: torch.Tensor, k_pos: torch.Tensor, key_valid: torch.Tensor | None,
                         tables: LookupTables, cache: DistanceCache | None = None) -> torch.Tensor | None:
    """Biased attention through the fused kernel, or ``None`` where it does not apply.

    Args:
        q: ``[B, H, Nq, D]``.
        k: ``[B, H, Nk, D]``.
        v: ``[B, H, Nk, D]``.
        bias: the attention module's bias module.
        q_pos: ``[B, Nq, P]``.
        k_pos: ``[B, Nk, P]``.
        key_valid: ``[B, Nk]`` True where a key may be attended.
        tables: the module's table memo.
        cache: the pass's :class:`DistanceCache` (shares the integer check with the old path).

    Returns:
        ``[B, H, Nq, D]`` equal to :func:`scan_attention` with ``bias.tiles(...)`` within float32
        rounding, or ``None``.
    """
    if q.dtype != torch.float32 or not (q.dtype == k.dtype == v.dtype):
        return None
    spatial = spatial_bias(bias, q_pos, k_pos, cache)
    if spatial is None:
        return None
    rbf, qs, ks = spatial
    packed = pack_positions(qs, ks, key_valid, cache)
    if packed is None:
        return None
    table = tables.get(rbf, q)
    if table is None or table.numel() != q.shape[1] * TABLE_LEN:
        return None
    # looked up in this module's namespace: tests/models/test_flex_attention.py spies on it here
    return lookup_attention(q, k, v, packed[0], packed[1], table)


__all__ = [
    "AUTO",
    "COMPILED",
    "FUSED_ENV",
    "MODES",
    "TABLE_LEN",
    "LookupTables",
    "compile_seconds",
    "fused_grid_attention",
    "lookup_attention",
    "lookup_table",
    "pack_positions",
    "resolve_mode",
]
