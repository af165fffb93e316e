"""How fast ``geonp fill`` (worker processes) and ``geonp batch`` (Dask) stop on SIGTERM and SIGINT.

SIGKILL scenarios show what a main process killed outright leaves: its partial files (the next
run removes them) and, above all, no worker process running on as an orphan.

Writes a synthetic 1024² float32 raster with cloud-shaped gaps (and, for the batch, a folder of
smaller ones), then runs each scenario as a subprocess in its own session: it waits until the
run is writing (a hidden partial file is in the output folder), waits ``--delay`` seconds more,
sends the signal, and measures the seconds until the process exits. Then it lists what is left
in the output folder (hidden partial files included) and the processes the run had started that
still run a second after it exited (by pid, checked against their start time) or that are left in
its session.

    python benchmarks/signals.py                           # every scenario, default model
    python benchmarks/signals.py --scenario fill-SIGTERM --delay 10
    python benchmarks/signals.py --size 2048 --model my_model  # another raster size, another model
    python benchmarks/signals.py --ctrl-c                  # SIGINT to the whole process group

``--ctrl-c`` sends SIGINT to the process group, as a terminal's Ctrl-C does (workers get it
too); without it the signal goes to the main process only, as ``kill -INT PID`` does.
Scenarios that do not exit within ``--timeout`` seconds are killed (SIGKILL) and reported as such.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

#: Seconds to wait, when processes of a run remain a second after it exited, before looking again.
ORPHAN_GRACE = 10.0
SCENARIOS = ("fill-SIGTERM", "fill-SIGINT", "fill-SIGKILL", "batch-SIGTERM", "batch-SIGINT", "batch-SIGKILL")


def write_raster(path: Path, size: int, seed: int) -> None:
    """A smooth float32 field with ~25 % cloud-shaped gaps (nodata -9999) and a real CRS."""
    import rasterio
    from affine import Affine
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    arr = (1000 + 200 * np.sin(xx / 37 + seed) + 150 * np.cos(yy / 23) + 5 * rng.normal(size=(size, size)))
    clouds = ndimage.gaussian_filter(rng.normal(size=(size, size)), size / 40) > 0.012
    arr = arr.astype("float32")
    arr[clouds] = -9999
    with rasterio.open(path, "w", driver="GTiff", width=size, height=size, count=1, dtype="float32",
                       crs="EPSG:32621", nodata=-9999, tiled=True,
                       transform=Affine(30.0, 0.0, 300000.0, 0.0, -30.0, 5000000.0)) as dst:
        dst.write(arr[None])


def descendants(proc: psutil.Process) -> dict[int, float]:
    """Pid -> start time of every process below ``proc`` now."""
    out = {}
    try:
        for child in proc.children(recursive=True):
            try:
                out[child.pid] = child.create_time()
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass
    return out


def _what(p: psutil.Process) -> str:
    """A short name of a process: its command line, cut."""
    try:
        return " ".join(p.cmdline())[-60:]
    except psutil.Error:
        return "?"


def still_running(seen: dict[int, float], session: int) -> list[str]:
    """The processes of ``seen`` (same pid and start time) or of ``session`` that still run."""
    alive = []
    for pid, started in seen.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{pid} {_what(p)} ({p.status()}, {p.cpu_percent(0.2):.0f} % CPU)")
        except psutil.NoSuchProcess:
            pass
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid not in seen and os.getsid(p.pid) == session and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{p.pid} {_what(p)} (in the run's session)")
        except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
            pass
    return alive


def _read(log: Any) -> str:
    log.seek(0)
    text = log.read()
    log.close()
    return text


@dataclass
class Outcome:
    scenario: str
    signal_after: float  # seconds from start to the signal
    seconds: float | None  # from the signal to the exit (None: killed after --timeout)
    code: int | None
    message: str
    tracebacks: int  # Python tracebacks on stderr (workers' KeyboardInterrupts, say)
    leftovers: list[str]
    orphans: list[str]


def run(scenario: str, argv: list[str], out_dir: Path, sig: signal.Signals, *, delay: float, timeout: float,
        ctrl_c: bool) -> Outcome:
    """Start ``geonp ARGV``, signal it ``delay`` s after it starts writing, and see what it leaves."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    t0 = time.monotonic()
    # stderr goes to a file: a pipe would also wait for every process that inherited it
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - read after the run, closed by the caller
    proc = subprocess.Popen([sys.executable, "-m", "geonp_cli", *argv], stdout=subprocess.DEVNULL,
                            stderr=log, text=True, env=env, start_new_session=True)
    main = psutil.Process(proc.pid)
    seen: dict[int, float] = {}
    deadline = t0 + timeout
    while not list(out_dir.rglob(".*geonp-partial*")) and proc.poll() is None and time.monotonic() < deadline:
        seen.update(descendants(main))
        time.sleep(0.05)
    writing_at = time.monotonic()
    while time.monotonic() < writing_at + delay and proc.poll() is None:
        seen.update(descendants(main))
        time.sleep(0.05)
    seen.update(descendants(main))
    if proc.poll() is not None:
        err = _read(log)
        raise SystemExit(f"{scenario}: the run ended (exit {proc.returncode}) before the signal; use a "
                         f"smaller --delay or a larger --size. stderr: {err[-1000:]}")
    t_sig = time.monotonic()
    if ctrl_c and sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
        seconds: float | None = time.monotonic() - t_sig
    except subprocess.TimeoutExpired:
        seconds = None
        proc.kill()
        proc.wait()
    err = _read(log)
    time.sleep(1.0)  # a worker that is being reaped right now is no orphan
    orphans = still_running(seen, proc.pid)
    if orphans:  # a worker still importing when its parent died ends when its set-up runs
        time.sleep(ORPHAN_GRACE)
        late = still_running(seen, proc.pid)
        orphans = [*orphans, f"{len(late)} of them still running {ORPHAN_GRACE + 1:g} s after the exit: {late}"]
    leftovers = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
    lines = err.splitlines()
    message = next((line for line in reversed(lines) if "Interrupted" in line), "(none)")
    for pid, started in seen.items():  # never leave the machine busy after a failed scenario
        try:
            p = psutil.Process(pid)
            if p.create_time() == started:  # the run's process, not a later one with its pid
                p.kill()
        except psutil.NoSuchProcess:
            pass
    return Outcome(scenario, t_sig - t0, seconds, proc.returncode, message, err.count("Traceback"), leftovers,
                   orphans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="default: all")
    parser.add_argument("--size", type=int, default=1024, help="edge of the fill's raster [1024]")
    parser.add_argument("--files", type=int, default=6, help="rasters of the batch [6]")
    parser.add_argument("--batch-size", type=int, default=512, help="edge of the batch's rasters [512]")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (fill and batch) [2]")
    parser.add_argument("--model", default="default", help="model name or directory [default]")
    parser.add_argument("--delay", type=float, default=8.0,
                        help="seconds after the first partial file appears before the signal [8]")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the exit [120]")
    parser.add_argument("--ctrl-c", action="store_true", help="send SIGINT to the process group (as Ctrl-C)")
    args = parser.parse_args()

    outcomes = []
    with tempfile.TemporaryDirectory(prefix="geonp-signals-") as tmp:
        root = Path(tmp)
        scene = root / "scene.tif"
        write_raster(scene, args.size, seed=0)
        scenes = root / "scenes"
        scenes.mkdir()
        for i in range(args.files):
            write_raster(scenes / f"scene{i:02d}.tif", args.batch_size, seed=i + 1)
        for scenario in args.scenario or SCENARIOS:
            kind, name = scenario.split("-")
            out_dir = root / f"out-{scenario}"
            out_dir.mkdir()
            common = ["--model", args.model, "--device", "cpu", "--workers", str(args.workers)]
            if kind == "fill":
                argv = ["-q", "fill", str(scene), str(out_dir / "filled.tif"), *common]
            else:
                argv = ["-q", "batch", str(scenes), str(out_dir), *common, "--dashboard-address", ":0"]
            outcomes.append(run(scenario, argv, out_dir, signal.Signals[f"{name}"], delay=args.delay,
                                timeout=args.timeout, ctrl_c=args.ctrl_c))

    print(f"workers {args.workers}, fill raster {args.size}², batch {args.files} x {args.batch_size}², "
          f"model {args.model}, signal {args.delay:g} s after writing began"
          f"{', SIGINT to the process group' if args.ctrl_c else ''}")
    print(f"{'scenario':15} {'signal at':>9} {'exit after':>10} {'code':>5}  leftovers / orphans / message")
    for o in outcomes:
        took = f"{o.seconds:.2f} s" if o.seconds is not None else f"> {args.timeout:g} s"
        print(f"{o.scenario:15} {o.signal_after:7.1f} s {took:>10} {o.code!s:>5}  "
              f"leftover files: {len(o.leftovers)} {o.leftovers}")
        print(f"{'':44}orphan processes: {len(o.orphans)} {o.orphans}")
        print(f"{'':44}message: {o.message}   (tracebacks on stderr: {o.tracebacks})")


if __name__ == "__main__":
    main()
