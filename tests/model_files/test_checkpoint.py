import json
import pickle

import pytest
import torch

from geonp.config import ModelConfig
from geonp.errors import CheckpointError
from geonp.model_files.card import ModelCard
from geonp.model_files.checkpoint import load_checkpoint, save_model
from geonp.models import build_model


@pytest.fixture()
def saved(tmp_path):
    cfg = ModelConfig(dim=32, depth=2, ff_dim=64)
    model = build_model(cfg).eval()
    path = save_model(tmp_path / "m", model, cfg, normalizer={"mean": [1.0], "std": [2.0]}, card=ModelCard(name="t"))
    return model, path


def test_round_trip_gives_identical_outputs(saved):
    model, path = saved
    loaded = load_checkpoint(path)
    g = torch.Generator().manual_seed(0)
    xc, yc, xt = torch.randint(0, 20, (1, 40, 2), generator=g).float(), torch.randn(1, 40, 1, generator=g), torch.rand(1, 9, 2, generator=g) * 20
    with torch.no_grad():
        a, b = model(xc, yc, xt), loaded.module(xc, yc, xt)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert loaded.normalizer == {"mean": [1.0], "std": [2.0]}
    assert loaded.name == "t"


def test_truncated_weights_are_refused(saved):
    _, path = saved
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(path)


def test_pickle_payload_is_refused(tmp_path, saved):
    _, path = saved

    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('unpickled!')",))

    (path / "model.safetensors").write_bytes(pickle.dumps({"w": Boom()}))
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(path)
    pt = tmp_path / "model.pt"
    pt.write_bytes(pickle.dumps(Boom()))
    with pytest.raises(CheckpointError, match="never loads pickled"):
        load_checkpoint(pt)


def _edit_config(path, edit):
    """Rewrite the model's config.json after ``edit(meta)``."""
    meta = json.loads((path / "config.json").read_text())
    edit(meta)
    (path / "config.json").write_text(json.dumps(meta))


def test_architecture_mismatch_is_refused(saved):
    _, path = saved
    _edit_config(path, lambda meta: meta["model"].update(attention="dka"))
    with pytest.raises(CheckpointError, match="does not match the tnpkr/dka architecture"):
        load_checkpoint(path)


def test_unknown_config_key_and_format_version(saved):
    _, path = saved
    _edit_config(path, lambda meta: meta["model"].update(colour="red"))
    with pytest.raises(CheckpointError, match=r"unknown model option\(s\) \['colour'\]"):
        load_checkpoint(path)
    _edit_config(path, lambda meta: meta.update(format_version=99))
    with pytest.raises(CheckpointError, match="format_version=99"):
        load_checkpoint(path)


def test_missing_directory_parts(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="config.json is missing"):
        load_checkpoint(tmp_path / "empty")
