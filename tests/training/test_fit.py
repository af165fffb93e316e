import math

import numpy as np
import pytest
import torch

from geonp.config import ModelConfig, TrainConfig
from geonp.data.gp_tasks import oracle_scores, sample_gp_batch
from geonp.errors import ConfigError
from geonp.models import build_model
from geonp.training.loop import FitHooks, evaluate_nll, fit
from geonp.training.optim import Yogi, cosine_lr


def _wave_batch(seed: int, b: int = 8, n: int = 48):
    """Tasks from smooth random-phase waves on [-2, 2]²: quick to learn, so 20 steps show it."""
    from geonp.data.batch import Batch

    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, 2 * n, 2, generator=g) * 4 - 2
    phase = torch.rand(b, 1, generator=g) * 6.28
    y = (torch.sin(1.5 * x[..., 0] + phase) * torch.cos(1.5 * x[..., 1]))[..., None]
    y = y + 0.05 * torch.randn(y.shape, generator=g)
    return Batch(xc=x[:, :n], yc=y[:, :n], xt=x[:, n:], yt=y[:, n:])


@pytest.mark.parametrize("optimizer", ["adamw", "yogi"])
def test_fit_lowers_nll_and_keeps_the_best(optimizer):
    model = build_model(ModelConfig(dim=32, depth=2, ff_dim=64, bias_length_scale=0.5))
    val = [_wave_batch(99)]
    before = evaluate_nll(model, val, torch.device("cpu"))
    seen = []
    res = fit(model, _wave_batch, val,
              TrainConfig(steps=20, val_every=5, lr=3e-3, warmup_steps=2, optimizer=optimizer, device="cpu"),
              hooks=FitHooks(on_validate=lambda rec, best, r: seen.append((rec["step"], best))))
    assert [s for s, _ in seen] == [5, 10, 15, 20]
    assert res.best_val_nll < before - 0.1, (before, res.best_val_nll)
    assert res.best_val_nll == min(h["val_nll"] for h in res.history)
    assert res.best_state is not None and res.step == 20


def test_seeded_runs_are_identical():
    def run():
        torch.manual_seed(3)
        model = build_model(ModelConfig(dim=16, depth=1, num_heads=2, ff_dim=32))
        fit(model, lambda s: sample_gp_batch(4, np.random.default_rng(s)).batch, [],
            TrainConfig(steps=3, val_every=3, device="cpu"))
        return torch.cat([p.flatten() for p in model.parameters()])

    assert torch.equal(run(), run())


def test_cosine_schedule_and_yogi_step():
    assert cosine_lr(0, total=100, warmup=10, min_ratio=0.1) == pytest.approx(0.1)
    assert cosine_lr(10, total=100, warmup=10, min_ratio=0.1) == pytest.approx(1.0)
    assert cosine_lr(100, total=100, warmup=10, min_ratio=0.1) == pytest.approx(0.1)
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = Yogi([w], lr=0.1)
    w.grad = torch.tensor([0.5, -0.5])
    opt.step()
    # first step: m = 0.05 g, v = 1e-6 + 0.001 g^2 (v < g^2 so it grows); bias-corrected step ~ lr * sign(g)
    assert w[0] < 1.0 and w[1] > -2.0
    assert float(w[0]) == pytest.approx(1.0 - 0.1 * 0.5 / (math.sqrt(1e-6 + 0.001 * 0.25) / math.sqrt(0.001) + 1e-3 / math.sqrt(0.001)) , rel=1e-3)


def test_gp_oracle_is_calibrated():
    s = oracle_scores(sample_gp_batch(16, np.random.default_rng(5)))
    assert 0.92 <= s["coverage95"] <= 0.98
    assert s["nll"] < 1.0


def test_config_errors():
    with pytest.raises(ConfigError, match="dim=30 must be divisible by num_heads=4"):
        ModelConfig(dim=30)
    with pytest.raises(ConfigError, match="optimizer='sgd'"):
        TrainConfig(optimizer="sgd")
