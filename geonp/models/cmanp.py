"""CMANP (the CMANP paper §3): Constant Memory Attentive Neural Processes.

Three levels, bottom up:

- :func:`~geonp.models.attention.constant_memory.cross_attention_update`, the kernel (beside the
  other kernels in :mod:`geonp.models.attention`): the CMANP paper's ``UPDATE`` (§3.1.1). It folds a
  block of new keys and values into the cross-attention output of a *fixed* set of queries. It
  keeps only the per-query log normaliser ``log c`` and the normalised output ``CA``, never
  revisiting old keys: constant memory in the number of context points (§3.1.2).
- :class:`CMAB`, the Constant Memory Attention Block (§3.2). Phase 1: the block's own learned
  latents ``L_B`` cross-attend to the context through the update, then self-attend. Phase 2: the
  incoming latents ``L_I`` cross-attend to ``L_B'``, then self-attend.
- :class:`CMANP`, the model (§3.3): ``L_i = CMAB(L_{i-1}, D_C)`` from learned ``L_0``; queries
  decode by ``X^i = CrossAttention(X^{i-1}, L_i)``, then a Gaussian head.

CMANP embeds coordinates, so it is not translation invariant: context tokens embed
``[x / pos_scale, y]`` and query tokens ``[x / pos_scale]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from geonp.config import ModelConfig
from geonp.models.attention.constant_memory import CrossAttentionState, cross_attention_update
from geonp.models.attention.dense import dense_attention
from geonp.models.base import NeuralProcess
from geonp.models.layers import MLP, MultiHeadProjection


class _AttentionLayer(nn.Module):
    """Pre-norm residual multi-head attention (no mask, no bias) followed by a feed-forward.

    A cross-attention layer (``cross=True``) normalises its keys with a LayerNorm of their own.
    """

    def __init__(self, dim: int, num_heads: int, ff_dim: int, dropout: float, *, cross: bool) -> None:
        super().__init__()
        self.proj = MultiHeadProjection(dim, num_heads)
        self.norm_q, self.norm_ff = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.norm_kv = nn.LayerNorm(dim) if cross else None
        self.ff = MLP([dim, ff_dim, dim])
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, Nq, E]`` attends to ``kv [B, Nk, E]`` (cross) or to itself (``kv`` None)."""
        qn = self.norm_q(x)
        kvn = self.norm_kv(kv) if self.norm_kv is not None and kv is not None else qn
        q, k, v = self.proj.qkv(qn, kvn)  # [B, H, Nq, D], [B, H, Nk, D] x2
        x = x + self.drop(self.proj.merge(dense_attention(q, k, v)))
        return x + self.drop(self.ff(self.norm_ff(x)))


