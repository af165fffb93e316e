"""The bad-input matrix of ``geonp fill`` (SPEC §6), each case through the CLI.

Every refused case must: exit non-zero (1 for geonp errors, 2 for click usage errors), print
one ``Error:`` line with the key words and no traceback (without ``-v``), leave no file in the
output directory (no OUTPUT, no std, no ``.geonp-partial`` file) and leave every input file,
model file and pre-existing output byte for byte as it was.
"""

from __future__ import annotations

import json
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import rasterio
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from tests.conftest import smooth_field, write_raster
from tests.hardening._helpers import (
    assert_refused,
    checksums,
    copy_model,
    invoke,
    listing,
    readonly_dir,
    scene,
)


@dataclass
class Case:
    args: list[object]
    words: list[str]
    out_dir: Path
    code: int = 1
    protect: list[Path] = field(default_factory=list)


def _base(tmp: Path, model: Path, **kw: object) -> tuple[Path, Path, Path]:
    inp, out = tmp / "in", tmp / "out"
    out.mkdir(parents=True, exist_ok=True)
    return scene(inp / "scene.tif", **kw), out, model


def _fill(src: Path, out: Path, model: Path, *extra: object) -> list[object]:
    return ["fill", src, out / "filled.tif", "--model", model, *extra]


# ------------------------------------------------------------------------------ input rasters


def missing_file(tmp: Path, model: Path) -> Case:
    _, out, _ = _base(tmp, model)
    return Case(_fill(tmp / "in" / "nope.tif", out, model), ["nope.tif", "does not exist"], out)


def directory_as_file(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(_fill(src.parent, out, model), ["is a directory", "geonp batch"], out, protect=[src])


def empty_file(tmp: Path, model: Path) -> Case:
    _, out, _ = _base(tmp, model)
    empty = tmp / "in" / "empty.tif"
    empty.write_bytes(b"")
    return Case(_fill(empty, out, model), ["empty file (0 bytes)"], out, protect=[empty])


def _truncated(keep: Callable[[int], int]) -> Callable[[Path, Path], Case]:
    def build(tmp: Path, model: Path) -> Case:
        src, out, _ = _base(tmp, model)
        data = src.read_bytes()
        cut = tmp / "in" / "cut.tif"
        cut.write_bytes(data[: keep(len(data))])
        return Case(_fill(cut, out, model), ["cut.tif", "truncated or corrupt", "re-download"], out,
                    protect=[cut])
    return build


def corrupt_middle_block(tmp: Path, model: Path) -> Case:
    """The first and last blocks read fine; a block in the middle holds garbage."""
    inp, out = tmp / "in", tmp / "out"
    out.mkdir(parents=True)
    inp.mkdir()
    arr = smooth_field((64, 64)).astype("float32")
    arr[5:9, 5:9] = -9999
    src = inp / "tiled.tif"
    with rasterio.open(src, "w", driver="GTiff", width=64, height=64, count=1, dtype="float32",
                       crs="EPSG:32621", transform=rasterio.transform.from_origin(0, 640, 10, 10),
                       nodata=-9999, tiled=True, blockxsize=16, blockysize=16, compress="deflate") as dst:
        dst.write(arr[None])
    with rasterio.open(src) as f:
        offset = int(f.get_tag_item("BLOCK_OFFSET_1_1", "TIFF", bidx=1))
        size = int(f.get_tag_item("BLOCK_SIZE_1_1", "TIFF", bidx=1))
    data = bytearray(src.read_bytes())
    data[offset: offset + size] = bytes(np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8))
    src.write_bytes(bytes(data))
    return Case(_fill(src, out, model), ["tiled.tif", "truncated or corrupt", "rows"], out, protect=[src])


def jpeg_renamed_tif(tmp: Path, model: Path) -> Case:
    _, out, _ = _base(tmp, model)
    fake = tmp / "in" / "photo.tif"
    img = (np.random.default_rng(0).random((32, 32, 3)) * 255).astype("uint8")
    Image.fromarray(img).save(fake, format="JPEG")
    return Case(_fill(fake, out, model), ["photo.tif", "not a GeoTIFF", "JPEG", "gdal_translate"], out,
                protect=[fake])


