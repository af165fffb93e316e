"""Neural process models (torch only); :func:`build_model` is the one reader of ``ModelConfig``."""

from __future__ import annotations

import torch
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
        temporal=cfg.temporal, time_length_scale=cfg.time_length_scale, query_prior=cfg.query_prior,
    )


def load_start_weights(module: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Load the weights a training run starts from; strict, except the query prior's parameters.

    A model with the query prior can start from one without it: its prior weights stay at their
    zero initialisation, so it predicts what the start model predicts until trained. Any other
    missing, unexpected or mis-shaped weight raises RuntimeError.
    """
    optional = set(TNPKR.PRIOR_KEYS) if getattr(module, "query_prior", False) else set()
    missing, unexpected = module.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k not in optional]
    if missing or unexpected:
        raise RuntimeError(f"missing weights {missing}, unexpected weights {unexpected}")


__all__ = ["CMANP", "TNPD", "TNPKR", "build_model", "load_start_weights"]