class CMAB(nn.Module):
    """Constant Memory Attention Block (the CMANP paper §3.2): ``SA(CA(L_I, SA(CA(L_B, D_C))))``.

    The context enters only through phase 1's cross-attention from the block's fixed learned
    latents ``L_B``, kept as a :class:`CrossAttentionState`: :meth:`absorb` folds in context
    tokens block by block, and :meth:`forward` finishes both phases from the state alone, at a cost
    independent of the number of context points.

    Args:
        dim: model width ``E``.
        num_heads: heads ``H``.
        num_latents: ``|L_B|``.
        ff_dim: feed-forward width.
        dropout: residual dropout.
    """

    def __init__(self, dim: int, num_heads: int, num_latents: int, *, ff_dim: int, dropout: float = 0.0) -> None:
        """Build the module; the arguments are described in the class docstring."""
        super().__init__()
        self.latents = nn.Parameter(torch.randn(num_latents, dim) * 0.02)  # L_B
        self.proj = MultiHeadProjection(dim, num_heads)  # phase 1 cross-attention
        self.norm_latents, self.norm_context, self.norm_ff = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = MLP([dim, ff_dim, dim])
        self.drop = nn.Dropout(dropout)
        self.self_b = _AttentionLayer(dim, num_heads, ff_dim, dropout, cross=False)  # SA on L_B
        self.cross_i = _AttentionLayer(dim, num_heads, ff_dim, dropout, cross=True)  # CA(L_I, L_B')
        self.self_i = _AttentionLayer(dim, num_heads, ff_dim, dropout, cross=False)  # SA on L_I

    def empty_state(self, batch: int, device: torch.device) -> CrossAttentionState:
        """Phase 1 state before any context."""
        dim = self.latents.shape[1]
        h = self.proj.num_heads
        return CrossAttentionState.empty(batch, h, self.latents.shape[0], dim // h, device=device)

    def _queries(self, batch: int) -> torch.Tensor:
        q = self.proj.split(self.proj.to_q(self.norm_latents(self.latents))[None])  # [1, H, L, D]
        return q.expand(batch, -1, -1, -1)  # [B, H, L, D]

    def absorb(
        self, state: CrossAttentionState, tokens: torch.Tensor, valid: torch.Tensor | None
    ) -> CrossAttentionState:
        """Fold context tokens ``[B, Nk, E]`` (``valid [B, Nk]``) into the phase 1 state."""
        kn = self.norm_context(tokens)
        k, v = self.proj.split(self.proj.to_k(kn)), self.proj.split(self.proj.to_v(kn))  # [B, H, Nk, D]
        return cross_attention_update(state, self._queries(tokens.shape[0]), k, v, valid)

    def forward(self, latents_in: torch.Tensor, state: CrossAttentionState) -> torch.Tensor:
        """``L_I [B, L, E]`` and the phase 1 state -> ``L_I' [B, L, E]``."""
        ca = state.ca.to(latents_in.dtype)  # [B, H, L_B, D]
        lb = self.latents[None] + self.drop(self.proj.merge(ca))  # [B, L_B, E]
        lb = self.self_b(lb + self.drop(self.ff(self.norm_ff(lb))))  # L_B' = SA(CA(L_B, D_C))
        return self.self_i(self.cross_i(latents_in, lb))  # L_I' = SA(CA(L_I, L_B'))


@dataclass(frozen=True)
class CMANPState:
    """An encoded context: one phase 1 state per CMAB; constant size in the context count.

    Attributes:
        blocks: per CMAB, its :class:`CrossAttentionState`.
    """

    blocks: tuple[CrossAttentionState, ...]


class CMANP(NeuralProcess):
    """Constant Memory Attentive Neural Process with the call signature of ``TNPKR``.

    Built from a :class:`~geonp.config.ModelConfig`: ``dim_y`` value channels, ``dim_x``
    coordinates, ``depth`` CMABs (and query decoding layers) of width ``dim`` with ``num_heads``
    heads, ``ff_dim`` feed-forward width and residual ``dropout``; ``num_latents`` latents per set
    (``|L_0| = |L_B|``); a Gaussian head whose std is at least ``sigma_min``. Coordinates are
    divided by ``pos_scale = 4 * bias_length_scale`` (coordinate units) before embedding.

    Args:
        cfg: the architecture.
    """

    #: Context points folded in per update step unless told (memory ``O(context_chunk · L)``).
    context_chunk = 1024

    def __init__(self, cfg: ModelConfig) -> None:
        """Build the module; the argument is described in the class docstring."""
        super().__init__(dim_y=cfg.dim_y, dim_x=cfg.dim_x)
        dim, heads = cfg.dim, cfg.num_heads
        self.pos_scale = float(cfg.bias_length_scale * 4)
        self.latents = nn.Parameter(torch.randn(cfg.num_latents, dim) * 0.02)  # L_0
        self.embed_context = MLP([cfg.dim_x + cfg.dim_y, 2 * dim, dim])
        self.embed_query = MLP([cfg.dim_x, 2 * dim, dim])
        self.blocks = nn.ModuleList(
            CMAB(dim, heads, cfg.num_latents, ff_dim=cfg.ff_dim, dropout=cfg.dropout) for _ in range(cfg.depth)
        )
        self.decoder = nn.ModuleList(
            _AttentionLayer(dim, heads, cfg.ff_dim, cfg.dropout, cross=True) for _ in range(cfg.depth)
        )
        self.add_head(dim, sigma_min=cfg.sigma_min)

    @property
    def _cmabs(self) -> Sequence[CMAB]:
        """``self.blocks`` typed as blocks (iterating a ``ModuleList`` gives plain modules)."""
        return cast(Sequence[CMAB], self.blocks)

    def empty_state(self, batch: int, device: torch.device) -> CMANPState:
        """The state of an empty context."""
        return CMANPState(tuple(b.empty_state(batch, device) for b in self._cmabs))

    def update(
        self,
        state: CMANPState,
        xc_new: torch.Tensor,
        yc_new: torch.Tensor,
        valid_new: torch.Tensor | None = None,
        *,
        context_chunk: int | None = None,
    ) -> CMANPState:
        """Absorb new context points without revisiting the old ones (the CMANP paper updating phase).

        Args:
            state: the state so far (not modified).
            xc_new: ``[B, Nu, P]`` new context coordinates.
            yc_new: ``[B, Nu, dy]`` new context values.
            valid_new: ``[B, Nu]`` True for real points.
            context_chunk: points per fold (default ``self.context_chunk``).

        Returns:
            The state of the old and new context together; cost ``O(Nu · L)``, memory
            ``O(context_chunk · L)``.
        """
        chunk = context_chunk or self.context_chunk
        if chunk < 1:
            raise ValueError(f"context_chunk must be positive, got {chunk}")
        blocks = list(state.blocks)
        for i in range(0, xc_new.shape[1], chunk):
            x, y = xc_new[:, i : i + chunk], yc_new[:, i : i + chunk]
            valid = None if valid_new is None else valid_new[:, i : i + chunk]
            tokens = self.embed_context(torch.cat([x / self.pos_scale, y], -1))  # [B, Nk, E]
            blocks = [blk.absorb(st, tokens, valid) for blk, st in zip(self._cmabs, blocks, strict=True)]
        return CMANPState(tuple(blocks))

    def encode_context(
        self, xc: torch.Tensor, yc: torch.Tensor, context_valid: torch.Tensor | None = None,
        *, context_chunk: int | None = None,
    ) -> CMANPState:
        """Conditioning phase: fold ``xc [B, Nc, P], yc [B, Nc, dy]`` into a fresh state.

        ``context_chunk``: context points per fold (default ``self.context_chunk``; same result).
        """
        state = self.empty_state(xc.shape[0], xc.device)
        return self.update(state, xc, yc, context_valid, context_chunk=context_chunk)

    def condition(
        self, xc: torch.Tensor, yc: torch.Tensor, context_valid: torch.Tensor | None = None,
        **options: Any,
    ) -> list[torch.Tensor]:
        """The latents every query decodes from: :meth:`latents_of` the encoded context."""
        return self.latents_of(self.encode_context(xc, yc, context_valid, **options))

    def latents_of(self, state: CMANPState) -> list[torch.Tensor]:
        """Each CMAB's output latents ``L_i [B, L, E]``, ``i = 1..depth``."""
        batch = state.blocks[0].ca.shape[0] if state.blocks else 1
        lat = self.latents[None].expand(batch, -1, -1)  # L_0 [B, L, E]
        out = []
        for block, st in zip(self.blocks, state.blocks, strict=True):
            lat = block(lat, st)
            out.append(lat)
        return out

    def decode(self, latents: list[torch.Tensor], xt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Querying phase: ``xt [B, Nt, P]`` -> ``(mean, std) [B, Nt, dy]``."""
        qs = self.embed_query(xt / self.pos_scale)  # [B, Nt, E]
        for layer, lat in zip(self.decoder, latents, strict=True):
            qs = layer(qs, lat)  # X^i = CA(X^{i-1}, L_i)
        return self.head(qs)
