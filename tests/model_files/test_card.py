"""The typed model card: built-in cards round-trip, unknown keys survive, bad fields are named."""

import json
import shutil
from dataclasses import replace

import pytest

from geonp.errors import CheckpointError
from geonp.model_files.card import ModelCard
from geonp.model_files.checkpoint import load_checkpoint, save_model
from geonp.model_files.registry import PRETRAINED, builtin_models


@pytest.mark.parametrize("name", sorted(builtin_models()))
def test_builtin_cards_round_trip_exactly(name):
    meta = json.loads((PRETRAINED / name / "config.json").read_text())
    card = ModelCard.from_dict(meta["card"])
    out = card.to_dict()
    assert out == meta["card"] and list(out) == list(meta["card"])  # same content, same key order
    assert card.name == name and isinstance(card.task_shape, dict) and card.task_shape["core_size"] > 0
    assert isinstance(card.best_val_nll, float) and isinstance(card.best_step, int)
    assert card.takes_any_band_count and card.scores is not None
    assert ModelCard.from_dict(out) == card


def test_builtin_model_saved_back_keeps_its_config_json(tmp_path):
    copy = tmp_path / "default"
    shutil.copytree(PRETRAINED / "default", copy)
    before = json.loads((copy / "config.json").read_text())
    lm = load_checkpoint(copy)
    save_model(copy, lm.module, lm.config, normalizer=lm.normalizer, calibration=lm.calibration, card=lm.card)
    after = json.loads((copy / "config.json").read_text())
    assert after["card"] == before["card"] and list(after["card"]) == list(before["card"])
    assert after["normalizer"] == before["normalizer"] and after["calibration"] == before["calibration"]


def test_unknown_keys_are_kept_in_extra_and_written_back_in_order():
    data = {"zeta": {"a": [1, 2]}, "name": "m", "split": None, "command": None, "best_step": 7, "note": "x"}
    card = ModelCard.from_dict(data)
    assert card.extra == {"zeta": {"a": [1, 2]}, "split": None, "note": "x"}
    assert card.name == "m" and card.command is None and card.best_step == 7
    assert card.to_dict() == data and list(card.to_dict()) == list(data)
    # fields set later follow the keys read; an explicit null read stays null
    later = replace(card, best_val_nll=0.5).to_dict()
    assert list(later) == [*data, "best_val_nll"] and later["command"] is None
    # a card built in code leaves unset fields out
    assert ModelCard(name="t", extra={"split": 1}).to_dict() == {"name": "t", "split": 1}
    assert ModelCard.from_dict(None) == ModelCard() and ModelCard().to_dict() == {}


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("best_val_nll", "low", ["card.best_val_nll='low'", "a number"]),
        ("best_step", 2.5, ["card.best_step=2.5", "a whole number"]),
        ("any_band_count", "yes", ["card.any_band_count='yes'", "true or false"]),
        ("task_shape", {"core_size": "48"}, ["card.task_shape=", "whole numbers"]),
        ("training_data", "a.tif", ["card.training_data='a.tif'", "a list of strings"]),
        ("name", 3, ["card.name=3", "a string"]),
    ],
)
def test_an_ill_typed_field_is_named_in_one_line(tmp_path, tiny_model, key, value, words):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_model, bad)
    meta = json.loads((bad / "config.json").read_text())
    meta["card"][key] = value
    (bad / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(bad)
    text = str(err.value)
    assert "\n" not in text and str(bad / "config.json") in text and "retrain" in text
    for word in words:
        assert word in text, text
    with pytest.raises(CheckpointError, match=f"card.{key}"):
        ModelCard(**{key: value})


def test_a_missing_card_is_blank_and_a_malformed_one_is_refused(tmp_path, tiny_model):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_model, bad)
    meta = json.loads((bad / "config.json").read_text())
    del meta["card"]
    (bad / "config.json").write_text(json.dumps(meta))
    loaded = load_checkpoint(bad)  # a model file without a card still loads, named after its folder
    assert loaded.card == ModelCard() and loaded.name == "bad"
    meta["card"] = ["not", "a", "mapping"]
    (bad / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"has card=\['not', 'a', 'mapping'\]; it must be a mapping"):
        load_checkpoint(bad)


def test_extra_may_not_shadow_a_typed_field():
    with pytest.raises(ValueError, match="repeats the typed field"):
        ModelCard(extra={"name": "x"})
