"""The 2D GP (RBF) benchmark of the TNP-KR paper (Jenson et al.) §4.2, scaled to a 2-core CPU.

TNP-KR (scan), TNP-KR (DKA) and TNP-D are trained with the same steps, batch size and optimiser on
the same task stream (``geonp.data.gp_tasks``: ℓ ~ Beta(3, 7) on [-2, 2]², noise 0.1, 12–128
context points, the other points of 128 random + 16x16 grid as targets), then scored on the same
fixed test tasks beside the exact GP posterior with the true kernel and noise (the best any model
can do on this data), with the NLL gap in nats. This is the ``gp`` part of ``models.py``, which
adds CMANP as a fourth row.

    python benchmarks/gp2d.py --steps 300      # about 15 minutes on 2 cores
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # benchmarks/models.py, importable once its folder is on sys.path

if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--models" not in argv:
        argv += ["--models", "TNP-KR (scan),TNP-KR (dka),TNP-D"]
    sys.argv = [sys.argv[0], "--parts", "gp", *argv]
    models.main()
