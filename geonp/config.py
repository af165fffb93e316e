"""Configuration dataclasses, built once at the edge; ``from_dict`` rejects unknown keys."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, TypeVar

from geonp.errors import ConfigError

T = TypeVar("T")

ARCHS = ("tnpkr", "tnpd", "cmanp")
ATTENTION_NAMES = ("scan", "dense", "dka", "performer")


def _from_dict(cls: type[T], data: dict[str, Any], what: str) -> T:
    if not isinstance(data, dict):
        raise ConfigError(f"{what} must be a mapping of option names to values, got {type(data).__name__}")
    valid = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - valid)
    if unknown:
        raise ConfigError(f"unknown {what} option(s) {unknown}; valid options: {sorted(valid)}")
    try:
        return cls(**data)
    except TypeError as err:
        raise ConfigError(f"invalid {what}: {err}") from err


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a model; stored in every model file so it can be rebuilt without code.

    Attributes:
        arch: ``"tnpkr"`` (default), ``"tnpd"`` (seed 001 baseline), ``"cmanp"`` (seed 003,
            constant memory in the context; embeds coordinates divided by ``4 * bias_length_scale``).
        attention: TNP-KR attention: ``"scan"``, ``"dense"``, ``"dka"``, ``"performer"``.
        dim_y: value channels modelled jointly (1 = each band on its own, any band count).
        dim_x: coordinate dimension.
        dim: model width.
        depth: blocks.
        num_heads: attention heads.
        ff_dim: feed-forward width.
        bias: kernel bias (``"rbf"``) or None.
        num_basis: basis functions of the RBF bias.
        bias_length_scale: typical distance in coordinate units (bias initialisation; CMANP's
            coordinate scale).
        embed_coords: put coordinates into tokens (not translation invariant).
        sigma_min: lower bound of the std in normalised units.
        dropout: residual dropout.
        coord_unit: what one coordinate unit is (``"pixel"`` for raster models).
        num_latents: CMANP latents per set (``|L_0| = |L_B|``).
    """

    arch: Literal["tnpkr", "tnpd", "cmanp"] = "tnpkr"
    attention: Literal["scan", "dense", "dka", "performer"] = "scan"
    dim_y: int = 1
    dim_x: int = 2
    dim: int = 64
    depth: int = 6
    num_heads: int = 4
    ff_dim: int = 256
    bias: str | None = "rbf"
    num_basis: int = 5
    bias_length_scale: float = 4.0
    embed_coords: bool = False
    sigma_min: float = 0.01
    dropout: float = 0.0
    coord_unit: str = "pixel"
    num_latents: int = 64

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ConfigError(f"arch={self.arch!r} is not one of {list(ARCHS)}")
        if self.attention not in ATTENTION_NAMES:
            raise ConfigError(f"attention={self.attention!r} is not one of {list(ATTENTION_NAMES)}")
        for name in ("dim_y", "dim_x", "dim", "depth", "num_heads", "ff_dim", "num_basis", "num_latents"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)!r} must be a positive integer")
        if self.dim % self.num_heads:
            raise ConfigError(f"dim={self.dim} must be divisible by num_heads={self.num_heads}")
        if not 0.0 <= self.sigma_min < 1.0:
            raise ConfigError(f"sigma_min={self.sigma_min} must be in [0, 1)")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Build from a mapping, rejecting unknown keys."""
        return _from_dict(cls, data, "model")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready)."""
        return asdict(self)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of :func:`geonp.training.loop.fit`.

    Attributes:
        steps: optimiser steps.
        lr: peak learning rate (cosine-annealed to ``lr * min_lr_ratio``).
        warmup_steps: linear warm-up steps.
        min_lr_ratio: final learning rate as a fraction of ``lr``.
        weight_decay: decoupled weight decay.
        optimizer: ``"adamw"`` or ``"yogi"``.
        grad_clip: global gradient-norm clip (3.0 in seed 002).
        val_every: validate every this many steps (and at the end).
        seed: seed of the model initialisation and the task sampler.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"``.
    """

    steps: int = 1000
    lr: float = 1e-3
    warmup_steps: int = 50
    min_lr_ratio: float = 0.05
    weight_decay: float = 1e-4
    optimizer: Literal["adamw", "yogi"] = "adamw"
    grad_clip: float = 3.0
    val_every: int = 100
    seed: int = 0
    device: str = "auto"

    def __post_init__(self) -> None:
        if self.optimizer not in ("adamw", "yogi"):
            raise ConfigError(f"optimizer={self.optimizer!r} is not one of ['adamw', 'yogi']")
        if self.steps < 1 or self.val_every < 1:
            raise ConfigError(f"steps={self.steps} and val_every={self.val_every} must be >= 1")
        if self.lr <= 0:
            raise ConfigError(f"lr={self.lr} must be > 0")
        if self.device not in ("cpu", "cuda", "auto"):
            raise ConfigError(f"device={self.device!r} is not one of ['auto', 'cpu', 'cuda']")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build from a mapping, rejecting unknown keys."""
        return _from_dict(cls, data, "training")
