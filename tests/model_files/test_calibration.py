"""The typed std calibration: the JSON of model files round-trips unchanged, and bad blocks are named."""

import json
import math
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

import geonp
from geonp.errors import ConfigError
from geonp.model_files.calibration import Calibration, DistanceBins
from geonp.model_files.checkpoint import load_checkpoint, write_calibration

ROOT = Path(geonp.__file__).resolve().parents[1]
#: Model files written by earlier geonp versions: the shipped ones.
SHIPPED = [ROOT / "geonp" / "pretrained" / "default", ROOT / "geonp" / "pretrained" / "multidate"]

OLD_FORMS = [
    {},
    {"std_scale": [1.5], "fitted_on": "a test"},
    {"std_scale": [0.9, 1.1, 1.2], "fitted_on": "geonp evaluate --series --calibrate, ...",
     "distance_bins": {"edges": [0.0, 1.5, 3.0, None], "factors": [0.9, 1.0, 1.3], "pixels": [10, 20, 0]}},
    {"distance_bins": {"edges": [0.0, 1.5, 3.0, 6.0, None], "factors": [[1, 1, 1, 1], [2, 2, 2, 2]]}},
]


@pytest.mark.parametrize("block", OLD_FORMS, ids=["empty", "scale", "bins", "per-band-bins"])
def test_an_old_format_block_round_trips_unchanged(block):
    cal = Calibration.from_dict(block)
    assert cal.to_dict() == block
    assert json.dumps(cal.to_dict()) == json.dumps(block)  # same keys in the same order: the same file
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    assert pickle.loads(pickle.dumps(cal)) == cal  # a fill's block jobs carry it to worker processes


@pytest.mark.parametrize("model", SHIPPED, ids=lambda p: p.name)
def test_model_files_load_and_are_rewritten_byte_for_byte(model, tmp_path):
    copy = tmp_path / model.name
    shutil.copytree(model, copy)
    before = (copy / "config.json").read_bytes()
    block = json.loads(before)["calibration"]
    loaded = load_checkpoint(copy)
    assert isinstance(loaded.calibration, Calibration) and loaded.calibration.to_dict() == block
    assert loaded.calibration.std_scale == tuple(block["std_scale"]) and len(loaded.calibration.std_scale) == 3
    write_calibration(copy, loaded.calibration)
    assert (copy / "config.json").read_bytes() == before


def test_the_default_model_calibration_reads_as_typed_values():
    cal = load_checkpoint(SHIPPED[0]).calibration
    bins = cal.distance_bins
    assert bins is not None and bins.edges[0] == 0.0 and bins.edges[-1] == math.inf and not bins.per_band
    assert len(bins.factors) == len(bins.edges) - 1 == len(bins.pixels) == 9
    assert cal.fitted_on.startswith("geonp evaluate --calibrate") and cal.needs_distance
    assert cal.describe() == (f"std scale {list(cal.std_scale)} and distance-bin factors {list(bins.factors)}, "
                              f"a near blend of {', '.join(cal.near_blend.estimates)}: {cal.fitted_on}")
    assert cal.near_blend.estimates == ("gdal", "ring1", "ring2", "ring4", "ring5", "ring8", "ring9")
    assert np.asarray(cal.near_blend.weights).shape == (4, 4, 7) and min(map(min, cal.near_blend.pixels)) == 0


def test_scales_per_band_follow_fills_rule():
    cal = Calibration(std_scale=(2.0, 3.0, 4.0))
    assert cal.band_scales(3) == [2.0, 3.0, 4.0]
    assert cal.band_scales(1) == [2.0]  # calibrated on other bands: the first factor
    assert Calibration().band_scales(2) == [1.0, 1.0] and Calibration().is_identity
    assert Calibration.from_dict({"std_scale": 2.5}).std_scale == (2.5,)  # one factor for all bands
    std = np.array([1.0, np.nan], np.float32)
    out = cal.apply(std, np.zeros(2), band=2, band_count=3)
    assert out.dtype == np.float32 and out[0] == 4.0 and np.isnan(out[1]) and std[0] == 1.0


