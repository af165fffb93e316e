"""Fuzzing the reading paths and the config parsing: only clean geonp errors, never a crash.

Each test runs a fixed (derandomised) set of hypothesis examples in well under 15 s, so a failure
reproduces on every run. ``GEONP_FUZZ_EXAMPLES=N`` runs more examples (and random ones).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import rasterio
import yaml
from affine import Affine
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from rasterio.windows import Window

from geonp.config import ModelConfig, TrainConfig
from geonp.errors import GeonpError, InputRasterError
from geonp.io.masks import read_mask_file, valid_mask
from geonp.io.observed import read_observed
from geonp.io.raster import open_raster, raster_info
from tests.conftest import smooth_field, write_raster

EXAMPLES = int(os.environ.get("GEONP_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=EXAMPLES or 60,
    deadline=None,
    derandomize=not EXAMPLES,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TRANSFORM = Affine(30.0, 0.0, 500000.0, 0.0, -30.0, 7000000.0)


# --------------------------------------------------------------------- mutated GeoTIFF bytes


def _seed_tiffs(root: Path) -> dict[str, bytes]:
    """Small valid GeoTIFFs of different layouts (strips, tiles, compression, mask band)."""
    root.mkdir(parents=True, exist_ok=True)
    arr = smooth_field((24, 24)).astype("float32")
    arr[3:6, 3:6] = -9999
    out = {"strips": write_raster(root / "strips.tif", arr, nodata=-9999).read_bytes()}
    with rasterio.open(root / "tiled.tif", "w", driver="GTiff", width=32, height=32, count=2, dtype="uint16",
                       crs="EPSG:32621", transform=TRANSFORM, nodata=0, tiled=True, blockxsize=16,
                       blockysize=16, compress="deflate", predictor=2) as dst:
        dst.write(np.stack([smooth_field((32, 32), s) for s in (1, 2)]).astype("uint16"))
    out["tiled"] = (root / "tiled.tif").read_bytes()
    with rasterio.Env(GDAL_TIFF_INTERNAL_MASK=True), rasterio.open(
            root / "masked.tif", "w", driver="GTiff", width=16, height=16, count=1, dtype="uint8",
            crs="EPSG:4326", transform=Affine(0.1, 0, 10, 0, -0.1, 50), compress="lzw") as dst:
        dst.write(np.arange(256, dtype="uint8").reshape(1, 16, 16))
        m = np.full((16, 16), 255, "uint8")
        m[4:8, 4:8] = 0
        dst.write_mask(m)
    out["masked"] = (root / "masked.tif").read_bytes()
    return out


@pytest.fixture(scope="module")
def seed_tiffs(tmp_path_factory):
    return _seed_tiffs(tmp_path_factory.mktemp("seeds"))


@st.composite
def mutations(draw, size: int):
    """Overwrite a few bytes (mostly in the header and the IFD) and maybe truncate."""
    edits = draw(st.lists(
        st.tuples(st.one_of(st.integers(0, min(size, 512) - 1), st.integers(0, size - 1)),
                  st.binary(min_size=1, max_size=4)),
        min_size=1, max_size=6))
    cut = draw(st.one_of(st.none(), st.integers(0, size)))
    return edits, cut


def _apply(data: bytes, edits, cut) -> bytes:
    buf = bytearray(data)
    for pos, chunk in edits:
        buf[pos: pos + len(chunk)] = chunk
    return bytes(buf[:cut] if cut is not None else buf)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.parametrize("layout", ["strips", "tiled", "masked"])
@FUZZ
@given(data=st.data(), nodata=st.sampled_from([None, 0.0, -9999.0, float("nan")]),
       window=st.tuples(st.integers(-8, 40), st.integers(-8, 40), st.integers(1, 24), st.integers(1, 24)))
def test_fuzz_mutated_geotiff_reading(layout, seed_tiffs, fuzz_dir, data, nodata, window):
    """Damaged GeoTIFFs: open_raster + read_observed + valid_mask raise InputRasterError or work."""
    original = seed_tiffs[layout]
    mutation = data.draw(mutations(len(original)), label="mutation")
    path = fuzz_dir / f"mutated_{layout}.tif"
    path.write_bytes(_apply(original, *mutation))
    try:
        with open_raster(path) as src:
            info = raster_info(src)
            # a corrupt header may claim an enormous raster: read bounded windows only
            bands = list(range(1, min(info.count, 4) + 1))
            row, col, h, w = window
            vals, ok = read_observed(src, Window(col, row, w, h), bands, info=info,
                                     nodata=info.nodata if nodata is None else nodata)
            assert vals.shape == ok.shape == (len(bands), h, w)
            assert ok.dtype == bool and not ok[~np.isfinite(vals)].any()
            again = valid_mask(vals, nodata=nodata, source_dtype=info.dtype)
            assert again.shape == vals.shape
        event("read")
    except GeonpError as err:
        event(f"refused: {str(err).split(str(path))[-1][:30]}")
        assert isinstance(err, InputRasterError), type(err)
        assert "\n" not in str(err) and str(path) in str(err)


# ---------------------------------------------------------------------------------- masks


MASK_DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "float32", "float64"]
SPECIAL = [0, 1, 255, -1, 2, 7, 0.5, float("nan"), float("inf"), -float("inf"), 65535, -32768]


@st.composite
def mask_cases(draw):
    dtype = draw(st.sampled_from(MASK_DTYPES))
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    palette = draw(st.sampled_from([(0, 1), (0, 255), (0, 1, 255, float("nan")), tuple(SPECIAL)]))
    values = draw(st.lists(st.sampled_from(palette), min_size=h * w, max_size=h * w))
    nodata = draw(st.sampled_from([None, 0, 1, 255, -1, float("nan")]))
    row, col = draw(st.integers(-6, h + 2)), draw(st.integers(-6, w + 2))
    wh, ww = draw(st.integers(1, 16)), draw(st.integers(1, 16))
    other_grid = draw(st.sampled_from([None, "size", "crs", "origin"]))
    return dtype, (h, w), values, nodata, (row, col, wh, ww), other_grid


def _storable(values: np.ndarray, dtype: str) -> np.ndarray:
    kind = np.dtype(dtype)
    if kind.kind in "ui":
        info = np.iinfo(kind)
        values = np.where(np.isfinite(values), values, 0)
        return np.clip(np.trunc(values), info.min, info.max).astype(kind)
    return values.astype(kind)


def _nodata_ok(nodata, dtype: str) -> bool:
    if nodata is None:
        return True
    kind = np.dtype(dtype)
    if kind.kind in "ui":
        return not math.isnan(nodata) and np.iinfo(kind).min <= nodata <= np.iinfo(kind).max
    return True


@FUZZ
@given(mask_cases())
def test_fuzz_read_mask_file(tmp_path_factory, case):
    dtype, (h, w), values, nodata, (row, col, wh, ww), other_grid = case
    assume(_nodata_ok(nodata, dtype))
    work = tmp_path_factory.mktemp("mask")
    like_path = write_raster(work / "input.tif", np.zeros((h, w), "float32"))
    with open_raster(like_path) as src:
        like = raster_info(src)
    arr = _storable(np.array(values, dtype="float64").reshape(h, w), dtype)
    mh, mw = (h + 1, w) if other_grid == "size" else (h, w)
    if other_grid == "size":
        arr = np.vstack([arr, arr[:1]])
    crs = "EPSG:4326" if other_grid == "crs" else "EPSG:32621"
    mask_path = work / "mask.tif"
    with rasterio.open(mask_path, "w", driver="GTiff", width=mw, height=mh, count=1, dtype=dtype, crs=crs,
                       transform=TRANSFORM @ Affine.translation(1, 0) if other_grid == "origin" else TRANSFORM,
                       nodata=nodata) as dst:
        dst.write(arr[None])
    try:
        gap = read_mask_file(mask_path, like=like, window=Window(col, row, ww, wh))
    except InputRasterError as err:
        event("refused")
        text = str(err)
        assert "\n" not in text and ("another grid" in text or "values other than 0 and 1" in text), text
        assert other_grid or "values other than" in text
        return
    event("read")
    if other_grid is not None:  # resampled onto the input's grid (tests/io/test_qa.py checks values)
        assert gap.shape == (wh, ww) and gap.dtype == bool
        return
    assert gap.shape == (wh, ww) and gap.dtype == bool
    rows = np.arange(row, row + wh)[:, None]
    cols = np.arange(col, col + ww)[None, :]
    inside = (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)
    assert gap[~inside].all(), "outside the raster must count as missing"
    stored = arr.astype("float64")
    r_in, c_in = np.clip(rows, 0, h - 1), np.clip(cols, 0, w - 1)
    window_vals = np.broadcast_to(stored[r_in, c_in], (wh, ww))
    is_nd = np.zeros_like(window_vals, bool) if nodata is None else (
        np.isnan(window_vals) if isinstance(nodata, float) and math.isnan(nodata) else
        window_vals == np.asarray(nodata).astype(dtype).astype("float64"))
    checked = window_vals[inside & ~is_nd]
    assert np.isin(checked, (0, 1, 255)).all(), "a mask with values other than 0/1/255 was accepted"
    expect = ~is_nd & (window_vals != 0)
    np.testing.assert_array_equal(gap[inside], expect[inside])


# ------------------------------------------------------------------------------- configs


NAMES_MODEL = [f.name for f in ModelConfig.__dataclass_fields__.values()]
NAMES_TRAIN = [f.name for f in TrainConfig.__dataclass_fields__.values()]
ODD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.sampled_from(["scan", "dense", "dka", "performer", "tnpkr", "tnpd", "rbf", "adamw", "yogi", "cpu",
                     "auto", "cuda", "pixel"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _positive_int(v) -> bool:
    return isinstance(v, int) and v >= 1


def _finite_number(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


MODEL_INTS = ("dim_y", "dim_x", "dim", "depth", "num_heads", "ff_dim", "num_basis", "num_latents")


def _model_config_is_sane(cfg: ModelConfig) -> None:
    """What build_model needs: a config that passes from_dict must build (no KeyError later)."""
    from geonp.models.attention.bias import BIASES

    for name in MODEL_INTS:
        if hasattr(cfg, name):
            assert _positive_int(getattr(cfg, name)), f"{name}={getattr(cfg, name)!r} accepted"
    assert cfg.dim % cfg.num_heads == 0
    assert cfg.bias is None or cfg.bias in BIASES, f"bias={cfg.bias!r} accepted"
    assert _finite_number(cfg.bias_length_scale) and cfg.bias_length_scale > 0, cfg.bias_length_scale
    assert _finite_number(cfg.sigma_min) and 0 <= cfg.sigma_min < 1, cfg.sigma_min
    assert _finite_number(cfg.dropout) and 0 <= cfg.dropout < 1, f"dropout={cfg.dropout!r} accepted"
    assert isinstance(cfg.embed_coords, bool), f"embed_coords={cfg.embed_coords!r} accepted"
    assert isinstance(cfg.coord_unit, str), f"coord_unit={cfg.coord_unit!r} accepted"


def _train_config_is_sane(cfg: TrainConfig) -> None:
    for name in ("steps", "val_every"):
        assert _positive_int(getattr(cfg, name)), f"{name}={getattr(cfg, name)!r} accepted"
    assert isinstance(cfg.warmup_steps, int) and cfg.warmup_steps >= 0, f"warmup_steps={cfg.warmup_steps!r}"
    assert isinstance(cfg.seed, int), f"seed={cfg.seed!r} accepted"
    assert _finite_number(cfg.lr) and cfg.lr > 0, f"lr={cfg.lr!r} accepted"
    assert _finite_number(cfg.min_lr_ratio) and 0 <= cfg.min_lr_ratio <= 1, f"min_lr_ratio={cfg.min_lr_ratio!r}"
    assert _finite_number(cfg.weight_decay) and cfg.weight_decay >= 0, f"weight_decay={cfg.weight_decay!r}"
    assert _finite_number(cfg.grad_clip) and cfg.grad_clip > 0, f"grad_clip={cfg.grad_clip!r} accepted"


def _config_dicts(names: list[str]):
    keys = st.one_of(st.sampled_from(names), st.text(max_size=5), st.integers(-2, 2))
    return st.one_of(
        st.dictionaries(keys, ODD_VALUES, max_size=5),
        st.dictionaries(st.sampled_from(names), ODD_VALUES, max_size=4),
        ODD_VALUES,
    )


def _collect(build, sane, strategy) -> list[str]:
    """Run the fuzzer, collecting problems instead of failing at the first (one report lists all)."""
    problems: list[str] = []

    @FUZZ
    @given(strategy)
    def run(data):
        try:
            cfg = build(data)
        except GeonpError as err:
            if "\n" in str(err):
                problems.append(f"{data!r}: multi-line message")
            return
        except Exception as err:  # noqa: BLE001 - what the test looks for
            problems.append(f"{data!r}: {type(err).__name__}: {err}")
            return
        try:
            sane(cfg)
        except AssertionError as err:
            problems.append(f"{data!r}: {err}")

    run()
    return sorted(set(problems))


def test_fuzz_model_config_from_dict():
    problems = _collect(ModelConfig.from_dict, _model_config_is_sane, _config_dicts(NAMES_MODEL))
    assert not problems, f"{len(problems)} problem(s), e.g.:\n" + "\n".join(problems[:10])


def test_fuzz_train_config_from_dict():
    problems = _collect(TrainConfig.from_dict, _train_config_is_sane, _config_dicts(NAMES_TRAIN))
    assert not problems, f"{len(problems)} problem(s), e.g.:\n" + "\n".join(problems[:10])


# Deterministic regressions for what the fuzzers found (each names the fix it needs).

@pytest.mark.parametrize("data", [
    {"bias": "foo"}, {"bias": 3}, {"dropout": 1.5}, {"bias_length_scale": -1.0},
    {"bias_length_scale": float("nan")}, {"embed_coords": "yes"}, {"coord_unit": 5}, {1: 2, "x": 3},
], ids=repr)
def test_model_config_rejects(data):
    with pytest.raises(GeonpError):
        ModelConfig.from_dict(data)


@pytest.mark.parametrize("data", [
    {"lr": float("nan")}, {"lr": float("inf")}, {"steps": 2.5}, {"warmup_steps": -5}, {"grad_clip": -1.0},
    {"weight_decay": float("nan")}, {"min_lr_ratio": 5.0}, {"seed": "x"}, {1: 2, "x": 3},
], ids=repr)
def test_train_config_rejects(data):
    with pytest.raises(GeonpError):
        TrainConfig.from_dict(data)


@pytest.mark.parametrize("data", [
    {"num_heads": 0}, {"dim": 0}, {"depth": -1}, {"dim": 16.5, "num_heads": 2}, {"ff_dim": "wide"},
    {"sigma_min": float("nan")}, {"arch": "transformer"}, {"attention": None}, [1, 2], "dim: 4",
], ids=repr)
def test_model_config_already_rejects(data):
    with pytest.raises(GeonpError):
        ModelConfig.from_dict(data)


# ---------------------------------------------------------------- YAML for geonp train --config


YAML_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 300), st.floats(allow_nan=False, width=32),
              st.text(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
SECTION = {
    "model": st.dictionaries(st.sampled_from(NAMES_MODEL + ["colour"]), YAML_VALUES, max_size=3),
    "training": st.dictionaries(st.sampled_from(NAMES_TRAIN + ["epochs"]), YAML_VALUES, max_size=3),
    "data": st.dictionaries(st.sampled_from(
        ["patch_size", "max_context", "core_size", "max_targets", "batch_size", "val_fraction", "bands",
         "nodata", "pretrain_steps", "pool_size", "shuffle"]), YAML_VALUES, max_size=3),
}
YAML_TEXT = st.one_of(
    st.fixed_dictionaries({}, optional=SECTION).map(yaml.safe_dump),
    st.dictionaries(st.sampled_from(["model", "training", "data", "extra"]), YAML_VALUES, max_size=3)
    .map(yaml.safe_dump),
    st.text(alphabet=st.sampled_from(list("model:training data{}[]-,'\"\n\t #&*!|>?%@`0123456789.eE+")),
            max_size=60),
)


@pytest.fixture(scope="module")
def train_raster(tmp_path_factory):
    return write_raster(tmp_path_factory.mktemp("train") / "t.tif", smooth_field((16, 16)).astype("float32"))


@FUZZ
@given(text=YAML_TEXT)
def test_fuzz_train_config_yaml(text, train_raster, tmp_path_factory, monkeypatch):
    """Random --config files: parsed and validated, or refused in one clean line."""
    import inspect

    import geonp
    from geonp.training import raster as training

    signature = inspect.signature(training.train)

    class Report:
        steps, seconds, best_val_nll, best_step, output, first_step = 1, 0.0, 0.0, 1, "stub", 0

    def fake_train(*args, **kwargs):  # the real signature, without the training
        from geonp.config import load_recipe

        signature.bind(*args, **kwargs)
        recipe = load_recipe(kwargs["recipe"])  # the library's validation, as train() runs it first
        ModelConfig.from_dict(recipe["model"])
        TrainConfig.from_dict(recipe["training"])
        return Report()

    monkeypatch.setattr(geonp, "train", fake_train, raising=False)
    work = tmp_path_factory.mktemp("yaml")
    cfg = work / "config.yaml"
    cfg.write_text(text)
    res = CliRunner().invoke(geonp_cli(), ["-q", "train", str(train_raster), "--output", str(work / "m"),
                                           "--config", str(cfg)])
    assert "Traceback" not in res.output
    assert "This is a bug in geonp" not in res.output, res.output
    event(f"exit {res.exit_code}")
    if res.exit_code == 0:
        assert "Trained 1 steps" in res.output
    else:
        assert res.exit_code in (1, 2), res.output
        errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, res.output


def geonp_cli():
    from geonp_cli.main import cli

    return cli
