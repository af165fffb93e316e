"""Scan attention: exact softmax attention with a kernel bias, in memory linear in the points.

Seed 002 §3.3 (eqs. 6–8): an online softmax over key blocks with the bias computed per
(query block, key block) tile, never holding an ``Nq × Nk`` matrix. The backward pass is a custom
autograd function in the FlashAttention-2 style: the forward saves only the output and the per-row
log-sum-exp; the backward recomputes each tile's logits (bias included) and accumulates
``dq, dk, dv`` and the bias tensors' gradients tile by tile. Peak extra memory is one tile,
``B·H·q_chunk·k_chunk`` floats, in both directions.
"""

from __future__ import annotations

from typing import Any

import torch

from geonp.models.attention.base import AttentionGeometry, key_mask, zero_keyless_rows
from geonp.models.attention.bias import BiasTiles
from geonp.models.attention.softmax import BiasedSoftmaxAttention

# Largest Nq·Nk trained by the one-tile path, whose probabilities [B, H, Nq, Nk] are kept for the
# backward of every layer (64 MB per layer at B·H = 64); larger attention uses the scan backward,
# which keeps O(Nq + Nk) per layer.
_ONE_TILE_PAIRS = 512 * 512


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _tile_logits(
    q_scaled: torch.Tensor,
    k: torch.Tensor,
    bias_tile: torch.Tensor | None,
    key_valid: torch.Tensor | None,
    tiles: BiasTiles | None,
    ks: slice,
) -> torch.Tensor:
    """Logits of one tile ``[B, H, Qc, Kc]``, masked keys at -inf (the forward and backward rule).

    ``bias_tile`` is the tile's bias ``[B, H, Qc, Kc]`` (None without a bias); keys are masked
    here unless the bias already put -inf on them (``tiles.masks_keys``).
    """
    s = q_scaled @ k[:, :, ks].transpose(-1, -2)  # [B, H, Qc, Kc]
    if bias_tile is not None:
        s = s + bias_tile
    if key_valid is not None and not (tiles is not None and tiles.masks_keys):
        s = s.masked_fill(~key_mask(key_valid[:, ks]), float("-inf"))
    return s


def _single_block_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tiles: BiasTiles | None,
    key_valid: torch.Tensor | None, q_chunk: int, groups: int = 1,
) -> torch.Tensor:
    """Inference when all keys fit in one block: ``scaled_dot_product_attention``, per query chunk.

    Same result as the online softmax (one block needs no rescaling); about 2.5x faster on CPU.

    ``groups > 1``: the batch is that many runs of one geometry and ``tiles`` the bias of the first
    run, ``[T, H, Qc, Kc]`` (``T = B / groups``). Every run attends through it: ``q, k, v
    [g·T, H, N, D]`` are laid out as ``[g, H·T, N, D]`` and the bias as ``[1, H·T, Qc, Kc]`` (a view
    of the head-major table gather), which ``scaled_dot_product_attention`` broadcasts over the
    runs; the gather, the squared distances and the key mask are done once for all runs (the bands
    of a tile).
    """
    b, h, nq, _ = q.shape
    t = b // groups
    dv = v.shape[-1]

    def fold(x: torch.Tensor) -> torch.Tensor:  # [g·T, H, N, D] -> [g, H·T, N, D]
        return x.view(groups, t, h, *x.shape[2:]).transpose(1, 2).reshape(groups, h * t, *x.shape[2:])

    if groups > 1:
        q, k, v = fold(q), fold(k), fold(v)
    out = q.new_empty((*q.shape[:-1], dv))
    ks = slice(0, k.shape[2])
    mask_kv = key_valid is not None and not (tiles is not None and tiles.masks_keys)
    for qs in _chunks(nq, q_chunk):
        bias = tiles.fn(tiles.tensors, qs, ks) if tiles is not None else None
        if mask_kv:
            assert key_valid is not None  # mask_kv implies it
            bias = torch.where(key_mask(key_valid[:t]), bias if bias is not None else 0.0, float("-inf"))
        if groups > 1:
            assert bias is not None  # the caller groups runs only with a bias (ScanAttention.attend)
            bias = bias.transpose(0, 1).reshape(1, h * t, *bias.shape[2:])
        out[:, :, qs] = torch.nn.functional.scaled_dot_product_attention(q[:, :, qs], k, v, attn_mask=bias)
    if groups > 1:
        out = out.view(groups, h, t, nq, dv).transpose(1, 2).reshape(b, h, nq, dv)
    # a row with no valid key is all -inf: softmax gives NaN there; the convention is zero
    return zero_keyless_rows(out, key_valid)


