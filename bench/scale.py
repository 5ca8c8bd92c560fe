"""Past one machine, measured: the tokenize stage on Dask workers, the loader streaming from S3.

    python -m bench.scale [--repeats 3] [--skip-stream]

(1) Tokenize on Dask. One project (the embedded python-stdlib source five times, ~55 MB of
    code with dedup off, plus ../shared/corpora when present; clean.part_mb 4, so ~12 parts of
    about a second of encoding each) is downloaded, cleaned and tokenized once (the tokenizer
    is trained then and reused). Two Dask clusters run on
    127.0.0.1, started as a user would (`dask scheduler`, `dask worker`): one worker, and two
    workers; every worker is pinned to its own core with taskset, as a worker on its own node
    would be. After one untimed run per cluster (its workers import the project), each repeat
    deletes data/tokens and runs `shardline stage tokenize` with parts.address pointing at
    one cluster, then the other (interleaved, so noise hits both);
    the time is the stage's own "done in" figure (Prefect flow included, Python start-up not),
    and its parts phase (the per-part work the runner spreads; the rest, ~2-3 s, is the flow,
    the worker check, the tokenizer and encoder set-up and the indexes, on the driver). The
    token parts must be byte-identical every time. Target: 2 workers >= 1.6x one worker.
(2) Loader streaming (bench/stream.py): tokens/s reading shards from a local S3 server
    (moto) with the cache cold and warm, against local disk.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from flows.server import OFFLINE, local_server
from bench.verdict import Targets
from harness.dask_cluster import DaskCluster

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CORPORA = REPO.parent / "shared" / "corpora"
COPIES = 5


def project(root: Path) -> Path:
    root.mkdir(parents=True)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    # COPIES copies of the stdlib source (dedup off, so all are kept): ~55 MB of code, in parts of
    # ~4 MB (about a second of encoding each), so the per-task overhead is a small fraction.
    params["sources"] = [{"name": f"code{i}", "uri": "builtin://python-stdlib", "format": "txt", "txt_unit": "file"}
                         for i in range(COPIES)]
    if CORPORA.exists():
        params["sources"].append({"name": "prose", "uri": str(CORPORA / "*.jsonl"), "format": "jsonl"})
    params["mix"] = {s["name"]: 1.0 for s in params["sources"]}
    params["clean"].update(part_mb=4, dedup=False)
    params["tokenizer"]["train_max_mb"] = 8  # the tokenizer is trained once, outside the timing
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def set_parts(root: Path, **parts) -> None:
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["parts"] = {**params["parts"], **parts}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def stage(root: Path, name: str, env: dict) -> float:
    return stage_phases(root, name, env)[0]


def _clock(line: str) -> float:
    h, m, sec = line.split(" | ")[0].split(":")
    return int(h) * 3600 + int(m) * 60 + float(sec)


def stage_phases(root: Path, name: str, env: dict) -> tuple[float, float | None]:
    """(the stage's own "done in" time, the parts phase: from the encoder's log line to the
    parts' summary line, i.e. the per-part work the runner spreads; None if not logged)."""
    r = subprocess.run([str(BIN / "shardline"), "stage", name], cwd=root, env={**env, "PREFECT_LOGGING_LEVEL": "INFO"},
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"shardline stage {name} failed:\n{r.stdout}\n{r.stderr}")
    done = float(re.findall(rf"^{name}: done in ([\d.]+)s", r.stderr, re.M)[-1])
    start = next((ln for ln in r.stderr.splitlines() if f"{name}: encoder " in ln and " | " in ln), None)
    end = next((ln for ln in r.stderr.splitlines() if " already done, " in ln and " | " in ln), None)
    return done, (_clock(end) - _clock(start)) if start and end else None


def tokens_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((root / "data/tokens").rglob("*.bin")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):6.2f} s  ({min(xs):.2f} - {max(xs):.2f})"


