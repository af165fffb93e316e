"""TNP-KR (the TNP-KR paper §3): embedding, a stack of KRBlocks, a Gaussian head. Composition only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from geonp.config import ModelConfig
from geonp.models.attention import make_attention
from geonp.models.attention.bias import DistanceCache
from geonp.models.base import NeuralProcess
from geonp.models.blocks import KRBlock
from geonp.models.layers import MLP


@dataclass
class ContextState:
    """The context stream after encoding: each block's input tokens, for query decoding.

    Attributes:
        tokens: per block, the context tokens entering it, ``[B, Nc, E]``.
        xc: context coordinates ``[B, Nc, P]``.
        valid: ``[B, Nc]`` True for real (not padded) context points.
        cache: squared distances shared by the layers of this pass (None: computed per layer).
        yc: context values ``[B, Nc, dy]`` (kept for the query prior).
    """

    tokens: list[torch.Tensor]
    xc: torch.Tensor
    valid: torch.Tensor | None
    cache: DistanceCache | None = None
    yc: torch.Tensor | None = None


def idw_prior(xt: torch.Tensor, xc: torch.Tensor, yc: torch.Tensor, valid: torch.Tensor | None,
              *, eps: float = 0.25) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse-distance estimate of the context at each query and the distance to the nearest context point.

    ``w_i = 1 / (d_i² + eps)`` over the (valid) context points, as GDAL FillNodata weighs by inverse
    squared distance. Distances are taken between coordinates centred on the context's mean, so
    scene-sized pixel coordinates keep float32 precision.

    Args:
        xt: query coordinates ``[B, Nt, P]``.
        xc: context coordinates ``[B, Nc, P]``.
        yc: context values ``[B, Nc, dy]``.
        valid: ``[B, Nc]`` True for real context points, or None.
        eps: added to squared distances (coordinate units²).

    Returns:
        ``(prior [B, Nt, dy], nearest [B, Nt])``: the estimate, and the distance to the nearest
        valid context point (coordinate units).
    """
    centre = xc.mean(dim=1, keepdim=True)
    a, b = xt - centre, xc - centre
    d2 = (a.square().sum(-1)[..., :, None] + b.square().sum(-1)[..., None, :]
          - 2.0 * a @ b.transpose(1, 2)).clamp_min(0.0)  # [B, Nt, Nc]
    w = 1.0 / (d2 + eps)
    if valid is not None:
        keep = valid[:, None, :]
        w = w * keep.to(w.dtype)
        d2 = d2.masked_fill(~keep, float("inf"))
    prior = (w @ yc) / w.sum(-1, keepdim=True).clamp_min(1e-12)
    return prior, d2.amin(-1).clamp_max(1e12).sqrt()


class TokenEmbedding(nn.Module):
    """Observed-flag and value embeddings co-embedded by an MLP (the TNP-KR paper eq. 2).

    Coordinates enter the token only when ``embed_coords`` is set; off by default, which keeps
    scan attention translation invariant (location enters through the kernel bias alone). The
    last ``features`` columns of ``x`` (a ``ref_slots`` model's reference features) always enter.
    """

    def __init__(self, dim: int, dim_y: int, dim_x: int, *, embed_coords: bool, hidden: int,
                 temporal: bool = False, features: int = 0) -> None:
        """Build the module; the arguments are described in the class docstring."""
        super().__init__()
        self.embed_coords = embed_coords
        self.temporal = temporal
        self.features = features
        self.flag = nn.Embedding(3 if temporal else 2, 8)
        n_in = 8 + dim_y + (dim_x if embed_coords else features)
        self.mlp = MLP([n_in, hidden, dim])

    def forward(self, x: torch.Tensor, y: torch.Tensor, observed: bool) -> torch.Tensor:
        """``x [B, N, P], y [B, N, dy] -> [B, N, E]``.

        Flags: 0 a target (query), 1 an observed pixel of the target's date, 2 (temporal models)
        an observed pixel of another date (a reference: its date offset ``x[..., -1]`` is not 0).
        """
        if observed and self.temporal:
            flag = self.flag.weight[1 + (x[..., -1] != 0).long()]
        else:
            flag = self.flag.weight[int(observed)].expand(*y.shape[:-1], -1)
        parts = [flag, y, x if self.embed_coords else x[..., x.shape[-1] - self.features:]]  # 0 columns: none
        return self.mlp(torch.cat(parts, dim=-1))