def test_distance_factors_stack_on_the_previous_ones():
    edges = (0.0, 1.5, math.inf)
    old = DistanceBins(edges=edges, factors=(2.0, 0.5))
    new = DistanceBins(edges=edges, factors=(1.5, 3.0), pixels=(10, 20))
    assert new.stacked_on(old) == DistanceBins(edges=edges, factors=(3.0, 1.5), pixels=(10, 20))
    assert new.stacked_on(None) is new
    other = DistanceBins(edges=(0.0, 3.0, math.inf), factors=(9.0, 9.0))
    assert new.stacked_on(other) is new  # other bins: replaced, not multiplied


@pytest.mark.parametrize(("block", "words"), [
    ([1.0], "calibration=[1.0]; it must be a mapping with 'std_scale'"),
    ({"std_scale": [-0.5]}, "calibration.std_scale=[-0.5]; it must be positive finite number(s)"),
    ({"std_scale": [1.0], "scale": 2}, "calibration.scale=2; the keys of calibration are ['std_scale', 'fitted_on',"),
    ({"fitted_on": 3}, "calibration.fitted_on=3; it must be text"),
    ({"distance_bins": {"edges": [0.0, None]}},
     "calibration.distance_bins={'edges': [0.0, None]}; it must be a mapping with 'edges' and 'factors'"),
    ({"distance_bins": {"edges": [0.0, 3.0, 1.5], "factors": [1, 1]}},
     "calibration.distance_bins.edges=[0.0, 3.0, 1.5]; they must increase"),
    ({"distance_bins": {"edges": [0.0, 1.5, None], "factors": [1.0]}},
     "calibration.distance_bins.factors=[1.0]; it must be 2 finite factors"),
])
def test_a_bad_block_is_named_by_its_key(block, words):
    with pytest.raises(ConfigError) as err:
        Calibration.from_dict(block)
    assert str(err.value).startswith(words)


def test_a_bad_block_in_a_model_file_keeps_the_checks_message(tiny_model, tmp_path):
    from geonp.errors import CheckpointError

    bad = tmp_path / "bad"
    shutil.copytree(tiny_model, bad)
    meta = json.loads((bad / "config.json").read_text())
    meta["calibration"] = {"std_scale": [-0.5]}
    (bad / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(bad)
    assert str(err.value) == (f"{bad / 'config.json'} has calibration.std_scale=[-0.5]; it must be positive finite "
                              "number(s); re-run geonp evaluate --calibrate with this model (or re-download it)")


def _zero(block, path):
    *keys, last = path
    for k in keys:
        block = block[k]
    block[last] = 0.0 if isinstance(block[last], float) else [0.0] * len(block[last])


@pytest.mark.parametrize(("path", "field"), [
    (("distance_bins", "factors"), "calibration.distance_bins.factors=[0.0, 0.0"),
    (("distance_bins", "factors", 4), "calibration.distance_bins.factors=[0.970601, 1.020909, 1.005316, 1.010271, 0.0,"),
    (("std_scale",), "calibration.std_scale=[0.0, 0.0, 0.0]"),
    (("near_blend", "std_factors", 1), "calibration.near_blend.std_factors=[[1.048324"),
], ids=["all-bins", "one-bin", "std-scale", "near-blend"])
def test_a_model_with_a_zero_std_factor_is_refused_on_load(tmp_path, path, field):
    # a factor of 0 made every filled pixel's std exactly 0, the mark of an observed pixel
    copy = tmp_path / "default"
    shutil.copytree(SHIPPED[0], copy)
    meta = json.loads((copy / "config.json").read_text())
    _zero(meta["calibration"], path)
    (copy / "config.json").write_text(json.dumps(meta))
    with pytest.raises(geonp.errors.CheckpointError) as err:
        geonp.fill_array(np.ones((8, 8)), np.eye(8, dtype=bool), model=str(copy), device="cpu")
    message = str(err.value)
    assert message.startswith(f"{copy / 'config.json'} has {field}") and "\n" not in message
    assert message.endswith("; re-run geonp evaluate --calibrate with this model (or re-download it)")
    with pytest.raises(ConfigError, match=r"it must be 9 finite factors > 0 \(one per bin\)"):
        Calibration.from_dict({"distance_bins": {"edges": [0, 1.5, 3, 6, 12, 24, 48, 96, 192, None],
                                                 "factors": [1, 1, 1, 1, float("inf"), 1, 1, 1, 1]}})
