"""One registry per kind of name: the torch-free name lists agree with it, and so does the CLI.

Each registry lives in the module that owns the concept; ``geonp.config`` keeps its names
(torch- and numpy-free) for the CLI's click choices, and these tests keep the two equal.
"""

import pickle
import subprocess
import sys

import click
import numpy as np
import pytest
from geonp_cli.main import cli

from geonp import config
from geonp.errors import ConfigError, UnknownNameError


def _registries() -> dict[str, tuple[tuple[str, ...], dict]]:
    """Kind -> (its names in geonp.config, its registry)."""
    from geonp.data.gaps import MASK_MAKERS
    from geonp.io.qa import QA_KINDS
    from geonp.models import MODEL_FAMILIES
    from geonp.models.attention import ATTENTIONS

    return {"arch": (config.ARCHS, MODEL_FAMILIES), "attention": (config.ATTENTION_NAMES, ATTENTIONS),
            "mask kind": (config.MASK_KINDS, MASK_MAKERS), "qa kind": (config.QA_KINDS, QA_KINDS)}


def test_each_name_list_equals_its_registry_in_order():
    for kind, (names, registry) in _registries().items():
        assert names == tuple(registry), kind
    assert config.EVALUATION_MASK_KINDS == tuple(k for k in _registries()["mask kind"][1] if k != "borrowed")
    from geonp.data.gaps import MASK_KINDS
    from geonp.evaluation import EVALUATION_MASK_KINDS

    assert MASK_KINDS == config.MASK_KINDS and EVALUATION_MASK_KINDS == config.EVALUATION_MASK_KINDS


def _error(call) -> str:
    with pytest.raises(UnknownNameError) as err:
        call()
    return str(err.value)


def test_each_registry_error_names_the_valid_choices():
    from geonp.data.gaps import make_mask
    from geonp.evaluation import simulate_masks
    from geonp.io.qa import decode_gaps, resolve_classes
    from geonp.models import build_model
    from geonp.models.attention import make_attention

    arch = "arch='unet' is not one of ['tnpkr', 'tnpd', 'cmanp']"
    assert _error(lambda: config.ModelConfig(arch="unet")) == arch
    bypassed = config.ModelConfig()
    object.__setattr__(bypassed, "arch", "unet")  # a config that skipped its checks still meets the registry's
    assert _error(lambda: build_model(bypassed)) == arch
    attention = "attention='flash' is not one of ['scan', 'dense', 'dka', 'performer']"
    assert _error(lambda: config.ModelConfig(attention="flash")) == attention
    object.__setattr__(bypassed, "attention", "flash")
    assert _error(lambda: make_attention(bypassed)) == attention
    kinds = "['cloud', 'stripe', 'random', 'borrowed', 'mixed', 'scene_cloud']"
    assert _error(lambda: make_mask("fog", (8, 8), coverage=0.3, rng=0)) == (
        f"kind='fog' is not one of {kinds}; geonp simulates only these gap kinds")
    assert _error(lambda: simulate_masks((8, 8), ["borrowed"], coverage=0.3, seed=0)) == (
        "masks='borrowed' is not one of ['cloud', 'stripe', 'random', 'mixed', 'scene_cloud']; to score on a real "
        "gap pattern pass mask_file= / --mask FILE")
    qa = "qa_kind='modis' is not one of ['landsat-c2', 'sentinel2-scl', 'fmask']"
    assert _error(lambda: resolve_classes("modis", None)) == qa
    assert _error(lambda: decode_gaps(np.zeros(2), kind="modis")) == qa


def test_the_error_is_a_config_error_that_crosses_processes():
    err = UnknownNameError("qa_kind", "modis", ("fmask",), "a hint")
    assert isinstance(err, ConfigError) and isinstance(err, ValueError)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is UnknownNameError and str(again) == str(err) == (
        "qa_kind='modis' is not one of ['fmask']; a hint") and again.valid == ("fmask",)


def _choices(command: str, option: str) -> tuple[str, ...]:
    param = next(p for p in cli.commands[command].params if f"--{option}" in p.opts)
    assert isinstance(param.type, click.Choice), (command, option)
    return tuple(param.type.choices)


def test_the_cli_choices_are_the_registries():
    reg = _registries()
    assert _choices("train", "arch") == tuple(reg["arch"][1])
    assert _choices("train", "attention") == tuple(reg["attention"][1])
    for command in ("train", "fill", "batch", "evaluate"):
        assert _choices(command, "qa-kind") == tuple(reg["qa kind"][1]), command
    assert _choices("evaluate", "mask-kind") == tuple(k for k in reg["mask kind"][1] if k != "borrowed")
    assert _choices("train", "optimizer") == config.OPTIMIZERS
    for command in ("train", "fill", "batch", "evaluate"):
        assert _choices(command, "device") == config.DEVICES, command
    assert _choices("fill", "categorical") == config.CATEGORICAL
    assert _choices("fill", "reference-fit") == config.REFERENCE_FITS
    assert _choices("fill", "queries") == config.QUERY_MODES


def test_a_name_added_to_a_list_shows_in_help():
    code = ("import geonp.config as c; c.QA_KINDS = (*c.QA_KINDS, 'planet-udm2'); "
            "c.ATTENTION_NAMES = (*c.ATTENTION_NAMES, 'flash'); "
            "from click.testing import CliRunner; from geonp_cli.main import cli; "
            "print(CliRunner().invoke(cli, ['train', '--help'], terminal_width=200).output)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "[landsat-c2|sentinel2-scl|fmask|planet-udm2]" in out
    assert "[scan|dense|dka|performer|flash]" in out