def text_file_named_tif(tmp: Path, model: Path) -> Case:
    _, out, _ = _base(tmp, model)
    txt = tmp / "in" / "notes.tif"
    txt.write_text("these are not pixels\n")
    return Case(_fill(txt, out, model), ["not a raster GDAL can read"], out, protect=[txt])


# ------------------------------------------------------------------------------------- masks


def _mask(tmp: Path, model: Path, arr: np.ndarray, **kw: object) -> tuple[Path, Path, Path]:
    src, out, _ = _base(tmp, model)
    mask = write_raster(tmp / "in" / "mask.tif", arr, **kw)
    return src, out, mask


def mask_other_size(tmp: Path, model: Path) -> Case:
    # Masks on other grids are resampled, but only when both files have a CRS.
    src, out, mask = _mask(tmp, model, np.zeros((16, 32), "uint8"), crs=None)
    return Case(_fill(src, out, model, "--mask", mask), ["Mask", "another grid", "has no CRS", "gdalwarp"],
                out, protect=[src, mask])


def mask_other_crs(tmp: Path, model: Path) -> Case:
    src, out, mask = _mask(tmp, model, np.full((32, 32), 21824, "uint16"))
    return Case(_fill(src, out, model, "--mask", mask), ["Mask", "values other than 0 and 1", "21824",
                                                          "--qa-kind"], out, protect=[src, mask])


def mask_values(tmp: Path, model: Path) -> Case:
    arr = np.zeros((32, 32), "uint8")
    arr[3, 3], arr[4, 4] = 7, 1
    src, out, mask = _mask(tmp, model, arr)
    return Case(_fill(src, out, model, "--mask", mask), ["values other than 0 and 1", "7"], out,
                protect=[src, mask])


