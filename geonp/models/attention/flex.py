"""Fused grid attention: FlexAttention with the kernel bias looked up inside the kernel.

Today's inference path (:mod:`.bias` then :func:`.scan.scan_attention`) writes the bias of every
(query, key) pair and head to memory, ``[B, H, Nq, Nk]`` floats gathered from a table of squared
distances, and then reads it back in the attention. Here the same table is read *inside* the
attention: ``torch.nn.attention.flex_attention``, compiled by ``torch.compile`` (a C++ kernel on
the CPU, Triton on CUDA), calls a ``score_mod`` per logit that computes the squared pixel distance
from the two points' packed integer coordinates and adds the table entry.

Packing and the table (exact, and the same numbers as the old path):

- A point's coordinates, shifted so the batch's smallest row and column are 0, are packed in one
  int32, ``row << 16 | col``; the span must stay below ``2**13`` pixels (else the old path runs).
- An invalid key gets the sentinel position ``(2**14, 2**14)``: its squared distance to any query
  is at least ``2**27``, above any real one (``< 2 * 8192**2``), and reads the table's last entry,
  -inf. A query with no valid key then has only -inf logits; its output is set to zero afterwards
  (the package convention, :mod:`geonp.models.attention`).
- The table has a fixed length, ``2**18 + 2`` entries per head: entry ``s`` is the bias at
  squared distance ``s`` up to the bias's reach (:meth:`RBFNetworkBias.reach`, rounded up to a
  power of two as the old table), the reach's value beyond it (the old table's clamp), and -inf
  last. A fixed length keeps the clamp a constant in the compiled kernel. It is evaluated once per
  parameter version and kept by the attention module (like the reach's memo).

Compiled once per process, device type and torch thread count, with dynamic shapes: one kernel
for every batch, head count (heads are folded into the batch), query and key count, and head
dimension up to 16 (zero-padded). The first compile traces sizes that differ from each other and
from 0 and 1, so that no size is specialised; a call with fewer than 2 queries, keys or heads takes
the old path (a second compile costs seconds and, in torch 2.13's CPU FlexAttention template, may
fail to build). Any failure to compile disables the fused path for that key and the old path runs
instead: the fused path never changes *whether* a forward pass works, only how fast.

Where it applies: inference (no gradient), float32, a spatial :class:`RBFNetworkBias` on integer
coordinates (or a :class:`SpaceTimeBias` whose batch has no date offset, which is the spatial bias
alone), at least 2 of every size. The backward pass of FlexAttention is not supported on the CPU
(torch 2.13: "torch.compile on CPU only supports inference"); training keeps scan attention's own
backward. The old path stays the oracle: ``tests/models/test_flex_attention.py`` ties them.

Switch: ``ScanAttention(fused=...)`` or the environment variable ``GEONP_FUSED_ATTENTION``
(``auto``, ``flex`` or ``off``; the argument wins over the variable, which wins over ``auto``).
``auto`` picks the faster path measured for the device (:data:`AUTO`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from geonp.models.attention.bias import DistanceCache, RBFNetworkBias, _compute_max_sq, _reach_sq, cached

logger = logging.getLogger(__name__)

FUSED_ENV = "GEONP_FUSED_ATTENTION"
MODES = ("auto", "flex", "off")
#: What ``auto`` means per device type. Measured on a 2-core CPU, torch 2.13 (busy machine): with 2
#: torch threads the fused kernel takes 0.5x the old path's time per call at fill shapes and a
#: whole 512² fill 0.8x (and 100-250 MB less peak RSS); with 1 thread (a fill's worker processes)
#: it is level with the old path per call and a whole fill 1.05x (its ~4 s compile not recovered).
#: The old path stays the default on the CPU; CUDA is unmeasured (no GPU here), so ``off`` too.
AUTO = {"cpu": "off", "cuda": "off"}

_SHIFT = 16  # a packed coordinate is row << 16 | col
_MAX_SPAN = 2**13  # rows and columns of a batch span fewer pixels than this
_SENTINEL = 2**14  # an invalid key's row and column
_MASKED_SQ = 2**27  # = 2 * 8192**2: a squared distance this large is a sentinel's
TABLE_LEN = 2**18 + 2  # entries per head: squared distances 0..2**18, then -inf
_LAST_SQ = TABLE_LEN - 2


def resolve_mode(requested: str | None, device: torch.device) -> str:
    """``flex`` or ``off`` for a call on ``device``: the argument, else the variable, else ``auto``.

    Raises:
        ValueError: a mode other than ``auto``, ``flex``, ``off``.
    """
    mode = requested if requested not in (None, "auto") else os.environ.get(FUSED_ENV, "auto").strip().lower()
    if mode not in MODES:
        raise ValueError(f"fused attention mode {mode!r} (from the argument or ${FUSED_ENV}); valid: {list(MODES)}")
    if mode == "auto":
        return AUTO.get(device.type, "off")
    return mode


# ----------------------------------------------------------------------------------------------
# The kernel: a pure function of per-head tensors, and its compiled forms.
#
# FlexAttention specialises the compiled kernel on the number of heads and the head dimension. So
# that one kernel serves every model, heads are folded into the batch (``G = B·H`` rows of one
# head each; the score_mod finds its row's head's table at ``offset [G]`` in the heads' tables laid
# end to end) and the head dimension is zero-padded to ``_HEAD_DIM`` (zero columns change no dot
# product; the padded output columns are dropped). The softmax scale is applied to ``q``
# beforehand, so the kernel's scale is 1. Every input is a tensor of its own, never a view, made in
# inference mode: the compiled kernel's guards include a view's base and a tensor's dispatch keys
# (autograd or not), and a call whose inputs differ from the first call's in either respect would
# compile again.


def _lookup_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_packed: torch.Tensor,
                      k_packed: torch.Tensor, offset: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``softmax(q·kᵀ + table[offset[g] + |p_q - p_k|²]) v`` on ``q [G, 1, Nq, Dp]`` (see above)."""
    from torch.nn.attention.flex_attention import flex_attention

    def score_mod(score: torch.Tensor, g: torch.Tensor, _h: torch.Tensor, i: torch.Tensor,
                  j: torch.Tensor) -> torch.Tensor:
        a, c = q_packed[g, i], k_packed[g, j]
        dr = (a >> _SHIFT) - (c >> _SHIFT)
        dc = (a & 0xFFFF) - (c & 0xFFFF)
        sq = dr * dr + dc * dc  # int32: at most 2 * 16384**2 < 2**31
        index = torch.where(sq >= _MASKED_SQ, TABLE_LEN - 1, torch.clamp(sq, max=_LAST_SQ))
        return score + table[offset[g] + index]

    return flex_attention(q, k, v, score_mod=score_mod, scale=1.0)


