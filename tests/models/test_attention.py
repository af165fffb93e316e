import pytest
import torch

from geonp.models.attention import (
    RBFNetworkBias,
    dense_attention,
    performer_attention,
    scan_attention,
)
from geonp.models.attention.dka import deep_kernel_attention, naive_deep_kernel_attention
from geonp.models.attention.performer import naive_performer_attention, orthogonal_features

B, H, NQ, NK, D = 2, 4, 45, 61, 8


def _inputs(grid: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, D, generator=g, requires_grad=True) for n in (NQ, NK, NK))
    q_pos = torch.rand(B, NQ, 2, generator=g) * 20
    k_pos = torch.rand(B, NK, 2, generator=g) * 20
    if grid:
        q_pos, k_pos = q_pos.round(), k_pos.round()
    key_valid = torch.rand(B, NK, generator=g) > 0.3
    return q, k, v, q_pos, k_pos, key_valid


def _grads(out, tensors):
    weights = torch.linspace(-1, 1, out.numel(), device=out.device).reshape(out.shape)
    return torch.autograd.grad((out * weights).sum(), tensors)


@pytest.mark.parametrize("grid", [False, True])
@pytest.mark.parametrize("chunks", [(7, 13), (16, 16), (1000, 1000), (1, 60)])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("mask_in_bias", [False, True])
def test_scan_matches_dense_values_and_gradients(grid, chunks, with_bias, mask_in_bias):
    q, k, v, q_pos, k_pos, key_valid = _inputs(grid)
    bias = RBFNetworkBias(H, length_scale=3.0)
    params = [q, k, v] + ([bias.a, bias.b, bias.c] if with_bias else [])
    dense = dense_attention(q, k, v, key_valid=key_valid, bias=bias.tiles(q_pos, k_pos).full() if with_bias else None)
    tiles = bias.tiles(q_pos, k_pos, key_valid if mask_in_bias else None) if with_bias else None
    scan = scan_attention(q, k, v, key_valid=key_valid, bias=tiles, q_chunk=chunks[0], k_chunk=chunks[1])
    torch.testing.assert_close(scan, dense, rtol=1e-5, atol=1e-5)
    for g_scan, g_dense in zip(_grads(scan, params), _grads(dense, params), strict=True):
        torch.testing.assert_close(g_scan, g_dense, rtol=1e-4, atol=1e-5)
    with torch.no_grad():  # the inference paths (single block through SDPA, or online softmax)
        again = scan_attention(q, k, v, key_valid=key_valid, bias=tiles, q_chunk=chunks[0], k_chunk=chunks[1])
    torch.testing.assert_close(again, dense.detach(), rtol=1e-5, atol=1e-5)


