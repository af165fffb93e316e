"""The fused grid attention (FlexAttention, bias read inside) against its slow twin, scan attention.

Every comparison runs the same module twice, ``fused="off"`` (today's path: the bias gathered from
the squared-distance table, then scan attention) and ``fused="flex"``, and checks that the fused
kernel really ran (a spy on :func:`geonp.models.attention.flex.lookup_attention`). Without a
working compiler the kernel is unavailable and these tests skip; the fallback tests do not.
"""

import pytest
import torch

from geonp.models.attention import ScanAttention, SpaceTimeBias, dense_attention, make_attention
from geonp.models.attention import flex
from geonp.models.attention.bias import DistanceCache, RBFNetworkBias, _reach_sq
from geonp.models.tnpkr import TNPKR

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
# torch.compile's own imports warn about torch.jit; nothing of geonp's
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


@pytest.fixture
def kernel_cpu():  # after conftest's thread setting: the kernel is compiled per thread count
    if flex.COMPILED.get(torch.device("cpu")) is None:
        pytest.skip("the fused kernel does not build here (no compiler?)")
    return True


@pytest.fixture
def spy(monkeypatch):
    """Counts calls of the compiled kernel that returned a result (not a fallback)."""
    calls = {"ran": 0, "declined": 0}
    real = flex.lookup_attention

    def counting(*args, **kwargs):
        out = real(*args, **kwargs)
        calls["ran" if out is not None else "declined"] += 1
        return out

    monkeypatch.setattr(flex, "lookup_attention", counting)
    monkeypatch.delenv(flex.FUSED_ENV, raising=False)
    return calls


def _grid_task(b, nq, nk, *, seed=0, span=40, dim=None):
    g = torch.Generator().manual_seed(seed)
    q_pos = torch.randint(0, span, (b, nq, 2), generator=g).float()
    k_pos = torch.randint(0, span, (b, nk, 2), generator=g).float() - span // 3  # negative coordinates too
    key_valid = torch.rand(b, nk, generator=g) > 0.3
    key_valid[:, 0] = True
    if dim is None:
        return q_pos, k_pos, key_valid
    x_q, x_kv = torch.randn(b, nq, dim, generator=g), torch.randn(b, nk, dim, generator=g)
    return q_pos, k_pos, key_valid, x_q, x_kv


def _both(att, x_q, x_kv, **kw):
    with torch.no_grad():
        att.fused = "off"
        old = att(x_q, x_kv, cache=DistanceCache(), **kw)
        att.fused = "flex"
        new = att(x_q, x_kv, cache=DistanceCache(), **kw)
    return old, new


# Sizes that divide no block size (scan's 1024/16 chunks, FlexAttention's 16-wide vectors); a key
# count above scan's k_chunk, which takes the online-softmax path on the old side.
@pytest.mark.parametrize(("b", "nq", "nk", "heads", "dim"), [
    (3, 37, 61, 4, 64),    # head dim 16 (the shipped models)
    (2, 45, 29, 2, 16),    # head dim 8: zero-padded to 16 inside
    (5, 2, 130, 4, 48),    # two queries; head dim 12
    (2, 300, 1100, 4, 64),  # keys beyond scan's k_chunk = 1024
])
def test_fused_equals_scan_attention(kernel_cpu, spy, b, nq, nk, heads, dim):
    torch.manual_seed(0)
    att = make_attention("scan", dim, heads, bias_length_scale=3.0).eval()
    q_pos, k_pos, key_valid, x_q, x_kv = _grid_task(b, nq, nk, dim=dim)
    old, new = _both(att, x_q, x_kv, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid)
    assert spy["ran"] == 1
    torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-5)


def test_fused_equals_the_dense_oracle_per_head(kernel_cpu, spy):
    b, nq, nk, h, d = 3, 33, 47, 4, 16
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(b, h, n, d, generator=g) for n in (nq, nk, nk))
    q_pos, k_pos, key_valid = _grid_task(b, nq, nk, seed=1)
    bias = RBFNetworkBias(h, length_scale=3.0)
    with torch.no_grad():
        dense = dense_attention(q, k, v, key_valid=key_valid, bias=bias.tiles(q_pos, k_pos).full())
        fused = flex.fused_grid_attention(q, k, v, bias=bias, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid,
                                          tables=flex.LookupTables())
    assert spy["ran"] == 1
    torch.testing.assert_close(fused, dense, rtol=1e-5, atol=1e-5)