# Entry points to compile: one per compiled kernel, each a code object of its own. Workarounds for
# torch 2.13's CPU FlexAttention template, which renames its two block-size symbols in the
# generated C++ by plain text replacement: the build breaks when one symbol's name is a prefix of
# another's ("'cur_qSplitSize4' was not declared", from ``ks4`` inside ``ks44``). The names follow
# from the compiled function's argument names (these build; ``q_packed, k_packed, offset, table``
# do not) and the first compile of a code object builds where a recompile of it (another thread
# count, say) does not. So each kernel (device type, thread count) compiles its own entry point.
def _entry_0(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qp: torch.Tensor, kp: torch.Tensor,
             off: torch.Tensor, t1: torch.Tensor) -> torch.Tensor:
    return _lookup_attention(q, k, v, qp, kp, off, t1)


def _entry_1(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qp: torch.Tensor, kp: torch.Tensor,
             off: torch.Tensor, t1: torch.Tensor) -> torch.Tensor:
    return _lookup_attention(q, k, v, qp, kp, off, t1)


def _entry_2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qp: torch.Tensor, kp: torch.Tensor,
             off: torch.Tensor, t1: torch.Tensor) -> torch.Tensor:
    return _lookup_attention(q, k, v, qp, kp, off, t1)


def _entry_3(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qp: torch.Tensor, kp: torch.Tensor,
             off: torch.Tensor, t1: torch.Tensor) -> torch.Tensor:
    return _lookup_attention(q, k, v, qp, kp, off, t1)


_ENTRIES = [_entry_0, _entry_1, _entry_2, _entry_3]


_HEAD_DIM = 16  # the head dimension the kernel is compiled for (smaller ones are zero-padded)


