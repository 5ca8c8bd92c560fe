"""How the benchmarks measure, said once (bench.verdict says how they judge):

    r = run_timed(cmd, cwd=root, log=root / "clean.log")  # a process: wall, CPU, peak RSS, tree PSS
    kb = status_kb("VmHWM"); reset_peak()                   # this process's peak RSS, and its reset
    print(top(profile(fn)))                                 # a cProfile's top functions by own time
    med_range(xs, ".2f", unit=" s", width=6)                # '  1.23 s (1.10 - 1.40)': median (min - max)
    data_stages(params, layout)                             # real shards, in this process, timed

Only the standard library at import (psutil when a process is timed), so the workers a benchmark
starts (torchrun ranks, probes in a fresh process) import it cheaply.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import subprocess
import threading
import time
from pathlib import Path

MiB = 2**20


def run_timed(cmd: list[str], cwd: Path, log: Path, env: dict | None = None) -> dict:
    """Run `cmd` (stdout and stderr to `log`) and time it as a whole: wall seconds, CPU seconds
    (user + sys, children included), peak RSS in MiB (wait4: the largest process), peak PSS in
    MiB (the sum over its process tree, sampled at 10 Hz: a stage may run its parts in worker
    processes) and the exit code. The caller decides what a non-zero exit means. Call it from a
    small process: until exec the child is this one, whose resident pages count in its peak RSS."""
    import psutil

    tree, done = [0], threading.Event()

    def pss(q: psutil.Process) -> int:
        try:
            return q.memory_full_info().pss
        except psutil.Error:  # gone meanwhile
            return 0

    def sample() -> None:
        while not done.wait(0.1):
            try:
                tree[0] = max(tree[0], sum(map(pss, [top := psutil.Process(p.pid), *top.children(recursive=True)])))
            except psutil.Error:
                return

    with open(log, "wb") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=out, env=env)
        (th := threading.Thread(target=sample, daemon=True)).start()
        _, status, ru = os.wait4(p.pid, 0)
        wall, p.returncode = time.perf_counter() - t0, os.waitstatus_to_exitcode(status)
        done.set()
        th.join()
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": ru.ru_maxrss * 1024 / MiB,  # KiB on Linux
            "pss": tree[0] / MiB, "returncode": p.returncode}


def status_kb(field: str) -> int:
    """A field of /proc/self/status in kB: VmRSS (resident now), VmHWM (the peak since the start
    or the last reset_peak())."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak() -> None:
    """VmHWM := VmRSS from here (Linux's clear_refs), so the next status_kb("VmHWM") is the peak
    of what runs after this call."""
    Path("/proc/self/clear_refs").write_text("5")


def profile(fn) -> pstats.Stats:
    """fn() under cProfile."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    return pstats.Stats(prof)


def top(st: pstats.Stats, n: int = 10, indent: str = "    ") -> str:
    """The `n` functions with the most own time, pstats' table without its header lines."""
    s = io.StringIO()
    st.stream = s
    st.sort_stats("tottime").print_stats(n)
    return "\n".join(indent + ln for ln in s.getvalue().splitlines()[4:] if ln.strip())


def med_range(xs: list[float], f: str = ".2f", scale: float = 1.0, unit: str = "", width: int = 0,
              gap: str = " ") -> str:
    """The median of `xs` (times `scale`, in format `f`, right-aligned in `width`), `unit`, then
    `gap` and the min - max: how every table row shows its repeats."""
    m, lo, hi = (format(v * scale, f) for v in (statistics.median(xs), min(xs), max(xs)))
    return f"{m:>{width}}{unit}{gap}({lo} - {hi})"


def data_stages(params, layout) -> None:
    """Real shards of `params` under `layout`: the engine's data stages (download -> clean ->
    tokenize -> shard) run in this process, and one line says how long they took."""
    from shardline.data import download, shard, tokenize
    from shardline.data.clean.stage import run as clean

    t0 = time.perf_counter()
    for stage in (download, clean, tokenize, shard):
        stage.run(params, layout, log=lambda _: None)
    print(f"built shards in {time.perf_counter() - t0:.1f}s (download, clean, tokenize, shard) at {layout.shards}")
