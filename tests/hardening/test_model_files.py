"""Tampered model files are refused before anything is allocated; models are written with the umask."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.hardening._helpers import assert_refused, checksums, copy_model, invoke, listing, scene


def _tamper(tiny_model: Path, tmp: Path, section: str, key: str | None, value: object) -> Path:
    bad = copy_model(tiny_model, tmp / "tampered")
    meta = json.loads((bad / "config.json").read_text())
    if key is None:
        meta[section] = value
    elif value is _DELETE:
        del meta[section][key]
    else:
        if not isinstance(meta.get(section), dict):
            meta[section] = {}
        meta[section][key] = value
    (bad / "config.json").write_text(json.dumps(meta))
    return bad


_DELETE = object()


@pytest.mark.parametrize(
    ("section", "key", "value", "words"),
    [
        ("calibration", "std_scale", [-0.5], ["calibration.std_scale=[-0.5]", "positive finite"]),
        ("calibration", "std_scale", "big", ["calibration.std_scale='big'", "positive finite"]),
        ("calibration", "std_scale", [float("nan")], ["calibration.std_scale", "positive finite"]),
        ("model", "depth", 1_000_000_000, ["model.depth=1000000000", "1..64"]),
        ("model", "dim", 10**7, ["model.dim=10000000", "1..4096"]),
        ("model", "dim", _DELETE, ["lacks model.dim", "retrain"]),
        ("normalizer", None, {"mean": [1.0], "std": [0.0]}, ["normalizer.std=[0.0]", "positive"]),
    ],
    ids=["negative-scale", "text-scale", "nan-scale", "huge-depth", "huge-dim", "missing-dim", "zero-std"],
)
def test_tampered_config_is_refused_with_its_key(tmp_path, tiny_model, section, key, value, words) -> None:
    src = scene(tmp_path / "in" / "scene.tif")
    out = tmp_path / "out"
    out.mkdir()
    bad = _tamper(tiny_model, tmp_path, section, key, value)
    digest = checksums([src, bad])
    res = invoke(["fill", src, out / "filled.tif", "--model", bad])
    line = assert_refused(res, ["config.json", *words])
    assert "bug in geonp" not in line and "different models" not in line
    assert listing(out) == [] and checksums([src, bad]) == digest


def test_integer_weights_are_refused(tmp_path, tiny_model) -> None:
    src = scene(tmp_path / "in" / "scene.tif")
    out = tmp_path / "out"
    out.mkdir()
    bad = copy_model(tiny_model, tmp_path / "int_weights")
    state = load_file(str(bad / "model.safetensors"))
    name = min(state)
    state[name] = state[name].to(torch.int64)
    save_file(state, str(bad / "model.safetensors"))
    res = invoke(["fill", src, out / "filled.tif", "--model", bad])
    assert_refused(res, ["model.safetensors", f"holds tensor {name} as I64", "floating point"])
    assert listing(out) == []


def test_saved_model_files_follow_the_umask(tmp_path) -> None:
    from geonp.config import ModelConfig
    from geonp.model_files.card import ModelCard
    from geonp.model_files.checkpoint import save_model
    from geonp.models import build_model

    cfg = ModelConfig(dim=8, depth=1, num_heads=2, ff_dim=8)
    old = os.umask(0o022)
    try:
        path = save_model(tmp_path / "m", build_model(cfg), cfg, card=ModelCard(name="m"), card_markdown="# m")
    finally:
        os.umask(old)
    for name in ("model.safetensors", "config.json", "card.md"):
        assert stat.S_IMODE((path / name).stat().st_mode) == 0o644, name