def test_query_with_no_valid_key_is_finite_zero_with_finite_gradients():
    q, k, v, q_pos, k_pos, key_valid = _inputs(grid=True)
    key_valid[1] = False  # every query of batch 1 has no key
    bias = RBFNetworkBias(H)
    out = scan_attention(q, k, v, key_valid=key_valid, bias=bias.tiles(q_pos, k_pos), q_chunk=8, k_chunk=9)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    grads = _grads(out, [q, k, v, bias.a, bias.b, bias.c])
    assert all(torch.isfinite(g).all() for g in grads)
    assert torch.equal(grads[0][1], torch.zeros_like(grads[0][1]))
    dense = dense_attention(q, k, v, key_valid=key_valid, bias=bias.tiles(q_pos, k_pos).full())
    torch.testing.assert_close(out, dense, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        for tiles in (bias.tiles(q_pos, k_pos), bias.tiles(q_pos, k_pos, key_valid)):
            single = scan_attention(q, k, v, key_valid=key_valid, bias=tiles, k_chunk=1000)
            assert torch.isfinite(single).all() and torch.equal(single[1], torch.zeros_like(single[1]))
            torch.testing.assert_close(single, dense.detach(), rtol=1e-5, atol=1e-5)


def test_scan_large_logits_stay_exact():
    q, k, v, _q_pos, _k_pos, key_valid = _inputs(grid=False)
    q = (q.detach() * 30).requires_grad_()
    dense = dense_attention(q, k, v, key_valid=key_valid)
    scan = scan_attention(q, k, v, key_valid=key_valid, q_chunk=5, k_chunk=11)
    torch.testing.assert_close(scan, dense, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(_grads(scan, [q])[0]).all()


def test_grid_bias_path_equals_direct_path():
    _, _, _, q_pos, k_pos, _ = _inputs(grid=True)
    bias = RBFNetworkBias(H, length_scale=3.0)
    fast = bias.tiles(q_pos, k_pos)
    assert len(fast.tensors) == 1  # the table path was taken
    bias.grid_fast_path = False
    direct = bias.tiles(q_pos, k_pos)
    assert len(direct.tensors) == 3
    torch.testing.assert_close(fast.full(), direct.full(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.tile(slice(3, 9), slice(40, 50)), direct.full()[:, :, 3:9, 40:50])


@pytest.mark.parametrize("with_grad", [False, True])
def test_grid_bias_beyond_its_reach_stays_within_tolerance_of_the_direct_path(with_grad):
    """Far pairs (up to ~1,400 px) read the table's last entry: within REACH_TOLERANCE of the truth."""
    from geonp.models.attention.bias import REACH_TOLERANCE, DistanceCache

    g = torch.Generator().manual_seed(4)
    q_pos = torch.randint(0, 1000, (2, 30, 2), generator=g).float()
    k_pos = torch.randint(0, 1000, (2, 50, 2), generator=g).float()
    key_valid = torch.rand(2, 50, generator=g) > 0.3
    bias = RBFNetworkBias(H, length_scale=4.0)
    with torch.no_grad():
        bias.b.mul_(torch.rand(bias.b.shape, generator=g) + 0.2)  # various widths per head and basis
    reach = bias.reach()
    assert 8.0 < reach < 100.0  # far below the largest distance here: the cap is taken
    with torch.set_grad_enabled(with_grad):
        fast = bias.tiles(q_pos, k_pos, key_valid, cache=DistanceCache()).full()
        bias.grid_fast_path = False
        direct = bias.tiles(q_pos, k_pos).full().masked_fill(~key_valid[:, None, None, :], float("-inf"))
    assert torch.equal(torch.isinf(fast), torch.isinf(direct))  # masked keys are -inf in both
    finite = torch.isfinite(direct)
    assert (fast[finite] - direct[finite]).abs().max() <= 2 * REACH_TOLERANCE
    d = (q_pos[:, :, None] - k_pos[:, None]).norm(dim=-1)[:, None].expand_as(direct)
    assert (d[finite] > reach).float().mean() > 0.9  # most pairs lie beyond the reach
    if with_grad:
        fast.masked_fill(~finite, 0).sum().backward()
        assert bias.a.grad is not None and torch.isfinite(bias.a.grad).all()


def test_grid_bias_of_points_farther_apart_than_int32_squares_allow():
    """Squared distances above 2**31 use int64 indices: the far pair reads the bias at the reach."""
    bias = RBFNetworkBias(H, length_scale=4.0)
    q_pos = torch.tensor([[[0.0, 0.0], [50_000.0, 0.0]]])
    k_pos = torch.tensor([[[0.0, 1.0], [0.0, 40_000.0]]])  # up to ~64,000 px: d² ~ 4.1e9
    tiles = bias.tiles(q_pos, k_pos)
    assert len(tiles.tensors) == 1  # the table path, capped at the reach
    fast = tiles.full()
    bias.grid_fast_path = False
    direct = bias.tiles(q_pos, k_pos).full()
    assert torch.isfinite(fast).all()
    assert (fast - direct).abs().max() <= 2e-6


def test_the_reach_follows_its_parameters():
    bias = RBFNetworkBias(H, length_scale=4.0)
    first = bias.reach()
    assert bias.reach() == first  # remembered
    with torch.no_grad():
        bias.b.mul_(0.25)  # wider bases (an optimiser step changes parameters in place like this)
    assert bias.reach() > first * 1.5
    bias.load_state_dict(RBFNetworkBias(H, length_scale=4.0).state_dict())
    assert bias.reach() == first


def test_rbf_bias_formula():
    bias = RBFNetworkBias(2, num_basis=3)
    with torch.no_grad():
        bias.a.copy_(torch.tensor([[1.0, -2.0, 0.5], [0.0, 1.0, 0.0]]))
        bias.b.copy_(torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.1, 1.0]]))
        bias.c.copy_(torch.tensor([[0.0, 1.0, 3.0], [0.0, 2.0, 0.0]]))
    q_pos = torch.tensor([[[0.0, 0.0]]])
    k_pos = torch.tensor([[[3.0, 4.0]]])  # distance 5
    got = bias.tiles(q_pos, k_pos).full()[0, :, 0, 0]
    d = 5.0
    expect0 = 1.0 * torch.exp(torch.tensor(-0.5 * d**2)) - 2.0 * torch.exp(torch.tensor(-1.0 * (d - 1) ** 2)) + 0.5 * torch.exp(torch.tensor(-2.0 * (d - 3) ** 2))
    expect1 = torch.exp(torch.tensor(-0.1 * (d - 2) ** 2))
    torch.testing.assert_close(got, torch.stack([expect0, expect1]))


