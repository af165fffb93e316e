"""Hostile inputs a new user meets, each run through the real command: one line per case.

Each case builds its input in a temporary folder, runs ``geonp`` (or the Python API) as a user
would, and prints ``ok`` or ``FAIL``, the exit code and what geonp said (the first line of its
stderr, or the exception). A case is ``ok`` when geonp did the right thing: refused in one line and
wrote nothing, or wrote a raster GDAL opens with what was asked for.

    python benchmarks/red_team.py            # every case (about two minutes on two cores)
    python benchmarks/red_team.py -k train   # the cases whose name holds "train"
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import rasterio
from rasterio.transform import from_origin

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "landsat8_cloudy.tif"
CLEAN = ROOT / "sample_data" / "landsat8_clean.tif"


def geonp(*args: object, timeout: float = 300) -> subprocess.CompletedProcess:
    """``geonp ARGS`` as a user runs it: a new process."""
    cmd = [sys.executable, "-c", "from geonp_cli.main import cli; cli()", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[0][:150] if lines else ""


def refused(done: subprocess.CompletedProcess, *paths: Path) -> tuple[bool, str]:
    """Refused in one line, non-zero, none of ``paths`` written."""
    lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    ok = done.returncode != 0 and len(lines) == 1 and not any(p.exists() for p in paths)
    return ok, f"rc {done.returncode}, {len(lines)} line(s): {first_line(done.stderr)}"


def write(path: Path, arr: np.ndarray, **profile: object) -> Path:
    arr = arr if arr.ndim == 3 else arr[None]
    base = {"driver": "GTiff", "width": arr.shape[2], "height": arr.shape[1], "count": arr.shape[0],
            "dtype": arr.dtype, "crs": "EPSG:32621", "transform": from_origin(500000, 7000000, 30, 30)}
    with rasterio.open(path, "w", **{**base, **profile}) as dst:
        dst.write(arr)
    return path


def digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())).hexdigest()


# ---------------------------------------------------------------------------------------- cases


def train_twice_into_one_folder(tmp: Path) -> tuple[bool, str]:
    out = tmp / "m"
    first = geonp("-q", "train", CLEAN, "--output", out, "--steps", "2", "--patch-size", "32", "--val-every", "1")
    if first.returncode != 0:
        return False, f"first train failed: {first_line(first.stderr)}"
    before = digest(out)
    again = geonp("-q", "train", CLEAN, "--output", out, "--steps", "2", "--patch-size", "32")
    ok, said = refused(again)
    return ok and digest(out) == before, said + ("" if digest(out) == before else "; the first model changed")


def train_into_the_installed_package(tmp: Path) -> tuple[bool, str]:
    import geonp as pkg

    target = Path(pkg.__file__).parent / "pretrained" / "default"
    before = digest(target)
    ok, said = refused(geonp("-q", "train", CLEAN, "--output", target, "--steps", "2", "--overwrite"))
    return ok and digest(target) == before, said


def train_stopped_by_sigterm(tmp: Path) -> tuple[bool, str]:
    import psutil

    cmd = [sys.executable, "-c", "from geonp_cli.main import cli; cli()", "train", str(CLEAN), "--output",
           str(tmp / "m"), "--steps", "100000", "--patch-size", "32", "--val-every", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(20)
    children = psutil.Process(proc.pid).children(recursive=True)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return False, "still running 60 s after SIGTERM"
    waited = time.monotonic() - t0
    _, alive = psutil.wait_procs(children, timeout=5)
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and "%" not in ln]
    ok = proc.returncode != 0 and not alive and waited < 30 and len(lines) == 1
    return ok, f"rc {proc.returncode} after {waited:.1f} s, {len(alive)} orphan(s): {lines[-1][:120] if lines else ''}"


def multi_file_format(driver: str, name: str) -> Callable[[Path], tuple[bool, str]]:
    def case(tmp: Path) -> tuple[bool, str]:
        done = geonp("-q", "fill", SAMPLE, tmp / name, "-f", driver)
        try:
            with rasterio.open(tmp / name) as src:
                ok = done.returncode == 0 and src.count == 3 and not any(p.name.startswith(".") for p in tmp.iterdir())
                return ok, f"rc {done.returncode}; GDAL opens {name}: {src.driver}, {src.count} bands"
        except rasterio.RasterioIOError as err:
            return False, f"rc {done.returncode}; GDAL cannot open {name}: {err}"
    return case


def complex_input(tmp: Path) -> tuple[bool, str]:
    arr = (np.arange(64 * 64).reshape(64, 64) + 1j).astype(np.complex64)
    arr[10:20, 10:20] = 0
    src = write(tmp / "c.tif", arr, nodata=0)
    return refused(geonp("fill", src, tmp / "o.tif"), tmp / "o.tif")


def one_pixel_at_zero(tmp: Path) -> tuple[bool, str]:
    arr = np.full((64, 64), np.nan, np.float32)
    arr[30, 30] = 0.0
    done = geonp("-q", "fill", write(tmp / "z.tif", arr, nodata=float("nan")), tmp / "o.tif")
    with rasterio.open(tmp / "o_std.tif") as s:
        std = s.read(1)
    low = float(np.nanmin(std[std > 0])) if (std > 0).any() else 0.0
    return done.returncode == 0 and low > 1.0, f"rc {done.returncode}; smallest std of a filled pixel {low:.3g}"


def zero_calibration_factors(tmp: Path) -> tuple[bool, str]:
    import geonp as pkg

    model = tmp / "model"
    shutil.copytree(Path(pkg.__file__).parent / "pretrained" / "default", model)
    config = json.loads((model / "config.json").read_text())
    bins = config["calibration"]["distance_bins"]
    bins["factors"] = [0.0] * len(bins["factors"])
    (model / "config.json").write_text(json.dumps(config))
    return refused(geonp("fill", SAMPLE, tmp / "o.tif", "--model", model), tmp / "o.tif")


def refused_option(*extra: object, output: str = "o.tif") -> Callable[[Path], tuple[bool, str]]:
    def case(tmp: Path) -> tuple[bool, str]:
        return refused(geonp("fill", SAMPLE, tmp / output, *extra), tmp / output, tmp / "o.tif")
    return case


def quiet_prints_nothing(tmp: Path) -> tuple[bool, str]:
    done = geonp("-q", "fill", SAMPLE, tmp / "o.tif")
    said = (done.stdout + done.stderr).strip()
    return done.returncode == 0 and not said, f"rc {done.returncode}; printed {len(said)} characters"


def search_radius_counts(tmp: Path) -> tuple[bool, str]:
    with rasterio.open(CLEAN) as src:
        arr, profile = src.read(), src.profile
    arr[:, 60:200, 60:200] = 0
    src_path = write(tmp / "hole.tif", arr, nodata=0, crs=profile["crs"], transform=profile["transform"])
    done = geonp("fill", src_path, tmp / "o.tif", "--search-radius", "5")
    with rasterio.open(tmp / "o.tif") as out:
        left = int((out.read() == 0).sum())
        tag = int(out.tags().get("GEONP_NO_CONTEXT_PIXELS", -1))
    ok = done.returncode == 0 and left == tag > 0 and "search-radius" in done.stderr
    return ok, f"rc {done.returncode}; {left} left nodata, tagged {tag}: {first_line(done.stderr)}"


def api(call: Callable[[], object]) -> Callable[[Path], tuple[bool, str]]:
    def case(tmp: Path) -> tuple[bool, str]:
        from geonp.errors import GeonpError

        try:
            call()
        except GeonpError as err:
            return "\n" not in str(err), f"{type(err).__name__}: {str(err)[:120]}"
        except Exception as err:  # noqa: BLE001 - the case reports what a user would see
            return False, f"raw {type(err).__name__}: {str(err)[:120]}"
        return False, "accepted"
    return case


def _uint16_nodata_minus_5() -> object:
    import geonp as pkg

    values = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    return pkg.fill_array(values, values % 7 != 0, nodata=-5)


def _dataset() -> object:
    import xarray as xr

    import geonp as pkg

    return pkg.fill(xr.Dataset({"b": (("y", "x"), np.ones((8, 8)))}))


def alpha_warned_once(tmp: Path) -> tuple[bool, str]:
    with rasterio.open(CLEAN) as src:
        arr, profile = src.read(), src.profile
    arr[:, 40:60, 40:60] = 0
    path = write(tmp / "a.tif", arr, nodata=0, crs=profile["crs"], transform=profile["transform"],
                 photometric="RGB", alpha="UNSPECIFIED")
    with rasterio.open(path, "r+") as dst:
        dst.colorinterp = [rasterio.enums.ColorInterp.red, rasterio.enums.ColorInterp.green,
                           rasterio.enums.ColorInterp.alpha]
    done = geonp("fill", path, tmp / "o.tif")
    n = done.stderr.count("tagged as alpha")
    return done.returncode == 0 and n == 1, f"rc {done.returncode}; the alpha warning printed {n} time(s)"


def batch_rerun_with_other_options(tmp: Path) -> tuple[bool, str]:
    src, out = tmp / "in", tmp / "out"
    src.mkdir()
    shutil.copy(SAMPLE, src / "a.tif")
    first = geonp("-q", "batch", src, out, "--workers", "1")
    if first.returncode != 0:
        return False, f"first batch failed: {first_line(first.stderr)}"
    before = digest(out / "a.tif") if (out / "a.tif").exists() else ""
    ok, said = refused(geonp("-q", "batch", src, out, "--workers", "1", "--max-distance", "3"))
    return ok and digest(out / "a.tif") == before, said


CASES: dict[str, Callable[[Path], tuple[bool, str]]] = {
    "train twice into one folder": train_twice_into_one_folder,
    "train into the installed package": train_into_the_installed_package,
    "train stopped by SIGTERM": train_stopped_by_sigterm,
    "fill to EHdr (.bil)": multi_file_format("EHdr", "o.bil"),
    "fill to ENVI (.img)": multi_file_format("ENVI", "o.img"),
    "complex64 input": complex_input,
    "one observed pixel at 0.0": one_pixel_at_zero,
    "a model with zero calibration factors": zero_calibration_factors,
    "--quicklook q.tif": refused_option("--quicklook", "q.tif"),
    "a .vrt OUTPUT": refused_option(output="o.vrt"),
    "--date yesterday": refused_option("--date", "yesterday"),
    "--overlap 1000": refused_option("--overlap", "1000"),
    "-q prints nothing": quiet_prints_nothing,
    "--search-radius 5 counts what it leaves": search_radius_counts,
    "fill_array(uint16, nodata=-5)": api(_uint16_nodata_minus_5),
    "geonp.fill(Dataset)": api(_dataset),
    "a data band tagged alpha": alpha_warned_once,
    "batch rerun with other options": batch_rerun_with_other_options,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="run only the cases whose name holds this")
    args = ap.parse_args()
    failed = 0
    for name, case in CASES.items():
        if args.k not in name:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            try:
                ok, said = case(Path(tmp))
            except Exception as err:  # noqa: BLE001 - one broken case must not hide the others
                ok, said = False, f"the case itself failed: {type(err).__name__}: {err}"
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name:<40} {time.perf_counter() - t0:5.1f} s  {said}", flush=True)
    print(f"{failed} case(s) failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
