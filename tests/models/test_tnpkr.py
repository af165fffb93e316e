import pytest
import torch

from geonp.config import ModelConfig
from geonp.models import build_model


def _task(seed=0, nc=50, nt=31, dy=2, grid=True):
    g = torch.Generator().manual_seed(seed)
    xc = torch.randint(0, 30, (2, nc, 2), generator=g).float() if grid else torch.rand(2, nc, 2, generator=g) * 30
    xt = torch.randint(0, 30, (2, nt, 2), generator=g).float() if grid else torch.rand(2, nt, 2, generator=g) * 30
    yc = torch.randn(2, nc, dy, generator=g)
    valid = torch.rand(2, nc, generator=g) > 0.2
    return xc, yc, xt, valid


def _model(**kw):
    cfg = ModelConfig(**{"dim": 32, "depth": 2, "num_heads": 4, "ff_dim": 64, "dim_y": 2, **kw})
    return build_model(cfg).eval()


@pytest.mark.parametrize("grid", [True, False])
def test_scan_model_is_translation_invariant(grid):
    model = _model(attention="scan")
    xc, yc, xt, valid = _task(grid=grid)
    shift = torch.tensor([1234.0, -567.0]) if grid else torch.tensor([12.34, -5.67])
    with torch.no_grad():
        m1, s1 = model(xc, yc, xt, valid)
        m2, s2 = model(xc + shift, yc, xt + shift, valid)
    torch.testing.assert_close(m1, m2, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(s1, s2, rtol=1e-4, atol=1e-5)


def test_dka_model_is_not_translation_invariant():
    # the invariance test above can fail: DKA co-embeds coordinates (the TNP-KR paper §3.4)
    model = _model(attention="dka")
    xc, yc, xt, valid = _task()
    shift = torch.tensor([40.0, -25.0])
    with torch.no_grad():
        m1, _ = model(xc, yc, xt, valid)
        m2, _ = model(xc + shift, yc, xt + shift, valid)
    assert float((m1 - m2).abs().max()) > 1e-3


@pytest.mark.parametrize("attention", ["scan", "dense", "dka", "performer"])
def test_context_permutation_invariance(attention):
    model = _model(attention=attention)
    xc, yc, xt, valid = _task()
    perm = torch.randperm(xc.shape[1])
    with torch.no_grad():
        m1, s1 = model(xc, yc, xt, valid)
        m2, s2 = model(xc[:, perm], yc[:, perm], xt, valid[:, perm])
    torch.testing.assert_close(m1, m2, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(s1, s2, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("arch,attention", [("tnpkr", "scan"), ("tnpkr", "dka"), ("tnpd", "scan")])
def test_query_chunking_changes_nothing(arch, attention):
    model = _model(arch=arch, attention=attention)
    xc, yc, xt, valid = _task()
    with torch.no_grad():
        whole = model(xc, yc, xt, valid)
        for chunk in (1, 7, 30):
            parts = model(xc, yc, xt, valid, query_chunk=chunk)
            torch.testing.assert_close(parts[0], whole[0], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(parts[1], whole[1], rtol=1e-5, atol=1e-6)


def test_scan_model_equals_dense_model_with_same_weights():
    scan = _model(attention="scan")
    dense = _model(attention="dense")
    dense.load_state_dict(scan.state_dict())
    for block in scan.blocks:
        block.attn.q_chunk, block.attn.k_chunk = 9, 14
    xc, yc, xt, valid = _task()
    m1, s1 = scan(xc, yc, xt, valid)
    m2, s2 = dense(xc, yc, xt, valid)
    torch.testing.assert_close(m1, m2, rtol=1e-4, atol=1e-5)
    g1 = torch.autograd.grad((m1 + s1).sum(), list(scan.parameters()))
    g2 = torch.autograd.grad((m2 + s2).sum(), list(dense.parameters()))
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)


def test_std_respects_sigma_min_and_shapes():
    model = _model(sigma_min=0.2)
    xc, yc, xt, valid = _task()
    with torch.no_grad():
        mean, std = model(xc, yc, xt, valid)
    assert mean.shape == (2, 31, 2) and std.shape == (2, 31, 2)
    assert float(std.min()) >= 0.2


def test_bad_shapes_give_a_clear_error():
    model = _model()
    xc, _yc, xt, valid = _task()
    with pytest.raises(ValueError, match=r"expected xc \[B, Nc, 2\].*got xc \(2, 50, 2\), yc \(2, 50, 3\)"):
        model(xc, torch.zeros(2, 50, 3), xt, valid)


def _runs(groups, seed=0, nc=50, nt=31, days=False):
    """A batch of ``groups`` runs of one geometry (2 tiles each, padded contexts), values per run."""
    xc, _, xt, valid = _task(seed=seed, nc=nc, nt=nt)
    if days:  # a multi-date batch: context points of other dates, queries on the target's
        g = torch.Generator().manual_seed(seed + 1)
        xc = torch.cat([xc, torch.randint(-40, 1, (*xc.shape[:2], 1), generator=g).float()], -1)
        xt = torch.cat([xt, torch.zeros(*xt.shape[:2], 1)], -1)
    yc = torch.randn(2 * groups, nc, 1, generator=torch.Generator().manual_seed(seed + 2))
    return xc.repeat(groups, 1, 1), yc, xt.repeat(groups, 1, 1), valid.repeat(groups, 1)


@pytest.mark.parametrize(("grid", "temporal"), [(True, False), (False, False), (True, True)])
def test_runs_of_one_geometry_read_one_bias_with_the_same_result(monkeypatch, grid, temporal):
    """``groups``: the bands of a tile share their bias (one gather for all); the numbers do not move."""
    from geonp.models.attention import scan

    calls = []
    single = scan._single_block_forward  # groups: its 7th argument
    monkeypatch.setattr(scan, "_single_block_forward",
                        lambda *a: (len(a) > 6 and a[6] > 1 and calls.append(a[6])) or single(*a))
    model = _model(attention="scan", dim_y=1, dim_x=3 if temporal else 2, temporal=temporal)
    xc, yc, xt, valid = _runs(3, days=temporal)
    if not grid:
        xc, xt = xc + 0.37, xt + 0.37  # off the grid: the direct bias, the key mask applied apart
    with torch.inference_mode():
        each = model(xc, yc, xt, valid, query_chunk=8)
        assert calls == []
        shared = model(xc, yc, xt, valid, query_chunk=8, groups=3)
    assert calls == [3] * (1 + 2 * 4)  # the first block's context stream (the last feeds nothing), 4 query chunks each
    torch.testing.assert_close(shared, each, rtol=0, atol=1e-6)


def test_groups_that_do_not_divide_the_batch_are_refused():
    model = _model(attention="scan", dim_y=1)
    xc, yc, xt, valid = _runs(2)
    with pytest.raises(ValueError, match="groups=3 needs share_distances and a batch \\(4\\) it divides"):
        model(xc, yc, xt, valid, groups=3)


@pytest.mark.parametrize("depth", [1, 3])
def test_context_stream_skips_the_last_blocks_unused_key_update(monkeypatch, depth):
    # Algorithm 1 literally: every block updates the queries from its input keys, then the keys
    # (the last block's new keys feed nothing); the model runs depth - 1 key updates, same output.
    from geonp.models.blocks import KRBlock

    model = _model(attention="scan", depth=depth)
    xc, yc, xt, valid = _task(seed=3)
    with torch.no_grad():
        ks = model.embed(xc, yc, observed=True)
        qs = model.embed(xt, model.unknown_values(xt), observed=False)
        for block in model.blocks:
            qs = block.update_queries(qs, ks, q_pos=xt, k_pos=xc, key_valid=valid)
            ks = block.update_keys(ks, k_pos=xc, key_valid=valid)
        want = model.head(qs)
        calls = []
        update = KRBlock.update_keys
        monkeypatch.setattr(KRBlock, "update_keys", lambda self, *a, **k: calls.append(1) or update(self, *a, **k))
        got = model(xc, yc, xt, valid)
    assert len(calls) == depth - 1
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
