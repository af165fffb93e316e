"""The per-pass distance cache (``bias.DistanceCache``) changes no number, only the work done."""

from __future__ import annotations

import pytest
import torch

from geonp.config import ModelConfig
from geonp.models import build_model
from geonp.models.attention import bias
from geonp.models.base import decode_in_chunks


def _task(seed: int = 0, nc: int = 70, nt: int = 45):
    g = torch.Generator().manual_seed(seed)
    xc = torch.randint(0, 40, (2, nc, 2), generator=g).float()  # pixel grid: the cached path
    xt = torch.randint(0, 40, (2, nt, 2), generator=g).float()
    yc = torch.randn(2, nc, 1, generator=g)
    valid = torch.rand(2, nc, generator=g) > 0.2  # padding keys point at the -inf entry
    return xc, yc, xt, valid


def _uncached(model, xc, yc, xt, valid, chunk):
    """The same forward pass as ``model(...)`` with no cache: every layer computes its own tiles."""
    state = model.encode_context(xc, yc, valid, share_distances=False)
    assert state.cache is None
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


def test_the_cache_is_used_and_stays_identical_when_it_evicts():
    torch.manual_seed(1)
    model = build_model(ModelConfig(dim=16, depth=3, num_heads=2, ff_dim=32, attention="scan")).eval()
    xc, yc, xt, valid = _task(seed=3)
    with torch.no_grad():
        plain = _uncached(model, xc, yc, xt, valid, 8)
        state = model.encode_context(xc, yc, valid)
        assert state.cache.tile_bytes and state.cache.bytes > 0  # the grid tiles went through the cache
        n_tiles = len(state.cache.tile_bytes)
        assert n_tiles == 1  # one [2, 70, 70] tile of squared distances, shared by the 3 layers
        state.cache.max_bytes = limit = 6_000  # two [2, 8, 70] int32 query-chunk tiles
        evicting = decode_in_chunks(lambda x: model.decode(state, x), xt, 8)
        assert 0 < state.cache.bytes <= limit
    assert torch.equal(evicting[0], plain[0]) and torch.equal(evicting[1], plain[1])


def test_a_cache_key_pins_its_tensor_so_its_storage_is_not_reused():
    cache = bias.DistanceCache()
    key = cache.key(torch.arange(6.0).reshape(2, 3), "tag")
    for _ in range(20):  # new tensors of the same shape never get the pinned storage
        other = torch.zeros(2, 3)
        assert cache.key(other, "tag") != key
        del other