def test_dka_equals_naive_quadratic_evaluation():
    g = torch.Generator().manual_seed(1)
    phi_q, phi_k = torch.randn(B, H, NQ, 16, generator=g), torch.randn(B, H, NK, 16, generator=g)
    psi_v = torch.randn(B, H, NK, D, generator=g)
    key_valid = torch.rand(B, NK, generator=g) > 0.5
    fast = deep_kernel_attention(phi_q, phi_k, psi_v, key_valid=key_valid)
    naive = naive_deep_kernel_attention(phi_q, phi_k, psi_v, key_valid=key_valid)
    torch.testing.assert_close(fast, naive, rtol=1e-5, atol=1e-5)
    # explicit double loop over one query, eq. 9 written out
    i, b, h = 3, 0, 2
    valid = key_valid[b].nonzero().flatten()
    expect = sum(float(phi_q[b, h, i] @ phi_k[b, h, j]) * psi_v[b, h, j] for j in valid) / len(valid)
    torch.testing.assert_close(fast[b, h, i], expect, rtol=1e-5, atol=1e-5)



def test_dka_kernel_sees_fourier_features_of_the_coordinates():
    """make_attention's DKA embeds the scaled coordinates by 32 fixed Fourier features as well; fourier=0: raw only."""
    from geonp.config import ModelConfig
    from geonp.models.attention import DKA_FOURIER, DeepKernelAttention, make_attention

    cfg = ModelConfig(attention="dka", dim=64, num_heads=4, dim_x=2, bias_length_scale=0.5)
    dka = make_attention(cfg)
    assert DKA_FOURIER == 32 and dka.freqs.shape == (2, 32) and dka.pos_scale == 2.0
    assert dka.phi[0].in_features == 64 + 2 + 2 * 32
    plain = DeepKernelAttention(64, 4, pos_dim=2)
    assert plain.freqs.shape == (2, 0) and plain.phi[0].in_features == 66
    # the same token at two places: different kernel features, as the fixed frequencies say
    x = torch.randn(1, 1, 64).expand(1, 2, 64)
    pos = torch.tensor([[[0.0, 0.0], [0.1, 0.0]]])
    f = dka._features(x, pos)  # [1, H, 2, R]
    assert float((f[0, :, 0] - f[0, :, 1]).abs().max()) > 1e-3
    torch.testing.assert_close(dka.freqs, make_attention(cfg).freqs)


def test_dka_kernel_holds_a_distance_kernel_per_head():
    """ω = φᵀφ of the learned features plus g_h² mean_f cos(2π a_h w_f·(p_i − p_j)); the raw DKA has no such term."""
    from geonp.models.attention import DeepKernelAttention

    dka = DeepKernelAttention(16, 2, pos_dim=2, feature_dim=8, pos_scale=4.0, fourier=32)
    with torch.no_grad():
        dka.gain.copy_(torch.tensor([0.5, 2.0]))
        dka.log_scale.copy_(torch.tensor([0.0, -1.0]))
    g = torch.Generator().manual_seed(3)
    x, pos = torch.randn(1, 5, 16, generator=g), torch.randn(1, 5, 2, generator=g) * 6
    f = dka._features(x, pos)  # [1, H, 5, R + 2F]
    assert f.shape == (1, 2, 5, 8 + 64)
    learned = f[..., :8] @ f[..., :8].transpose(-1, -2)
    omega = f @ f.transpose(-1, -2)
    p = pos[0] / 4.0
    for h, (gain, scale) in enumerate([(0.5, 1.0), (2.0, float(torch.exp(torch.tensor(-1.0))))]):
        phase = 2 * torch.pi * scale * (p[:, None, :] - p[None, :, :]) @ dka.freqs  # [5, 5, F]
        expect = gain**2 * torch.cos(phase).mean(-1)
        torch.testing.assert_close(omega[0, h] - learned[0, h], expect, rtol=1e-4, atol=1e-5)
    assert float(torch.diagonal(omega[0, 1] - learned[0, 1]).min()) == pytest.approx(4.0, abs=1e-4)
    assert DeepKernelAttention(16, 2, pos_dim=2, feature_dim=8).gain is None

