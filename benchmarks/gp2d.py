"""The 2D GP (RBF) benchmark of seed 002 §4.2, scaled to a 2-core CPU.

TNP-KR (scan), TNP-KR (DKA) and TNP-D are trained with the same steps, batch size and optimiser on
the same task stream, then scored on the same fixed test batches beside the exact GP posterior with
the true kernel and noise (the best any model can do on this data). Prints a table with the NLL gap
to the oracle in nats.

    python benchmarks/gp2d.py --steps 1500         # ~20 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from geonp.config import ModelConfig, TrainConfig
from geonp.data.gp_tasks import oracle_scores, sample_gp_batch
from geonp.models import build_model
from geonp.training.loop import fit

MODELS = {
    "TNP-KR (scan)": ModelConfig(arch="tnpkr", attention="scan", dim=64, depth=4, ff_dim=128, bias_length_scale=0.5),
    "TNP-KR (dka)": ModelConfig(arch="tnpkr", attention="dka", dim=64, depth=4, ff_dim=128, bias_length_scale=0.5),
    "TNP-D": ModelConfig(arch="tnpd", dim=64, depth=4, ff_dim=128),
}


@torch.no_grad()
def model_scores(model: torch.nn.Module, batches: list) -> dict[str, float]:
    model.eval()
    nll, se, cov, n = 0.0, 0.0, 0.0, 0
    for gp in batches:
        b = gp.batch
        mean, std = model(b.xc, b.yc, b.xt, b.context_valid)
        tv = b.target_valid[..., None]
        z = (b.yt - mean) / std
        nll += float(((0.5 * torch.log(2 * torch.pi * std**2) + 0.5 * z**2) * tv).sum())
        se += float((((b.yt - mean) ** 2) * tv).sum())
        cov += float(((z.abs() <= 1.959964) & tv).sum())
        n += int(tv.sum())
    return {"nll": nll / n, "rmse": (se / n) ** 0.5, "coverage95": cov / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--test-batches", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    torch.set_num_threads(2)
    test = [sample_gp_batch(16, np.random.default_rng([args.seed, 10**6, i])) for i in range(args.test_batches)]
    val = [t.batch for t in test[:4]]
    oracle = [oracle_scores(t) for t in test]
    weights = np.array([o["n"] for o in oracle], float)
    orc = {k: float(np.average([o[k] for o in oracle], weights=weights)) for k in ("nll", "rmse", "coverage95")}
    rows = []
    for name in args.models.split(","):
        cfg = MODELS[name]
        torch.manual_seed(args.seed)
        model = build_model(cfg)
        tcfg = TrainConfig(steps=args.steps, lr=5e-4, warmup_steps=100, val_every=max(1, args.steps // 5),
                           seed=args.seed, device="cpu")
        t0 = time.perf_counter()
        result = fit(model, lambda step: sample_gp_batch(args.batch_size, np.random.default_rng([args.seed, step])).batch,
                     val, tcfg)
        seconds = time.perf_counter() - t0
        if result.best_state is not None:
            model.load_state_dict(result.best_state)
        s = model_scores(model, test)
        params = sum(p.numel() for p in model.parameters())
        rows.append((name, s, seconds, params))
        print(f"  {name}: nll {s['nll']:.3f} in {seconds:.0f} s", flush=True)
    n_points = int(weights.sum())
    print(f"\n2D GP RBF (seed 002 §4.2 generator), {args.steps} steps x batch {args.batch_size}, "
          f"{args.test_batches * 16} test tasks ({n_points} target points), noise 0.1")
    print(f"{'model':<16}{'params':>8}{'NLL':>8}{'gap (nats)':>12}{'RMSE':>8}{'cov95':>8}{'train s':>9}")
    print(f"{'exact GP':<16}{'-':>8}{orc['nll']:>8.3f}{0.0:>12.3f}{orc['rmse']:>8.3f}{orc['coverage95']:>8.3f}{'-':>9}")
    for name, s, seconds, params in rows:
        print(f"{name:<16}{params:>8}{s['nll']:>8.3f}{s['nll'] - orc['nll']:>12.3f}{s['rmse']:>8.3f}"
              f"{s['coverage95']:>8.3f}{seconds:>9.0f}")


if __name__ == "__main__":
    main()
