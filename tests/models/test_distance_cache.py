"""The per-pass distance cache (``bias.shared_distances``) changes no number, only the work done."""

from __future__ import annotations

import pytest
import torch

from geonp.config import ModelConfig
from geonp.models import build_model
from geonp.models.attention import bias
from geonp.models.layers import decode_in_chunks


def _task(seed: int = 0, nc: int = 70, nt: int = 45):
    g = torch.Generator().manual_seed(seed)
    xc = torch.randint(0, 40, (2, nc, 2), generator=g).float()  # pixel grid: the cached path
    xt = torch.randint(0, 40, (2, nt, 2), generator=g).float()
    yc = torch.randn(2, nc, 1, generator=g)
    valid = torch.rand(2, nc, generator=g) > 0.2  # padding keys point at the -inf sentinel
    return xc, yc, xt, valid


def _uncached(model, xc, yc, xt, valid, chunk):
    """The same forward pass as ``model(...)``, outside ``shared_distances()``: nothing cached."""
    assert bias._SQ_CACHE.get() is None
    state = model.encode_context(xc, yc, valid)
    return decode_in_chunks(lambda x: model.decode(state, x), xt, chunk)


@pytest.mark.parametrize("attention", ["scan", "dense"])
@pytest.mark.parametrize("chunk", [None, 16])
def test_model_output_is_identical_with_and_without_the_cache(attention, chunk):
    torch.manual_seed(0)
    model = build_model(ModelConfig(dim=16, depth=3, num_heads=2, ff_dim=32, attention=attention)).eval()
    xc, yc, xt, valid = _task()
    with torch.no_grad():
        cached = model(xc, yc, xt, valid, query_chunk=chunk)
        plain = _uncached(model, xc, yc, xt, valid, chunk)
    assert torch.equal(cached[0], plain[0]) and torch.equal(cached[1], plain[1])
    assert cached[1].min() > 0 and cached[0].abs().sum() > 0


def test_the_cache_is_used_and_stays_identical_when_it_evicts(monkeypatch):
    torch.manual_seed(1)
    model = build_model(ModelConfig(dim=16, depth=3, num_heads=2, ff_dim=32, attention="scan")).eval()
    xc, yc, xt, valid = _task(seed=3)
    with torch.no_grad():
        plain = _uncached(model, xc, yc, xt, valid, 8)
        with bias.shared_distances():
            model.encode_context(xc, yc, valid)
            cache = bias._SQ_CACHE.get()
            assert cache["tiles"] and cache["bytes"] > 0  # the grid tiles went through the cache
        limit = 20_000  # two [2, 8, 70] query-chunk tiles: older ones are dropped and recomputed
        monkeypatch.setattr(bias, "_MAX_CACHE_BYTES", limit)
        with bias.shared_distances():
            state = model.encode_context(xc, yc, valid)
            evicting = decode_in_chunks(lambda x: model.decode(state, x), xt, 8)
            cache = bias._SQ_CACHE.get()
            assert 0 < cache["bytes"] <= limit
    assert torch.equal(evicting[0], plain[0]) and torch.equal(evicting[1], plain[1])
