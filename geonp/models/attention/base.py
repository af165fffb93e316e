"""The interface every attention module implements, and the key-mask rules every kernel shares.

:class:`AttentionModule` holds the one ``forward`` of the package (see :mod:`geonp.models.attention`
for the shape and mask conventions): a module projects its inputs to per-head tensors
(:meth:`~AttentionModule.project`), runs its kernel on them (:meth:`~AttentionModule.attend`) and
maps the heads back to the model width (:meth:`~AttentionModule.output`).
:class:`ProjectedAttention` is the common case of linear q/k/v/out projections.

The mask helpers write the conventions down once: ``key_valid [B, Nk]`` is True where a key may
be attended, and a query with no valid key at all receives zero.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import nn

from geonp.models.attention.bias import DistanceCache
from geonp.models.layers import MultiHeadProjection

__all__ = [
    "AttentionGeometry",
    "AttentionModule",
    "ProjectedAttention",
    "has_valid_key",
    "key_mask",
    "mask_keys",
    "valid_key_count",
    "zero_keyless_rows",
]


def key_mask(key_valid: torch.Tensor) -> torch.Tensor:
    """``key_valid [B, Nk]`` as a mask over logits ``[B, H, Nq, Nk]``: ``[B, 1, 1, Nk]``."""
    return key_valid[:, None, None, :]


def mask_keys(x: torch.Tensor, key_valid: torch.Tensor | None) -> torch.Tensor:
    """Per-key rows of ``x [B, H, Nk, R]`` with the invalid keys' rows zeroed (None: all kept)."""
    if key_valid is None:
        return x
    return x * key_valid[:, None, :, None]  # [B, 1, Nk, 1]


def has_valid_key(key_valid: torch.Tensor) -> torch.Tensor:
    """``[B, 1, 1, 1]``: True where a batch element has at least one valid key."""
    return key_valid.any(-1)[:, None, None, None]


def zero_keyless_rows(out: torch.Tensor, key_valid: torch.Tensor | None) -> torch.Tensor:
    """The package convention on ``out [B, H, Nq, Dv]``: zero where no key is valid.

    ``where`` rather than a product, so a NaN of an all-masked softmax row cannot leak through.
    """
    if key_valid is None:
        return out
    return torch.where(has_valid_key(key_valid), out, 0.0)


def valid_key_count(key_valid: torch.Tensor) -> torch.Tensor:
    """Valid keys per batch element, at least 1 (a divisor): ``[B, 1, 1, 1]``."""
    return key_valid.sum(-1).clamp_min(1)[:, None, None, None]


@dataclass(frozen=True)
class AttentionGeometry:
    """Where the queries and keys are, which keys count, and the distances a pass shares.

    Attributes:
        q_pos: query coordinates ``[B, Nq, P]``.
        k_pos: key coordinates ``[B, Nk, P]``.
        key_valid: ``[B, Nk]`` True where a key may be attended; None: every key.
        cache: squared distances shared by the layers of one forward pass, or None.
    """

    q_pos: torch.Tensor
    k_pos: torch.Tensor
    key_valid: torch.Tensor | None = None
    cache: DistanceCache | None = None


class AttentionModule(nn.Module, ABC):
    """Multi-head attention from query tokens to key tokens: project, attend, merge.

    Subclasses own the parameters and choose the kernel; ``forward`` is the same for all of them,
    so a block can hold any attention module (:func:`~geonp.models.attention.make_attention`).
    """

    def forward(
        self,
        x_q: torch.Tensor,
        x_kv: torch.Tensor,
        *,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        key_valid: torch.Tensor | None = None,
        cache: DistanceCache | None = None,
    ) -> torch.Tensor:
        """Attend from ``x_q [B, Nq, E]`` to ``x_kv [B, Nk, E]``; returns ``[B, Nq, E]``.

        Args:
            x_q: query tokens ``[B, Nq, E]``.
            x_kv: key and value tokens ``[B, Nk, E]``.
            q_pos: query coordinates ``[B, Nq, P]``.
            k_pos: key coordinates ``[B, Nk, P]``.
            key_valid: ``[B, Nk]`` True where a key may be attended.
            cache: shares squared distances between the layers of one forward pass (modules
                without a kernel bias ignore it).
        """
        where = AttentionGeometry(q_pos, k_pos, key_valid, cache)
        q, k, v = self.project(x_q, x_kv, where)  # [B, H, Nq, D], [B, H, Nk, D], [B, H, Nk, Dv]
        return self.output(self.attend(q, k, v, where))

    @abstractmethod
    def project(
        self, x_q: torch.Tensor, x_kv: torch.Tensor, where: AttentionGeometry
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-head queries ``[B, H, Nq, D]``, keys ``[B, H, Nk, D]`` and values ``[B, H, Nk, Dv]``."""

    @abstractmethod
    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, where: AttentionGeometry
    ) -> torch.Tensor:
        """Run the kernel on per-head tensors: ``[B, H, Nq, Dv]``, zero where no key is valid."""

    @abstractmethod
    def output(self, out: torch.Tensor) -> torch.Tensor:
        """Merge the heads of ``out [B, H, Nq, Dv]`` back to tokens ``[B, Nq, E]``."""


class ProjectedAttention(AttentionModule):
    """Attention whose heads come from linear q/k/v projections and merge through a linear one.

    Args:
        dim: model width ``E``.
        num_heads: heads ``H``.
    """

    def __init__(self, dim: int, num_heads: int) -> None:
        """Build the projections (``proj.to_q``, ``to_k``, ``to_v``, ``to_out``)."""
        super().__init__()
        self.proj = MultiHeadProjection(dim, num_heads)

    def project(
        self, x_q: torch.Tensor, x_kv: torch.Tensor, where: AttentionGeometry
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project and split into heads (positions unused)."""
        return self.proj.qkv(x_q, x_kv)

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """Merge the heads and apply the output projection."""
        return self.proj.merge(out)