def _fold(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_packed: torch.Tensor, k_packed: torch.Tensor,
          table: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The kernel's inputs from per-head tensors: heads into the batch, ``D`` padded, ``q`` scaled."""
    b, h, _, d = q.shape

    def rows(x: torch.Tensor) -> torch.Tensor:  # [B, H, N, D] -> [B·H, 1, N, Dp], a new tensor
        n = x.shape[2]
        out = x.new_empty((b * h, 1, n, _HEAD_DIM)) if d == _HEAD_DIM else x.new_zeros((b * h, 1, n, _HEAD_DIM))
        out.view(b, h, n, _HEAD_DIM)[..., :d] = x
        return out

    offset = torch.arange(h, dtype=torch.int32, device=q.device).mul_(TABLE_LEN).repeat(b)  # [B·H]
    return (rows(q).mul_(d**-0.5), rows(k), rows(v), q_packed.repeat_interleave(h, 0),
            k_packed.repeat_interleave(h, 0), offset, flat_table(table))


def flat_table(table: torch.Tensor) -> torch.Tensor:
    """``[H, TABLE_LEN] -> [H·TABLE_LEN]``, an inference tensor of its own; such a one passes as is."""
    if table.dim() == 1 and table.is_inference() and table._base is None and table.is_contiguous():
        return table
    with torch.inference_mode():
        return table.new_empty(table.numel()).copy_(table.reshape(-1))


class _Compiled:
    """Compiled kernels by (device type, torch threads), built on first use; ``None`` where one cannot run.

    The compiled code is specialised on the thread count (``torch.compile`` guards on it), so a
    process that changes it gets a kernel per count, each from an unused entry point; when the
    entry points run out, or a build fails, that key takes the old path.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fns: dict[tuple[str, int], Callable[..., torch.Tensor] | None] = {}
        self.compile_seconds: dict[tuple[str, int], float] = {}
        self.unused = list(_ENTRIES)

    @staticmethod
    def key(device: torch.device) -> tuple[str, int]:
        """What a compiled kernel is specialised on."""
        return device.type, torch.get_num_threads()

    def get(self, device: torch.device) -> Callable[..., torch.Tensor] | None:
        """The kernel for ``device`` and the current thread count (compiled on the first call), or None."""
        key = self.key(device)
        if key not in self.fns:
            with self.lock:
                if key not in self.fns:
                    self.fns[key] = self._build(device, key)
        return self.fns[key]

    def disable(self, device: torch.device) -> None:
        """Never use the kernel of ``device`` and the current thread count again in this process."""
        with self.lock:
            self.fns[self.key(device)] = None

    def _build(self, device: torch.device, key: tuple[str, int]) -> Callable[..., torch.Tensor] | None:
        t0 = time.perf_counter()
        # Trace with sizes unlike each other and unlike 0 and 1: dynamic shapes then keep every
        # size symbolic (no duck-sizing of Nq with Nk, no specialisation), and this one kernel
        # serves every later call.
        b, h, nq, nk, d = 3, 5, 37, 29, 10
        g = torch.Generator(device="cpu").manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, generator=g).to(device) for n in (nq, nk, nk))
        qp, kp = (torch.randint(0, 64, (2, b, n), generator=g, dtype=torch.int32) for n in (nq, nk))
        qp, kp = ((x[0] << _SHIFT | x[1]).to(device) for x in (qp, kp))  # packed positions in a 64² window
        table = torch.randn(h, TABLE_LEN, generator=g).to(device)
        ref = _reference(q, k, v, qp, kp, table)
        while self.unused:
            entry = self.unused.pop(0)
            try:
                fn = torch.compile(entry, dynamic=True)
                with torch.inference_mode():
                    out = _unfold(fn(*_fold(q, k, v, qp, kp, table)), b, d)
                if not torch.allclose(out, ref, atol=1e-4, rtol=1e-4):
                    raise RuntimeError(f"compiled kernel differs from its reference by {(out - ref).abs().max():.3g}")
            except Exception as err:  # no compiler, an unsupported platform, a failed build
                logger.debug("fused attention: %s does not build for %s (%s: %s)", entry.__name__, key,
                             type(err).__name__, err)
                if not _buildable(err):
                    break
                continue
            self.compile_seconds[key] = time.perf_counter() - t0
            logger.debug("fused attention compiled for %s in %.1f s", key, self.compile_seconds[key])
            return fn
        logger.debug("fused attention unavailable for %s; using scan attention", key)
        return None


def _buildable(err: Exception) -> bool:
    """Whether another entry point might build where this one failed (the symbol-name clash)."""
    return "was not declared in this scope" in str(err)


COMPILED = _Compiled()


def _unfold(out: torch.Tensor, b: int, d: int) -> torch.Tensor:
    """``[B·H, 1, Nq, Dp] -> [B, H, Nq, D]``."""
    return out.reshape(b, -1, out.shape[2], out.shape[3])[..., :d]


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_packed: torch.Tensor,
               k_packed: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The lookup kernel written out densely (the compile check's oracle)."""
    a, c = q_packed[:, :, None], k_packed[:, None, :]
    dr = (a >> _SHIFT) - (c >> _SHIFT)
    dc = (a & 0xFFFF) - (c & 0xFFFF)
    sq = dr * dr + dc * dc  # [B, Nq, Nk]
    index = torch.where(sq >= _MASKED_SQ, TABLE_LEN - 1, sq.clamp_max(_LAST_SQ)).long()
    bias = table[:, index].permute(1, 0, 2, 3)  # [B, H, Nq, Nk]
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + bias, -1) @ v


