"""Models side by side on the default model's validation columns, over several mask draws.

A model replaces a shipped one only when it wins on validation columns. One draw of a mask is
noisy (a scene-scale cloud is one blob: the same two models swapped places from one seed to the
next), so this script runs ``geonp evaluate`` (the command users run) on the validation window of
the shared Landsat 8 scene for each seed, and prints per mask and model the mean over the draws of
RMSE, NLL and 95 % coverage, the RMSE and NLL against the first model, and the draws each model
wins on RMSE against the first. GDAL FillNodata is scored on the same pixels.

    python benchmarks/validation.py --model default --model runs/near_ft
    python benchmarks/validation.py --model default --model M --masks scene_cloud --seeds 0,1,2,3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"
#: The default model's validation columns (its card's split: columns 1327-1633), rows 502-1358:
#: where its std calibration was fitted.
WINDOW = ("1327", "502", "306", "856")


def run(models: list[str], masks: list[str], seed: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "geonp_cli", "-q", "evaluate", str(SCENE), "--window", *WINDOW, "--nodata", "0",
           "--seed", str(seed), "--json", str(out)]
    for m in models:
        cmd += ["--model", m]
    for k in masks:
        cmd += ["--mask-kind", k]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, help="model name or directory (repeatable; "
                        "the first is the one the others are compared with)")
    parser.add_argument("--masks", default="cloud,stripe,random,scene_cloud")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--keep", type=Path, help="also keep each draw's scores (JSON) in this folder")
    args = parser.parse_args()
    masks, seeds = args.masks.split(","), [int(s) for s in args.seeds.split(",")]
    keep = args.keep or Path(tempfile.mkdtemp())
    keep.mkdir(parents=True, exist_ok=True)
    # scores[mask][method] = list over seeds of (rmse, nll, cov95)
    scores: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    for seed in seeds:
        doc = run(args.model, masks, seed, keep / f"seed{seed}.json")
        names = doc["methods"]  # geonp models in the order given, then the peers
        for row in doc["rows"]:
            if row["band"] != "all":
                continue
            method = row["method"]
            label = args.model[names.index(method)] if method in names[:len(args.model)] else method
            scores.setdefault(row["mask"], {}).setdefault(label, []).append(
                (row["rmse"], row.get("nll") or np.nan, row.get("coverage95") or np.nan))
        print(f"seed {seed} scored", file=sys.stderr, flush=True)
    first = args.model[0]
    print(f"validation window {' '.join(WINDOW)} of {SCENE.name}; seeds {args.seeds}; means over the draws")
    print(f"{'mask':<12}{'model':<26}{'RMSE':>8}{'÷first':>8}{'NLL':>8}{'-first':>8}{'cov95':>7}{'wins':>6}")
    for mask in masks:
        base = np.array(scores[mask][first])
        for label, values in scores[mask].items():
            v = np.array(values)
            rmse, nll, cov = v.mean(0)
            wins = int((v[:, 0] < base[:, 0]).sum()) if label != first else 0
            nll_txt = "" if np.isnan(nll) else f"{nll:8.3f}{nll - base[:, 1].mean():8.3f}"
            cov_txt = "" if np.isnan(cov) else f"{cov:7.3f}" + ("" if label == first else f"{wins:>4}/{len(v)}")
            print(f"{mask:<12}{label[-25:]:<26}{rmse:8.1f}{rmse / base[:, 0].mean():8.3f}{nll_txt}{cov_txt}")


if __name__ == "__main__":
    main()
