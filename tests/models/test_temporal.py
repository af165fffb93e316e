"""The space-time kernel bias and the multi-date TNP-KR."""

import pytest
import torch

from geonp.config import ModelConfig
from geonp.errors import ConfigError
from geonp.models import TNPKR, build_model
from geonp.models.attention.temporal import SpaceTimeBias


def _points(b=2, n=30, seed=0, days=(0, -16, -32, 48)):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 20, (b, n, 3), generator=g).float()
    pick = torch.randint(0, len(days), (b, n), generator=g)
    x[..., 2] = torch.tensor(days, dtype=torch.float32)[pick]
    return x


def _bias(seed=0):
    torch.manual_seed(seed)
    bias = SpaceTimeBias(4, num_basis=5, length_scale=4.0, time_length_scale=32.0)
    with torch.no_grad():
        bias.time.a.normal_()
    return bias


@pytest.mark.parametrize("shift", [100.0, -7.0, 3650.0])
def test_temporal_bias_is_invariant_to_a_shift_of_all_dates(shift):
    bias = _bias()
    q, k = _points(seed=1), _points(seed=2)
    before = bias.tiles(q, k).full()
    moved_q, moved_k = q.clone(), k.clone()
    moved_q[..., 2] += shift
    moved_k[..., 2] += shift
    after = bias.tiles(moved_q, moved_k).full()
    torch.testing.assert_close(after, before)


def test_temporal_bias_adds_the_time_kernel_of_the_day_difference():
    bias = _bias()
    q, k = _points(seed=3), _points(seed=4)
    dt = (q[..., 2][:, :, None] - k[..., 2][:, None, :]).abs()
    expected_time = bias.time.evaluate((bias.time.a, bias.time.b, bias.time.c), dt).permute(1, 0, 2, 3)
    space = bias.space.tiles(q[..., :2], k[..., :2]).full()
    torch.testing.assert_close(bias.tiles(q, k).full(), space + expected_time)
    # fractional days take the direct path: the same kernel
    qf, kf = q.clone(), k.clone()
    qf[..., 2] += 0.5
    torch.testing.assert_close(bias.tiles(qf, kf).full()[..., :1, :],
                               (space + bias.time.evaluate((bias.time.a, bias.time.b, bias.time.c),
                                                           (qf[..., 2][:, :, None] - kf[..., 2][:, None, :]).abs()
                                                           ).permute(1, 0, 2, 3))[..., :1, :])


def test_time_bias_is_skipped_when_no_point_has_another_date():
    bias = _bias()
    q, k = _points(seed=5, days=(0,)), _points(seed=6, days=(0,))
    tiles = bias.tiles(q, k)
    assert len(tiles.tensors) == 1  # the spatial table alone
    torch.testing.assert_close(tiles.full(), bias.space.tiles(q[..., :2], k[..., :2]).full())


def _temporal(**kw):
    return TNPKR(ModelConfig(dim_x=3, temporal=True, **kw))


def _chunked(model, chunk):
    """``model`` with scan tiles of ``chunk`` queries by ``chunk`` keys."""
    for block in model.blocks:
        block.attn.q_chunk = block.attn.k_chunk = chunk
    return model


