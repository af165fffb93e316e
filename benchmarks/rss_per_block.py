"""A one-process fill's memory as it goes: RSS now and at its peak, read about 40 times during the fill.

Fills a synthetic raster (``benchmarks/fill.py``'s: smooth uint16, 2 % cloud gaps) with one process
and prints ``(share done, RSS MB, peak RSS MB)``: whether memory creeps up block after block or
peaks within blocks.

    python benchmarks/rss_per_block.py --size 4096
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fill import synthetic

import geonp


def rss_mb() -> float:
    """This process's resident memory now (MB)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


def main() -> None:
    """Fill and print the readings."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    args = ap.parse_args()
    marks: list[tuple[float, int, int]] = []
    last = [0]

    def progress(done: int, total: int) -> None:
        if done - last[0] > total / 40 or done == total:
            last[0] = done
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            marks.append((round(done / total, 2), round(rss_mb()), round(peak)))

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.tif"
        synthetic(src, args.size, 0.02)
        geonp.fill_raster(src, Path(tmp) / "out.tif", workers=1, progress=progress)
    print(f"{args.size}², one process: (share done, RSS MB, peak RSS MB)")
    for mark in marks:
        print(*mark)


if __name__ == "__main__":
    main()