def _one_tile_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tiles: BiasTiles | None, key_valid: torch.Tensor | None,
) -> torch.Tensor:
    """Training when the whole logit matrix is no bigger than one scan tile: plain autograd ops.

    The same numbers as the online softmax, but the backward reuses the saved probabilities
    instead of recomputing every tile (bias gather, logits, exp), and the bias is added inside
    the matrix product (``baddbmm``) and normalised by one fused softmax: about half the passes
    over the ``[B, H, Nq, Nk]`` pairs of :class:`_ScanAttentionFn`, measured on the CPU
    (benchmarks/train_speed.py). Memory is that one tile, kept for the backward (hence
    ``_ONE_TILE_PAIRS``).
    """
    b, h, nq, d = q.shape
    nk = k.shape[2]
    # head-major [H·B, ...]: the bias gather writes [H, B, Qc, Kc] (gather_table), so the bias,
    # the logits and their gradients flow through the products without a copy; q, k, v (D wide)
    # are the cheap ones to reorder
    qf = q.transpose(0, 1).reshape(h * b, nq, d)  # [H·B, Nq, D]
    kt = k.transpose(0, 1).reshape(h * b, nk, d).transpose(1, 2)  # [H·B, D, Nk]
    vf = v.transpose(0, 1).reshape(h * b, nk, v.shape[-1])  # [H·B, Nk, Dv]
    if tiles is None:
        s = torch.bmm(qf, kt) * d**-0.5  # [H·B, Nq, Nk]
    else:
        bias = tiles.fn(tiles.tensors, slice(0, nq), slice(0, nk))  # [B, H, Nq, Nk]
        bias = bias.transpose(0, 1).reshape(h * b, nq, nk)  # a view when gathered head-major
        s = torch.baddbmm(bias, qf, kt, alpha=d**-0.5)  # bias + q·kᵀ/√D
    s = s.view(h, b, nq, nk)
    mask_kv = key_valid is not None and not (tiles is not None and tiles.masks_keys)
    if mask_kv:
        assert key_valid is not None  # mask_kv implies it
        s = s.masked_fill(~key_valid[None, :, None, :], float("-inf"))
    has_key = None if key_valid is None or bool(key_valid.any(-1).all()) else key_valid.any(-1)[None, :, None, None]
    if has_key is not None:
        # where() twice: a row with no valid key is all -inf, whose softmax (and gradient) is NaN
        s = torch.where(has_key, s, 0.0)
    p = torch.softmax(s, dim=-1)  # [H, B, Nq, Nk]
    if has_key is not None:
        p = torch.where(has_key, p, 0.0)
    out = torch.bmm(p.view(h * b, nq, nk), vf)  # [H·B, Nq, Dv]
    return out.view(h, b, nq, -1).transpose(0, 1)  # [B, H, Nq, Dv]


