"""The neural-process task container shared by training, evaluation and inference."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch


@dataclass
class Batch:
    """A batch of NP tasks (tnp notation).

    Attributes:
        xc: context coordinates ``[B, Nc, P]`` (pixel units for rasters: (row, col)).
        yc: context values ``[B, Nc, dy]`` (normalised).
        xt: target coordinates ``[B, Nt, P]``.
        yt: target values ``[B, Nt, dy]`` or None at inference.
        context_valid: ``[B, Nc]`` True for real context points (False = padding).
        target_valid: ``[B, Nt]`` True for real targets (False = padding).
    """

    xc: torch.Tensor
    yc: torch.Tensor
    xt: torch.Tensor
    yt: torch.Tensor | None = None
    context_valid: torch.Tensor | None = None
    target_valid: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> Batch:
        """Move every tensor to ``device``."""
        moved: dict[str, Any] = {
            f.name: (getattr(self, f.name).to(device) if getattr(self, f.name) is not None else None)
            for f in fields(self)
        }
        return Batch(**moved)
