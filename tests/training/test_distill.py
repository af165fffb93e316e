"""Distillation (``TrainConfig.distill_from``): the KL term, a student that moves toward its teacher,
and ``geonp train`` with a recipe that names a teacher."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner
from geonp_cli.main import cli

from geonp.config import ModelConfig, TrainConfig
from geonp.errors import ConfigError
from geonp.model_files.checkpoint import load_checkpoint
from geonp.models import build_model
from geonp.models.heads import gaussian_kl
from geonp.training.loop import fit
from tests.training.test_fit import _wave_batch

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "landsat8_clean.tif"


def test_gaussian_kl_matches_torch_distributions_and_masks_targets():
    g = torch.Generator().manual_seed(0)
    mp, mq = torch.randn(2, 5, 1, generator=g), torch.randn(2, 5, 1, generator=g)
    sp, sq = torch.rand(2, 5, 1, generator=g) + 0.1, torch.rand(2, 5, 1, generator=g) + 0.1
    ref = torch.distributions.kl_divergence(torch.distributions.Normal(mp, sp), torch.distributions.Normal(mq, sq))
    assert torch.allclose(gaussian_kl(mp, sp, mq, sq), ref.mean())
    valid = torch.tensor([[True, True, False, False, False], [True, False, False, False, False]])
    assert torch.allclose(gaussian_kl(mp, sp, mq, sq, valid), ref[valid].mean())
    assert float(gaussian_kl(mp, sp, mp, sp)) == pytest.approx(0.0, abs=1e-7)


def test_a_student_moves_toward_its_teacher(tmp_path):
    """With the KL term alone (weight 1) a student ends closer to the teacher's predictions than the
    same student trained on the data alone (weight 0), and far closer than where it started."""
    from geonp.model_files.card import ModelCard
    from geonp.model_files.checkpoint import save_model

    torch.manual_seed(0)
    tcfg = ModelConfig(dim=32, depth=2, ff_dim=64, bias_length_scale=0.5)
    teacher = build_model(tcfg)
    fit(teacher, _wave_batch, [], TrainConfig(steps=30, val_every=30, lr=3e-3, warmup_steps=2, device="cpu"))
    path = save_model(tmp_path / "teacher", teacher, tcfg, card=ModelCard(name="teacher"))
    probe = _wave_batch(123)

    def gap(student) -> float:
        with torch.no_grad():
            return float(gaussian_kl(*teacher.eval()(probe.xc, probe.yc, probe.xt),
                                     *student.eval()(probe.xc, probe.yc, probe.xt)))

    gaps = {}
    for weight in (0.0, 1.0):
        torch.manual_seed(1)
        student = build_model(ModelConfig(dim=16, depth=1, num_heads=2, ff_dim=32, bias_length_scale=0.5))
        gaps["start"] = gap(student)
        fit(student, _wave_batch, [], TrainConfig(steps=30, val_every=30, lr=3e-3, warmup_steps=2, device="cpu",
                                                  distill_from=str(path), distill_weight=weight))
        gaps[weight] = gap(student)
    assert gaps[1.0] < 0.7 * gaps[0.0] and gaps[1.0] < 0.5 * gaps["start"], gaps


def test_distill_settings_are_checked():
    with pytest.raises(ConfigError, match="distill_weight"):
        TrainConfig(distill_weight=1.5)
    with pytest.raises(ConfigError, match="distill_from"):
        TrainConfig(distill_from=3)


def test_geonp_train_distils_from_the_recipes_teacher(tmp_path, tiny_model):
    recipe = tmp_path / "distill.yaml"
    recipe.write_text(yaml.safe_dump({"model": {"dim": 8, "depth": 1, "num_heads": 2, "ff_dim": 8},
                                      "training": {"distill_from": str(tiny_model), "distill_weight": 0.7}}))
    out = tmp_path / "student"
    res = CliRunner().invoke(cli, ["-q", "train", str(SAMPLE), "-o", str(out), "--recipe", str(recipe),
                                   "--steps", "2", "--val-every", "2", "--device", "cpu", "--no-calibrate"])
    assert res.exit_code == 0, res.output
    card = load_checkpoint(out).card
    assert card.train_config["distill_from"] == str(tiny_model) and card.train_config["distill_weight"] == 0.7
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"training": {"distill_from": str(tmp_path / "no_such_model")}}))
    res = CliRunner().invoke(cli, ["-q", "train", str(SAMPLE), "-o", str(tmp_path / "s2"), "--recipe", str(bad),
                                   "--steps", "2", "--device", "cpu", "--no-calibrate"])
    assert res.exit_code != 0 and "no_such_model" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "s2").exists()