def lookup_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_packed: torch.Tensor,
                     k_packed: torch.Tensor, table: torch.Tensor) -> torch.Tensor | None:
    """The compiled kernel on per-head tensors; ``None`` where it cannot run (then use the old path).

    Args:
        q: ``[B, H, Nq, D]``, ``D <= 16``.
        k: ``[B, H, Nk, D]``.
        v: ``[B, H, Nk, D]``.
        q_packed: ``[B, Nq]`` int32 packed query positions (:func:`pack_positions`).
        k_packed: ``[B, Nk]`` int32 packed key positions, the sentinel at invalid keys.
        table: ``[H, TABLE_LEN]`` float32 bias by squared distance (:func:`lookup_table`), or the
            same laid flat, ``[H·TABLE_LEN]`` (:class:`LookupTables`).

    Returns:
        ``[B, H, Nq, D]``; rows whose keys are all invalid are zero.
    """
    b, h, nq, d = q.shape
    if min(b * h, nq, k.shape[2]) < 2 or h < 2 or d > _HEAD_DIM or v.shape[-1] != d:
        return None  # a size of 0 or 1 would be specialised: a second compile
    fn = COMPILED.get(q.device)
    if fn is None:
        return None
    try:
        with torch.inference_mode():  # as compiled: grad mode and the inputs' dispatch keys are guarded on
            out = _unfold(fn(*_fold(q, k, v, q_packed, k_packed, table)), b, d)
    except Exception as err:  # a recompile that fails to build: never again in this process
        logger.debug("fused attention failed (%s: %s); using scan attention", type(err).__name__, err)
        COMPILED.disable(q.device)
        return None
    has_key = (k_packed != (_SENTINEL << _SHIFT | _SENTINEL)).any(-1)  # [B]
    return torch.where(has_key[:, None, None, None], out, 0.0)  # a normal tensor again, outside inference mode


# ----------------------------------------------------------------------------------------------
# Geometry and table: the inputs of the kernel, from positions and a bias module.


