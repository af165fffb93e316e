"""The one attention interface (:mod:`geonp.models.attention.base`) and its key-mask rules."""

import pytest
import torch

from geonp.config import ModelConfig
from geonp.models.attention import ATTENTIONS, make_attention
from geonp.models.attention.base import (
    AttentionGeometry,
    AttentionModule,
    ProjectedAttention,
    has_valid_key,
    key_mask,
    mask_keys,
    valid_key_count,
    zero_keyless_rows,
)
from geonp.models.attention.bias import DistanceCache
from geonp.models.layers import merge_heads, split_heads

B, NQ, NK, E, H = 2, 9, 13, 16, 4


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x_q, x_kv = torch.randn(B, NQ, E, generator=g), torch.randn(B, NK, E, generator=g)
    q_pos = torch.randint(0, 12, (B, NQ, 2), generator=g).float()
    k_pos = torch.randint(0, 12, (B, NK, 2), generator=g).float()
    key_valid = torch.rand(B, NK, generator=g) > 0.4
    key_valid[0, 0] = True
    key_valid[1] = False  # batch element 1: no valid key at all
    return x_q, x_kv, q_pos, k_pos, key_valid


def test_mask_helpers_follow_the_package_conventions():
    key_valid = torch.tensor([[True, False, True], [False, False, False]])
    assert key_mask(key_valid).shape == (2, 1, 1, 3)
    assert has_valid_key(key_valid).flatten().tolist() == [True, False]
    assert valid_key_count(key_valid).flatten().tolist() == [2, 1]  # never a zero divisor
    x = torch.ones(2, 4, 3, 5)
    masked = mask_keys(x, key_valid)
    assert masked[0, :, 1].abs().sum() == 0 and masked[0, :, [0, 2]].eq(1).all() and masked[1].abs().sum() == 0
    assert mask_keys(x, None) is x
    out = torch.full((2, 4, 6, 5), float("nan"))
    out[0] = 1.5
    zeroed = zero_keyless_rows(out, key_valid)  # a NaN row of a keyless query becomes exactly 0
    assert torch.equal(zeroed[1], torch.zeros(4, 6, 5)) and torch.equal(zeroed[0], out[0])
    assert zero_keyless_rows(out, None) is out


def test_split_and_merge_heads_are_inverse_and_lay_heads_side_by_side():
    x = torch.arange(2 * 5 * 12, dtype=torch.float32).reshape(2, 5, 12)
    heads = split_heads(x, 3)  # [B, H, N, D]
    assert heads.shape == (2, 3, 5, 4)
    assert torch.equal(heads[1, 2, 3], x[1, 3, 8:12])
    assert torch.equal(merge_heads(heads), x)


@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_every_attention_module_has_the_same_forward_and_zero_for_a_keyless_query(name):
    torch.manual_seed(0)
    att = make_attention(ModelConfig(attention=name, dim=E, num_heads=H, bias_length_scale=3.0)).eval()
    x_q, x_kv, q_pos, k_pos, key_valid = _inputs()
    with torch.no_grad():
        out = att(x_q, x_kv, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid, cache=DistanceCache())
        where = AttentionGeometry(q_pos, k_pos, key_valid)
        heads = att.attend(*att.project(x_q, x_kv, where), where)
        empty = att.output(torch.zeros_like(heads[1:]))  # what "attention output zero" maps to
    assert isinstance(att, AttentionModule)
    assert out.shape == (B, NQ, E) and torch.isfinite(out).all()
    assert torch.equal(heads[1], torch.zeros_like(heads[1]))
    torch.testing.assert_close(out[1:], empty, rtol=0, atol=1e-6)
    torch.testing.assert_close(att.output(heads), out, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_invalid_keys_do_not_reach_the_output(name):
    torch.manual_seed(0)
    att = make_attention(ModelConfig(attention=name, dim=E, num_heads=H)).eval()
    x_q, x_kv, q_pos, k_pos, key_valid = _inputs()
    key_valid[1, :4] = True
    other = torch.randn(x_kv.shape, generator=torch.Generator().manual_seed(5))
    noisy = torch.where(key_valid[..., None], x_kv, other)  # other tokens at the padded keys
    with torch.no_grad():
        out = att(x_q, x_kv, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid)
        out2 = att(x_q, noisy, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid)
    if name == "performer":  # FAVOR+'s key stabiliser sees every key; it cancels up to rounding
        torch.testing.assert_close(out2, out, rtol=1e-4, atol=1e-5)
    else:
        assert torch.equal(out2, out)


def test_forward_hands_the_geometry_to_the_kernel():
    seen = {}

    class Recording(ProjectedAttention):
        def attend(self, q, k, v, where):
            seen["where"] = where
            return torch.zeros_like(q)

    att = Recording(E, H)
    x_q, x_kv, q_pos, k_pos, key_valid = _inputs()
    cache = DistanceCache()
    out = att(x_q, x_kv, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid, cache=cache)
    where = seen["where"]
    assert where.q_pos is q_pos and where.k_pos is k_pos and where.key_valid is key_valid and where.cache is cache
    torch.testing.assert_close(out, att.proj.to_out.bias.expand(B, NQ, E))


def test_an_attention_module_must_implement_its_kernel():
    class NoKernel(ProjectedAttention):
        pass

    with pytest.raises(TypeError, match="attend"):
        NoKernel(E, H)
