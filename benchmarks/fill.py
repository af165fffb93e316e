"""``geonp fill`` against GDAL FillNodata on cloud blobs, SLC-off stripes and random dropped pixels.

Each gap kind hides pixels of a crop of the shared Landsat 8 scene (1024² for clouds and stripes,
512² with 90 % of the pixels dropped); ``geonp fill`` runs as a whole process (the command users
run) with ``--queries lattice`` (the default) and ``--queries every`` (every gap pixel predicted by
every overlapping tile), on the CPU and (where present) CUDA, and GDAL FillNodata on the same gaps
in the same run. The script prints seconds, seconds per megapixel of band-gaps, ratios to GDAL
and to ``every``, the peak RSS of the largest process (workers included), RMSE and the 95 %
coverage of the std raster; then geonp's peak memory on larger synthetic rasters (each size in its
own process) to show that it does not grow with the raster.

    python benchmarks/fill.py                      # the comparison + 2048² and 8192² memory runs
    python benchmarks/fill.py --sizes ""           # the comparison only
    python benchmarks/fill.py --kinds cloud --size 512 --sizes ""   # a quick look
    python benchmarks/fill.py --sizes "" --queries lattice --model DIR   # another model, the default queries only
    python benchmarks/fill.py --sizes "" --queries lattice --engine ../old   # and another checkout's geonp

``--engine DIR`` also times the geonp package of another checkout (``git worktree add ../old
COMMIT``) on the same gaps in the same run, each fill run from that folder (``python -m`` puts the
working directory first on the import path: run from this repository, every fill imports it).

``--host-only`` measures what the host costs when the model costs nothing: each case's ``geonp
fill`` process runs twice, through a small wrapper (this script's hidden ``--wrapped-fill``) that
calls the command line in-process, once with the real model and once with every model's forward
(``NeuralProcess.forward``, which ``Predictor`` calls for every batch) replaced by a stand-in of
zero cost (mean 0, std 1 of the shapes the model would give) that logs its calls and the points it
was given. The patch is made before the fill forks its worker processes, so they inherit it; the
run fails if the workers were spawned instead (they would run the real model uncounted).

``--profile`` splits one case's fill (the first kind and query mode, ``--workers 1``, in a
process of its own) into start-up, model, host work and I/O with ``time.perf_counter`` wrappers
around geonp's stages, then lists the host functions that dominate (cProfile of the same fill with
the stand-in model).

    python benchmarks/fill.py --host-only --kinds cloud,stripe --queries lattice
    python benchmarks/fill.py --profile --kinds cloud --size 512 --queries lattice
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import rasterio
from rasterio.windows import Window

SCENE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "landsat8_224078_20200518_b234.tif"


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_children_mb() -> float:
    """The largest peak RSS of any finished child process (the fill's worker processes)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def crop_window(src: Any, size: int) -> Window:
    """The scene's ``size``-px crop used by the benchmarks: its rightmost columns, from row 640.

    The last 20 % of the columns (408) are the default model's held-out test region; the rest of
    a 1024-wide crop overlaps its training and validation columns.
    """
    return Window(src.width - size, min(640, src.height - size), size, size)


def synthetic(path: Path, size: int, coverage: float) -> None:
    """A smooth uint16 single-band raster with cloud gaps, written block by block."""
    from geonp.data.gap_shapes import cloud_mask

    profile = {"driver": "GTiff", "width": size, "height": size, "count": 1, "dtype": "uint16", "nodata": 0, "tiled": True,
                   "blockxsize": 256, "blockysize": 256, "compress": "deflate", "crs": "EPSG:32621",
                   "transform": rasterio.transform.from_origin(500000, 7000000, 30, 30)}
    block = 1024
    with rasterio.open(path, "w", **profile) as dst:
        for r in range(0, size, block):
            for c in range(0, size, block):
                rr, cc = np.mgrid[r : r + block, c : c + block]
                vals = 8000 + 800 * np.sin(rr / 37.0) * np.cos(cc / 53.0) + 300 * np.sin((rr + cc) / 11.0)
                gap = cloud_mask((block, block), coverage=coverage, rng=r * 7 + c)
                vals[gap] = 0
                dst.write(vals.astype("uint16")[None], window=Window(c, r, block, block))


def run_geonp(src: Path, dst: Path, model: str, device: str, workers: int | None) -> dict:
    import torch

    import geonp

    t0 = time.perf_counter()
    report = geonp.fill_raster(src, dst, model=model, overwrite=True, device=device, workers=workers)
    cuda_mb = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0.0
    return {"seconds": time.perf_counter() - t0, "peak_mb": peak_mb(), "worker_peak_mb": peak_children_mb(),
            "cuda_mb": cuda_mb, "gap_pixels": report.gap_pixels, "filled": report.filled_pixels,
            "timings": report.timings, "workers": report.workers}


def child_fill(args: argparse.Namespace, src: Path, dst: Path, device: str) -> dict:
    """One geonp fill in a fresh process, timed from the command line: the whole process's seconds."""
    cmd = [sys.executable, __file__, "--model", args.model, "--device", device, "--one", str(src), str(dst)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - t0
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--coverage", type=float, default=0.3)
    parser.add_argument("--kinds", default=",".join(KINDS), help="gap kinds of the comparison: cloud,stripe,random")
    parser.add_argument("--model", default="default")
    parser.add_argument("--queries", default="lattice,every", help="query modes of geonp (each a whole run)")
    parser.add_argument("--sizes", default="2048,8192", help="synthetic sizes for the memory runs")
    parser.add_argument("--memory-coverage", type=float, default=0.02, help="gap fraction of the memory runs")
    parser.add_argument("--skip-crop", action="store_true", help="only the memory runs")
    parser.add_argument("--devices", default=None, help="comma-separated: cpu,cuda [default: cpu, and cuda if present]")
    parser.add_argument("--workers", type=int, default=None, help="fill worker processes [default: geonp's choice]")
    parser.add_argument("--engine", type=Path, default=None,
                        help="also time the geonp of this checkout (its folder; rows marked with its name)")
    parser.add_argument("--host-only", action="store_true",
                        help="each case with the real model and with a stand-in of zero cost: host seconds, "
                             "model calls and points per call (no GDAL, no memory runs)")
    parser.add_argument("--profile", action="store_true",
                        help="split one case (first kind and query mode, --workers 1) into start-up, model, "
                             "host and I/O seconds; then the host functions that dominate")
    parser.add_argument("--top", type=int, default=15, help="host functions listed by --profile")
    parser.add_argument("--batch-rows", type=int, default=None,
                        help="--host-only and --profile: the fills' row budget per model call [default: "
                             "geonp's by device; 32768 packs as on CUDA]")
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--standin", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cprofile", action="store_true", help=argparse.SUPPRESS)
    if sys.argv[1:2] == ["--wrapped-fill"]:  # child process: `geonp ARGS` in-process, maybe with the stand-in
        wrapped_fill(Path(sys.argv[2]), sys.argv[3:])
        return
    args = parser.parse_args()
    if args.one and args.profile:  # child process: one timed (or cProfiled) fill_raster, print JSON
        print(json.dumps(profiled_fill(args)))
        return
    if args.one:  # child process: one geonp fill, print JSON
        print(json.dumps(run_geonp(Path(args.one[0]), Path(args.one[1]), args.model, args.device, args.workers)))
        return
    import torch

    devices = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"host: {os.cpu_count()} CPU(s); CUDA: "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}; torch {torch.__version__}")
    tmp = Path(tempfile.mkdtemp(prefix="geonp-bench-"))
    if args.host_only or args.profile:
        if args.host_only:
            host_only(args, devices, tmp)
        if args.profile:
            profile(args, devices[0], tmp)
        return
    if not args.skip_crop:
        compare(args, devices, tmp)
    memory_runs(args, devices, tmp)