class TNPKR(NeuralProcess):
    """Transformer Neural Process with Kernel Regression blocks.

    Built from a :class:`~geonp.config.ModelConfig`, whose checks it relies on: ``dim_y`` value
    channels and ``dim_x`` coordinates; ``depth`` KRBlocks of width ``dim`` with ``num_heads``
    heads, ``ff_dim`` feed-forward width and residual ``dropout``, each attending by
    :func:`~geonp.models.attention.make_attention` (``attention``, ``bias``, ``num_basis``,
    ``bias_length_scale``, ``time_length_scale``); a Gaussian head whose std is at least
    ``sigma_min``. With ``embed_coords`` the coordinates enter the tokens (which breaks
    translation invariance). A ``temporal`` (multi-date) model reads its last coordinate as the
    date offset in days (0 on the target's date): a temporal kernel bias joins the spatial one and
    reference tokens get their own flag (:mod:`geonp.models.attention.temporal`). A ``ref_slots``
    model reads the columns of ``x`` after (row, col) as each point's reference features: they
    enter its token (:class:`TokenEmbedding`), the kernel bias sees (row, col) alone.

    ``query_prior`` gives each query an inverse-distance estimate of the context at its place and
    its distance to the nearest context point (:func:`idw_prior`); the mean is predicted as a
    learned gain times that estimate plus a correction. Both enter through zero-initialised
    weights, so a model without the prior loads into one with it and predicts the same until
    trained (single-date models only).

    Args:
        cfg: the architecture.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        """Build the module; the argument is described in the class docstring."""
        super().__init__(dim_y=cfg.dim_y, dim_x=cfg.dim_x)
        self.temporal = cfg.temporal
        self.n_pos = cfg.dim_x - 3 * cfg.ref_slots  # coordinates the kernel bias reads
        self.embed = TokenEmbedding(cfg.dim, cfg.dim_y, cfg.dim_x, embed_coords=cfg.embed_coords,
                                    hidden=2 * cfg.dim, temporal=cfg.temporal, features=3 * cfg.ref_slots)
        blocks = [KRBlock(cfg.dim, make_attention(cfg), ff_dim=cfg.ff_dim, dropout=cfg.dropout)
                  for _ in range(cfg.depth)]
        self.blocks = nn.ModuleList(blocks)
        self.add_head(cfg.dim, sigma_min=cfg.sigma_min)
        self.query_prior = cfg.query_prior
        if cfg.query_prior:
            self.prior_proj = nn.Linear(cfg.dim_y + 1, cfg.dim)
            self.prior_gain = nn.Parameter(torch.zeros(cfg.dim_y))
            nn.init.zeros_(self.prior_proj.weight)
            nn.init.zeros_(self.prior_proj.bias)

    #: Parameters a model without the query prior lacks; they start at zero when it is loaded into one with it.
    PRIOR_KEYS = ("prior_proj.weight", "prior_proj.bias", "prior_gain")

    def encode_context(
        self, xc: torch.Tensor, yc: torch.Tensor, context_valid: torch.Tensor | None = None,
        *, share_distances: bool = True, groups: int = 1,
    ) -> ContextState:
        """Run the context stream: ``xc [B, Nc, P], yc [B, Nc, dy]``.

        With ``share_distances`` (the default) one :class:`DistanceCache` serves every layer of
        this pass and the decoding of its queries; without it each layer computes its own (same
        numbers, more work: the oracle of the cache's test). ``groups``: the batch is that many
        equal runs of one geometry (``xc``, ``context_valid`` and the queries' ``xt`` of every
        run are those of the first; the bands of a tile), whose kernel bias is worked out once
        (:class:`DistanceCache`; needs ``share_distances``).
        """
        if groups > 1 and (not share_distances or xc.shape[0] % groups):
            raise ValueError(f"groups={groups} needs share_distances and a batch ({xc.shape[0]}) it divides")
        cache = DistanceCache(groups=groups) if share_distances else None
        ks = self.embed(xc, yc, observed=True)
        xc = xc[..., :self.n_pos]
        tokens = [ks]
        # each block's queries read that block's *input* keys, so the last block's key update
        # would feed nothing: depth - 1 updates
        for block in cast(Sequence[KRBlock], self.blocks)[:-1]:
            ks = block.update_keys(ks, k_pos=xc, key_valid=context_valid, cache=cache)
            tokens.append(ks)
        return ContextState(tokens, xc, context_valid, cache, yc)

    def decode(self, state: ContextState, xt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Predict targets ``xt [B, Nt, P]`` from an encoded context; ``(mean, std) [B, Nt, dy]``."""
        qs = self.embed(xt, self.unknown_values(xt), observed=False)  # target values start at 0 (eq. 2)
        xt = xt[..., :self.n_pos]
        prior = None
        if self.query_prior:
            assert state.yc is not None, "the query prior needs the context values (ContextState.yc)"
            prior, nearest = idw_prior(xt, state.xc, state.yc, state.valid)
            qs = qs + self.prior_proj(torch.cat([prior, torch.log1p(nearest)[..., None]], dim=-1))
        for block, ks in zip(cast(Sequence[KRBlock], self.blocks), state.tokens, strict=True):
            qs = block.update_queries(qs, ks, q_pos=xt, k_pos=state.xc, key_valid=state.valid, cache=state.cache)
        mean, std = self.head(qs)
        if prior is not None:
            mean = mean + self.prior_gain * prior
        return mean, std
