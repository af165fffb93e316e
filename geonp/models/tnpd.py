"""TNP-D (Nguyen & Grover, TNP §3): the transformer neural process baseline with a diagonal Gaussian head.

Context tokens embed ``[x, y]`` and target tokens ``[x, 0]`` with one MLP; a post-norm transformer
runs over the concatenated sequence with a mask that lets every token attend to the context only.
Attention is materialised over all ``(Nc + Nt)²`` pairs, which is TNP-D's memory cost.
"""

from __future__ import annotations

import torch
from torch import nn

from geonp.config import ModelConfig
from geonp.models.attention.dense import dense_attention
from geonp.models.base import NeuralProcess
from geonp.models.layers import MLP, MultiHeadProjection


class _EncoderLayer(nn.Module):
    def __init__(self, dim: int, num_heads: int, ff_dim: int, dropout: float) -> None:
        super().__init__()
        self.proj = MultiHeadProjection(dim, num_heads)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = MLP([dim, ff_dim, dim])
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_valid: torch.Tensor) -> torch.Tensor:
        q, k, v = self.proj.qkv(x, x)
        x = self.norm1(x + self.drop(self.proj.merge(dense_attention(q, k, v, key_valid=key_valid))))
        return self.norm2(x + self.drop(self.ff(x)))  # post-norm, as torch's TransformerEncoder


class TNPD(NeuralProcess):
    """TNP-D with the same call signature as :class:`~geonp.models.tnpkr.TNPKR`.

    The context cannot be encoded apart from the targets (they share one sequence), so its
    conditioning state is the context itself and every decoding runs the whole sequence.

    Built from a :class:`~geonp.config.ModelConfig`: ``dim_y`` value channels, ``dim_x``
    coordinates, ``depth`` encoder layers of width ``dim`` with ``num_heads`` heads, ``ff_dim``
    feed-forward width and residual ``dropout``; a Gaussian head whose std is at least
    ``sigma_min``.

    Args:
        cfg: the architecture.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        """Build the module; the argument is described in the class docstring."""
        super().__init__(dim_y=cfg.dim_y, dim_x=cfg.dim_x)
        self.embed = MLP([cfg.dim_x + cfg.dim_y, 2 * cfg.dim, cfg.dim])
        self.layers = nn.ModuleList(_EncoderLayer(cfg.dim, cfg.num_heads, cfg.ff_dim, cfg.dropout)
                                    for _ in range(cfg.depth))
        self.add_head(cfg.dim, sigma_min=cfg.sigma_min)

    def encode_context(
        self, xc: torch.Tensor, yc: torch.Tensor, context_valid: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The context as it is, ``(xc, yc, context_valid)``: TNP-D encodes it with the targets."""
        return xc, yc, context_valid

    def decode(
        self, state: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None], xt: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the transformer over context and targets ``xt [B, Nt, P]``; ``(mean, std) [B, Nt, dy]``."""
        xc, yc, context_valid = state
        b, nc = xc.shape[0], xc.shape[1]
        targets = torch.cat([xt, self.unknown_values(xt)], -1)  # [B, Nt, P + dy]
        tokens = self.embed(torch.cat([torch.cat([xc, yc], -1), targets], 1))  # [B, Nc+Nt, E]
        cv = context_valid if context_valid is not None else xc.new_ones(b, nc, dtype=torch.bool)
        key_valid = torch.cat([cv, cv.new_zeros(b, xt.shape[1])], 1)  # only context tokens are keys
        for layer in self.layers:
            tokens = layer(tokens, key_valid)
        return self.head(tokens[:, nc:])
