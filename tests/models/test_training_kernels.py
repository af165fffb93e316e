"""The training-time kernels agree with their slower, obviously correct twins (values and gradients).

- ``gather.gather_table`` (index_select forward, index_add_ backward) vs advanced indexing.
- scan attention's one-tile training path (saved probabilities, ``baddbmm``) vs the
  FlashAttention-style ``_ScanAttentionFn`` (forced by tiles smaller than the problem).
- a whole TNP-KR training step: same weights, same loss and gradients on either path.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from geonp.config import ModelConfig
from geonp.models import build_model
from geonp.models.attention import bias as bias_module
from geonp.models.attention.bias import RBFNetworkBias
from geonp.models.attention.gather import gather_table, gather_table_reference
from geonp.models.attention.scan import scan_attention
from geonp.models.heads import gaussian_nll


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_gather_table_matches_advanced_indexing_in_values_and_gradients(index_dtype):
    g = torch.Generator().manual_seed(0)
    table = torch.randn(3, 50, generator=g, dtype=torch.float64)
    index = torch.randint(0, 50, (2, 17, 23), generator=g).to(index_dtype)
    index[0, 0, :5] = 7  # repeated entries: their gradients must add up
    weight = torch.randn(2, 3, 17, 23, generator=g, dtype=torch.float64)
    grads = []
    for fn in (gather_table, gather_table_reference):
        leaf = table.clone().requires_grad_(True)
        out = fn(leaf, index)
        assert out.shape == (2, 3, 17, 23)
        (out * weight).sum().backward()
        grads.append((out.detach(), leaf.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=0, atol=0)
    torch.testing.assert_close(grads[0][1], grads[1][1])
    assert grads[0][1].abs().sum() > 0
    # untouched entries get exactly zero gradient
    unused = torch.ones(50, dtype=torch.bool)
    unused[index.long().unique()] = False
    assert torch.all(grads[0][1][:, unused] == 0)


def _attention_inputs(seed: int, nq: int, nk: int, all_masked_row: bool):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 2, n, 8, generator=g, dtype=torch.float64) for n in (nq, nk, nk))
    q_pos = torch.randint(0, 30, (2, nq, 2), generator=g).double()
    k_pos = torch.randint(0, 30, (2, nk, 2), generator=g).double()
    key_valid = torch.rand(2, nk, generator=g) > 0.3
    if all_masked_row:
        key_valid[1] = False  # a task with no valid key: zero output, finite gradients
    return q, k, v, q_pos, k_pos, key_valid


@pytest.mark.parametrize("all_masked_row", [False, True])
@pytest.mark.parametrize("grid", [True, False])
def test_one_tile_training_path_matches_the_scan_backward(all_masked_row, grid):
    q, k, v, q_pos, k_pos, key_valid = _attention_inputs(1, 21, 33, all_masked_row)
    if not grid:
        q_pos, k_pos = q_pos + 0.25, k_pos + 0.5  # off-grid: the direct bias path
    rbf = RBFNetworkBias(2, length_scale=3.0).double()
    results = []
    for chunks in ((1024, 1024), (8, 13)):  # one tile (the new path) | several (the scan backward)
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        tiles = rbf.tiles(q_pos, k_pos, key_valid)
        out = scan_attention(*leaves, key_valid=key_valid, bias=tiles, q_chunk=chunks[0], k_chunk=chunks[1])
        weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
        rbf.zero_grad()
        (out * weight).sum().backward()
        results.append([out.detach(), *(t.grad for t in leaves), *(p.grad.clone() for p in rbf.parameters())])
    for new, old in zip(*results, strict=True):
        assert torch.isfinite(new).all()
        torch.testing.assert_close(new, old, rtol=1e-9, atol=1e-10)
    if all_masked_row:
        assert torch.all(results[0][0][1] == 0)
    assert results[0][-1].abs().sum() > 0  # the bias parameters got gradients


def _step_grads(model, batch):
    model.zero_grad()
    xc, yc, xt, yt, valid = batch
    mean, std = model(xc, yc, xt, valid)
    loss = gaussian_nll(mean, std, yt)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_a_training_step_has_the_same_loss_and_gradients_on_the_old_kernels():
    torch.manual_seed(0)
    model = build_model(ModelConfig(dim=16, depth=2, num_heads=2, ff_dim=32)).double()
    g = torch.Generator().manual_seed(2)
    xc = torch.randint(0, 40, (3, 60, 2), generator=g).double()
    xt = torch.randint(0, 40, (3, 25, 2), generator=g).double()
    yc, yt = torch.randn(3, 60, 1, generator=g).double(), torch.randn(3, 25, 1, generator=g).double()
    valid = torch.rand(3, 60, generator=g) > 0.2
    batch = (xc, yc, xt, yt, valid)
    new_loss, new_grads = _step_grads(model, batch)
    for block in model.blocks:
        block.attn.q_chunk, block.attn.k_chunk = 16, 16  # several tiles: the FlashAttention-style backward
    with mock.patch.object(bias_module, "gather_table", gather_table_reference):
        old_loss, old_grads = _step_grads(model, batch)
    torch.testing.assert_close(new_loss, old_loss, rtol=1e-10, atol=1e-12)
    assert new_grads.keys() == old_grads.keys() and any("bias" in n for n in new_grads)
    for name in new_grads:
        torch.testing.assert_close(new_grads[name], old_grads[name], rtol=1e-8, atol=1e-10, msg=name)