def memory_runs(args: argparse.Namespace, devices: list[str], tmp: Path) -> None:
    """Peak memory of whole fills of synthetic rasters of growing size, each in its own process."""
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if sizes:
        print(f"\ngeonp peak memory vs raster size (synthetic, 1 band, {args.memory_coverage:.0%} cloud gaps, "
              f"{devices[0]})")
        print(f"{'size':>7}{'Mpx':>8}{'seconds':>9}{'peak MB':>9}{'worker MB':>10}")
        for size in sizes:
            synthetic(tmp / f"s{size}.tif", size, args.memory_coverage)
            r = child_fill(args, tmp / f"s{size}.tif", tmp / f"o{size}.tif", devices[0])
            print(f"{size:>7}{size * size / 1e6:>8.1f}{r['process_seconds']:>9.0f}{r['peak_mb']:>9.0f}"
                  f"{r['worker_peak_mb']:>10.0f}", flush=True)


KINDS = ("cloud", "stripe", "random")


def gap_mask(kind: str, size: int, coverage: float, seed: int) -> np.ndarray:
    """Cloud blobs (with their shadows' shapes), SLC-off-like stripes, or 90 % random dropped pixels."""
    from geonp.data.gap_shapes import cloud_mask
    from geonp.data.gaps import make_mask

    rng = np.random.default_rng(seed)
    if kind == "cloud":
        return cloud_mask((size, size), coverage=coverage, rng=seed)
    if kind == "random":
        return rng.random((size, size)) < 0.9
    return make_mask("stripe", (size, size), coverage=coverage, rng=rng)


