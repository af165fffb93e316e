"""Neural process models (torch only); :func:`build_model` is the one reader of ``ModelConfig``."""

from __future__ import annotations

from torch import nn

from geonp.config import ModelConfig
from geonp.models.cmanp import CMANP
from geonp.models.tnpd import TNPD
from geonp.models.tnpkr import TNPKR


def build_model(cfg: ModelConfig) -> nn.Module:
    """Build an untrained model from its configuration."""
    common = {
        "dim_y": cfg.dim_y, "dim_x": cfg.dim_x, "dim": cfg.dim, "depth": cfg.depth, "num_heads": cfg.num_heads,
        "ff_dim": cfg.ff_dim, "sigma_min": cfg.sigma_min, "dropout": cfg.dropout,
    }
    if cfg.arch == "tnpd":
        return TNPD(**common)
    if cfg.arch == "cmanp":
        return CMANP(**common, num_latents=cfg.num_latents, pos_scale=cfg.bias_length_scale * 4)
    return TNPKR(
        **common, attention=cfg.attention, bias=cfg.bias, num_basis=cfg.num_basis,
        bias_length_scale=cfg.bias_length_scale, embed_coords=cfg.embed_coords,
        temporal=cfg.temporal, time_length_scale=cfg.time_length_scale,
    )


__all__ = ["CMANP", "TNPD", "TNPKR", "build_model"]
