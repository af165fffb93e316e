"""Attention kernels and modules behind one interface.

Conventions, stated once for the whole package:

- Shape letters: ``B`` batch, ``H`` heads, ``Nq``/``Nk`` query/key counts, ``D`` head dimension,
  ``P`` coordinate dimension, ``E`` model width.
- Kernels (``dense_attention``, ``scan_attention``, ``deep_kernel_attention``,
  ``performer_attention``) are pure functions on per-head tensors ``q [B, H, Nq, D]``,
  ``k [B, H, Nk, D]``, ``v [B, H, Nk, D]``.
- Masks are boolean and ``True`` means valid: ``key_valid [B, Nk]``. A query with no valid key at
  all receives a zero attention output (and zero gradients), never NaN. The helpers of
  :mod:`.base` (``key_mask``, ``mask_keys``, ``zero_keyless_rows``, ...) apply these rules.
- A kernel bias is a function of coordinates, evaluated tile by tile: see :mod:`.bias`.
- Every attention module is an :class:`~.base.AttentionModule`, with the one
  ``forward(x_q, x_kv, *, q_pos, k_pos, key_valid=None, cache=None)`` returning ``[B, Nq, E]``;
  :func:`make_attention` builds any of them by name, the one place where names become modules.
"""

from __future__ import annotations

from geonp.errors import UnknownNameError
from geonp.models.attention.base import AttentionGeometry, AttentionModule
from geonp.models.attention.bias import BIASES, BiasTiles, RBFNetworkBias
from geonp.models.attention.dense import DenseAttention, dense_attention
from geonp.models.attention.dka import DeepKernelAttention, deep_kernel_attention
from geonp.models.attention.performer import PerformerAttention, performer_attention
from geonp.models.attention.scan import ScanAttention, scan_attention
from geonp.models.attention.temporal import SpaceTimeBias

#: The attention kernels, by name (``ModelConfig.attention``); :data:`geonp.config.ATTENTION_NAMES`
#: lists the same names for the CLI.
ATTENTIONS: dict[str, type[AttentionModule]] = {
    "scan": ScanAttention,
    "dense": DenseAttention,
    "dka": DeepKernelAttention,
    "performer": PerformerAttention,
}


#: Fourier features of the coordinates in DKA's kernel (:class:`DeepKernelAttention`): on the 2-D GP
#: benchmark at 600 steps, 0.546 nats from the exact GP with 32 of them against 0.651 without
#: (docs/cuda.md).
DKA_FOURIER = 32


def make_attention(
    name: str,
    dim: int,
    num_heads: int,
    *,
    dim_x: int = 2,
    bias: str | None = "rbf",
    num_basis: int = 5,
    bias_length_scale: float = 4.0,
    q_chunk: int = 1024,
    k_chunk: int = 1024,
    time_length_scale: float | None = None,
) -> AttentionModule:
    """An attention module by name (``scan``, ``dense``, ``dka`` or ``performer``).

    Args:
        name: the kernel.
        dim: model width ``E``.
        num_heads: heads ``H``.
        dim_x: coordinate dimension (DKA's positional features).
        bias: kernel bias name (``"rbf"``) or None; used by ``scan`` and ``dense``.
        num_basis: basis functions of the RBF bias.
        bias_length_scale: typical distance in coordinate units (initialises the bias; sets DKA's
            positional scale).
        q_chunk: scan tile rows.
        k_chunk: scan tile columns.
        time_length_scale: days; when given (``scan``/``dense`` with a bias), the last coordinate
            is a date offset and the bias is :class:`SpaceTimeBias` (space + time kernels).

    Raises:
        UnknownNameError: an unknown name (a ``ValueError``; the message lists the valid ones).
    """
    UnknownNameError.check("attention", name, ATTENTIONS)
    if name in ("scan", "dense"):
        b: SpaceTimeBias | RBFNetworkBias | None
        if bias and time_length_scale is not None:
            b = SpaceTimeBias(num_heads, num_basis=num_basis, length_scale=bias_length_scale,
                              time_length_scale=time_length_scale)
        else:
            b = BIASES[bias](num_heads, num_basis=num_basis, length_scale=bias_length_scale) if bias else None
        extra = {"q_chunk": q_chunk, "k_chunk": k_chunk} if name == "scan" else {}
        return ATTENTIONS[name](dim, num_heads, bias=b, **extra)
    if name == "dka":
        return DeepKernelAttention(dim, num_heads, pos_dim=dim_x, pos_scale=bias_length_scale * 4, fourier=DKA_FOURIER)
    return PerformerAttention(dim, num_heads)


__all__ = [
    "ATTENTIONS",
    "AttentionGeometry",
    "AttentionModule",
    "BiasTiles",
    "DeepKernelAttention",
    "DenseAttention",
    "PerformerAttention",
    "RBFNetworkBias",
    "ScanAttention",
    "SpaceTimeBias",
    "deep_kernel_attention",
    "dense_attention",
    "make_attention",
    "performer_attention",
    "scan_attention",
]
