"""Plot a training run's learning curve (the metrics file of ``geonp train --metrics``).

    python benchmarks/curve.py runs/default_ft/metrics.csv runs/default_ft/curve.png
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", type=Path)
    parser.add_argument("output", type=Path)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(csv.DictReader(args.metrics.open()))
    step = [int(r["step"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in ("train_nll", "val_nll"):
        ax.plot(step, [float(r[key]) for r in rows], marker="o", ms=3, label=key.replace("_", " "))
    best = min(rows, key=lambda r: float(r["val_nll"]))
    ax.axhline(float(best["val_nll"]), color="grey", lw=0.5)
    ax.set_xlabel("step")
    ax.set_ylabel("Gaussian NLL (standardised units)")
    ax.set_title(f"{args.metrics.parent.name}: best validation NLL {float(best['val_nll']):.3f} at step {best['step']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"{len(rows)} records; best validation NLL {float(best['val_nll']):.4f} at step {best['step']}: {args.output}")


if __name__ == "__main__":
    main()
