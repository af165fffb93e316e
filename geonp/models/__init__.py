"""Neural process models (torch only), each built from a ``ModelConfig`` (:func:`build_model`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from geonp.config import ModelConfig
from geonp.errors import UnknownNameError
from geonp.models.cmanp import CMANP
from geonp.models.tnpd import TNPD
from geonp.models.tnpkr import TNPKR


@dataclass(frozen=True)
class ModelFamily:
    """A model family: how to build it, and what to call it.

    Attributes:
        build: ``config -> module``: the family's class.
        title: its name for people (model cards); ``{attention}`` stands for the attention kernel.
    """

    build: Callable[[ModelConfig], nn.Module]
    title: str

    def describe(self, cfg: ModelConfig) -> str:
        """The family's title for a model of this configuration."""
        return self.title.format(attention=cfg.attention)


#: The model families (``ModelConfig.arch``), by name. :data:`geonp.config.ARCHS` lists the same
#: names for the CLI.
MODEL_FAMILIES: dict[str, ModelFamily] = {
    "tnpkr": ModelFamily(TNPKR, "TNP-KR ({attention})"),
    "tnpd": ModelFamily(TNPD, "TNP-D"),
    "cmanp": ModelFamily(CMANP, "CMANP"),
}


def build_model(cfg: ModelConfig) -> nn.Module:
    """Build an untrained model from its configuration.

    Raises:
        UnknownNameError: ``cfg.arch`` is not one of :data:`MODEL_FAMILIES`.
    """
    UnknownNameError.check("arch", cfg.arch, MODEL_FAMILIES)
    return MODEL_FAMILIES[cfg.arch].build(cfg)


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
