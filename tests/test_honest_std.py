"""The shipped model's std against the exact GP's on a field with a large hole, and with one pixel."""

import itertools

import numpy as np
import pytest
from scipy import ndimage

from geonp.data.synthetic import gp_grid_field, gp_posterior
from geonp.evaluation.metrics import binned_scores
from geonp.filling.arrays import fill_array
from geonp.filling.calibration import (
    DISTANCE_BIN_EDGES,
    apply_std_calibration,
    distance_to_observed,
)
from geonp.model_files.calibration import Calibration
from geonp.model_files.registry import load_model

BINS = (1.0, 2.0, 4.0, 8.0, 16.0)


@pytest.fixture(scope="module")
def default_model():
    return load_model("default")


def _binned_std(std, distance):
    return np.array(
        [std[(distance >= lo) & (distance < hi)].mean() for lo, hi in itertools.pairwise(BINS)]
    )


def test_std_grows_with_distance_like_the_exact_gp(default_model):
    rng = np.random.default_rng(0)
    noise, ls = 0.05, 6.0
    field = gp_grid_field((64, 64), kernel="rbf", lengthscale=ls, rng=rng) + rng.normal(
        0, noise, (64, 64)
    )
    observed = np.ones((64, 64), bool)
    observed[17:47, 17:47] = False  # a 30-px hole: targets 1-15 px from data
    distance = ndimage.distance_transform_edt(~observed)
    # the exact GP posterior from the observed pixels within 12 px of the hole (the rest adds nothing)
    near = observed & (ndimage.distance_transform_edt(observed) <= 12)
    xc = np.argwhere(near).astype(float)
    xt = np.argwhere(~observed).astype(float)
    _, gp_std = gp_posterior(xc, field[near], xt, kernel="rbf", lengthscale=ls, noise=noise)
    gp = _binned_std(gp_std, distance[~observed])
    # the model, in DN-like units
    mean, std = fill_array(field[None] * 300.0 + 7000.0, observed, model=default_model)
    model = _binned_std(std[0][~observed] / 300.0, distance[~observed])
    assert (
        np.all(np.diff(gp) > 0) and gp[-1] > 0.6
    )  # sanity: the yardstick grows towards the prior (1)
    assert np.all(np.diff(model) > 0), model
    # never much surer than the exact GP (the best possible), and as unsure as it far from data
    ratio = model / gp
    assert np.all(ratio > 0.5) and 0.5 < ratio[-1] < 2.0, (model, gp)
    rmse = (
        np.array(
            [
                r["rmse"]
                for r in binned_scores(
                    field[~observed] * 300 + 7000,
                    mean[0][~observed],
                    None,
                    distance[~observed],
                    BINS,
                )
            ]
        )
        / 300.0
    )
    assert rmse[-1] > 2 * rmse[0]  # the model's error grows too (per bin it is noisy), and its std follows it
    assert np.all((model / rmse > 0.5) & (model / rmse < 2.0)), (model, rmse)


def test_one_observed_pixel_gives_about_the_prior_std(default_model):
    norm = default_model.normalizer
    values = np.array(norm["mean"])[:, None, None] * np.ones((3, 40, 40))
    valid = np.zeros((3, 40, 40), bool)
    valid[:, 20, 20] = True
    _, std = fill_array(values, valid, model=default_model)
    ratio = np.array([np.nanmean(std[b][~valid[b]]) / norm["std"][b] for b in range(3)])
    assert np.all((ratio > 0.3) & (ratio < 3.0)), (
        ratio
    )  # geonp 0.1 gave ~0.03 of the band's std here


def test_distance_calibration_lifts_a_flat_std_far_from_data():
    # a std that stays flat deep in a gap, as geonp 0.1's did, is lifted by the fitted bin factors
    observed = np.ones((200, 200), bool)
    observed[20:180, 20:180] = False
    d = distance_to_observed(observed)
    flat = np.where(observed, 0.0, 10.0)
    bins = {
        "edges": [None if np.isinf(e) else e for e in DISTANCE_BIN_EDGES],
        "factors": [1.0, 1.0, 1.2, 1.6, 2.2, 3.0, 4.0, 4.0, 4.0],
    }
    out = apply_std_calibration(flat, d, Calibration.from_dict({"distance_bins": bins}))
    assert out[21, 100] == pytest.approx(10.0)  # 1 px from data
    assert out[100, 100] == pytest.approx(
        40.0
    )  # 80 px from data, beyond the last fitted bin's centre
    assert np.all(out[observed] == 0.0)