def test_fused_rows_do_not_depend_on_batch_or_query_chunk(kernel_cpu, spy):
    # what makes fills independent of block size and worker count: bit-identical rows
    b, nq, nk, h, d = 4, 33, 47, 4, 16
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(b, h, n, d, generator=g) for n in (nq, nk, nk))
    q_pos, k_pos, key_valid = _grid_task(b, nq, nk, seed=8)
    bias, tables = RBFNetworkBias(h, length_scale=3.0), flex.LookupTables()

    def fused(bs, qs):
        return flex.fused_grid_attention(q[bs][:, :, qs], k[bs], v[bs], bias=bias, q_pos=q_pos[bs][:, qs],
                                         k_pos=k_pos[bs], key_valid=key_valid[bs], tables=tables)

    with torch.no_grad():
        full = fused(slice(None), slice(None))
        assert torch.equal(fused(slice(1, 3), slice(None)), full[1:3])
        assert torch.equal(fused(slice(None), slice(5, 25)), full[:, :, 5:25])
    assert spy["ran"] == 3


def test_a_query_with_no_valid_key_gets_zero(kernel_cpu, spy):
    b, nq, nk, h, d = 3, 21, 35, 4, 16
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(b, h, n, d, generator=g) for n in (nq, nk, nk))
    q_pos, k_pos, key_valid = _grid_task(b, nq, nk, seed=2)
    key_valid[1] = False  # every query of batch 1 has no key
    bias = RBFNetworkBias(h)
    with torch.no_grad():
        fused = flex.fused_grid_attention(q, k, v, bias=bias, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid,
                                          tables=flex.LookupTables())
        dense = dense_attention(q, k, v, key_valid=key_valid, bias=bias.tiles(q_pos, k_pos).full())
    assert spy["ran"] == 1
    assert torch.isfinite(fused).all()
    assert torch.equal(fused[1], torch.zeros_like(fused[1]))
    torch.testing.assert_close(fused, dense, rtol=1e-5, atol=1e-5)


def test_far_points_read_the_clamped_table_like_the_old_path(kernel_cpu, spy):
    # context 3,000 px away: far beyond the bias's reach, where the old table clamps
    torch.manual_seed(3)
    att = make_attention("scan", 64, 4, bias_length_scale=2.0).eval()
    q_pos, k_pos, key_valid, x_q, x_kv = _grid_task(2, 19, 23, seed=3, dim=64)
    k_pos[:, ::2] += 3000
    old, new = _both(att, x_q, x_kv, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid)
    assert spy["ran"] == 1
    torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-5)


def test_lookup_table_holds_the_old_table_clamped_and_minus_inf_last():
    bias = RBFNetworkBias(4, length_scale=3.0)
    with torch.no_grad():
        table = flex.lookup_table(bias, torch.zeros(1))
        reach_sq = _reach_sq(bias.reach())
        old = bias._table((bias.a, bias.b, bias.c), reach_sq, torch.zeros(1))  # [H, reach_sq + 2], -inf first
    assert table.shape == (4, flex.TABLE_LEN)
    torch.testing.assert_close(table[:, : reach_sq + 1], old[:, 1:], rtol=0, atol=1e-7)
    assert torch.equal(table[:, reach_sq + 1 : -1], old[:, -1:].expand(-1, flex.TABLE_LEN - reach_sq - 2))
    assert torch.isneginf(table[:, -1]).all()


def test_temporal_bias_without_dates_is_fused_with_dates_falls_back(kernel_cpu, spy):
    torch.manual_seed(4)
    att = ScanAttention(64, 4, bias=SpaceTimeBias(4, length_scale=3.0, time_length_scale=10.0)).eval()
    with torch.no_grad():
        att.bias.time.a.normal_()  # a time kernel that matters
    q_pos, k_pos, key_valid, x_q, x_kv = _grid_task(2, 27, 31, seed=4, dim=64)
    no_dates = (torch.cat([q_pos, torch.zeros_like(q_pos[..., :1])], -1),
                torch.cat([k_pos, torch.zeros_like(k_pos[..., :1])], -1))
    old, new = _both(att, x_q, x_kv, q_pos=no_dates[0], k_pos=no_dates[1], key_valid=key_valid)
    assert spy["ran"] == 1
    torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-5)
    dated_k = no_dates[1].clone()
    dated_k[:, ::3, -1] = -16.0  # reference pixels of another date
    old, new = _both(att, x_q, x_kv, q_pos=no_dates[0], k_pos=dated_k, key_valid=key_valid)
    assert spy["ran"] == 1  # no second call: today's path ran
    torch.testing.assert_close(new, old, rtol=0, atol=0)


