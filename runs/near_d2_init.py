"""The start of runs/near_d2: the shipped near model with 2 of its 4 blocks (the first and the last)."""

import dataclasses

from geonp.model_files.checkpoint import save_model
from geonp.model_files.registry import load_model
from geonp.models import build_model

near = load_model("geonp/pretrained/default/near")
cfg = dataclasses.replace(near.config, depth=2)
module = build_model(cfg)
keep = {"blocks.0.": "blocks.0.", "blocks.3.": "blocks.1."}
state = {}
for k, v in near.module.state_dict().items():
    if k.startswith("blocks."):
        prefix = next((p for p in keep if k.startswith(p)), None)
        if prefix is None:
            continue
        k = keep[prefix] + k[len(prefix):]
    state[k] = v
module.load_state_dict(state)
save_model("runs/near_d2_init", module, cfg, normalizer=near.normalizer, calibration=None, card=near.card)
