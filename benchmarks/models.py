"""The peer models side by side: TNP-KR (scan), TNP-KR (dka), TNP-D and CMANP (Feng et al.).

Three parts, each optional:

1. ``gp``: the 2D GP (RBF) tasks of the TNP-KR paper (Jenson et al.) §4.2. Every model is trained with the same steps,
   batch size, optimiser and task stream, then scored on the same fixed test batches beside the
   exact GP posterior (the best any model can do).
2. ``raster``: 64x64 patches of the Landsat 8 scene with simulated gaps, as ``geonp train`` cuts
   them. Training patches come from the "train" column region and test patches from the "val"
   region, so no pixel is shared. NLL and RMSE are in normalised units (per-band z-scores).
3. ``memory``: peak inference memory (peak RSS of a fresh process, minus that of an idle one) and
   time of one untrained forward pass as the context grows (1k to 64k points, 1k queries, batch
   1, raster coordinates at 10% density). Memory does not depend on the weights. A model and size
   whose estimate exceeds ``--max-gb`` (or 70% of the free memory) is skipped, not run.

    python benchmarks/models.py                                   # ~25 minutes on 2 cores
    python benchmarks/models.py --steps 20 --test-batches 4 --sizes 1024,4096   # smoke run
    python benchmarks/models.py --parts gp --device cuda --steps 3000          # the peers on a GPU
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

RASTER = "/work/shared/data/landsat8_224078_20200518_b234.tif"
NAMES = ("TNP-KR (scan)", "TNP-KR (dka)", "TNP-D", "CMANP")
#: Variants run only when named (``--models``).
VARIANTS = ("TNP-KR (dka+xy)", "TNP-KR (dka-raw)")
HEADS = 4


def model_config(name: str, length_scale: float):
    """The architecture of ``name`` at the shared size (width 64, 4 blocks, feed-forward 128)."""
    from geonp.config import ModelConfig

    common = {"dim": 64, "depth": 4, "num_heads": HEADS, "ff_dim": 128, "bias_length_scale": length_scale}
    return {
        "TNP-KR (scan)": ModelConfig(arch="tnpkr", attention="scan", **common),
        "TNP-KR (dka)": ModelConfig(arch="tnpkr", attention="dka", **common),
        # DKA with the coordinates in the tokens too (as a TNP's tokens hold them), not only in its kernel
        "TNP-KR (dka+xy)": ModelConfig(arch="tnpkr", attention="dka", embed_coords=True, **common),
        # DKA as it was before its kernel took Fourier features of the coordinates (train_and_score)
        "TNP-KR (dka-raw)": ModelConfig(arch="tnpkr", attention="dka", **common),
        "TNP-D": ModelConfig(arch="tnpd", **common),
        "CMANP": ModelConfig(arch="cmanp", num_latents=64, **common),
    }[name]


def score_batches(model, batches: list) -> dict[str, float]:
    """NLL, RMSE and 95% coverage over ``Batch`` es, weighted by valid targets."""
    import torch

    model.eval()
    device = next(model.parameters()).device
    nll, se, cov, n = 0.0, 0.0, 0.0, 0
    with torch.no_grad():
        for b in batches:
            b = b.to(device)
            mean, std = model(b.xc, b.yc, b.xt, b.context_valid)
            tv = b.target_valid[..., None]
            z = (b.yt - mean) / std
            nll += float(((0.5 * torch.log(2 * torch.pi * std**2) + 0.5 * z**2) * tv).sum())
            se += float((((b.yt - mean) ** 2) * tv).sum())
            cov += float(((z.abs() <= 1.959964) & tv).sum())
            n += int(tv.sum())
    return {"nll": nll / n, "rmse": (se / n) ** 0.5, "coverage95": cov / n}


def train_and_score(name: str, length_scale: float, sample: Callable, val: list, test: list, args) -> dict:
    """Train one model with the shared budget, keep its best validation weights, score it."""
    import torch

    from geonp.config import TrainConfig
    from geonp.models import attention, build_model
    from geonp.training.loop import FitHooks, fit

    fourier = attention.DKA_FOURIER
    if name == "TNP-KR (dka-raw)":
        attention.DKA_FOURIER = 0  # DKA's kernel on raw coordinates alone
    try:
        torch.manual_seed(args.seed)
        model = build_model(model_config(name, length_scale))
    finally:
        attention.DKA_FOURIER = fourier
    cfg = TrainConfig(steps=args.steps, lr=args.lr, warmup_steps=min(100, args.steps // 10),
                      val_every=max(1, args.steps // 5), seed=args.seed, device=args.device)
    t0 = time.perf_counter()
    def report(record: dict, is_best: bool, _result) -> None:  # a run cut short still shows how far it got
        print(f"  {name}: step {record['step']}/{args.steps}, validation NLL {record['val_nll']:.3f}"
              f"{' (best)' if is_best else ''}, {record['seconds']:.0f} s", file=sys.stderr, flush=True)

    result = fit(model, sample, val, cfg, hooks=FitHooks(on_validate=report))
    seconds = time.perf_counter() - t0
    if result.best_state is not None:
        model.load_state_dict(result.best_state)
    scores = score_batches(model, test)
    params = sum(p.numel() for p in model.parameters())
    print(f"  {name}: nll {scores['nll']:.3f}, rmse {scores['rmse']:.3f} in {seconds:.0f} s", file=sys.stderr, flush=True)
    return {"name": name, "params": params, "seconds": seconds, **scores}


def print_table(title: str, rows: list[dict], reference: dict | None = None) -> None:
    print(f"\n{title}")
    gap = reference is not None
    print(f"{'model':<15}{'params':>9}{'NLL':>8}{'gap (nats)' if gap else '':>11}{'RMSE':>8}{'cov95':>8}{'train s':>9}")
    if reference is not None:
        print(f"{reference['name']:<15}{'-':>9}{reference['nll']:>8.3f}{0.0:>11.3f}{reference['rmse']:>8.3f}"
              f"{reference['coverage95']:>8.3f}{'-':>9}")
    for r in rows:
        g = f"{r['nll'] - reference['nll']:>11.3f}" if reference is not None else f"{'':>11}"
        print(f"{r['name']:<15}{r['params']:>9}{r['nll']:>8.3f}{g}{r['rmse']:>8.3f}{r['coverage95']:>8.3f}"
              f"{r['seconds']:>9.0f}")


def _gp_batch(batch_size: int, seed: int, step: int):
    import numpy as np

    from geonp.data.gp_tasks import sample_gp_batch

    return sample_gp_batch(batch_size, np.random.default_rng([seed, step])).batch


class Prefetched:
    """``sample(step)`` from ``--data-workers`` processes, ``ahead`` steps ahead; the same batches as
    calling ``fn(step)`` in order (each batch depends on its step alone)."""

    def __init__(self, fn: Callable, workers: int, ahead: int = 16):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.fn, self.ahead, self.pending = fn, ahead, {}
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) if workers else None

    def __call__(self, step: int):
        if self.pool is None:
            return self.fn(step)
        for s in range(step, step + self.ahead):
            if s not in self.pending:
                self.pending[s] = self.pool.submit(self.fn, s)
        return self.pending.pop(step).result()


def gp_part(args, names: list[str]) -> None:
    import numpy as np

    from geonp.data.gp_tasks import oracle_scores, sample_gp_batch

    test = [sample_gp_batch(16, np.random.default_rng([args.seed, 10**6, i])) for i in range(args.test_batches)]
    val = [t.batch for t in test[:4]]
    oracle = [oracle_scores(t) for t in test]
    weights = np.array([o["n"] for o in oracle], float)
    ref = {k: float(np.average([o[k] for o in oracle], weights=weights)) for k in ("nll", "rmse", "coverage95")}

    from functools import partial

    sample = Prefetched(partial(_gp_batch, args.batch_size, args.seed), args.data_workers)
    rows = [train_and_score(n, 0.5, sample, val, [t.batch for t in test], args) for n in names]
    print_table(f"2D GP (RBF, noise 0.1): {args.steps} steps x batch {args.batch_size}, lr {args.lr}, "
                f"{args.test_batches * 16} test tasks", rows, {"name": "exact GP", **ref})


def raster_part(args, names: list[str]) -> None:
    import numpy as np

    from geonp.data.datasets import ColumnSplit, PatchSpec, sample_patches
    from geonp.tasks.normalize import Normalizer
    from geonp.training.windows import TaskRecipe, TaskShape, WindowGroup, make_batch, raster_tasks

    shape = TaskShape()
    recipe = TaskRecipe(shape, None, None)  # the 64-px patch gap mix
    rng = np.random.default_rng(args.seed)
    spec = PatchSpec(shape.patch_size, nodata=0, bands=None, split=ColumnSplit(0.15, 0.0), min_valid_fraction=0.5)
    train_pool = sample_patches([args.raster], spec, region="train", count=args.pool, rng=rng)
    test_pool = sample_patches([args.raster], spec, region="val", count=max(16, args.test_batches * 4), rng=rng)
    flat = np.moveaxis(train_pool.values, 1, 0).reshape(train_pool.values.shape[1], -1)
    norm = Normalizer.fit(flat, np.isfinite(flat), seed=args.seed)
    test_rng = np.random.default_rng([args.seed, 10**6])
    test = [make_batch(lambda r: raster_tasks([WindowGroup(test_pool, norm, 1.0)], recipe, r), 16, test_rng)
            for _ in range(args.test_batches)]
    val_rng = np.random.default_rng([args.seed, 10**7])
    val = [make_batch(lambda r: raster_tasks([WindowGroup(train_pool, norm, 1.0)], recipe, r), 16, val_rng) for _ in range(2)]

    def sample(step: int):
        return make_batch(lambda r: raster_tasks([WindowGroup(train_pool, norm, 1.0)], recipe, r), args.batch_size,
                          np.random.default_rng([args.seed, step]))

    rows = [train_and_score(n, 4.0, sample, val, test, args) for n in names]
    n_targets = sum(int(b.target_valid.sum()) for b in test)
    print_table(f"Landsat 8 patches ({Path(args.raster).name}, 64x64, <= {shape.max_context} context): "
                f"{args.steps} steps x batch {args.batch_size}; test on the 'val' columns, {n_targets} "
                "target pixels; normalised units", rows)


def estimate_gb(name: str, n: int, nt: int) -> float:
    """Rough peak of one forward pass; only TNP-D grows quadratically (its attention matrices)."""
    if name == "TNP-D":
        return 3 * HEADS * (n + nt) ** 2 * 4 / 2**30  # logits, softmax and masked weights, float32
    return 0.5 + n * 64 * 4 * 8 / 2**30  # tokens and per-block activations, linear in n


def _proc_status_mb(key: str) -> float | None:
    """``VmRSS`` / ``VmHWM`` of this process in MB (Linux), or None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def memory_worker(name: str, n: int, nt: int, threads: int) -> None:
    """Child process: one untrained forward pass; prints a JSON line.

    The peak is the process's high-water RSS, reset just before the forward pass (Linux
    ``clear_refs``), minus its RSS at that moment: what inference adds on top of the weights and
    inputs. ``getrusage`` alone would not do: a child starts with its parent's peak across fork.
    """
    import torch

    from geonp.models import build_model

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model(model_config(name, 4.0)).eval()
    side = math.ceil(math.sqrt((n + nt) / 0.1))  # context at 10% density in a square tile
    g = torch.Generator().manual_seed(0)
    pix = torch.randperm(side * side, generator=g)[: n + nt]
    coords = torch.stack([pix // side, pix % side], -1).float()[None]  # [1, n + nt, 2] (row, col)
    xc, xt = coords[:, :n], coords[:, n:]
    yc = torch.randn(1, n, 1, generator=g)
    rss_before = _proc_status_mb("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current RSS
        reset = True
    except OSError:
        reset = False
    t0 = time.perf_counter()
    with torch.no_grad():
        mean, _ = model(xc, yc, xt)
    seconds = time.perf_counter() - t0
    peak = _proc_status_mb("VmHWM") if reset else None
    if peak is None or rss_before is None:  # no /proc: whole-process peak, start-up included
        peak, rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0.0
    print(json.dumps({"name": name, "n": n, "seconds": seconds, "added_mb": peak - rss_before,
                      "peak_mb": peak, "finite": bool(torch.isfinite(mean).all())}))


def available_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return math.inf


def memory_part(args, names: list[str]) -> None:
    sizes = sorted(int(s) for s in args.sizes.split(",") if s)
    limit = min(args.max_gb, 0.7 * available_gb())
    rows = []
    for name in names:
        last: tuple[int, float] | None = None  # (n, seconds) of the previous size, to extrapolate time
        power = 2 if name in ("TNP-KR (scan)", "TNP-D") else 1  # exact attention: time grows as n²
        for n in sizes:
            est = estimate_gb(name, n, args.queries)
            est_s = last[1] * (n / last[0]) ** power if last else 0.0
            if est > limit:
                rows.append((name, n, None, None, f"skipped (est. {est:.0f} GB)"))
                continue
            if est_s > args.timeout:
                rows.append((name, n, None, None, f"skipped (est. {est_s:.0f} s)"))
                continue
            cmd = [sys.executable, __file__, "--memory-worker", f"{name}|{n}|{args.queries}|{args.threads}"]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False)
            except subprocess.TimeoutExpired:
                rows.append((name, n, None, None, f"timed out (> {args.timeout} s)"))
                continue
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
                rows.append((name, n, None, None, f"failed (exit {proc.returncode}): {tail}"))
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            last = (n, r["seconds"])
            rows.append((name, n, r["seconds"], r["added_mb"], "" if r["finite"] else "non-finite output"))
            print(f"  {name} n={n}: {r['seconds']:.2f} s, +{r['added_mb']:.0f} MB", file=sys.stderr, flush=True)
    print(f"\nInference, untrained weights, batch 1, {args.queries} queries, {args.threads} threads, one fresh "
          "process each: seconds, and the peak RSS the forward pass adds")
    print(f"{'model':<15}{'context':>9}{'seconds':>10}{'peak MB':>10}  note")
    for name, n, sec, mb, note in rows:
        s = f"{sec:.2f}" if sec is not None else "-"
        m = f"{mb:.0f}" if mb is not None else "-"
        print(f"{name:<15}{n:>9}{s:>10}{m:>10}  {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="gp,raster,memory", help="comma list of gp, raster, memory")
    parser.add_argument("--models", default=",".join(NAMES), help="comma list of model names")
    parser.add_argument("--steps", type=int, default=500, help="training steps per model and task family")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--test-batches", type=int, default=32, help="test batches of 16 tasks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--raster", default=RASTER)
    parser.add_argument("--pool", type=int, default=400, help="training patches read from the raster")
    parser.add_argument("--sizes", default="1024,4096,16384,65536", help="context sizes for the memory part")
    parser.add_argument("--queries", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="training and scoring device: cpu or cuda")
    parser.add_argument("--data-workers", type=int, default=0, help="gp part: processes cutting the tasks ahead")
    parser.add_argument("--max-gb", type=float, default=16.0, help="skip a run whose estimate exceeds this")
    parser.add_argument("--timeout", type=int, default=300, help="seconds allowed per memory run")
    parser.add_argument("--memory-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_worker:
        name, n, nt, threads = args.memory_worker.split("|")
        memory_worker(name, int(n), int(nt), int(threads))
        return
    import torch

    torch.set_num_threads(args.threads)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = sorted(set(names) - set(NAMES) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; valid: {list(NAMES + VARIANTS)}")
    parts = {p.strip() for p in args.parts.split(",")}
    if "gp" in parts:
        gp_part(args, names)
    if "raster" in parts:
        raster_part(args, names)
    if "memory" in parts:
        memory_part(args, names)


if __name__ == "__main__":
    main()
