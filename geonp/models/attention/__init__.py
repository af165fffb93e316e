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
  :func:`make_attention` builds any of them by name (``ModelConfig.attention``), the one place
  where names become modules.
"""

from __future__ import annotations

from geonp.config import ModelConfig
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


def make_attention(cfg: ModelConfig) -> AttentionModule:
    """The attention module of one block of a model of this configuration.

    ``cfg.attention`` names the kernel (``scan``, ``dense``, ``dka`` or ``performer``), at width
    ``cfg.dim`` with ``cfg.num_heads`` heads. ``scan`` and ``dense`` add the kernel bias
    ``cfg.bias`` (none when None): ``num_basis`` basis functions initialised at
    ``bias_length_scale`` coordinate units, and in a temporal model (the last coordinate is a date
    offset) a :class:`SpaceTimeBias` (space + time kernels, ``time_length_scale`` days). DKA
    embeds the ``dim_x`` coordinates divided by ``4 * bias_length_scale``. Scan tiles hold 1024
    queries by 1024 keys (:class:`ScanAttention`'s ``q_chunk``, ``k_chunk``).

    Raises:
        UnknownNameError: an unknown name (a ``ValueError``; the message lists the valid ones).
    """
    UnknownNameError.check("attention", cfg.attention, ATTENTIONS)
    name, dim, heads = cfg.attention, cfg.dim, cfg.num_heads
    if name in ("scan", "dense"):
        b: SpaceTimeBias | RBFNetworkBias | None = None
        if cfg.bias and cfg.temporal:
            b = SpaceTimeBias(heads, num_basis=cfg.num_basis, length_scale=cfg.bias_length_scale,
                              time_length_scale=cfg.time_length_scale)
        elif cfg.bias:
            b = BIASES[cfg.bias](heads, num_basis=cfg.num_basis, length_scale=cfg.bias_length_scale)
        return ATTENTIONS[name](dim, heads, bias=b)
    if name == "dka":
        return DeepKernelAttention(dim, heads, pos_dim=cfg.dim_x, pos_scale=cfg.bias_length_scale * 4,
                                   fourier=DKA_FOURIER)
    return PerformerAttention(dim, heads)


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
