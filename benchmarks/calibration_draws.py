"""Does fitting the std calibration on more mask draws give a better std on draws it never saw?

The std calibration (``geonp train``'s last step, ``geonp evaluate --calibrate``) is fitted on
draws of the four evaluation masks over the default model's validation columns. Its distance
factors beyond 24 px come from the pixels of one or two scene-scale clouds per draw. This script
copies a model (its calibration removed; a ``near/`` model keeps its own), fits the calibration
on draws ``SEED..SEED+k-1`` for each ``k`` of ``--fit-draws``, and scores every fit on ``--score-draws``
other draws of the same columns (seeds from ``--score-seed``): 95 % coverage by distance to data
(pooled over masks, draws and bands), mean NLL and mean coverage per mask. Every fill runs
through ``geonp.evaluate`` (the library call of ``geonp evaluate``).

    python benchmarks/calibration_draws.py --model default --fit-draws 1,3 --score-seed 4 --score-draws 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import rasterio

import geonp
from geonp.config import EvaluationConfig
from geonp.model_files.registry import resolve_model_path
from geonp.training.calibrate import (
    CALIBRATION_MASKS,
    calibrate_on_validation,
    recipe_calibration,
    validation_window,
)

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"


def uncalibrated_copy(model: str, out: Path) -> Path:
    """``model``'s directory copied to ``out`` without its std calibration (its near model's kept)."""
    shutil.copytree(resolve_model_path(model), out)
    cfg = json.loads((out / "config.json").read_text())
    cfg.pop("calibration", None)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def coverage_by_distance(binned: dict) -> list[tuple[float, float | None, int, float]]:
    """``(lo, hi, n, coverage95)`` per distance bin, pooled over the masks of one method."""
    pooled: dict[tuple, tuple[int, float]] = {}
    for bins in binned.values():
        for b in bins:
            if b["coverage95"] is not None:
                n, c = pooled.get((b["lo"], b["hi"]), (0, 0.0))
                pooled[(b["lo"], b["hi"])] = (n + b["n"], c + b["n"] * b["coverage95"])
    return [(lo, hi, n, c / n) for (lo, hi), (n, c) in sorted(pooled.items(), key=lambda kv: kv[0][0])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--fit-seed", type=int, default=1)
    ap.add_argument("--fit-draws", default="1,3", help="draws of each fit, comma-separated")
    ap.add_argument("--score-seed", type=int, default=4)
    ap.add_argument("--score-draws", type=int, default=3)
    args = ap.parse_args()
    split, _ = recipe_calibration()  # the shipped models' columns
    with rasterio.open(SCENE) as src:
        window = validation_window(src.width, src.height, split)
    with tempfile.TemporaryDirectory() as tmp:
        fits = {}
        for k in (int(v) for v in args.fit_draws.split(",")):
            d = uncalibrated_copy(args.model, Path(tmp) / f"fit{k}")
            calibrate_on_validation(d, SCENE, split, EvaluationConfig(nodata=0, seed=args.fit_seed, device="cpu", draws=k))
            factors = json.loads((d / "config.json").read_text())["calibration"]["distance_bins"]["factors"]
            print(f"fit on {k} draw(s) from seed {args.fit_seed}: distance factors {[round(f, 3) for f in factors]}")
            fits[k] = d
        report = geonp.evaluate(SCENE, models=tuple(str(d) for d in fits.values()), masks=CALIBRATION_MASKS,
                                window=window, nodata=0, seed=args.score_seed, draws=args.score_draws,
                                fillnodata=False, device="cpu")
    print(f"scored on {args.score_draws} draw(s) from seed {args.score_seed}, validation window {window}")
    labels = [m for m in report.methods if m.startswith("geonp")]
    for k, label in zip(fits, labels, strict=True):
        bins = coverage_by_distance(report.binned[label])
        rows = [r for r in report.rows if r["method"] == label and r["band"] == "all"]
        print(f"fit on {k} draw(s): mean NLL {np.mean([r['nll'] for r in rows]):.3f}; cov95 by distance "
              + ", ".join(f"{lo:g}-{'' if hi is None else f'{hi:g}'} {c:.3f}" for lo, hi, _, c in bins))


if __name__ == "__main__":
    main()
