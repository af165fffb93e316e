"""Forward+backward time and peak memory of dense, scan and DKA attention as n grows.

Each (kernel, n) runs in a fresh subprocess so that its peak RSS (CPU) or peak CUDA memory is its
own. Context and query counts are both n; 4 heads, width 64 (head dim 16); grid coordinates in a
square so the RBF kernel bias takes its table path; the bias parameters get gradients too.

    python benchmarks/attention.py                 # CPU: n = 1k, 4k, 16k (64k for scan and dka)
    python benchmarks/attention.py --device cuda   # when a GPU is present
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