def _scan_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tiles: BiasTiles | None,
    key_valid: torch.Tensor | None,
    q_chunk: int,
    k_chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Online-softmax forward; returns ``out [B, H, Nq, Dv]`` and ``lse [B, H, Nq]``."""
    b, h, nq, d = q.shape
    scale = d**-0.5
    out = q.new_empty((b, h, nq, v.shape[-1]))
    lse = q.new_empty((b, h, nq))
    bias_tensors = tiles.tensors if tiles is not None else ()
    for qs in _chunks(nq, q_chunk):
        q_scaled = q[:, :, qs] * scale  # [B, H, Qc, D]
        m = q.new_full(q_scaled.shape[:-1], float("-inf"))  # running max [B, H, Qc]
        l = q.new_zeros(q_scaled.shape[:-1])  # running normaliser [B, H, Qc]
        acc = q.new_zeros((*q_scaled.shape[:-1], v.shape[-1]))  # unnormalised output
        for ks in _chunks(k.shape[2], k_chunk):
            bias_tile = tiles.fn(bias_tensors, qs, ks) if tiles is not None else None
            s = _tile_logits(q_scaled, k, bias_tile, key_valid, tiles, ks)
            m_new = torch.maximum(m, s.amax(-1))
            # A row whose keys so far are all masked has m_new = -inf; shift by 0 there so that
            # exp(-inf - 0) = 0 instead of exp(-inf + inf) = NaN.
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - m_safe[..., None])  # [B, H, Qc, Kc]
            alpha = torch.exp(m - m_safe)  # rescale of the old state; 0 when m = -inf
            l = alpha * l + p.sum(-1)
            acc = alpha[..., None] * acc + p @ v[:, :, ks]
            m = m_new
        has_key = l > 0
        out[:, :, qs] = torch.where(has_key[..., None], acc / l.clamp_min(1e-30)[..., None], 0.0)
        # rows without a valid key get lse = 0: their recomputed p = exp(-inf - 0) = 0 in backward
        m_fin = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        lse[:, :, qs] = torch.where(has_key, m_fin + torch.log(l.clamp_min(1e-30)), 0.0)
    return out, lse


class _ScanAttentionFn(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_valid: torch.Tensor | None,
        tiles: BiasTiles | None,
        q_chunk: int,
        k_chunk: int,
        *bias_tensors: torch.Tensor,
    ) -> torch.Tensor:
        out, lse = _scan_forward(q, k, v, tiles, key_valid, q_chunk, k_chunk)
        ctx.save_for_backward(q, k, v, out, lse, *bias_tensors)
        ctx.key_valid = key_valid
        ctx.tiles = tiles
        ctx.chunks = (q_chunk, k_chunk)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        q, k, v, out, lse, *bias_tensors = ctx.saved_tensors
        tiles, key_valid = ctx.tiles, ctx.key_valid
        q_chunk, k_chunk = ctx.chunks
        scale = q.shape[-1] ** -0.5
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        delta = (grad_out * out).sum(-1)  # [B, H, Nq]: rowsum(dO ∘ O)
        # Leaf copies of the bias tensors: each tile's bias is recomputed under autograd and its
        # gradient (dS) is pushed into these leaves, which accumulate over tiles.
        leaves = tuple(t.detach().requires_grad_(t.requires_grad) for t in bias_tensors)
        bias_needs_grad = any(t.requires_grad for t in leaves)
        for qs in _chunks(q.shape[2], q_chunk):
            q_scaled = q[:, :, qs] * scale
            do = grad_out[:, :, qs]  # [B, H, Qc, Dv]
            for ks in _chunks(k.shape[2], k_chunk):
                with torch.enable_grad():
                    bias_tile = tiles.fn(leaves, qs, ks) if tiles is not None else None
                detached = None if bias_tile is None else bias_tile.detach()
                s = _tile_logits(q_scaled, k, detached, key_valid, tiles, ks)
                p = torch.exp(s - lse[:, :, qs, None])  # [B, H, Qc, Kc]
                dv[:, :, ks] += p.transpose(-1, -2) @ do
                dp = do @ v[:, :, ks].transpose(-1, -2)  # [B, H, Qc, Kc]
                ds = p * (dp - delta[:, :, qs, None])  # d(logit); zero on masked keys
                dq[:, :, qs] += (ds @ k[:, :, ks]) * scale
                dk[:, :, ks] += ds.transpose(-1, -2) @ q_scaled
                if bias_tile is not None and bias_needs_grad:
                    torch.autograd.backward(bias_tile, ds)
        bias_grads = tuple(t.grad if t.requires_grad else None for t in leaves)
        return (dq, dk, dv, None, None, None, None, *bias_grads)


def scan_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    key_valid: torch.Tensor | None = None,
    bias: BiasTiles | None = None,
    q_chunk: int = 1024,
    k_chunk: int = 1024,
) -> torch.Tensor:
    """Exact biased softmax attention computed tile by tile.

    With gradients, attention no larger than one tile (and ``_ONE_TILE_PAIRS``) is computed by
    :func:`_one_tile_attention`, which keeps its probabilities for the backward; larger
    attention by the online softmax with a recomputing backward (linear memory).

    Args:
        q: ``[B, H, Nq, D]``.
        k: ``[B, H, Nk, D]``.
        v: ``[B, H, Nk, Dv]``.
        key_valid: ``[B, Nk]``, True where a key may be attended.
        bias: the kernel bias as tiles (see :class:`BiasTiles`), or None.
        q_chunk: queries per tile.
        k_chunk: keys per tile.

    Returns:
        ``[B, H, Nq, Dv]``, equal to :func:`dense_attention` with the materialised bias; rows with
        no valid key are zero.
    """
    if q_chunk < 1 or k_chunk < 1:
        raise ValueError(f"chunk sizes must be positive, got q_chunk={q_chunk}, k_chunk={k_chunk}")
    bias_tensors = bias.tensors if bias is not None else ()
    needs_grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (q, k, v, *bias_tensors)
    )
    if not needs_grad:
        if k.shape[2] <= k_chunk:
            return _single_block_forward(q, k, v, bias, key_valid, q_chunk)
        return _scan_forward(q, k, v, bias, key_valid, q_chunk, k_chunk)[0]
    if q.shape[2] * k.shape[2] <= min(q_chunk * k_chunk, _ONE_TILE_PAIRS):
        return _one_tile_attention(q, k, v, bias, key_valid)
    return _ScanAttentionFn.apply(q, k, v, key_valid, bias, q_chunk, k_chunk, *bias_tensors)


class ScanAttention(BiasedSoftmaxAttention):
    """Multi-head scan attention (exact, memory-bounded) with an optional kernel bias.

    Args:
        dim: model width ``E``.
        num_heads: heads ``H``.
        bias: kernel bias module or None.
        q_chunk: queries per tile.
        k_chunk: keys per tile.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        bias: Any = None,
        q_chunk: int = 1024,
        k_chunk: int = 1024,
    ) -> None:
        """Build the module; the arguments are described in the class docstring."""
        super().__init__(dim, num_heads, bias=bias)
        self.q_chunk = q_chunk
        self.k_chunk = k_chunk

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, where: AttentionGeometry
    ) -> torch.Tensor:
        """As :meth:`BiasedSoftmaxAttention.attend`; a batch of runs of one geometry reads one bias.

        Where the pass's cache says the batch is ``groups`` runs of one geometry (the bands of a
        tile, :class:`~geonp.models.attention.bias.DistanceCache`), at inference with one key
        block: the bias of the first run serves all (:func:`_single_block_forward`).
        """
        groups = where.cache.groups if where.cache is not None else 1
        if groups == 1 or self.bias is None or k.shape[2] > self.k_chunk or q.shape[0] % groups \
                or (torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *self.bias.parameters()))):
            return super().attend(q, k, v, where)
        t = q.shape[0] // groups
        valid = where.key_valid
        tiles = self.bias.tiles(where.q_pos[:t], where.k_pos[:t], None if valid is None else valid[:t],
                                cache=where.cache)
        return _single_block_forward(q, k, v, tiles, valid, self.q_chunk, groups)

    def attend_tiles(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tiles: BiasTiles | None,
        key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """Run :func:`scan_attention` tile by tile."""
        return scan_attention(
            q, k, v, key_valid=key_valid, bias=tiles, q_chunk=self.q_chunk, k_chunk=self.k_chunk
        )
