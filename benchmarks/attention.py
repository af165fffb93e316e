"""Forward+backward time and peak memory of dense, scan and DKA attention as n grows.

Each (kernel, n) runs in a fresh subprocess so that its peak RSS (CPU) or peak CUDA memory is its
own. Context and query counts are both n; 4 heads, width 64 (head dim 16); grid coordinates in a
square so the RBF kernel bias takes its table path; the bias parameters get gradients too.

    python benchmarks/attention.py                 # CPU: n = 1k, 4k, 16k (64k for scan and dka)
    python benchmarks/attention.py --device cuda   # when a GPU is present

``--fused`` prints, instead, inference time per call of the biased attention paths at a fill's
shape (8 tiles x 4 heads x 2,304 queries x 352 keys x 16 dims), a decode batch of a real fill
(140 x 4 x 58 x 352 x 16) and a training batch's shape (16 x 4 x 256 targets x 512 context x 16),
one thread unless --threads, in one process, interleaved
rounds, medians: the old path (bias gathered from the squared-distance table, then
scaled_dot_product_attention; with and without the pass's squared distances already cached), the
fused kernel (FlexAttention with the table read inside, geonp.models.attention.flex), and
scaled_dot_product_attention without a bias; each as a ratio to the old path, plus the fused
kernel's compile time (with the on-disk inductor cache as found; a fresh
TORCHINDUCTOR_CACHE_DIR gives a cold compile), the number of graphs compiled, and whether its
backward runs on this device.

    python benchmarks/attention.py --fused
    python benchmarks/attention.py --fused --threads 2
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time

HEADS, WIDTH = 4, 64


def run_one(kernel: str, n: int, device: str, chunk: int) -> dict:
    import torch

    from geonp.models.attention import (
        RBFNetworkBias,
        deep_kernel_attention,
        dense_attention,
        scan_attention,
    )

    torch.manual_seed(0)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    d = WIDTH // HEADS
    side = math.ceil(math.sqrt(n))
    grid = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij"), -1).reshape(-1, 2)
    pos = grid[:n].float()[None].to(device)
    q, k, v = (torch.randn(1, HEADS, n, d, device=device, requires_grad=True) for _ in range(3))
    bias = RBFNetworkBias(HEADS, length_scale=8.0).to(device)

    def step() -> None:
        if kernel == "dense":
            out = dense_attention(q, k, v, bias=bias.tiles(pos, pos).full())
        elif kernel == "scan":
            out = scan_attention(q, k, v, bias=bias.tiles(pos, pos), q_chunk=chunk, k_chunk=chunk)
        else:  # dka: feature maps of the same size as the head dimension
            out = deep_kernel_attention(torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1, v)
        out.sum().backward()

    step()  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    reps = 2 if n <= 4096 else 1
    for _ in range(reps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - t0) / reps
    if device == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"kernel": kernel, "n": n, "seconds": seconds, "peak_mb": peak_mb}


def baseline_mb() -> float:
    out = subprocess.run([sys.executable, "-c", ("import resource, torch, geonp.models; "
                          "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="1024,4096,16384")
    parser.add_argument("--big", default="65536", help="extra sizes for scan and dka only")
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--dense-limit-gb", type=float, default=18.0, help="skip dense when its estimate exceeds this")
    parser.add_argument("--max-seconds", type=float, default=600.0,
                        help="skip a run whose time, extrapolated from the previous size, exceeds this")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--fused", action="store_true", help="inference: old bias path vs fused kernel vs SDPA")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of --fused")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds of --fused")
    args = parser.parse_args()
    if args.fused:
        fused_section(args.device, args.threads, args.rounds)
        return
    if args.one:
        kernel, n = args.one.split(":")
        print(json.dumps(run_one(kernel, int(n), args.device, args.chunk)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    big = [int(s) for s in args.big.split(",") if s]
    base = baseline_mb() if args.device == "cpu" else 0.0
    rows = []
    for n in sizes + big:
        for kernel in ("dense", "scan", "dka"):
            if n in big and kernel == "dense":
                continue
            est_gb = 6 * HEADS * n * n * 4 / 2**30  # logits, bias, weights, and their gradients
            if kernel == "dense" and est_gb > args.dense_limit_gb:
                rows.append({"kernel": kernel, "n": n, "seconds": None, "peak_mb": None, "note": f"skipped: ~{est_gb:.0f} GB"})
                continue
            prev = [r for r in rows if r["kernel"] == kernel and r["seconds"] is not None]
            if prev:
                power = 1 if kernel == "dka" else 2
                est_s = prev[-1]["seconds"] * (n / prev[-1]["n"]) ** power
                if est_s > args.max_seconds:
                    rows.append({"kernel": kernel, "n": n, "seconds": None, "peak_mb": None,
                                 "note": f"skipped: ~{est_s:.0f} s expected (over --max-seconds)"})
                    continue
            cmd = [sys.executable, __file__, "--one", f"{kernel}:{n}", "--device", args.device, "--chunk", str(args.chunk)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                rows.append({"kernel": kernel, "n": n, "seconds": None, "peak_mb": None,
                             "note": f"failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}"})
                continue
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["peak_mb"] -= base
            rows.append(row)
            print(f"  done {kernel} n={n}: {row['seconds']:.2f} s, {row['peak_mb']:.0f} MB", file=sys.stderr)
    dense = {r["n"]: r for r in rows if r["kernel"] == "dense" and r["seconds"] is not None}
    print(f"\nattention forward+backward, {HEADS} heads, width {WIDTH}, device {args.device}, "
          f"scan chunk {args.chunk}; memory = peak {'RSS above an idle interpreter' if args.device == 'cpu' else 'CUDA allocation'}")
    print(f"{'kernel':<7}{'n':>7}{'seconds':>10}{'peak MB':>10}{'time/dense':>12}{'mem/dense':>11}  note")
    for r in rows:
        d = dense.get(r["n"])
        t = f"{r['seconds']:.3f}" if r["seconds"] is not None else "-"
        m = f"{r['peak_mb']:.0f}" if r["peak_mb"] is not None else "-"
        tr = f"{r['seconds'] / d['seconds']:.2f}x" if d and r["seconds"] is not None else "-"
        mr = f"{r['peak_mb'] / max(d['peak_mb'], 1):.3f}x" if d and r["peak_mb"] is not None else "-"
        print(f"{r['kernel']:<7}{r['n']:>7}{t:>10}{m:>10}{tr:>12}{mr:>11}  {r.get('note', '')}")
    dka = [r for r in rows if r["kernel"] == "dka" and r["seconds"]]
    if len(dka) >= 2:
        a, b = dka[0], dka[-1]
        print(f"dka time scaling {a['n']}->{b['n']}: x{b['seconds'] / a['seconds']:.1f} for x{b['n'] / a['n']:.0f} points")


# (batch, queries, keys): the probe; a real decode batch of a 512² fill (140 tiles of 58
# queries each, 352 context points); a training batch (notes/cpu-cost.md)
FUSED_SHAPES = {"fill": (8, 2304, 352), "fill batch": (140, 58, 352), "training": (16, 256, 512)}


def fused_section(device: str, threads: int, rounds: int) -> None:
    """Inference time per call: old bias path, fused kernel, SDPA without bias (see the docstring)."""
    import statistics

    import torch
    import torch.nn.functional as F

    from geonp.models.attention import RBFNetworkBias, scan_attention
    from geonp.models.attention import flex
    from geonp.models.attention.bias import DistanceCache

    torch.set_num_threads(threads)
    d = WIDTH // HEADS
    bias = RBFNetworkBias(HEADS, length_scale=8.0).to(device)
    tables = flex.LookupTables()
    t0 = time.perf_counter()
    kernel = flex.COMPILED.get(torch.device(device))
    compile_s = time.perf_counter() - t0
    if kernel is None:
        print(f"fused kernel unavailable on {device} (no compiler or a failed build): nothing to compare")
        return
    print(f"fused kernel: compiled in {compile_s:.1f} s (first call in this process; "
          f"torch {torch.__version__}, {threads} thread(s), device {device})")
    g = torch.Generator().manual_seed(0)
    rows = []
    for name, (b, nq, nk) in FUSED_SHAPES.items():
        q = torch.randn(b, HEADS, nq, d, generator=g).to(device)
        k, v = (torch.randn(b, HEADS, nk, d, generator=g).to(device) for _ in range(2))
        # a tile: queries in a 48-px square, context around it out to ~240 px, 5 % padded keys
        q_pos = torch.randint(96, 144, (b, nq, 2), generator=g).float().to(device)
        k_pos = torch.randint(0, 240, (b, nk, 2), generator=g).float().to(device)
        key_valid = (torch.rand(b, nk, generator=g) > 0.05).to(device)
        cache = DistanceCache()
        warm_tiles = bias.tiles(q_pos, k_pos, key_valid, cache=cache)

        def old() -> torch.Tensor:
            return scan_attention(q, k, v, key_valid=key_valid, bias=bias.tiles(q_pos, k_pos, key_valid,
                                                                                cache=DistanceCache()))

        def old_cached() -> torch.Tensor:
            return scan_attention(q, k, v, key_valid=key_valid, bias=warm_tiles)

        def fused() -> torch.Tensor:
            return flex.fused_grid_attention(q, k, v, bias=bias, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid,
                                             tables=tables, cache=DistanceCache())

        def sdpa() -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v)

        paths = {"old": old, "old, distances cached": old_cached, "fused": fused, "sdpa, no bias": sdpa}
        with torch.inference_mode():
            ref, out = old(), fused()
            diff = float((ref - out).abs().max())
            times: dict[str, list[float]] = {p: [] for p in paths}
            for _ in range(rounds):
                for p, fn in paths.items():
                    if device == "cuda":
                        torch.cuda.synchronize()
                    t1 = time.perf_counter()
                    fn()
                    if device == "cuda":
                        torch.cuda.synchronize()
                    times[p].append(time.perf_counter() - t1)
        med = {p: statistics.median(t) for p, t in times.items()}
        for p in paths:
            rows.append((name, f"{b}x{HEADS}x{nq}x{nk}x{d}", p, med[p], med[p] / med["old"],
                         med[p] / med["fused"], diff if p == "fused" else None))
    print(f"\ninference, median of {rounds} interleaved rounds; the machine's other load is not controlled")
    print(f"{'shape':<12}{'B x H x Nq x Nk x D':<22}{'path':<24}{'s/call':>9}{'/old':>7}{'/fused':>8}"
          "  max |fused - old|")
    for name, dims, p, sec, r_old, r_fused, diff in rows:
        tail = f"  {diff:.1e}" if diff is not None else ""
        print(f"{name:<12}{dims:<22}{p:<24}{sec:>9.4f}{r_old:>7.2f}{r_fused:>8.2f}{tail}")
    from torch._dynamo.utils import counters

    print(f"graphs compiled in this process: {counters['stats']['unique_graphs']} "
          f"(one kernel for every shape above: dynamic shapes, no recompile)")
    print(f"\nfused backward on {device}: {_fused_backward(device)}")


def _fused_backward(device: str) -> str:
    """Whether a gradient flows through the compiled FlexAttention kernel on ``device``."""
    import torch

    from geonp.models.attention import flex

    q, k, v = (torch.randn(3, 4, 37, 16, device=device, requires_grad=True) for _ in range(3))
    qp = torch.randint(0, 32, (3, 37), dtype=torch.int32, device=device)
    table = torch.randn(4, flex.TABLE_LEN, device=device)
    try:
        kernel = flex.COMPILED.get(torch.device(device))
        if kernel is None:
            return "no kernel"
        out = kernel(*flex._fold(q, k, v, qp, qp, table))
        out.sum().backward()
    except Exception as err:  # report, do not fail: training keeps scan attention's backward
        return f"not supported ({type(err).__name__}: {str(err).strip().splitlines()[0][:160]})"
    return "runs"


if __name__ == "__main__":
    main()