def test_scan_equals_dense_with_dates_forward_and_backward():
    torch.manual_seed(0)
    scan = _chunked(_temporal(depth=2, dim=32), 16)
    dense = _temporal(depth=2, dim=32, attention="dense")
    with torch.no_grad():
        for blk in scan.blocks:
            blk.attn.bias.time.a.normal_()
    dense.load_state_dict(scan.state_dict())
    xc, xt = _points(n=40, seed=7), _points(n=25, seed=8, days=(0,))
    yc = torch.randn(2, 40, 1)
    for m in (scan, dense):
        m.train()
        m(xc, yc, xt)[0].pow(2).sum().backward()
    torch.testing.assert_close(scan(xc, yc, xt)[0], dense(xc, yc, xt)[0], atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(scan.named_parameters(), dense.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-3, msg=name)
    assert scan.blocks[0].attn.bias.time.a.grad.abs().sum() > 0  # the time kernel learns


def test_reference_tokens_get_their_own_flag():
    torch.manual_seed(0)
    m = _temporal(depth=1, dim=16)
    with torch.no_grad():
        m.embed.flag.weight[2] += 5.0  # make the reference flag differ from the observed one
    x = _points(n=6, days=(0, -16))
    tokens = m.embed(x, torch.zeros(2, 6, 1), observed=True)
    plain = m.embed(x * torch.tensor([1.0, 1.0, 0.0]), torch.zeros(2, 6, 1), observed=True)
    is_ref = x[..., 2] != 0
    assert is_ref.any() and (~is_ref).any()
    torch.testing.assert_close(tokens[~is_ref], plain[~is_ref])
    assert (tokens[is_ref] - plain[is_ref]).abs().amax() > 1e-3


def test_temporal_config_is_checked():
    assert build_model(ModelConfig(temporal=True, dim_x=3)).temporal
    with pytest.raises(ConfigError, match="dim_x 3"):
        ModelConfig(temporal=True, dim_x=2)
    with pytest.raises(ConfigError, match="temporal=true needs"):
        ModelConfig(temporal=True, dim_x=3, attention="dka")


def test_distance_cache_does_not_change_a_multi_date_forward():
    torch.manual_seed(0)
    m = _chunked(_temporal(depth=2, dim=16), 8).eval()
    with torch.no_grad():
        for blk in m.blocks:
            blk.attn.bias.time.a.normal_()
    xc, xt, yc = _points(n=30, seed=9), _points(n=20, seed=10, days=(0,)), torch.randn(2, 30, 1)
    with torch.no_grad():
        cached = m(xc, yc, xt)  # forward shares one distance cache between its layers
        uncached = m.decode(m.encode_context(xc, yc, share_distances=False), xt)  # every tile afresh
    torch.testing.assert_close(uncached[0], cached[0])
    torch.testing.assert_close(uncached[1], cached[1])


@pytest.mark.parametrize("far", [False, True])  # far: squared distances beyond the table (clamped)
def test_joint_space_time_table_reads_the_same_bias_as_two_tables(monkeypatch, far):
    """One joint table (one gather per pair) equals the space and time tables read apart, bit for
    bit, with the key mask, through a shared cache, and in the gradients of all six parameters."""
    from geonp.models.attention import temporal
    from geonp.models.attention.bias import DistanceCache

    bias = _bias(seed=7)
    q, k = _points(b=3, n=40, seed=8), _points(b=3, n=50, seed=9)
    if far:
        q[..., :2] *= 40  # spans beyond the spatial reach: the space index is clamped
    valid = torch.rand(3, 50, generator=torch.Generator().manual_seed(1)) > 0.2
    cache = DistanceCache()

    def run():
        bias.zero_grad()
        tiles = bias.tiles(q, k, valid, cache=cache)
        out = torch.cat([tiles.tile(slice(0, 25), slice(None)), tiles.tile(slice(25, 40), slice(None))], 2)
        (out.masked_fill(~torch.isfinite(out), 0) * torch.linspace(0, 1, 50)).sum().backward()
        return tiles, out, [p.grad.clone() for p in bias.parameters()]

    joint_tiles, joint, joint_grads = run()
    with torch.no_grad():  # inference: the joint table is built once per pass and cached
        inference = bias.tiles(q, k, valid, cache=cache)
        assert torch.equal(inference.tile(slice(0, 25), slice(None)), joint[:, :, :25])
        assert torch.equal(inference.tile(slice(25, 40), slice(None)), joint[:, :, 25:])
    monkeypatch.setattr(temporal, "_MAX_JOINT", 0)
    apart_tiles, apart, apart_grads = run()
    assert len(joint_tiles.tensors) == 2 and len(apart_tiles.tensors) == 2
    assert joint_tiles.fn is not apart_tiles.fn
    assert torch.equal(joint, apart) and torch.isneginf(joint[..., ~valid[0]][0]).all()
    for a, b in zip(joint_grads, apart_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_inference_keeps_the_time_and_joint_tables_from_pass_to_pass_until_a_parameter_changes():
    """Rebuilt in every layer call, the joint table was a tenth of a 61x61 multi-date fill; kept, a
    pass reads the same numbers, and an optimiser step (a new parameter version) rebuilds them."""
    from geonp.models.attention.bias import DistanceCache

    bias = _bias(seed=3)
    q, k = _points(b=2, n=20, seed=4), _points(b=2, n=30, seed=5)
    with torch.no_grad():
        fresh = bias.tiles(q, k).full()  # no cache: nothing kept
        assert not bias._joint_kept and not bias._days_kept
        first = bias.tiles(q, k, cache=DistanceCache()).full()
        second = bias.tiles(q, k, cache=DistanceCache()).full()  # another pass: the kept tables
    assert torch.equal(first, fresh) and torch.equal(second, fresh)
    assert len(bias._joint_kept) == 1 and len(bias._days_kept) == 1
    with torch.no_grad():
        bias.time.a.mul_(2.0)  # what an optimiser step does to the version
        doubled = bias.tiles(q, k, cache=DistanceCache()).full()
        expected = bias.tiles(q, k).full()
    assert torch.equal(doubled, expected) and not torch.equal(doubled, fresh)
    assert len(bias._joint_kept) == 2 and len(bias._days_kept) == 2