def test_performer_linear_equals_explicit_and_approximates_softmax():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g) * 0.5 for n in (30, 40, 40))
    features = orthogonal_features(4096, 8, generator=g)
    fast = performer_attention(q, k, v, features)
    explicit = naive_performer_attention(q, k, v, features)
    torch.testing.assert_close(fast, explicit, rtol=1e-4, atol=1e-5)
    exact = dense_attention(q, k, v)
    assert float((fast - exact).abs().max()) < 0.05


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_scan_matches_dense_on_cuda():
    q, k, v, q_pos, k_pos, key_valid = (t.cuda() if t.is_leaf and not t.requires_grad else t.detach().cuda().requires_grad_() for t in _inputs(grid=True))
    bias = RBFNetworkBias(H, length_scale=3.0).cuda()
    dense = dense_attention(q, k, v, key_valid=key_valid, bias=bias.tiles(q_pos, k_pos).full())
    scan = scan_attention(q, k, v, key_valid=key_valid, bias=bias.tiles(q_pos, k_pos, key_valid), q_chunk=16, k_chunk=13)
    torch.testing.assert_close(scan, dense, rtol=1e-4, atol=1e-4)
    for a, b in zip(_grads(scan, [q, k, v, bias.a]), _grads(dense, [q, k, v, bias.a]), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


def test_make_attention_builds_every_configured_name():
    from geonp.config import ATTENTION_NAMES, ModelConfig
    from geonp.models.attention import ATTENTIONS, make_attention

    assert ATTENTION_NAMES == tuple(ATTENTIONS)
    x = torch.randn(2, 7, 16)
    pos = torch.randint(0, 9, (2, 7, 2)).float()
    for name in ATTENTION_NAMES:
        attn = make_attention(ModelConfig(attention=name, dim=16, num_heads=2))
        assert type(attn) is ATTENTIONS[name]
        assert attn(x, x, q_pos=pos, k_pos=pos).shape == (2, 7, 16)
    bypassed = ModelConfig(dim=16, num_heads=2)
    object.__setattr__(bypassed, "attention", "flash")  # a config that skipped its checks
    with pytest.raises(ValueError, match=r"attention='flash' is not one of \['scan', 'dense', 'dka', 'performer'\]"):
        make_attention(bypassed)


def test_a_raster_wide_basis_keeps_its_table_across_passes_and_reads_it_exactly():
    """A basis with a reach of ~1,800 px (a trained default's first block) needs a table past the 4M
    entries once kept per length; it is built once, at the longest pass, and read by shorter ones."""
    from geonp.models.attention.bias import _MAX_TABLE, DistanceCache, _compute_max_sq, _reach_sq

    bias = RBFNetworkBias(H, length_scale=4.0)
    with torch.no_grad():
        bias.b[0, 0] = 4.7e-6  # wide: |K| stays above the tolerance out to ~1,800 px
    assert _reach_sq(bias.reach()) >= _MAX_TABLE
    g = torch.Generator().manual_seed(0)
    far = torch.randint(0, 1100, (1, 40, 2), generator=g).float()  # d² up to ~2.4M
    near = torch.randint(0, 60, (1, 40, 2), generator=g).float()
    length = (1 << _compute_max_sq(far, far).bit_length()) + 2  # a power of two past the farthest pair
    assert length > 1 << 20
    with torch.no_grad():
        outs = []
        for pos in (far, near, far):
            outs.append(bias.tiles(pos, pos, cache=DistanceCache()).full())
            (kept,) = bias._tables_kept.values()
            assert kept[1].shape[1] == length  # one table, the longest so far
        builds = kept[1]
        bias.grid_fast_path = False
        for pos, out in zip((far, near, far), outs, strict=True):
            torch.testing.assert_close(out, bias.tiles(pos, pos).full(), rtol=1e-5, atol=1e-6)
    assert next(iter(bias._tables_kept.values()))[1] is builds  # not rebuilt by the later passes
