"""The contract every model family fulfils through :class:`geonp.models.base.NeuralProcess`."""

import pytest
import torch

from geonp.config import ModelConfig
from geonp.models import build_model
from geonp.models.base import NeuralProcess, decode_in_chunks

SIGMA_MIN = 0.05
FAMILIES = [
    pytest.param({"arch": "tnpkr", "attention": "scan"}, id="tnpkr-scan"),
    pytest.param({"arch": "tnpkr", "attention": "dka"}, id="tnpkr-dka"),
    pytest.param({"arch": "tnpkr", "attention": "scan", "query_prior": True}, id="tnpkr-prior"),
    pytest.param({"arch": "tnpd"}, id="tnpd"),
    pytest.param({"arch": "cmanp", "num_latents": 8}, id="cmanp"),
]


def _model(family, seed=0):
    torch.manual_seed(seed)
    cfg = ModelConfig(dim=16, depth=2, num_heads=2, ff_dim=32, dim_y=2, sigma_min=SIGMA_MIN, **family)
    model = build_model(cfg).eval()
    with torch.no_grad():  # move the zero-initialised weights (query prior) off zero
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _task(seed=1, b=2, nc=30, nt=11):
    g = torch.Generator().manual_seed(seed)
    xc = torch.randint(0, 20, (b, nc, 2), generator=g).float()
    yc = torch.randn(b, nc, 2, generator=g)
    xt = torch.randint(0, 20, (b, nt, 2), generator=g).float()
    valid = torch.rand(b, nc, generator=g) > 0.3
    return xc, yc, xt, valid


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_is_a_neural_process_with_the_same_forward_contract(family):
    model = _model(family)
    xc, yc, xt, valid = _task()
    with torch.no_grad():
        mean, std = model(xc, yc, xt, valid)
    assert isinstance(model, NeuralProcess)
    assert (model.dim_x, model.dim_y) == (2, 2)
    assert mean.shape == std.shape == (2, 11, 2)
    assert torch.isfinite(mean).all()
    assert float(std.min()) >= SIGMA_MIN
    assert model.unknown_values(xt).shape == (2, 11, 2) and not model.unknown_values(xt).any()


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_is_decode_of_the_conditioned_context_in_any_chunking(family):
    model = _model(family)
    xc, yc, xt, valid = _task()
    with torch.no_grad():
        mean, std = model(xc, yc, xt, valid)
        state = model.condition(xc, yc, valid)
        by_hand = model.decode(state, xt)
        chunked = model(xc, yc, xt, valid, query_chunk=4)
        by_threes = decode_in_chunks(lambda x: model.decode(state, x), xt, 3)
    assert torch.equal(by_hand[0], mean) and torch.equal(by_hand[1], std)
    # the query prior's squared distances (|a|² + |b|² - 2ab) round differently per chunk shape
    atol = 1e-3 if family.get("query_prior") else 1e-6
    for m, s in (chunked, by_threes):
        torch.testing.assert_close(m, mean, rtol=1e-5, atol=atol)
        torch.testing.assert_close(s, std, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("family", FAMILIES)
def test_padded_context_points_change_nothing(family):
    model = _model(family)
    xc, yc, xt, valid = _task()
    noisy = torch.where(valid[..., None], yc, yc + 100.0)  # only the padding changes
    with torch.no_grad():
        mean, std = model(xc, yc, xt, valid)
        mean2, std2 = model(xc, noisy, xt, valid)
    assert torch.equal(mean, mean2) and torch.equal(std, std2)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_query_with_no_context_gets_a_finite_prediction_independent_of_the_padding(family):
    model = _model(family)
    xc, yc, xt, _ = _task()
    none = torch.zeros(xc.shape[:2], dtype=torch.bool)
    with torch.no_grad():
        mean, std = model(xc, yc, xt, none)
        mean2, std2 = model(xc, -3.0 * yc, xt, none)
    assert torch.isfinite(mean).all() and float(std.min()) >= SIGMA_MIN
    torch.testing.assert_close(mean2, mean, rtol=0, atol=1e-6)
    torch.testing.assert_close(std2, std, rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_shapes_and_options_are_checked_for_every_family(family):
    model = _model(family)
    xc, yc, xt, valid = _task()
    with pytest.raises(ValueError, match=r"expected xc \[B, Nc, 2\], yc \[B, Nc, 2\].*got xc \(2, 30, 2\), yc \(2, 30, 1\)"):
        model(xc, yc[..., :1], xt, valid)
    with pytest.raises(ValueError, match=r"context_valid \(2, 29\)"):
        model(xc, yc, xt, valid[:, 1:])
    with pytest.raises(TypeError, match="no_such_option"):
        model(xc, yc, xt, valid, no_such_option=1)


def test_cmanp_takes_its_context_chunk_through_forward():
    model = _model({"arch": "cmanp", "num_latents": 8})
    xc, yc, xt, valid = _task()
    with torch.no_grad():
        whole = model(xc, yc, xt, valid)
        folded = model(xc, yc, xt, valid, context_chunk=7)
    torch.testing.assert_close(folded[0], whole[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(folded[1], whole[1], rtol=1e-5, atol=1e-6)


def test_a_family_must_implement_both_phases():
    class EncodeOnly(NeuralProcess):
        def encode_context(self, xc, yc, context_valid=None):
            return xc

    with pytest.raises(TypeError, match="abstract"):
        EncodeOnly(dim_y=1, dim_x=2)


def test_every_family_shares_the_gaussian_head():
    heads = {}
    for family in FAMILIES:
        model = _model(family.values[0])
        heads[family.id] = sorted(k for k in model.state_dict() if k.startswith("head."))
        assert model.head.sigma_min == SIGMA_MIN
        assert tuple(model.head.mlp[-1].weight.shape) == (2 * 2, 2 * 16)  # mean and raw std per channel
    assert len({tuple(v) for v in heads.values()}) == 1
    assert heads["tnpd"] == ["head.mlp.0.bias", "head.mlp.0.weight", "head.mlp.2.bias", "head.mlp.2.weight",
                             "head.norm.bias", "head.norm.weight"]
