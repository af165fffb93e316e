"""The compiled kernel of fused grid attention: FlexAttention reading the bias table inside.

The fused path (:mod:`.flex`) hands this kernel per-head tensors, packed positions and a bias
table; here they become one ``flex_attention`` call whose ``score_mod`` computes each pair's
squared pixel distance from the two packed coordinates and adds the table entry.

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
"""

from __future__ import annotations

import logging
import threading
import time
import types
from collections.abc import Callable

import torch

from geonp.models.attention.base import zero_keyless_rows

logger = logging.getLogger(__name__)

__all__ = ["COMPILED", "TABLE_LEN", "compile_seconds", "flat_table", "lookup_attention"]

SHIFT = 16  # a packed coordinate is row << 16 | col
SENTINEL = 2**14  # an invalid key's row and column
_MASKED_SQ = 2**27  # = 2 * 8192**2: a squared distance this large is a sentinel's
TABLE_LEN = 2**18 + 2  # entries per head: squared distances 0..2**18, then -inf
LAST_SQ = TABLE_LEN - 2
_HEAD_DIM = 16  # the head dimension the kernel is compiled for (smaller ones are zero-padded)


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
        dr = (a >> SHIFT) - (c >> SHIFT)
        dc = (a & 0xFFFF) - (c & 0xFFFF)
        sq = dr * dr + dc * dc  # int32: at most 2 * 16384**2 < 2**31
        index = torch.where(sq >= _MASKED_SQ, TABLE_LEN - 1, torch.clamp(sq, max=LAST_SQ))
        return score + table[offset[g] + index]

    return flex_attention(q, k, v, score_mod=score_mod, scale=1.0)


# Entry points to compile: one per compiled kernel, each a code object of its own. Workarounds for
# torch 2.13's CPU FlexAttention template, which renames its two block-size symbols in the
# generated C++ by plain text replacement: the build breaks when one symbol's name is a prefix of
# another's ("'cur_qSplitSize4' was not declared", from ``ks4`` inside ``ks44``). The names follow
# from the compiled function's argument names (these build; ``q_packed, k_packed, offset, table``
# do not) and the first compile of a code object builds where a recompile of it (another thread
# count, say) does not. So each kernel (device type, thread count) compiles its own entry point:
# copies of one function, each with a code object of its own (torch.compile keeps its cache on
# the code object).
def _entry(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qp: torch.Tensor, kp: torch.Tensor,
           off: torch.Tensor, t1: torch.Tensor) -> torch.Tensor:
    return _lookup_attention(q, k, v, qp, kp, off, t1)


def _entry_points(count: int) -> list[Callable[..., torch.Tensor]]:
    """``count`` copies of :func:`_entry`, each with a code object of its own (``_entry_0``, ...)."""
    points: list[Callable[..., torch.Tensor]] = []
    for i in range(count):
        name = f"_entry_{i}"
        code = _entry.__code__.replace(co_name=name, co_qualname=name)
        points.append(types.FunctionType(code, _entry.__globals__, name))
    return points


_ENTRIES = _entry_points(4)


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
        qp, kp = ((x[0] << SHIFT | x[1]).to(device) for x in (qp, kp))  # packed positions in a 64² window
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
            except Exception as err:  # noqa: BLE001 - no compiler, an unsupported platform, a failed build
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
    dr = (a >> SHIFT) - (c >> SHIFT)
    dc = (a & 0xFFFF) - (c & 0xFFFF)
    sq = dr * dr + dc * dc  # [B, Nq, Nk]
    index = torch.where(sq >= _MASKED_SQ, TABLE_LEN - 1, sq.clamp_max(LAST_SQ)).long()
    bias = table[:, index].permute(1, 0, 2, 3)  # [B, H, Nq, Nk]
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + bias, -1) @ v


def lookup_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_packed: torch.Tensor,
                     k_packed: torch.Tensor, table: torch.Tensor) -> torch.Tensor | None:
    """The compiled kernel on per-head tensors; ``None`` where it cannot run (then use the old path).

    Args:
        q: ``[B, H, Nq, D]``, ``D <= 16``.
        k: ``[B, H, Nk, D]``.
        v: ``[B, H, Nk, D]``.
        q_packed: ``[B, Nq]`` int32 packed query positions (:func:`.flex.pack_positions`).
        k_packed: ``[B, Nk]`` int32 packed key positions, the sentinel at invalid keys.
        table: ``[H, TABLE_LEN]`` float32 bias by squared distance (:func:`.flex.lookup_table`), or the
            same laid flat, ``[H·TABLE_LEN]`` (:class:`.flex.LookupTables`).

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
    except Exception as err:  # noqa: BLE001 - a recompile that fails to build: never again
        logger.debug("fused attention failed (%s: %s); using scan attention", type(err).__name__, err)
        COMPILED.disable(q.device)
        return None
    key_valid = k_packed != (SENTINEL << SHIFT | SENTINEL)  # [B, Nk]
    return zero_keyless_rows(out, key_valid)  # a normal tensor again, outside inference mode


def compile_seconds(device: str = "cpu") -> float | None:
    """Seconds the compile for ``device`` and the current thread count took (None: none, or failed)."""
    return COMPILED.compile_seconds.get(_Compiled.key(torch.device(device)))