def mask_missing(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(_fill(src, out, model, "--mask", tmp / "in" / "nomask.tif"), ["Mask", "does not exist"], out,
                protect=[src])


# ------------------------------------------------------------------------------ pixel content


def all_missing(tmp: Path, model: Path) -> Case:
    _, out, _ = _base(tmp, model)
    src = write_raster(tmp / "in" / "void.tif", np.full((32, 32), -9999, "float32"), nodata=-9999)
    return Case(_fill(src, out, model), ["no observed pixel", "--nodata"], out, protect=[src])


def all_nan(tmp: Path, model: Path) -> Case:
    _, out, _ = _base(tmp, model)
    src = write_raster(tmp / "in" / "nan.tif", np.full((32, 32), np.nan, "float32"))
    return Case(_fill(src, out, model), ["no observed pixel"], out, protect=[src])


def band_count(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    from geonp.config import ModelConfig
    from geonp.model_files.card import ModelCard
    from geonp.model_files.checkpoint import save_model
    from geonp.models import build_model

    cfg = ModelConfig(dim=16, depth=1, num_heads=2, ff_dim=32)
    three = save_model(tmp / "three", build_model(cfg), cfg,
                       normalizer={"mean": [1.0, 2.0, 3.0], "std": [1.0, 1.0, 1.0]},
                       card=ModelCard(name="three", any_band_count=False))
    return Case(_fill(src, out, three), ["three", "3 band(s)", "cannot take 1", "-b"], out,
                protect=[src, three])


def band_out_of_range(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(_fill(src, out, model, "--band", 2), ["--band 2 is out of range", "1 band", "1..1"], out,
                protect=[src])


def band_zero(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(_fill(src, out, model, "--band", 0), ["--band", "0 is not in the range"], out, code=2,
                protect=[src])


def band_repeated(tmp: Path, model: Path) -> Case:
    inp, out = tmp / "in", tmp / "out"
    out.mkdir(parents=True)
    inp.mkdir()
    src = write_raster(inp / "two.tif", np.stack([smooth_field((32, 32), s) for s in (0, 1)]).astype("float32"))
    return Case(_fill(src, out, model, "-b", 1, "-b", 1), ["--band 1 is given more than once"], out,
                protect=[src])


def _nodata(value: object, dtype: str, words: list[str]) -> Callable[[Path, Path], Case]:
    def build(tmp: Path, model: Path) -> Case:
        _, out, _ = _base(tmp, model)
        src = scene(tmp / "in" / f"{dtype}.tif", dtype=dtype, nodata=None, gap=False)
        return Case(_fill(src, out, model, "--nodata", value), words, out, protect=[src])
    return build


# ------------------------------------------------------------------------------------ outputs


def output_is_input(tmp: Path, model: Path) -> Case:
    src, _, _ = _base(tmp, model)
    return Case(["fill", src, src, "--model", model], ["is the input", "never modifies its input"], src.parent,
                protect=[src])


def output_is_input_with_overwrite(tmp: Path, model: Path) -> Case:
    src, _, _ = _base(tmp, model)
    return Case(["fill", src, src, "--model", model, "--overwrite"], ["is the input"], src.parent,
                protect=[src])


def output_is_input_via_symlink(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    link = out / "link.tif"
    link.symlink_to(src)
    return Case(["fill", src, link, "--model", model, "--overwrite"], ["is the input"], out, protect=[src])


def std_is_input(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(_fill(src, out, model, "--uncertainty", src, "--overwrite"), ["is the input"], out,
                protect=[src])


def default_std_is_input(tmp: Path, model: Path) -> Case:
    """``geonp fill a_std.tif a.tif`` would write its std raster onto the input."""
    inp = tmp / "in"
    src = scene(inp / "a_std.tif")
    return Case(["fill", src, inp / "a.tif", "--model", model, "--overwrite"], ["a_std.tif", "is the input"], inp,
                protect=[src])


def quicklook_is_input(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(_fill(src, out, model, "--quicklook", src, "--overwrite"), ["--quicklook", "is the input"], out,
                protect=[src])


def quicklook_is_output(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(_fill(src, out, model, "--quicklook", out / "filled.tif"), ["--quicklook", "same path as OUTPUT"],
                out, protect=[src])


def quicklook_dir_missing(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(_fill(src, out, model, "--quicklook", tmp / "nodir" / "q.png"), ["nodir", "does not exist"],
                out, protect=[src])


def output_dir_missing(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(["fill", src, out / "sub" / "filled.tif", "--model", model],
                ["Output directory", "does not exist", "mkdir -p"], out, protect=[src])


def output_is_directory(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(["fill", src, out, "--model", model], ["is a directory", "give a file path"], out, protect=[src])


def output_exists(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    old = out / "filled.tif"
    old.write_bytes(b"an earlier result")
    return Case(_fill(src, out, model), ["filled.tif already exists", "--overwrite"], out, protect=[src, old])


def std_exists(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    old = out / "filled_std.tif"
    old.write_bytes(b"an earlier std")
    return Case(_fill(src, out, model), ["filled_std.tif already exists", "--overwrite"], out,
                protect=[src, old])


def std_same_as_output(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(_fill(src, out, model, "--uncertainty", out / "filled.tif"), ["same path as OUTPUT"], out,
                protect=[src])


# -------------------------------------------------------------------------------- model files


def model_truncated(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    bad = copy_model(model, tmp / "cut_model")
    data = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[: len(data) // 2])
    return Case(_fill(src, out, bad), ["model.safetensors", "corrupt or truncated", "retrain"], out,
                protect=[src, bad])


def model_header_tampered(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    bad = copy_model(model, tmp / "tampered")
    data = bytearray((bad / "model.safetensors").read_bytes())
    data[8:20] = b"{{{{{{{{{{{{"  # the JSON header of safetensors
    (bad / "model.safetensors").write_bytes(bytes(data))
    return Case(_fill(src, out, bad), ["corrupt or truncated"], out, protect=[src, bad])


def model_weights_nan(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    bad = copy_model(model, tmp / "nan_model")
    state = load_file(str(bad / "model.safetensors"))
    key = min(k for k, v in state.items() if v.is_floating_point())
    state[key] = torch.full_like(state[key], float("nan"))
    save_file(state, str(bad / "model.safetensors"))
    return Case(_fill(src, out, bad), ["NaN or Inf weights"], out, protect=[src, bad])


def model_config_garbage(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    bad = copy_model(model, tmp / "garbage_cfg")
    (bad / "config.json").write_text("{not json")
    return Case(_fill(src, out, bad), ["config.json is corrupt"], out, protect=[src, bad])


def model_config_missing(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    bad = copy_model(model, tmp / "no_cfg")
    (bad / "config.json").unlink()
    return Case(_fill(src, out, bad), ["not a geonp model directory", "config.json is missing"], out,
                protect=[src, bad])


def model_other_architecture(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    from geonp.config import ModelConfig
    from geonp.model_files.checkpoint import save_model
    from geonp.models import build_model

    cfg = ModelConfig(arch="tnpd", dim=16, depth=1, num_heads=2, ff_dim=32)
    other = save_model(tmp / "tnpd", build_model(cfg), cfg)
    mixed = copy_model(model, tmp / "mixed")
    shutil.copy(other / "model.safetensors", mixed / "model.safetensors")
    return Case(_fill(src, out, mixed), ["does not match", "tnpkr/scan", "different models"], out,
                protect=[src, mixed])


def model_other_width(tmp: Path, model: Path) -> Case:
    """config.json says one width, the weights have another."""
    src, out, _ = _base(tmp, model)
    bad = copy_model(model, tmp / "wide")
    meta = json.loads((bad / "config.json").read_text())
    meta["model"]["dim"], meta["model"]["ff_dim"] = 32, 64
    (bad / "config.json").write_text(json.dumps(meta))
    return Case(_fill(src, out, bad), ["does not match", "wrong shape"], out, protect=[src, bad])


def model_unknown_name(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    return Case(_fill(src, out, "no-such-model"), ["unknown model 'no-such-model'", "geonp models"], out,
                protect=[src])


def model_pickle_file(tmp: Path, model: Path) -> Case:
    src, out, _ = _base(tmp, model)
    pt = tmp / "model.pt"
    pt.write_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    return Case(_fill(src, out, pt), ["never loads pickled"], out, protect=[src, pt])


# ------------------------------------------------------------------------- creation options


def _co(value: str, words: list[str]) -> Callable[[Path, Path], Case]:
    def build(tmp: Path, model: Path) -> Case:
        src, out, _ = _base(tmp, model)
        return Case(_fill(src, out, model, "--co", value), words, out, protect=[src])
    return build


CASES: dict[str, Callable[[Path, Path], Case]] = {
    "missing_file": missing_file,
    "directory_as_file": directory_as_file,
    "empty_file": empty_file,
    "truncated_header": _truncated(lambda n: 100),
    "truncated_half": _truncated(lambda n: n // 2),
    "truncated_tail": _truncated(lambda n: n - 64),
    "corrupt_middle_block": corrupt_middle_block,
    "jpeg_renamed_tif": jpeg_renamed_tif,
    "text_file_named_tif": text_file_named_tif,
    "mask_other_size": mask_other_size,
    "mask_other_crs": mask_other_crs,
    "mask_values": mask_values,
    "mask_missing": mask_missing,
    "all_missing": all_missing,
    "all_nan": all_nan,
    "band_count": band_count,
    "band_out_of_range": band_out_of_range,
    "band_zero": band_zero,
    "band_repeated": band_repeated,
    "nodata_below_uint16": _nodata(-1, "uint16", ["nodata -1.0 is out of range", "uint16", "0..65535"]),
    "nodata_above_uint16": _nodata(70000, "uint16", ["nodata 70000.0 is out of range", "0..65535"]),
    "nodata_fraction_uint8": _nodata(1.5, "uint8", ["nodata 1.5 cannot be stored", "uint8"]),
    "nodata_above_float32": _nodata(1e40, "float32", ["out of range for a float32 raster"]),
    "output_is_input": output_is_input,
    "output_is_input_with_overwrite": output_is_input_with_overwrite,
    "output_is_input_via_symlink": output_is_input_via_symlink,
    "std_is_input": std_is_input,
    "default_std_is_input": default_std_is_input,
    "quicklook_is_input": quicklook_is_input,
    "quicklook_is_output": quicklook_is_output,
    "quicklook_dir_missing": quicklook_dir_missing,
    "output_dir_missing": output_dir_missing,
    "output_is_directory": output_is_directory,
    "output_exists": output_exists,
    "std_exists": std_exists,
    "std_same_as_output": std_same_as_output,
    "model_truncated": model_truncated,
    "model_header_tampered": model_header_tampered,
    "model_weights_nan": model_weights_nan,
    "model_config_garbage": model_config_garbage,
    "model_config_missing": model_config_missing,
    "model_other_architecture": model_other_architecture,
    "model_other_width": model_other_width,
    "model_unknown_name": model_unknown_name,
    "model_pickle_file": model_pickle_file,
    "co_unknown_key": _co("FOO=1", ["Unknown creation option FOO"]),
    "co_bad_value": _co("COMPRESS=FOO", ["COMPRESS=FOO", "unexpected value for COMPRESS", "GDAL says"]),
    "co_not_key_value": _co("garbage", ["not KEY=VALUE"]),
    "co_jpeg_float": _co("COMPRESS=JPEG", ["JPEG compression holds only 8-bit values, not float32"]),
    "co_cog_only": _co("OVERVIEWS=AUTO", ["applies only to COG output", "--cog"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_refused_cleanly(name, tmp_path, tiny_model):
    case = CASES[name](tmp_path, tiny_model)
    before_files = listing(case.out_dir)
    protected = checksums([*case.protect, tiny_model])
    res = invoke(case.args)
    assert_refused(res, case.words, code=case.code)
    assert listing(case.out_dir) == before_files, "the run left files behind"
    assert checksums([*case.protect, tiny_model]) == protected, "an input or earlier output was modified"


@pytest.mark.parametrize("name", ["truncated_half", "model_truncated", "output_exists"])
def test_verbose_adds_the_traceback(name, tmp_path, tiny_model):
    case = CASES[name](tmp_path, tiny_model)
    res = invoke(case.args, verbose=True)
    assert res.exit_code == 1
    assert "Traceback" in res.output and "GeonpError" not in res.output.splitlines()[-1]
    assert res.output.splitlines()[-1].startswith("Error:")


def test_read_only_output_directory(tmp_path, tiny_model):
    src = scene(tmp_path / "in" / "scene.tif")
    digest = checksums([src])
    with readonly_dir(tmp_path / "ro") as ro:
        res = invoke(["fill", src, ro / "filled.tif", "--model", tiny_model])
        assert_refused(res, ["Output directory", "not writable"])
        assert listing(ro) == []
    assert checksums([src]) == digest


# ------------------------------------------------------------------- accepted unusual inputs


def test_no_missing_pixel_copies_through_with_zero_std(tmp_path, tiny_model):
    src = scene(tmp_path / "full.tif", dtype="uint16", nodata=0, gap=False)
    digest = checksums([src])
    res = invoke(["fill", src, tmp_path / "out.tif", "--model", tiny_model])
    assert res.exit_code == 0, res.output
    assert "has no missing pixel" in res.output and "copied it unchanged" in res.output
    with rasterio.open(src) as a, rasterio.open(tmp_path / "out.tif") as b, \
            rasterio.open(tmp_path / "out_std.tif") as s:
        np.testing.assert_array_equal(b.read(), a.read())
        assert b.dtypes == a.dtypes and b.nodata == a.nodata and b.crs == a.crs
        assert (s.read() == 0).all()
    assert checksums([src]) == digest


def test_raster_without_crs_is_filled_in_pixel_units_with_a_warning(tmp_path, tiny_model, caplog):
    """No CRS is not an error: geonp works in pixels; the output keeps the (missing) CRS."""
    src = scene(tmp_path / "nocrs.tif", crs=None)
    digest = checksums([src])
    res = invoke(["fill", src, tmp_path / "out.tif", "--model", tiny_model])
    assert res.exit_code == 0, res.output
    warned = [r for r in caplog.records if r.levelname == "WARNING" and "has no CRS" in r.getMessage()]
    assert len(warned) == 1 and "gdal_edit.py -a_srs" in warned[0].getMessage()
    assert "Traceback" not in res.output
    with rasterio.open(src) as a, rasterio.open(tmp_path / "out.tif") as b:
        assert b.crs is None and b.transform == a.transform
        got, arr = b.read(1), a.read(1)
    gap = arr == -9999
    np.testing.assert_array_equal(got[~gap], arr[~gap])
    assert (got[gap] != -9999).all()
    assert checksums([src]) == digest


def test_gcp_georeferencing_is_kept(tmp_path, tiny_model):
    """A raster located by ground control points (no CRS, no transform) keeps its GCPs."""
    from rasterio.control import GroundControlPoint

    arr = smooth_field((32, 32)).astype("float32")
    arr[8:12, 8:12] = -9999
    gcps = [GroundControlPoint(0, 0, 500000, 7000000), GroundControlPoint(0, 32, 500960, 7000000),
            GroundControlPoint(32, 0, 500000, 6999040), GroundControlPoint(32, 32, 500960, 6999040)]
    src = tmp_path / "gcp.tif"
    with rasterio.open(src, "w", driver="GTiff", width=32, height=32, count=1, dtype="float32",
                       nodata=-9999, gcps=gcps, crs="EPSG:32621") as dst:
        dst.write(arr[None])
    res = invoke(["fill", src, tmp_path / "out.tif", "--model", tiny_model])
    assert res.exit_code == 0, res.output
    assert "has no CRS" not in res.output and "NotGeoreferencedWarning" not in res.output
    with rasterio.open(tmp_path / "out.tif") as b:
        got, crs = b.gcps
        assert len(got) == 4 and crs.to_epsg() == 32621
        assert (got[1].x, got[1].col) == (500960, 32)


def test_model_file_with_a_pickle_payload_is_refused_without_unpickling(tmp_path, tiny_model):
    """``--model DIR`` where DIR/model.safetensors is a pickle that would run code when loaded."""
    src = scene(tmp_path / "in" / "scene.tif")
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('unpickled')",))

    bad = copy_model(tiny_model, tmp_path / "evil")
    (bad / "model.safetensors").write_bytes(pickle.dumps({"blocks.0.weight": Payload()}))
    digest = checksums([src, bad])
    res = invoke(["fill", src, out / "filled.tif", "--model", bad])
    assert_refused(res, ["model.safetensors", "corrupt or truncated"])
    assert not marker.exists(), "the pickle payload ran"
    assert listing(out) == []
    assert checksums([src, bad]) == digest


@pytest.mark.parametrize("change", [{"bias": "foo"}, {"dropout": 1.5}], ids=["bias", "dropout"])
def test_model_config_with_unbuildable_values(tmp_path, tiny_model, change):
    """A tampered config.json whose values pass from_dict but break build_model."""
    src = scene(tmp_path / "in" / "scene.tif")
    out = tmp_path / "out"
    out.mkdir()
    bad = copy_model(tiny_model, tmp_path / "tampered_values")
    meta = json.loads((bad / "config.json").read_text())
    meta["model"].update(change)
    (bad / "config.json").write_text(json.dumps(meta))
    res = invoke(["fill", src, out / "filled.tif", "--model", bad])
    assert_refused(res, ["config.json", "cannot build"])
    assert listing(out) == []


@pytest.mark.parametrize(("error", "words"), [
    (RuntimeError("boom"), ["unexpected RuntimeError: boom", "bug in geonp", "-v"]),
    (PermissionError(13, "Permission denied", "/x/y.tif"), ["Permission denied", "/x/y.tif"]),
    (MemoryError(), ["out of memory", "--block-size"]),
], ids=["bug", "oserror", "memory"])
def test_any_error_is_one_line_without_verbose(tmp_path, monkeypatch, error, words):
    """The last line of defence: even an unexpected exception prints one line, no traceback."""
    import geonp

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(geonp, "fill_raster", broken, raising=False)
    src = scene(tmp_path / "scene.tif")
    res = invoke(["fill", src, tmp_path / "out.tif"])
    assert_refused(res, words)
    res = invoke(["fill", src, tmp_path / "out.tif"], verbose=True)
    assert res.exit_code == 1 and "Traceback" in res.output
