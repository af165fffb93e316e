"""The neural process contract every model family fulfils: context in, a Gaussian per target out.

A family (:class:`~geonp.models.tnpkr.TNPKR`, :class:`~geonp.models.tnpd.TNPD`,
:class:`~geonp.models.cmanp.CMANP`) implements two phases, as the CMANP paper (Feng et al.) names them: conditioning
(:meth:`NeuralProcess.encode_context`, the context alone) and querying
(:meth:`NeuralProcess.decode`, targets given the conditioned context). :meth:`NeuralProcess.forward`
is the same for every family: check the inputs, condition once, decode the targets (a chunk at a
time if asked) through the Gaussian head. Targets are independent given the context in every
family, so chunking changes no prediction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from geonp.models.heads import GaussianHead

__all__ = ["NeuralProcess", "check_shapes", "decode_in_chunks"]


def decode_in_chunks(
    decode: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    xt: torch.Tensor,
    query_chunk: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``decode`` on ``xt [B, Nt, P]`` in chunks of targets and concatenate ``(mean, std)``.

    Valid for models whose targets are independent given the context (all of geonp's).
    """
    if query_chunk is None or query_chunk >= xt.shape[1]:
        return decode(xt)
    parts = [decode(xt[:, i : i + query_chunk]) for i in range(0, xt.shape[1], query_chunk)]
    return torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts], 1)


def check_shapes(
    xc: torch.Tensor,
    yc: torch.Tensor,
    xt: torch.Tensor,
    context_valid: torch.Tensor | None,
    dim_x: int,
    dim_y: int,
) -> None:
    """Raise ValueError unless ``xc [B, Nc, P], yc [B, Nc, dy], xt [B, Nt, P], context_valid [B, Nc]``.

    Every neural process of geonp checks its inputs with it.
    """
    ok = (
        xc.dim() == 3 and yc.dim() == 3 and xt.dim() == 3
        and xc.shape[:2] == yc.shape[:2] and xt.shape[0] == xc.shape[0]
        and xc.shape[-1] == dim_x and xt.shape[-1] == dim_x and yc.shape[-1] == dim_y
        and (context_valid is None or context_valid.shape == xc.shape[:2])
    )
    if not ok:
        cv = None if context_valid is None else tuple(context_valid.shape)
        raise ValueError(
            f"expected xc [B, Nc, {dim_x}], yc [B, Nc, {dim_y}], xt [B, Nt, {dim_x}], context_valid "
            f"[B, Nc]; got xc {tuple(xc.shape)}, yc {tuple(yc.shape)}, xt {tuple(xt.shape)}, "
            f"context_valid {cv}"
        )


class NeuralProcess(nn.Module, ABC):
    """A neural process over ``dim_x``-dimensional coordinates and ``dim_y`` value channels.

    A family builds its layers, then its head with :meth:`add_head` (built last, so that a seeded
    model initialises its parameters in the same order as ever), and implements
    :meth:`encode_context` and :meth:`decode`.

    Args:
        dim_y: value channels ``dy``.
        dim_x: coordinate dimension ``P``.
    """

    def __init__(self, *, dim_y: int, dim_x: int) -> None:
        """Keep the dimensions; the arguments are described in the class docstring."""
        super().__init__()
        self.dim_y, self.dim_x = dim_y, dim_x

    def add_head(self, dim: int, *, sigma_min: float) -> None:
        """Attach the Gaussian head on features of width ``dim`` (``std >= sigma_min``)."""
        self.head = GaussianHead(dim, self.dim_y, hidden=2 * dim, sigma_min=sigma_min)

    def unknown_values(self, xt: torch.Tensor) -> torch.Tensor:
        """Zeros ``[B, Nt, dy]``: a target's values before prediction (the TNP-KR paper eq. 2)."""
        return xt.new_zeros((*xt.shape[:-1], self.dim_y))

    @abstractmethod
    def encode_context(
        self, xc: torch.Tensor, yc: torch.Tensor, context_valid: torch.Tensor | None = None
    ) -> Any:
        """Conditioning phase: the context ``xc [B, Nc, P], yc [B, Nc, dy]`` as a family state.

        A family may add keyword-only options with defaults (CMANP: ``context_chunk``).
        """

    @abstractmethod
    def decode(self, state: Any, xt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Querying phase: ``(mean, std)``, each ``[B, Nt, dy]``, at ``xt [B, Nt, P]``."""

    def condition(
        self, xc: torch.Tensor, yc: torch.Tensor, context_valid: torch.Tensor | None = None,
        **options: Any,
    ) -> Any:
        """What :meth:`decode` reads: by default the state of :meth:`encode_context`."""
        return self.encode_context(xc, yc, context_valid, **options)

    def forward(
        self,
        xc: torch.Tensor,
        yc: torch.Tensor,
        xt: torch.Tensor,
        context_valid: torch.Tensor | None = None,
        *,
        query_chunk: int | None = None,
        **options: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Predictive mean and std at ``xt``.

        Args:
            xc: context coordinates ``[B, Nc, P]``.
            yc: context values ``[B, Nc, dy]``.
            xt: target coordinates ``[B, Nt, P]``.
            context_valid: ``[B, Nc]`` True for real context points (False = padding).
            query_chunk: decode targets this many at a time (same result, less memory).
            **options: the family's options of :meth:`encode_context` (CMANP: ``context_chunk``).

        Returns:
            ``(mean, std)``, each ``[B, Nt, dy]``.

        Raises:
            ValueError: the shapes do not fit each other or the model's dimensions.
        """
        check_shapes(xc, yc, xt, context_valid, self.dim_x, self.dim_y)
        state = self.condition(xc, yc, context_valid, **options)
        return decode_in_chunks(lambda x: self.decode(state, x), xt, query_chunk)
