"""The query prior: an inverse-distance estimate and the distance to data given to each query."""

import numpy as np
import pytest
import torch

from geonp.config import ModelConfig
from geonp.errors import ConfigError
from geonp.model_files.checkpoint import load_checkpoint, save_model
from geonp.models import build_model, load_start_weights
from geonp.models.tnpkr import idw_prior


def _idw_slow(xt, xc, yc, valid, eps=0.25):
    """One query at a time, in float64: the formula as written."""
    b, nt = xt.shape[:2]
    prior = np.zeros((b, nt, yc.shape[-1]))
    nearest = np.zeros((b, nt))
    for i in range(b):
        keep = valid[i]
        for j in range(nt):
            d2 = ((xc[i, keep] - xt[i, j]) ** 2).sum(-1)
            w = 1.0 / (d2 + eps)
            prior[i, j] = (w[:, None] * yc[i, keep]).sum(0) / w.sum()
            nearest[i, j] = np.sqrt(d2.min())
    return prior, nearest


@pytest.mark.parametrize("offset", [0.0, 7000.0])
def test_idw_prior_equals_its_slow_twin(offset):
    # scene-sized pixel coordinates (offset 7000) keep float32 precision: distances are centred
    g = torch.Generator().manual_seed(3)
    xc = torch.randint(0, 60, (3, 80, 2), generator=g).double() + offset
    xt = torch.randint(0, 60, (3, 40, 2), generator=g).double() + offset
    yc = torch.randn(3, 80, 2, generator=g, dtype=torch.float64)
    valid = torch.rand(3, 80, generator=g) > 0.3
    want_prior, want_near = _idw_slow(xt.numpy(), xc.numpy(), yc.numpy(), valid.numpy())
    prior, near = idw_prior(xt.float(), xc.float(), yc.float(), valid)
    np.testing.assert_allclose(prior.numpy(), want_prior, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(near.numpy(), want_near, rtol=1e-4, atol=1e-3)
    # on a context pixel the distance to data is 0
    prior, near = idw_prior(xc[:, :5].float(), xc.float(), yc.float(), None)
    assert float(near.abs().max()) < 0.05


def _config(**kw):
    return ModelConfig(**{"dim": 32, "depth": 2, "num_heads": 4, "ff_dim": 64, **kw})


def _task(seed=0):
    g = torch.Generator().manual_seed(seed)
    xc = torch.randint(0, 40, (2, 60, 2), generator=g).float()
    xt = torch.randint(0, 40, (2, 25, 2), generator=g).float()
    yc = torch.randn(2, 60, 1, generator=g)
    return xc, yc, xt, torch.rand(2, 60, generator=g) > 0.2


def test_a_model_without_the_prior_starts_one_with_it_and_predicts_the_same(tmp_path):
    torch.manual_seed(0)
    plain = build_model(_config()).eval()
    with_prior = build_model(_config(query_prior=True)).eval()
    load_start_weights(with_prior, plain.state_dict())
    xc, yc, xt, valid = _task()
    with torch.no_grad():
        m0, s0 = plain(xc, yc, xt, valid)
        m1, s1 = with_prior(xc, yc, xt, valid)
    torch.testing.assert_close(m1, m0, rtol=0, atol=0)
    torch.testing.assert_close(s1, s0, rtol=0, atol=0)
    # the prior's weights learn: one step moves the gain and the projection
    with_prior.train()
    mean, _std = with_prior(xc, yc, xt, valid)
    ((mean - 1.0) ** 2).mean().backward()
    assert float(with_prior.prior_gain.grad.abs().sum()) > 0
    assert float(with_prior.prior_proj.weight.grad.abs().sum()) > 0
    # and the model file keeps the option: a saved model loads with its prior
    with torch.no_grad():
        with_prior.prior_gain.fill_(0.5)
    save_model(tmp_path / "m", with_prior, _config(query_prior=True))
    loaded = load_checkpoint(tmp_path / "m")
    assert loaded.config.query_prior is True
    with_prior.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded.module(xc, yc, xt, valid)[0], with_prior(xc, yc, xt, valid)[0])


def test_the_gain_carries_the_prior_into_the_mean():
    torch.manual_seed(0)
    model = build_model(_config(query_prior=True)).eval()
    xc, yc, xt, valid = _task(1)
    with torch.no_grad():
        m0, _ = model(xc, yc, xt, valid)
        model.prior_gain.fill_(1.0)
        m1, _ = model(xc, yc, xt, valid)
    prior, _ = idw_prior(xt, xc, yc, valid)
    torch.testing.assert_close(m1 - m0, prior, rtol=1e-5, atol=1e-5)


def test_other_missing_weights_still_refuse_to_load():
    plain = build_model(_config(depth=1))
    with_prior = build_model(_config(depth=2, query_prior=True))
    with pytest.raises(RuntimeError, match="missing weights"):
        load_start_weights(with_prior, plain.state_dict())
    # and a model without the prior does not silently drop the prior's weights
    with pytest.raises(RuntimeError, match="unexpected weights"):
        load_start_weights(build_model(_config()), build_model(_config(query_prior=True)).state_dict())


@pytest.mark.parametrize("kw, message", [
    ({"arch": "tnpd"}, "needs arch tnpkr"),
    ({"temporal": True, "dim_x": 3}, "single-date"),
    ({"query_prior": "yes"}, "must be true or false"),
])
def test_bad_query_prior_configs_are_refused(kw, message):
    with pytest.raises(ConfigError, match=message):
        _config(**{"query_prior": True, **kw})
