"""What `geonp fill` writes is whole and opens, or it refuses before writing, with one line on stderr.

Multi-file formats (EHdr, ENVI) keep their sidecars; complex rasters, VRT outputs and non-PNG
quicklooks are refused before any work; a full disk and a data band tagged alpha each say so once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.enums import ColorInterp

import geonp
from geonp.errors import InputRasterError
from geonp.io import atomic
from tests.conftest import smooth_field, write_raster
from tests.hardening._helpers import assert_refused, fill_to, invoke, listing, scene, small_disk


def _run(args: list[object], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A real `geonp` process (stderr as the terminal gets it, libtiff's own lines included)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "geonp_cli", *(str(a) for a in args)], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)


def _files_of(*rasters: Path) -> list[str]:
    """Every file GDAL counts as part of the rasters (data, header, projection, .aux.xml)."""
    names = set()
    for path in rasters:
        with rasterio.open(path) as src:
            names.update(Path(f).name for f in src.files)
    return sorted(names)


@pytest.mark.parametrize(("name", "driver", "std_name"), [("o.bil", "EHdr", "o_std.bil"),
                                                          ("o.img", "ENVI", "o_std.img")])
def test_multi_file_output_opens_and_matches_the_geotiff_fill(tmp_path, tiny_model, name, driver,
                                                               std_name) -> None:
    src = scene(tmp_path / "in" / "scene.tif")
    ref, out = tmp_path / "gtiff", tmp_path / "out"
    ref.mkdir()
    out.mkdir()
    assert invoke(["-q", "fill", src, ref / "o.tif", "--model", tiny_model]).exit_code == 0
    res = invoke(["-q", "fill", src, out / name, "-f", driver, "--model", tiny_model])
    assert res.exit_code == 0, res.output
    assert not [n for n in listing(out) if "geonp-partial" in n]
    assert listing(out) == _files_of(out / name, out / std_name)  # nothing else is left beside them
    for got, want in ((out / name, ref / "o.tif"), (out / std_name, ref / "o_std.tif")):
        with rasterio.open(got) as g, rasterio.open(want) as w:
            assert g.driver == driver
            assert (g.crs, g.transform, g.count) == (w.crs, w.transform, w.count)
            np.testing.assert_array_equal(g.read(), w.read())
    assert {"o.hdr", "o_std.hdr"} <= set(listing(out))


def test_a_sidecar_of_another_raster_is_not_replaced(tmp_path, tiny_model) -> None:
    src = scene(tmp_path / "in" / "scene.tif")
    out = tmp_path / "out"
    out.mkdir()
    assert invoke(["-q", "fill", src, out / "o.bil", "-f", "EHdr", "--model", tiny_model]).exit_code == 0
    with rasterio.open(out / "o.bil") as bil:
        before = bil.read()
    kept = listing(out)
    res = invoke(["-q", "fill", src, out / "o.img", "-f", "ENVI", "--model", tiny_model,
                  "--uncertainty", out / "o_std.tif"])
    assert_refused(res, [f"{out / 'o.hdr'} already exists", "--overwrite"])
    assert listing(out) == kept  # o.img's header did not replace o.bil's: no o.img, no partial file
    with rasterio.open(out / "o.bil") as bil:
        np.testing.assert_array_equal(bil.read(), before)


def test_an_output_that_does_not_open_under_its_name_is_removed(tmp_path, tiny_model, monkeypatch) -> None:
    """A driver whose sidecars geonp would misname (injected): the run fails and leaves nothing."""
    src = scene(tmp_path / "in" / "scene.tif")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(atomic, "_final_name", lambda name, ready, final: "misnamed-" + name.lstrip("."))
    res = invoke(["-q", "fill", src, out / "o.bil", "-f", "EHdr", "--model", tiny_model])
    assert_refused(res, ["does not open as the raster written", "write a GeoTIFF", "No file was written"])
    assert listing(out) == []


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "complex_int16"])
def test_complex_input_is_refused_before_anything_is_written(tmp_path, dtype) -> None:
    path = tmp_path / "c.tif"
    with rasterio.open(path, "w", driver="GTiff", width=16, height=16, count=1, dtype=dtype, crs="EPSG:32621",
                       transform=rasterio.transform.from_origin(0, 0, 30, 30)) as dst:
        if dtype != "complex_int16":  # numpy has no such type: GDAL's zeros
            dst.write((np.ones((1, 16, 16)) * (1 + 2j)).astype(dtype))
    res = invoke(["fill", path, tmp_path / "o.tif"])
    assert_refused(res, [f"holds complex pixels ({dtype})", "split the real and imaginary parts into two bands"])
    assert listing(tmp_path) == ["c.tif"]


def test_fill_array_refuses_complex_values() -> None:
    values = np.ones((8, 8), np.complex64)
    with pytest.raises(InputRasterError, match=r"values holds complex pixels \(complex64\).*split the real"):
        geonp.fill_array(values, np.ones((8, 8), bool))


@pytest.mark.parametrize("quicklook", ["q.tif", "q", "q.jpg"])
def test_quicklook_must_be_named_png(tmp_path, quicklook) -> None:
    src = scene(tmp_path / "scene.tif")
    res = invoke(["fill", src, tmp_path / "o.tif", "--quicklook", tmp_path / quicklook])
    line = assert_refused(res, ["--quicklook writes a PNG; give a path ending in .png"])
    assert line.endswith(f"not {tmp_path / quicklook}.")
    assert listing(tmp_path) == ["scene.tif"]


@pytest.mark.parametrize(("output", "extra"), [("o.vrt", []), ("o.dat", ["-f", "VRT"]),
                                               ("o.tif", ["--uncertainty", "s.vrt"])])
def test_vrt_output_is_refused_before_filling(tmp_path, monkeypatch, output, extra) -> None:
    monkeypatch.chdir(tmp_path)
    src = scene(tmp_path / "scene.tif")
    res = invoke(["fill", src, output, *extra])
    assert_refused(res, ["a VRT only refers to other raster files", "geonp cannot write one", "-f GTiff"])
    assert listing(tmp_path) == ["scene.tif"]


@pytest.mark.parametrize("cog", [False, True], ids=["gtiff", "cog"])
def test_a_full_disk_prints_one_line_on_stderr(tmp_path, tiny_model, cog) -> None:
    rng = np.random.default_rng(0)
    arr = (smooth_field((64, 64)) + 100 * rng.normal(size=(64, 64))).astype("float32")  # compresses badly
    arr[10:20, 10:20] = -9999
    src = write_raster(tmp_path / "scene.tif", arr, nodata=-9999)
    with small_disk(tmp_path / "disk", "200k") as disk:
        fill_to(disk, 8000)
        run = _run(["-q", "fill", src, disk / "filled.tif", "--model", tiny_model, *(["--cog"] if cog else [])],
                   tmp_path)
        assert run.returncode == 1
        line = (f"Error: No space left on device while writing {disk / 'filled.tif'}; free space or write "
                "elsewhere. No file was written.")
        assert run.stderr.splitlines() == [line]  # no libtiff lines before it
        assert listing(disk) == ["filler"]


def test_a_data_band_tagged_alpha_is_warned_about_once(tmp_path, tiny_model) -> None:
    arr = np.random.default_rng(0).integers(1, 238, (4, 48, 48)).astype("uint8")  # red, green, blue, NIR
    arr[:, 10:20, 10:20] = 0
    path = write_raster(tmp_path / "rgbn.tif", arr, nodata=0)
    with rasterio.open(path, "r+") as dst:
        dst.colorinterp = [ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha]
    for extra in ([], ["--dry-run"]):
        run = _run(["fill", path, tmp_path / "o.tif", "--model", tiny_model, "--overwrite", *extra], tmp_path)
        assert run.returncode == 0, run.stderr
        assert run.stderr.count("band 4 of") == 1, run.stderr
        assert run.stderr.count("is tagged as alpha but holds 238 distinct values") == 1
