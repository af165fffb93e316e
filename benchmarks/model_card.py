"""Score a model on the held-out columns of the Landsat scene and write its model card.

Runs ``geonp evaluate`` (the library call) on a window of the test region that ``geonp train
--test-fraction`` kept out of training, with cloud, stripe and random masks, against GDAL
FillNodata on the same pixels; stores the scores in the model's ``config.json`` card and writes
``card.md`` beside it.

    python benchmarks/model_card.py geonp/pretrained/default
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import geonp
from geonp.models.registry import load_model
from geonp.training.checkpoint import save_model

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("--window", type=int, nargs=4, default=None, metavar=("COL", "ROW", "W", "H"),
                        help="default: the test columns, rows 640-1663")
    parser.add_argument("--coverage", type=float, default=0.3)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    loaded = load_model(args.model_dir)
    card = dict(loaded.card)
    split = card["split"]["regions"][0]
    test_cols = split["test"]
    window = args.window or [test_cols[0], 640, test_cols[1] - test_cols[0], 1024]
    report = geonp.evaluate(SCENE, models=[args.model_dir], masks=("cloud", "stripe", "random"),
                            coverage=args.coverage, seed=0, nodata=0, window=window,
                            json_path=args.json, plot=args.plot)
    print(report.format_table())
    method = next(m for m in report.methods if m.startswith("geonp"))
    scores = {}
    for mask in ("cloud", "stripe", "random"):
        rows = {r["method"]: r for r in report.rows if r["mask"] == mask and r["band"] == "all"}
        g, d = rows[method], rows["fillnodata"]
        scores[mask] = {
            "rmse": round(g["rmse"], 2), "nll": round(g["nll"], 4), "coverage95": round(g["coverage95"], 4),
            "calibration_error": round(g["calibration_error"], 4), "crps": round(g["crps"], 2),
            "gdal_fillnodata_rmse": round(d["rmse"], 2),
            "rmse_reduction_vs_gdal": round(1 - g["rmse"] / d["rmse"], 4),
            "hidden_pixels": next(m["hidden_pixels"] for m in report.masks if m["name"] == mask),
            "seconds": round(g["seconds"], 1),
        }
    card["scores"] = {"raster": SCENE.name, "window_col_row_w_h": window, "coverage": args.coverage,
                      "units": "digital numbers (uint16 DN) for RMSE/CRPS, nats for NLL", "masks": scores}
    card["any_band_count"] = True
    md = [f"# geonp model card: {card.get('name')}", "",
          card.get("description", ""), "",
          f"- Architecture: {json.dumps(loaded.config.to_dict())}",
          *([f"- Trained with (in this order):"] + [f"  - `{c}`" for c in card["commands"]]
            if card.get("commands") else [f"- Trained with: `{card.get('command')}`"]),
          f"- Training time: {card.get('training_seconds')} s on {card.get('hardware')} "
          f"(best validation NLL {card.get('best_val_nll'):.4f} at step {card.get('best_step')})",
          f"- Data: {', '.join(card.get('training_data', []))} (Landsat 8 OLI DN, bands B2-B4, 0 = nodata) plus "
          f"{card.get('pretrain_steps')} steps of simulated GP fields; columns split "
          f"train/val/test = {split['train']}/{split['val']}/{split['test']}",
          "- Normalisation: per-band statistics of the training patches (stored), then each tile is "
          "standardised by its own context; the model works on any band count (each band on its own).",
          "- Coordinates: pixel units (row, col); scan attention with no coordinate embedding, so the "
          "model is translation invariant and runs on rasters of any size.", "",
          f"## Scores on the held-out test columns (window col,row,w,h = {window}, {args.coverage:.0%} gaps per mask)", "",
          "| mask | RMSE (DN) | GDAL FillNodata RMSE | RMSE change | NLL | 95 % coverage | calibration error |",
          "| --- | --- | --- | --- | --- | --- | --- |"]
    for mask, s in scores.items():
        md.append(f"| {mask} | {s['rmse']:.1f} | {s['gdal_fillnodata_rmse']:.1f} | "
                  f"{-100 * s['rmse_reduction_vs_gdal']:+.1f} % | {s['nll']:.3f} | {s['coverage95']:.3f} | "
                  f"{s['calibration_error']:.3f} |")
    md += ["", "Measured with `python benchmarks/model_card.py " + args.model_dir + "`."]
    save_model(args.model_dir, loaded.module, loaded.config, normalizer=loaded.normalizer,
               calibration=loaded.calibration, card=card, card_markdown="\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
