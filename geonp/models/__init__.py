"""Neural process models (torch only); :func:`build_model` is the one reader of ``ModelConfig``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from geonp.config import ModelConfig
from geonp.errors import UnknownNameError
from geonp.models.cmanp import CMANP
from geonp.models.tnpd import TNPD
from geonp.models.tnpkr import TNPKR


def _tnpkr(cfg: ModelConfig, common: dict[str, Any]) -> nn.Module:
    return TNPKR(
        **common, attention=cfg.attention, bias=cfg.bias, num_basis=cfg.num_basis,
        bias_length_scale=cfg.bias_length_scale, embed_coords=cfg.embed_coords,
        temporal=cfg.temporal, time_length_scale=cfg.time_length_scale, query_prior=cfg.query_prior,
    )


def _tnpd(cfg: ModelConfig, common: dict[str, Any]) -> nn.Module:
    return TNPD(**common)


def _cmanp(cfg: ModelConfig, common: dict[str, Any]) -> nn.Module:
    return CMANP(**common, num_latents=cfg.num_latents, pos_scale=cfg.bias_length_scale * 4)


@dataclass(frozen=True)
class ModelFamily:
    """A model family: how to build it, and what to call it.

    Attributes:
        build: ``(config, common) -> module``; ``common`` holds the arguments every family takes.
        title: its name for people (model cards); ``{attention}`` stands for the attention kernel.
    """

    build: Callable[[ModelConfig, dict[str, Any]], nn.Module]
    title: str

    def describe(self, cfg: ModelConfig) -> str:
        """The family's title for a model of this configuration."""
        return self.title.format(attention=cfg.attention)


#: The model families (``ModelConfig.arch``), by name. :data:`geonp.config.ARCHS` lists the same
#: names for the CLI.
MODEL_FAMILIES: dict[str, ModelFamily] = {
    "tnpkr": ModelFamily(_tnpkr, "TNP-KR ({attention})"),
    "tnpd": ModelFamily(_tnpd, "TNP-D"),
    "cmanp": ModelFamily(_cmanp, "CMANP"),
}


def build_model(cfg: ModelConfig) -> nn.Module:
    """Build an untrained model from its configuration.

    Raises:
        UnknownNameError: ``cfg.arch`` is not one of :data:`MODEL_FAMILIES`.
    """
    UnknownNameError.check("arch", cfg.arch, MODEL_FAMILIES)
    common = {
        "dim_y": cfg.dim_y, "dim_x": cfg.dim_x, "dim": cfg.dim, "depth": cfg.depth, "num_heads": cfg.num_heads,
        "ff_dim": cfg.ff_dim, "sigma_min": cfg.sigma_min, "dropout": cfg.dropout,
    }
    return MODEL_FAMILIES[cfg.arch].build(cfg, common)


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


__all__ = ["CMANP", "MODEL_FAMILIES", "TNPD", "TNPKR", "ModelFamily", "build_model", "load_start_weights"]