def write_crop(path: Path, size: int, gap: np.ndarray) -> np.ndarray:
    """The scene's crop with ``gap`` set to nodata 0; returns the truth."""
    with rasterio.open(SCENE) as src:
        win = crop_window(src, size)
        arr = src.read(window=win)
        profile = src.profile | {"width": size, "height": size, "transform": src.window_transform(win), "nodata": 0}
    cloudy = arr.copy()
    cloudy[:, gap] = 0
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(cloudy)
    return arr


def timed(cmd: list[str], engine: Path | None = None) -> tuple[float, float]:
    """Run a command; its wall seconds and the peak RSS (MB) of its largest process (workers included).

    ``engine``: run it from that checkout's folder, with the checkout first on ``PYTHONPATH``.
    """
    code = ("import json,resource,subprocess,sys,time; t=time.perf_counter(); subprocess.run(sys.argv[1:], check=True, "
            "capture_output=True); print(json.dumps([time.perf_counter()-t, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024]))")
    env = None if engine is None else os.environ | {"PYTHONPATH": str(engine.resolve())}
    out = subprocess.run([sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True,
                         cwd=engine, env=env).stdout
    seconds, mb = json.loads(out)
    return seconds, mb


def crop_case(kind: str, args: argparse.Namespace, tmp: Path) -> tuple[np.ndarray, np.ndarray, float]:
    """A crop of the scene under ``kind`` gaps, written to ``tmp/KIND.tif``: gaps, truth, Mpx of band-gaps."""
    size = args.size if kind != "random" else min(args.size, 512)
    gap = gap_mask(kind, size, args.coverage, seed=1)
    truth = write_crop(tmp / f"{kind}.tif", size, gap)
    gap &= (truth > 0).all(0)
    return gap, truth, gap.sum() * truth.shape[0] / 1e6


def compare(args: argparse.Namespace, devices: list[str], tmp: Path) -> None:
    """``geonp fill`` (lattice and every-pixel queries) and GDAL FillNodata on the same hidden pixels."""
    geonp_cmd = [sys.executable, "-m", "geonp_cli", "-q", "fill"]
    print(f"whole processes on crops of {SCENE.name} (rightmost columns, from row 640; its last 408 columns "
          f"were held out from training); GDAL FillNodata on the same gaps; {args.model} model")
    print(f"{'gaps':<8}{'method':<30}{'s':>7}{'s/Mpx':>8}{'÷GDAL':>7}{'÷every':>7}{'peak MB':>9}{'RMSE':>8}"
          f"{'÷GDAL':>7}{'cov95':>7}")
    for kind in args.kinds.split(","):
        gap, truth, mpx = crop_case(kind, args, tmp)
        gdal_s, gdal_mb = timed([sys.executable, "-c", _GDAL, str(tmp / f"{kind}.tif"), str(tmp / "gdal.npy")])
        gdal = np.load(tmp / "gdal.npy").astype(float)
        rmse_gdal = float(np.sqrt(((gdal[:, gap] - truth[:, gap]) ** 2).mean()))
        rows = {}
        for engine in [None] + ([args.engine] if args.engine else []):
            tag = "" if engine is None else f" @{engine.resolve().name}"
            for device in devices:
                for queries in args.queries.split(","):
                    out = tmp / f"{kind}_{queries}_{device}{tag.strip(' @')}.tif"
                    seconds, mb = timed(geonp_cmd + [str(tmp / f"{kind}.tif"), str(out), "--model", args.model,
                                                     "--queries", queries, "--device", device, "--overwrite"]
                                        + (["--workers", str(args.workers)] if args.workers else []), engine)
                    with rasterio.open(out) as f, rasterio.open(str(out)[:-4] + "_std.tif") as g:
                        pred, std = f.read().astype(float), g.read().astype(float)
                    err = pred[:, gap] - truth[:, gap]
                    rows[(device, queries, tag)] = (seconds, mb, float(np.sqrt((err**2).mean())),
                                                    float((np.abs(err) <= 1.96 * std[:, gap]).mean()))
        print(f"{kind:<8}{'GDAL FillNodata':<30}{gdal_s:7.1f}{gdal_s / mpx:8.2f}{1:7.0f}{'':>7}{gdal_mb:9.0f}"
              f"{rmse_gdal:8.1f}{1:7.3f}{'':>7}   ({mpx:.2f} Mpx of band-gaps, {gap.shape[1]}x{gap.shape[0]})")
        for (device, queries, tag), (seconds, mb, rmse, cov) in rows.items():
            every = rows.get((device, "every", tag), (np.nan,))[0]
            print(f"{kind:<8}{f'geonp {queries} {device}{tag}':<30}{seconds:7.1f}{seconds / mpx:8.1f}{seconds / gdal_s:7.0f}"
                  f"{seconds / every:7.2f}{mb:9.0f}{rmse:8.1f}{rmse / rmse_gdal:7.3f}{cov:7.3f}", flush=True)


# --- the model's stand-in (--host-only, --profile) ---

#: Environment variable naming the folder the stand-in logs its calls in (a file per process).
CALLS_ENV = "GEONP_BENCH_CALLS"
_CALL_LOG: dict[int, int] = {}  # pid -> its log's descriptor (a forked worker opens its own)


def standin_forward(self: Any, xc: Any, yc: Any, xt: Any, context_valid: Any = None, *,
                    query_chunk: int | None = None, **options: Any) -> tuple[Any, Any]:
    """``NeuralProcess.forward`` at zero cost: mean 0, std 1, ``[B, Nt, dim_y]``; logs the call's sizes.

    A line per call: tasks (B), query rows per task (Nt, padded), context rows per task (Nc,
    padded), valid context points of the call.
    """
    pid = os.getpid()
    fd = _CALL_LOG.get(pid)
    if fd is None:
        fd = _CALL_LOG[pid] = os.open(Path(os.environ[CALLS_ENV], f"{pid}.calls"),
                                      os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    b, nt, nc = xt.shape[0], xt.shape[1], xc.shape[1]
    valid = b * nc if context_valid is None else int(context_valid.sum())
    os.write(fd, f"{b} {nt} {nc} {valid}\n".encode())
    shape = (b, nt, self.dim_y)
    return xt.new_zeros(shape), xt.new_ones(shape)


def install_standin(calls: Path) -> None:
    """Every model family's forward replaced by :func:`standin_forward`, logging into ``calls``.

    ``Predictor._run_batch`` calls ``module(...)``, which looks ``forward`` up on the class at each
    call: models loaded before or after, and workers forked after, all take the stand-in.
    """
    import geonp.models  # noqa: F401  (every family imported, so every own forward is found)
    from geonp.models.base import NeuralProcess

    calls.mkdir(parents=True, exist_ok=True)
    os.environ[CALLS_ENV] = str(calls)
    todo: list[type] = [NeuralProcess]
    while todo:
        cls = todo.pop()
        if cls is NeuralProcess or "forward" in vars(cls):
            cls.forward = standin_forward  # type: ignore[method-assign]
        todo.extend(cls.__subclasses__())


def read_calls(calls: Path) -> dict[str, float]:
    """The stand-in's log: calls, tasks, query rows, context rows, valid context points, processes."""
    rows = [np.loadtxt(f, ndmin=2) for f in calls.glob("*.calls") if f.stat().st_size]
    a = np.concatenate(rows) if rows else np.zeros((0, 4))
    return {"calls": len(a), "tasks": float(a[:, 0].sum()), "query_rows": float((a[:, 0] * a[:, 1]).sum()),
            "context_rows": float((a[:, 0] * a[:, 2]).sum()), "context_points": float(a[:, 3].sum()),
            "processes": len(rows)}


def wrapped_fill(stats: Path, argv: list[str]) -> None:
    """``geonp ARGV[1:]`` in this process, with the stand-in where ``ARGV[0]`` is ``standin``.

    Writes ``times.json`` (seconds of imports and of the command) and ``start_method`` (how the
    fill's worker processes started, where it started any) into ``stats``.
    """
    t0 = time.perf_counter()
    from geonp.filling import engine

    mode, argv = argv[0], argv[1:]
    if mode == "standin":
        install_standin(stats)
    method = engine.worker_start_method

    def recorded(device: Any = "cpu") -> str:
        started = method(device)
        (stats / "start_method").write_text(started)
        return started

    engine.worker_start_method = recorded  # run_blocks looks it up at each fill
    from geonp_cli.main import cli

    t1 = time.perf_counter()
    try:
        cli(argv)
    except SystemExit as exc:  # click ends the command with sys.exit
        if exc.code:
            raise
    (stats / "times.json").write_text(json.dumps({"imports": t1 - t0, "fill": time.perf_counter() - t1}))


def run_wrapped(geonp_args: list[str], stats: Path, standin: bool) -> dict[str, Any]:
    """One ``geonp`` process through :func:`wrapped_fill`: its wall seconds, times and the stand-in's log."""
    stats.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--wrapped-fill", str(stats), "standin" if standin else "real", *geonp_args]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    out: dict[str, Any] = {"process": time.perf_counter() - t0, **json.loads((stats / "times.json").read_text())}
    method = stats / "start_method"
    out["start_method"] = method.read_text() if method.exists() else "in-process"
    if standin:
        if out["start_method"] == "spawn":
            raise SystemExit("the fill spawned its workers: they ran the real model, uncounted")
        out |= read_calls(stats)
    return out


def host_only(args: argparse.Namespace, devices: list[str], tmp: Path) -> None:
    """Each case's ``geonp fill`` with the real model and with the stand-in, in the same run."""
    print(f"whole `geonp fill` processes on crops of {SCENE.name}, {args.model} model: the real model, then a "
          "stand-in of zero cost in its place (host = the stand-in's fill)")
    print(f"{'gaps':<8}{'queries':<9}{'dev':<5}{'Mpx':>6}{'procs':>6}{'real s':>8}{'host s':>8}{'host s/Mpx':>11}"
          f"{'fill-only':>10}{'calls':>7}{'calls/Mpx':>10}{'tasks/call':>11}{'q rows/call':>12}"
          f"{'ctx rows/call':>14}{'ctx pts/call':>13}{'host÷real':>10}")
    started = set()
    for kind in args.kinds.split(","):
        _, _, mpx = crop_case(kind, args, tmp)
        for device in devices:
            for queries in args.queries.split(","):
                name = f"{kind}_{queries}_{device}"
                common = ["-q", "fill", str(tmp / f"{kind}.tif"), str(tmp / f"{name}.tif"), "--model", args.model,
                          "--queries", queries, "--device", device, "--overwrite"]
                common += ["--workers", str(args.workers)] if args.workers else []
                common += ["--batch-rows", str(args.batch_rows)] if args.batch_rows else []
                real = run_wrapped(common, tmp / f"{name}_real", standin=False)
                host = run_wrapped(common, tmp / f"{name}_host", standin=True)
                started |= {real["start_method"], host["start_method"]}
                calls = max(host["calls"], 1)
                print(f"{kind:<8}{queries:<9}{device:<5}{mpx:6.2f}{host['processes']:6d}{real['process']:8.1f}"
                      f"{host['process']:8.1f}{host['process'] / mpx:11.2f}{host['fill'] / mpx:10.2f}"
                      f"{host['calls']:7d}{host['calls'] / mpx:10.0f}{host['tasks'] / calls:11.1f}"
                      f"{host['query_rows'] / calls:12.0f}{host['context_rows'] / calls:14.0f}"
                      f"{host['context_points'] / calls:13.0f}{host['process'] / real['process']:10.3f}",
                      flush=True)
    print("host s: the whole process with the stand-in (interpreter, imports, model load, survey, tasks, blend, "
          "I/O); fill-only: without the interpreter's start and imports; rows padded as the model sees them; "
          f"workers: {', '.join(sorted(started))}")


# --- --profile: one case split into start-up, model, host and I/O ---

def profiled_fill(args: argparse.Namespace) -> dict[str, Any]:
    """One ``fill_raster`` (``--workers 1``, in this process) with its stages timed, maybe cProfiled."""
    t0 = time.perf_counter()
    import functools

    import torch  # noqa: F401

    import geonp
    from geonp.filling import engine, predict, raster, survey
    from geonp.models.base import NeuralProcess

    imports = time.perf_counter() - t0
    calls = Path(args.one[1] + ".calls")
    if args.standin:
        install_standin(calls)
    spent: dict[str, float] = {}

    def wrap(owner: Any, name: str, key: str) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def timed_stage(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                spent[key] = spent.get(key, 0.0) + time.perf_counter() - t

        setattr(owner, name, timed_stage)

    wrap(NeuralProcess, "forward", "model")  # the stand-in's, where it is in place
    wrap(predict, "block_tasks", "tasks")  # Predictor.predict's task building
    wrap(engine, "fill_block", "block")  # a block's whole fill (tasks, model, blend, calibration)
    wrap(engine.BlockRunner, "read", "read")  # a block's read with its halo
    wrap(survey, "count_gaps", "survey")  # the gap count before any block (reads the raster)
    wrap(survey, "sample_for_stats", "sample")  # the normaliser's sample (where fitted on the input)
    wrap(raster, "load_for_fill", "load")  # the model's load
    prof = None
    if args.cprofile:
        import cProfile

        prof = cProfile.Profile()
    t1 = time.perf_counter()
    if prof is not None:
        prof.enable()
    report = geonp.fill_raster(args.one[0], args.one[1], model=args.model, overwrite=True, device=args.device,
                               workers=1, queries=args.queries.split(",")[0], batch_rows=args.batch_rows)
    if prof is not None:
        prof.disable()
    out: dict[str, Any] = {"imports": imports, "fill": time.perf_counter() - t1, "spent": spent,
                           "timings": report.timings, "workers": report.workers}
    if args.standin:
        out["calls"] = read_calls(calls)
    if prof is not None:
        out["top"] = top_functions(prof, args.top)
    return out


def top_functions(prof: Any, n: int) -> dict[str, list[tuple[float, float, int, str]]]:
    """The ``n`` functions of most own time, and the ``n`` geonp functions of most cumulative time."""
    import pstats

    rows = []
    for (file, line, func), (_, ncalls, tt, ct, _) in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        where = file.split("site-packages/")[-1].split("/work/main/")[-1]
        rows.append((tt, ct, ncalls, f"{where}:{line}({func})" if line else func))
    own = sorted(rows, reverse=True)[:n]
    ours = sorted((r for r in rows if r[3].startswith("geonp/")), key=lambda r: -r[1])[:n]
    return {"own": own, "cumulative": ours}


def profile(args: argparse.Namespace, device: str, tmp: Path) -> None:
    """One case's fill split into start-up, model, host and I/O seconds; the host functions that dominate."""
    kind, queries = args.kinds.split(",")[0], args.queries.split(",")[0]
    size = args.size if kind != "random" else min(args.size, 512)
    gap = gap_mask(kind, size, args.coverage, seed=1)
    truth = write_crop(tmp / f"{kind}.tif", size, gap)
    gap &= (truth > 0).all(0)
    mpx = gap.sum() * truth.shape[0] / 1e6
    runs = {}
    for name, extra in (("real", []), ("standin", ["--standin"]), ("cprofile", ["--standin", "--cprofile"])):
        cmd = [sys.executable, __file__, "--profile", "--one", str(tmp / f"{kind}.tif"), str(tmp / f"p_{name}.tif"),
               "--model", args.model, "--device", device, "--queries", queries, "--top", str(args.top), *extra]
        cmd += ["--batch-rows", str(args.batch_rows)] if args.batch_rows else []
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        runs[name] = json.loads(out.strip().splitlines()[-1]) | {"process": time.perf_counter() - t0}
    print(f"\nprofile: {kind} {size}x{size}, {mpx:.2f} Mpx of band-gaps, --queries {queries}, {device}, one "
          "process (--workers 1), time.perf_counter around geonp's stages")
    print(f"{'stage':<44}{'kind':<10}{'real s':>8}{'share':>7}{'stand-in s':>11}{'share':>7}")
    table = {name: profile_rows(r) for name, r in runs.items()}
    for (stage, what, s), (_, _, h) in zip(table["real"], table["standin"], strict=True):
        print(f"{stage:<44}{what:<10}{s:8.2f}{s / runs['real']['process']:7.1%}{h:11.2f}"
              f"{h / runs['standin']['process']:7.1%}")
    for what in ("start-up", "model", "host", "I/O"):
        s = sum(r[2] for r in table["real"] if r[1] == what)
        h = sum(r[2] for r in table["standin"] if r[1] == what)
        print(f"{'  all ' + what:<44}{'':<10}{s:8.2f}{s / runs['real']['process']:7.1%}{h:11.2f}"
              f"{h / runs['standin']['process']:7.1%}")
    print(f"{'process (wall)':<44}{'':<10}{runs['real']['process']:8.2f}{'':>7}{runs['standin']['process']:11.2f}")
    c = runs["standin"]["calls"]
    print(f"model calls {c['calls']} ({c['calls'] / mpx:.0f} per Mpx of band-gaps), {c['tasks'] / max(c['calls'], 1):.1f} "
          f"tasks, {c['query_rows'] / max(c['calls'], 1):.0f} query rows, {c['context_rows'] / max(c['calls'], 1):.0f} "
          "context rows per call (padded)")
    top = runs["cprofile"]["top"]
    print(f"\ncProfile of the stand-in's fill (in-process part {runs['cprofile']['fill']:.1f} s under the profiler, "
          f"{runs['standin']['fill']:.1f} s without): functions of most own time")
    print(f"{'own s':>7}{'cum s':>7}{'calls':>9}  function")
    for tt, ct, nc, where in top["own"]:
        print(f"{tt:7.2f}{ct:7.2f}{nc:9d}  {where}")
    print("geonp functions of most cumulative time")
    print(f"{'own s':>7}{'cum s':>7}{'calls':>9}  function")
    for tt, ct, nc, where in top["cumulative"]:
        print(f"{tt:7.2f}{ct:7.2f}{nc:9d}  {where}")


def profile_rows(r: dict[str, Any]) -> list[tuple[str, str, float]]:
    """``(stage, kind, seconds)`` of one :func:`profiled_fill` run; they add up to its process's wall time."""
    sp, tm = r["spent"], r["timings"]
    get = sp.get
    model = get("model", 0.0)
    batch = tm.get("model", 0.0) - model  # Predictor's model stage less the forward: collate, to(device)
    blend = tm.get("blend", 0.0)
    block_other = get("block", 0.0) - get("tasks", 0.0) - tm.get("model", 0.0) - blend
    write = tm.get("write", 0.0) + tm.get("cast", 0.0)
    survey = get("survey", 0.0) + get("sample", 0.0)
    rest = r["fill"] - get("load", 0.0) - survey - get("read", 0.0) - get("block", 0.0) - write
    return [
        ("interpreter start, script imports, exit", "start-up", r["process"] - r["imports"] - r["fill"]),
        ("import torch, geonp", "start-up", r["imports"]),
        ("model load (load_for_fill)", "start-up", get("load", 0.0)),
        ("model forward (NeuralProcess.forward)", "model", model),
        ("task building (block_tasks)", "host", get("tasks", 0.0)),
        ("batch collate, to device", "host", batch),
        ("blend (index_add, normalise)", "host", blend),
        ("rest of fill_block (targets, calibration..)", "host", block_other),
        ("rest of fill_raster (checks, plan, ..)", "host", rest),
        ("block reads with halo (BlockRunner.read)", "I/O", get("read", 0.0)),
        ("survey: gap count + stats sample", "I/O", survey),
        ("cast + write + atomic close", "I/O", write),
    ]


_GDAL = (
    "import sys,numpy as np,rasterio; from rasterio.fill import fillnodata\n"
    "a=rasterio.open(sys.argv[1]).read()\n"
    "np.save(sys.argv[2], np.stack([fillnodata(b.astype('float32'), mask=(b>0).astype('uint8'), "
    "max_search_distance=2000, smoothing_iterations=0) for b in a]))"
)


if __name__ == "__main__":
    main()