@pytest.mark.parametrize("case", ["off_grid", "grad", "one_query", "wide_span", "float64", "env_off"])
def test_falls_back_to_the_old_path_exactly(spy, monkeypatch, case):
    torch.manual_seed(5)
    att = make_attention("scan", 64, 4, bias_length_scale=3.0)
    q_pos, k_pos, key_valid, x_q, x_kv = _grid_task(2, 13, 17, seed=5, dim=64)
    if case == "off_grid":
        q_pos = q_pos + 0.25
    elif case == "one_query":
        q_pos, x_q = q_pos[:, :1], x_q[:, :1]
    elif case == "wide_span":
        k_pos[:, 0] += 9000  # rows span more than 2**13 px
    elif case == "float64":
        att, x_q, x_kv = att.double(), x_q.double(), x_kv.double()
    elif case == "env_off":
        monkeypatch.setenv(flex.FUSED_ENV, "off")
    kw = {"q_pos": q_pos, "k_pos": k_pos, "key_valid": key_valid}
    with torch.set_grad_enabled(case == "grad"):
        att.fused = "off"
        old = att(x_q, x_kv, **kw)
        att.fused = "auto" if case == "env_off" else "flex"
        new = att(x_q, x_kv, **kw)
    assert spy["ran"] == 0
    assert torch.equal(new, old)
    if case == "grad":
        new.sum().backward()  # scan attention's own backward
        assert att.bias.a.grad is not None and torch.isfinite(att.bias.a.grad).all()


def test_mode_resolution_and_its_errors(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.delenv(flex.FUSED_ENV, raising=False)
    assert flex.resolve_mode("off", cpu) == "off"
    assert flex.resolve_mode("flex", cpu) == "flex"
    assert flex.resolve_mode("auto", cpu) == flex.AUTO["cpu"]
    monkeypatch.setenv(flex.FUSED_ENV, "FLEX")
    assert flex.resolve_mode("auto", cpu) == "flex"
    assert flex.resolve_mode("off", cpu) == "off"  # the argument wins over the variable
    monkeypatch.setenv(flex.FUSED_ENV, "fast")
    with pytest.raises(ValueError, match="GEONP_FUSED_ATTENTION"):
        flex.resolve_mode("auto", cpu)


@pytest.mark.parametrize("temporal", [False, True])
def test_tnpkr_forward_is_the_same_on_either_path(kernel_cpu, spy, monkeypatch, temporal):
    torch.manual_seed(6)
    model = TNPKR(dim=32, depth=2, num_heads=4, ff_dim=64, dim_x=3 if temporal else 2, temporal=temporal,
                  bias_length_scale=3.0).eval()
    b, nc, nt = 3, 41, 23
    g = torch.Generator().manual_seed(6)
    xc = torch.randint(0, 30, (b, nc, 2), generator=g).float()
    xt = torch.randint(0, 30, (b, nt, 2), generator=g).float()
    if temporal:  # one date: the fused path; the time bias needs other dates to matter
        xc, xt = (torch.cat([x, torch.zeros_like(x[..., :1])], -1) for x in (xc, xt))
    yc = torch.randn(b, nc, 1, generator=g)
    valid = torch.rand(b, nc, generator=g) > 0.2
    with torch.no_grad():
        monkeypatch.setenv(flex.FUSED_ENV, "off")
        old = model(xc, yc, xt, valid, query_chunk=7)
        monkeypatch.setenv(flex.FUSED_ENV, "flex")
        new = model(xc, yc, xt, valid, query_chunk=7)
    # the context stream of the first layer (the last feeds nothing), 4 query chunks per layer (23 = 7+7+7+2)
    assert spy["ran"] == 1 + 2 * 4
    for a, c in zip(old, new, strict=True):
        torch.testing.assert_close(c, a, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@requires_cuda
def test_fused_equals_scan_attention_on_cuda(spy):
    torch.manual_seed(7)
    att = make_attention("scan", 64, 4, bias_length_scale=3.0).eval().cuda()
    q_pos, k_pos, key_valid, x_q, x_kv = (t.cuda() for t in _grid_task(3, 37, 61, seed=7, dim=64))
    old, new = _both(att, x_q, x_kv, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid)
    assert spy["ran"] == 1
    torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-5)