def pack_positions(q_pos: torch.Tensor, k_pos: torch.Tensor, key_valid: torch.Tensor | None,
                   cache: DistanceCache | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Packed int32 positions ``([B, Nq], [B, Nk])``, or ``None`` off the grid or beyond the span.

    ``q_pos [B, Nq, 2]`` and ``k_pos [B, Nk, 2]`` must hold integers (pixel coordinates); the
    batch's rows and columns must span fewer than ``2**13`` pixels.
    """
    if q_pos.shape[-1] != 2 or k_pos.shape[-1] != 2:
        return None
    max_sq = cached(cache, ("max_sq", q_pos, k_pos), lambda: _compute_max_sq(q_pos, k_pos))
    if max_sq is None:  # not all integers (or empty)
        return None
    lo = torch.minimum(q_pos.amin(dim=(0, 1)), k_pos.amin(dim=(0, 1)))  # [2]
    hi = torch.maximum(q_pos.amax(dim=(0, 1)), k_pos.amax(dim=(0, 1)))
    if float((hi - lo).max()) >= _MAX_SPAN:
        return None

    def pack(pos: torch.Tensor) -> torch.Tensor:
        rc = (pos - lo).round().to(torch.int32)  # [B, N, 2], in [0, 2**13)
        return (rc[..., 0] << _SHIFT) | rc[..., 1]  # [B, N]

    q_packed = pack(q_pos).contiguous()
    k_packed = pack(k_pos)
    if key_valid is not None:
        k_packed = torch.where(key_valid, k_packed, _SENTINEL << _SHIFT | _SENTINEL)
    return q_packed, k_packed.contiguous()


def lookup_table(bias: RBFNetworkBias, like: torch.Tensor) -> torch.Tensor | None:
    """``[H, TABLE_LEN]``: the bias by squared distance, clamped at its reach, -inf last; or ``None``.

    Entry ``s`` equals the old table's entry for squared distance ``s`` (the same evaluation,
    clamped at the same ``last_sq`` when the reach is shorter than the batch); ``None`` when the
    bias's reach needs more than ``2**18`` squared pixels (about 512 px).
    """
    reach_sq = _reach_sq(bias.reach())
    if reach_sq > _LAST_SQ:
        return None
    params = (bias.a, bias.b, bias.c)
    dist = torch.arange(reach_sq + 1, device=like.device, dtype=like.dtype).sqrt()
    values = RBFNetworkBias.evaluate(params, dist)  # [H, reach_sq + 1]
    table = values.new_empty((values.shape[0], TABLE_LEN))
    table[:, : reach_sq + 1] = values
    table[:, reach_sq + 1 :] = values[:, -1:]  # beyond the reach: the reach's value (the old clamp)
    table[:, -1] = float("-inf")  # invalid keys
    return table


class LookupTables:
    """Tables of one attention module, kept while its bias parameters do not change (inference)."""

    def __init__(self) -> None:
        """An empty memo."""
        self._memo: tuple[tuple, torch.Tensor | None] | None = None

    def get(self, bias: RBFNetworkBias, like: torch.Tensor) -> torch.Tensor | None:
        """:func:`lookup_table` of ``bias`` on ``like``'s device, flat (``[H·TABLE_LEN]``), remembered
        until a parameter changes."""
        params = (bias.a, bias.b, bias.c)
        key = (like.device, like.dtype, *((t.data_ptr(), t._version) for t in params))
        if self._memo is None or self._memo[0] != key:
            with torch.inference_mode():  # the kernel's inputs are inference tensors (see _fold)
                table = lookup_table(bias, like)
                self._memo = (key, None if table is None else flat_table(table))
        return self._memo[1]


def spatial_bias(bias: Any, q_pos: torch.Tensor, k_pos: torch.Tensor,
                 cache: DistanceCache | None) -> tuple[RBFNetworkBias, torch.Tensor, torch.Tensor] | None:
    """The spatial RBF bias and the spatial positions, or ``None`` where the fused path does not apply.

    A :class:`SpaceTimeBias` qualifies when no point of the batch has a date offset (then its bias
    is the spatial one, as in :meth:`SpaceTimeBias.tiles`); with dates the old path runs.
    """
    from geonp.models.attention.temporal import SpaceTimeBias, _max_abs_dt

    if isinstance(bias, SpaceTimeBias):
        qt, kt = q_pos[..., -1], k_pos[..., -1]
        if cached(cache, ("max_dt", qt, kt), lambda: _max_abs_dt(qt, kt)) != 0:
            return None
        return bias.space, q_pos[..., :-1], k_pos[..., :-1]
    if type(bias) is RBFNetworkBias and bias.grid_fast_path:
        return bias, q_pos, k_pos
    return None


def fused_grid_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, bias: Any,
                         q_pos: torch.Tensor, k_pos: torch.Tensor, key_valid: torch.Tensor | None,
                         tables: LookupTables, cache: DistanceCache | None = None) -> torch.Tensor | None:
    """Biased attention through the fused kernel, or ``None`` where it does not apply.

    Args:
        q: ``[B, H, Nq, D]``.
        k: ``[B, H, Nk, D]``.
        v: ``[B, H, Nk, D]``.
        bias: the attention module's bias module.
        q_pos: ``[B, Nq, P]``.
        k_pos: ``[B, Nk, P]``.
        key_valid: ``[B, Nk]`` True where a key may be attended.
        tables: the module's table memo.
        cache: the pass's :class:`DistanceCache` (shares the integer check with the old path).

    Returns:
        ``[B, H, Nq, D]`` equal to :func:`scan_attention` with ``bias.tiles(...)`` within float32
        rounding, or ``None``.
    """
    if q.dtype != torch.float32 or not (q.dtype == k.dtype == v.dtype):
        return None
    spatial = spatial_bias(bias, q_pos, k_pos, cache)
    if spatial is None:
        return None
    rbf, qs, ks = spatial
    packed = pack_positions(qs, ks, key_valid, cache)
    if packed is None:
        return None
    table = tables.get(rbf, q)
    if table is None or table.numel() != q.shape[1] * TABLE_LEN:
        return None
    return lookup_attention(q, k, v, packed[0], packed[1], table)


def compile_seconds(device: str = "cpu") -> float | None:
    """Seconds the compile for ``device`` and the current thread count took (None: none, or failed)."""
    return COMPILED.compile_seconds.get(_Compiled.key(torch.device(device)))


__all__ = [
    "AUTO",
    "FUSED_ENV",
    "MODES",
    "TABLE_LEN",
    "LookupTables",
    "compile_seconds",
    "fused_grid_attention",
    "lookup_attention",
    "lookup_table",
    "pack_positions",
    "resolve_mode",
]
