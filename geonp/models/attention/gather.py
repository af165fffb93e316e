"""Reading a per-head bias table at integer indices: the grid path's only per-pair operation.

A bias table ``[H, T]`` holds the kernel bias at each distinct squared distance; a tile of the
bias is the table read at the tile's squared-distance indices ``[B, Qc, Kc]``. Training needs the
gradient of the table, the sum of the logits' gradients over every pair that read each entry.

Autograd's own path (advanced indexing, ``table[:, index]``) is the slower, obviously correct
twin, :func:`gather_table_reference`: its backward is an accumulating ``index_put`` that was, on
the CPU, as slow as the rest of the attention's backward together. :func:`gather_table` reads
with one ``index_select`` per head and sums the gradient with one ``index_add_`` per head (a
histogram of the gradient over the indices); tests/models/test_training_kernels.py ties the two.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["gather_table", "gather_table_reference"]


def _select(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table [H, T]`` at ``index [B, Qc, Kc]`` -> ``[B, H, Qc, Kc]`` (a permuted view of ``[H, B, Qc, Kc]``)."""
    out = table.new_empty((table.shape[0], *index.shape))  # [H, B, Qc, Kc]
    flat = index.reshape(-1)
    for h in range(table.shape[0]):
        torch.index_select(table[h], 0, flat, out=out[h].view(-1))
    return out.permute(1, 0, 2, 3)


class _GatherTableFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(index)
        ctx.size = table.shape[1]
        return _select(table, index)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        (index,) = ctx.saved_tensors
        heads = grad.shape[1]
        flat = index.reshape(-1)
        # index_add_ sums in the grad's own dtype, in order per head (deterministic on the CPU)
        out = grad.new_zeros((heads, ctx.size))  # [H, T]
        for h in range(heads):
            out[h].index_add_(0, flat, grad[:, h].reshape(-1))  # grad[:, h]: [B, Qc, Kc]
        return out, None


def gather_table(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table [H, T]`` read at ``index [B, Qc, Kc]`` (integers in ``[0, T)``): ``[B, H, Qc, Kc]``.

    Differentiable in ``table``; the backward is a per-head ``index_add_`` of the incoming
    gradient (see the module docstring). Without gradients it is the same ``index_select``.
    """
    if torch.is_grad_enabled() and table.requires_grad:
        return _GatherTableFn.apply(table, index)
    return _select(table, index)


def gather_table_reference(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The twin of :func:`gather_table` by advanced indexing (autograd's own backward)."""
    return table[:, index.long()].permute(1, 0, 2, 3)  # [H, B, Qc, Kc] -> [B, H, Qc, Kc]
