"""A run's *last* weights (its train_state/) as a model directory to judge beside the shipped default.

For a distilled model the best validation NLL does not pick the best fills: judge the last weights.

python runs/last_weights.py runs/near_d3_distill2 /tmp/pair --as near   # the default with them as near/
python runs/last_weights.py runs/default_d3_distill /tmp/pair --as main # them, with the default's near/

``--as near``: a copy of geonp/pretrained/default whose near/ holds the weights, std calibrated on
their own (the fill gives near tiles the near model's calibration). ``--as main``: the weights as
the main model with the shipped near/, the pair's std calibrated as the card's. Then
``python benchmarks/validation.py --model default --model /tmp/pair``.
"""

import argparse
import json
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

from geonp.training.calibrate import calibrate_on_validation, recipe_calibration

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"
DEFAULT = Path(__file__).resolve().parents[1] / "geonp" / "pretrained" / "default"


def last_weights(run: Path, out: Path) -> Path:
    """``run``'s last weights and card (no calibration) in ``out``."""
    out.mkdir(parents=True)
    state = load_file(run / "train_state" / "state.safetensors")
    save_file({k[len("model."):]: v.contiguous() for k, v in state.items() if k.startswith("model.")},
              out / "model.safetensors")
    cfg = json.loads((run / "config.json").read_text())
    cfg.pop("calibration", None)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    step = json.loads((run / "train_state" / "state.json").read_text())["progress"]["step"]
    print(f"{run}: last weights of step {step}")
    return out


def calibrate(model: Path) -> None:
    """Fit ``model``'s std calibration as the shipped models' (the default recipe's split and seed)."""
    calibrate_on_validation(model, SCENE, nodata=0, bands=None, device="cpu", near_blend=True, **recipe_calibration())


def main() -> None:
    """Write the model directory the arguments ask for."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--as", dest="role", choices=("near", "main"), required=True)
    args = ap.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists; give a new folder")
    if args.role == "near":
        shutil.copytree(DEFAULT, args.out, ignore=shutil.ignore_patterns("near"))
        calibrate(last_weights(args.run, args.out / "near"))
    else:
        last_weights(args.run, args.out)
        # the default's band statistics (the std floor's prior): a run on several rasters stores those
        # of its first raster, in that raster's units
        cfg = json.loads((args.out / "config.json").read_text())
        cfg["normalizer"] = json.loads((DEFAULT / "config.json").read_text())["normalizer"]
        (args.out / "config.json").write_text(json.dumps(cfg, indent=2))
        shutil.copytree(DEFAULT / "near", args.out / "near")
        calibrate(args.out)
    print(f"judge it: python benchmarks/validation.py --model default --model {args.out}")


if __name__ == "__main__":
    main()
