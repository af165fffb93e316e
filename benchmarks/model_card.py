"""Score a model on the held-out columns of the Landsat scene and write its model card.

Runs ``geonp evaluate`` (the library call) on a window of the test region that ``geonp train
--test-fraction`` kept out of training, with cloud, stripe, random and scene-scale cloud masks,
against GDAL FillNodata on the same pixels; reports RMSE, NLL, CRPS, 90/95 % coverage and the
coverage and std binned by distance to the nearest observed pixel; stores the scores in the
model's ``config.json`` card and writes ``card.md`` beside it.

    python benchmarks/model_card.py geonp/pretrained/default
    python benchmarks/model_card.py geonp/pretrained/default_new --no-write --json new.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

import geonp
from geonp.evaluation.metrics import pool_binned
from geonp.model_files.card import ModelCard
from geonp.model_files.checkpoint import save_model
from geonp.model_files.registry import load_model

SCENE = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "data"
    / "landsat8_224078_20200518_b234.tif"
)
MASKS = ("cloud", "stripe", "random", "scene_cloud")


_ROW_MEANS = ("nll", "crps", "coverage90", "coverage95", "calibration_error")


def _pooled_row(rows: list[dict[str, Any]], weights: list[int]) -> dict[str, Any]:
    """One mask kind's pooled-band row over its draws, weighted by hidden pixels (RMSE: root of the
    pooled MSE); a score a method has not (GDAL's NLL) stays None."""
    w = np.asarray(weights, float)
    out = {k: None if rows[0][k] is None else float(np.average([r[k] for r in rows], weights=w)) for k in _ROW_MEANS}
    out["rmse"] = float(np.sqrt(np.average([r["rmse"] ** 2 for r in rows], weights=w)))
    out["seconds"] = float(sum(r["seconds"] for r in rows))
    return out


def _card_bins(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Distance bins pooled over draws (:func:`~geonp.evaluation.metrics.pool_binned`), as the card keeps them."""
    keys = ("lo", "hi", "n", "coverage95", "mean_std", "rmse")
    return [{k: round(b[k], 4) if isinstance(b[k], float) else b[k] for k in keys}
            for b in pool_binned(parts) if b["n"]]


def _scores(report: Any, masks: tuple[str, ...]) -> dict[str, Any]:
    """Per mask kind, its draws (``cloud``, ``cloud#2``, ...) pooled; and all masks by distance to data."""
    method = next(m for m in report.methods if m.startswith("geonp") and not m.endswith("+cal"))
    hidden = {m["name"]: m["hidden_pixels"] for m in report.masks}
    scores: dict[str, Any] = {}
    for mask in masks:
        draws = [name for name in hidden if name.split("#")[0] == mask]
        rows = {(r["method"], r["mask"]): r for r in report.rows if r["mask"] in draws and r["band"] == "all"}
        weights = [hidden[d] for d in draws]
        g = _pooled_row([rows[method, d] for d in draws], weights)
        peer = _pooled_row([rows["fillnodata", d] for d in draws], weights)
        scores[mask] = {
            "rmse": round(g["rmse"], 2),
            **{k: round(g[k], 4) for k in _ROW_MEANS},
            "gdal_fillnodata_rmse": round(peer["rmse"], 2),
            "rmse_ratio_vs_gdal": round(g["rmse"] / peer["rmse"], 4),
            "hidden_pixels": int(sum(weights)),
            "draws": len(draws),
            "seconds": round(g["seconds"], 1),
            "by_distance": _card_bins([report.binned[method][d] for d in draws]),
        }
    scores["all_masks_by_distance"] = _card_bins([report.binned[method]["all"]])
    return scores


def card_markdown(
    card: dict[str, Any], config: dict[str, Any], scores: dict[str, Any], command: str,
    near: dict[str, Any] | None = None,
) -> str:
    """The model card as Markdown (``near``: the card of the model's near model, if it has one)."""
    split = card["split"]["regions"][0]
    shape = card.get("task_shape", {})
    md = [
        f"# geonp model card: {card.get('name')}",
        "",
        card.get("description", ""),
        "",
        f"- Architecture: {json.dumps(config)}",
    ]
    if card.get("commands"):
        md += ["- Trained with (in this order):"] + [f"  - `{c}`" for c in card["commands"]]
    else:
        md.append(f"- Trained with: `{card.get('command')}`")
    md += [
        (f"- Training time: {card.get('training_seconds')} s on {card.get('hardware')} "
         f"(best validation NLL {card.get('best_val_nll'):.4f} at step {card.get('best_step')})"),
        f"- Data: {', '.join(card.get('training_data', []))}; columns split train/val/test = "
        f"{split['train']}/{split['val']}/{split['test']} (the test columns were never read in training)"
        + (
            f"; {card.get('pretrain_steps') or 0} pre-training steps and a fraction "
            f"{card.get('gp_fraction') or 0} of the raster steps' windows on simulated GP fields"
            if card.get("pretrain_steps") or card.get("gp_fraction")
            else ""
        ),
        f"- Tasks: {json.dumps(shape)}; gap mix "
        f"{json.dumps(card['gap_mix']) if card.get('gap_mix') else 'of 64-px patches (geonp 0.1)'}"
        + (f"; started from {card['init_from']}" if card.get("init_from") else ""),
        f"- Std calibration: {card.get('calibration_note', 'none')}",
    ]
    if near is not None:
        md.append(
            f"- Near model (`near/`, its own card there): the tiles whose gaps all lie within 8 px of data "
            f"run through its near model (near context {near.get('task_shape', {}).get('near_context')}; "
            f"how it was made: `near/card.md`), last trained with "
            f"`{near.get('command')}`; "
            "its std is calibrated by its own calibration. The scores below are of the two together, "
            "as `geonp fill` runs them."
        )
    md += [
        ("- Normalisation: per-band statistics of the training windows (stored), then each tile is "
         "standardised by its own context (its spread shrunk towards the band's); any band count."),
        ("- Coordinates: pixel units; scan attention without coordinate embedding (translation "
         "invariant, any raster size)."),
        "",
        (f"## Scores on the held-out test columns (window col,row,w,h = {scores['window_col_row_w_h']}, "
         f"{scores['coverage']:.0%} gaps per mask, {scores.get('draws', 1)} draw(s) of each mask pooled, "
         "3 bands pooled, DN)"),
        "",
        "| mask | RMSE | GDAL FillNodata RMSE | RMSE ÷ GDAL | NLL | CRPS | 90 % cov. | 95 % cov. | cal. err |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mask, s in scores["masks"].items():
        if mask == "all_masks_by_distance":
            continue
        md.append(
            f"| {mask} | {s['rmse']:.1f} | {s['gdal_fillnodata_rmse']:.1f} | {s['rmse_ratio_vs_gdal']:.3f} | "
            f"{s['nll']:.3f} | {s['crps']:.1f} | {s['coverage90']:.3f} | {s['coverage95']:.3f} | "
            f"{s['calibration_error']:.3f} |"
        )
    md += [
        "",
        "95 % coverage, mean std and RMSE by distance to the nearest observed pixel (all masks pooled):",
        "",
        "| distance (px) | pixels | 95 % cov. | mean std | RMSE |",
        "| --- | --- | --- | --- | --- |",
    ]
    for b in scores["masks"]["all_masks_by_distance"]:
        rng = f"{b['lo']:g}-{b['hi']:g}" if b["hi"] is not None else f">= {b['lo']:g}"
        md.append(
            f"| {rng} | {b['n']} | {b['coverage95']:.3f} | {b['mean_std']:.1f} | {b['rmse']:.1f} |"
        )
    md += ["", f"Measured with `{command}` ({scores['seconds']:.0f} s on {scores['hardware']})."]
    return "\n".join(md) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model_dir")
    parser.add_argument(
        "--window",
        type=int,
        nargs=4,
        default=None,
        metavar=("COL", "ROW", "W", "H"),
        help="default: the test columns, rows 640-1663",
    )
    parser.add_argument("--coverage", type=float, default=0.3)
    parser.add_argument("--draws", type=int, default=3,
                        help="masks of each kind (seeds 0, 1, ...), pooled: one draw holds only a few clouds")
    parser.add_argument("--masks", nargs="+", default=list(MASKS))
    parser.add_argument("--plot", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--no-write", action="store_true", help="print and save JSON only; leave the card alone"
    )
    args = parser.parse_args()
    loaded = load_model(args.model_dir)
    card = loaded.card.to_dict()
    test_cols = card["split"]["regions"][0]["test"]
    window = args.window or [test_cols[0], 640, test_cols[1] - test_cols[0], 1024]
    masks = tuple(args.masks)
    t0 = time.perf_counter()
    report = geonp.evaluate(
        SCENE,
        models=[args.model_dir],
        masks=masks,
        coverage=args.coverage,
        draws=args.draws,
        seed=0,
        nodata=0,
        window=window,
        json_path=args.json,
        plot=args.plot,
    )
    seconds = time.perf_counter() - t0
    print(report.format_table())
    import os
    import platform

    import torch

    hardware = (
        f"{platform.machine()}, {os.cpu_count()} cores, "
        f"{'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}"
    )
    scores = {
        "raster": SCENE.name,
        "window_col_row_w_h": window,
        "coverage": args.coverage,
        "draws": args.draws,
        "units": "digital numbers (uint16 DN) for RMSE/CRPS/std, nats for NLL",
        "masks": _scores(report, masks),
        "seconds": round(seconds, 1),
        "hardware": hardware,
    }
    print(json.dumps(scores["masks"]["all_masks_by_distance"], indent=1))
    if args.no_write:
        return
    card["scores"] = scores
    card["any_band_count"] = True
    if loaded.calibration is not None and loaded.calibration.to_dict():
        card["calibration_note"] = loaded.calibration.describe()
    command = "python benchmarks/model_card.py " + args.model_dir
    md = card_markdown(card, loaded.config.to_dict(), scores, command,
                       near=None if loaded.near is None else loaded.near.card.to_dict())
    save_model(
        args.model_dir,
        loaded.module,
        loaded.config,
        normalizer=loaded.normalizer,
        calibration=loaded.calibration,
        card=ModelCard.from_dict(card),
        card_markdown=md,
    )
    print(md)


if __name__ == "__main__":
    main()
