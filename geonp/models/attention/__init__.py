"""Attention kernels and modules behind one interface.

Conventions, stated once for the whole package:

- Shape letters: ``B`` batch, ``H`` heads, ``Nq``/``Nk`` query/key counts, ``D`` head dimension,
  ``P`` coordinate dimension, ``E`` model width.
- Kernels (``dense_attention``, ``scan_attention``, ``deep_kernel_attention``,
  ``performer_attention``) are pure functions on per-head tensors ``q [B, H, Nq, D]``,
  ``k [B, H, Nk, D]``, ``v [B, H, Nk, D]``.
- Masks are boolean and ``True`` means valid: ``key_valid [B, Nk]``. A query with no valid key at
  all receives a zero attention output (and zero gradients), never NaN.
- A kernel bias is a function of coordinates, evaluated tile by tile: see :mod:`.bias`.
- Every attention module has the same ``forward(x_q, x_kv, *, q_pos, k_pos, key_valid=None)``
  returning ``[B, Nq, E]``; ``ATTENTIONS`` maps names to classes.
"""

from __future__ import annotations

from geonp.models.attention.bias import BiasTiles, RBFNetworkBias
from geonp.models.attention.dense import DenseAttention, dense_attention
from geonp.models.attention.dka import DeepKernelAttention, deep_kernel_attention
from geonp.models.attention.performer import PerformerAttention, performer_attention
from geonp.models.attention.scan import ScanAttention, scan_attention

ATTENTIONS = {
    "dense": DenseAttention,
    "scan": ScanAttention,
    "dka": DeepKernelAttention,
    "performer": PerformerAttention,
}

__all__ = [
    "ATTENTIONS",
    "BiasTiles",
    "DeepKernelAttention",
    "DenseAttention",
    "PerformerAttention",
    "RBFNetworkBias",
    "ScanAttention",
    "deep_kernel_attention",
    "dense_attention",
    "performer_attention",
    "scan_attention",
]