def tokenize_on_dask(repeats: int, tmp: Path, env: dict) -> dict:
    root = project(tmp / "proj")
    for name in ("download", "clean", "tokenize"):
        stage(root, name, env)
    reference = tokens_digest(root)
    tokens = sum(json.loads(p.read_text())["tokens"] for p in (root / "data/tokens").glob("*/index.json"))
    parts = len(list((root / "data/tokens").rglob("*.bin")))
    n_cores = os.cpu_count() or 1
    clusters = {n: DaskCluster(tmp, env=env, cores=cores, name=f"dask-{n}")
                for n, cores in ((1, [0]), (2, [0, 1 % n_cores]))}
    times: dict[int, list[float]] = {1: [], 2: []}
    phase: dict[int, list[float]] = {1: [], 2: []}
    try:
        for n, cluster in clusters.items():  # untimed: workers import the project on their first parts
            shutil.rmtree(root / "data/tokens")
            set_parts(root, runner="dask", address=cluster.address)
            stage(root, "tokenize", env)
        for _ in range(repeats):
            for n, cluster in clusters.items():
                shutil.rmtree(root / "data/tokens")
                set_parts(root, runner="dask", address=cluster.address)
                done, parts_s = stage_phases(root, "tokenize", env)
                times[n].append(done)
                phase[n].append(parts_s)
                if tokens_digest(root) != reference:
                    raise SystemExit(f"tokens on {n} Dask worker(s) differ from the thread runner's")
        overhead = task_overhead(clusters[1].address)
    finally:
        for c in clusters.values():
            c.close()
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"\ntokenize stage on Dask ({tokens / 1e6:.1f} M tokens, {parts} parts, {repeats} repeats, "
          f"token parts byte-identical to the thread runner's every time):")
    print(f"  1 worker   {fmt(times[1])}   {tokens / one / 1e6:.2f} Mtok/s")
    print(f"  2 workers  {fmt(times[2])}   {tokens / two / 1e6:.2f} Mtok/s")
    p1, p2 = statistics.median(phase[1]), statistics.median(phase[2])
    pairs = [a / b for a, b in zip(times[1], times[2])]  # same repeat: the two runs back to back
    print(f"  speed-up 2 vs 1 of the medians: {one / two:.2f}x (info)")
    Targets().check("  speed-up 2 vs 1, worst repeat", min(pairs), ">=", SPEEDUP_TARGET, "x", repeats=pairs)
    print(f"  parts phase: 1 worker {fmt(phase[1])}, 2 workers {fmt(phase[2])}: {p1 / p2:.2f}x")
    print(f"  Prefect task-run overhead on Dask: {overhead * 1e3:.0f} ms per task (no-op tasks, 1 worker)")
    return {"tokens": tokens, "parts": parts, "1 worker s": one, "2 workers s": two, "speedup": min(pairs),
            "parts phase 1 worker s": p1, "parts phase 2 workers s": p2, "parts phase speedup": p1 / p2,
            "task overhead s": overhead}


SPEEDUP_TARGET = 1.6


def task_overhead(address: str, n: int = 40) -> float:
    """Seconds per Prefect task run on the Dask runner, for a task that does nothing
    (posixpath.basename: importable on any worker), median of 3 batches of n."""
    import posixpath

    from prefect import flow

    from shardline.core import config
    from tasks.mappers import part_mapper
    from tasks.runners import task_runner

    params = config.parse(yaml.safe_load((REPO / "params.yaml").read_text()))
    parts = config.Parts(runner="dask", address=address)

    @flow(task_runner=task_runner(parts))
    def noop_parts() -> float:
        mapper = part_mapper(params, "noop")
        mapper(posixpath.basename, ["a/b"])  # connect and warm up
        t0 = time.perf_counter()
        mapper(posixpath.basename, [f"x/{i}" for i in range(n)])
        return (time.perf_counter() - t0) / n

    return statistics.median(noop_parts() for _ in range(3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-stream", action="store_true", help="only the Dask tokenize benchmark")
    args = ap.parse_args()
    env = {**os.environ, **OFFLINE, "PATH": f"{BIN}:{os.environ['PATH']}", "PREFECT_LOGGING_LEVEL": "WARNING"}
    with tempfile.TemporaryDirectory() as tmp, local_server(Path(tmp) / "prefect") as penv:
        os.environ.update(penv)  # the overhead probe runs its flow in this process
        results = {"tokenize on dask": tokenize_on_dask(args.repeats, Path(tmp), {**env, **penv})}
    if not args.skip_stream:
        from bench import stream

        print("\nloader streaming from a local S3 server (moto) vs local disk:")
        results["loader streaming"] = stream.run(repeats=args.repeats)
        stream.report(results["loader streaming"])
    t = results["tokenize on dask"]
    print(f"\nsummary: tokenize stage 2 vs 1 Dask worker {t['speedup']:.2f}x at the worst repeat (parts phase, medians: "
          f"{t['parts phase speedup']:.2f}x)"
          + ("" if args.skip_stream else "; loader from S3 vs local, after the first batch: cold "
             f"{results['loader streaming']['ratio']['steady']['s3 cold']:.2f}x, warm "
             f"{results['loader streaming']['ratio']['steady']['s3 warm']:.2f}x"))


    if t["speedup"] < SPEEDUP_TARGET:
        sys.exit(f"FAIL: tokenize on 2 Dask workers is {t['speedup']:.2f}x 1 worker at the worst repeat "
                 f"(target >= {SPEEDUP_TARGET}x)")


if __name__ == "__main__":
    main()
