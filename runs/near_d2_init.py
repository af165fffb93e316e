"""The start of runs/near_d2 (and near_d3, default_d3): a 4-block model with some of its blocks.

python runs/near_d2_init.py              # runs/near_d2_init: blocks 0 and 3 of the 4-block near model
python runs/near_d2_init.py 0,1,3 runs/near_d3_init
python runs/near_d2_init.py 0,1,3 runs/default_d3_init runs/default_teacher   # of the default model
"""

import dataclasses
import sys

from geonp.model_files.checkpoint import save_model
from geonp.model_files.registry import load_model
from geonp.models import build_model

blocks = [int(b) for b in (sys.argv[1] if len(sys.argv) > 1 else "0,3").split(",")]
out = sys.argv[2] if len(sys.argv) > 2 else "runs/near_d2_init"
# the 4-block near model shipped before the 3-block one (runs/near_teacher is a copy of it)
near = load_model(sys.argv[3] if len(sys.argv) > 3 else "runs/near_teacher")
cfg = dataclasses.replace(near.config, depth=len(blocks))
module = build_model(cfg)
state = {}
for k, v in near.module.state_dict().items():
    if k.startswith("blocks."):
        i = int(k.split(".")[1])
        if i not in blocks:
            continue
        k = f"blocks.{blocks.index(i)}." + k.split(".", 2)[2]
    state[k] = v
module.load_state_dict(state)
save_model(out, module, cfg, normalizer=near.normalizer, calibration=None, card=near.card)
