"""Past one machine, measured: the clean stage on Dask workers, the loader streaming from S3.

    python -m bench.scale [--repeats 3] [--mib 256] [--skip-stream]

(1) The clean stage on Dask, where the data half's seconds are: bench.data's corpus (--mib of it,
    256 MiB by default) with the FineWeb-like rules on (language, gopher_repetition,
    gopher_quality, c4, fineweb), in parts of 32 MiB (clean.part_mb: so 8 parts of equal size,
    which 2 workers share evenly), downloaded once. Three runners clean it: the engine's own
    local process pool of 2 workers (the default runner), a Dask cluster of one worker and one
    of two workers, started as a user would (`dask scheduler`, `dask worker --nthreads 1`),
    each worker pinned to its own core with taskset, as a worker on its own node would be.
    After one untimed run per runner (workers import the project and load the rules on their
    first part), each repeat deletes data/clean and runs `shardline stage clean` on every
    runner, in an order reversed each repeat. Each run gives the stage's wall ("done in") and
    its parts phase (the engine's "cleaned in"): their difference is the driver's fixed seconds
    (the worker check, planning, the held-out split and dedup, the stats), printed on
    a line of their own, with the same figure for parts of 8 MB (4x the parts): O(1) in the
    number of parts. The clean parts must be byte-identical every time. Targets: 2 Dask workers
    >= 1.7x one at the worst repeat; 2 Dask workers no slower than the local pool (<= 1.05x). The
    parts go to Dask directly (shardline.orchestration.tasks.runners.dask_map), not as Prefect task runs.
(2) Loader streaming (bench/stream.py): tokens/s reading shards from a local S3 server
    (moto) with the cache cold and warm, against local disk.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from shardline.orchestration.flows.server import OFFLINE
from bench.measure import med_range
from bench.verdict import Targets, in_order
from harness.dask_cluster import DaskCluster

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WEB = {"language": {}, "gopher_repetition": {}, "gopher_quality": {}, "c4": {}, "fineweb": {}}
PART_MB = 32
SPEEDUP_TARGET = 1.7


def project(root: Path, mb: float) -> Path:
    """A project whose one source is `mb` MB of bench.data's corpus, the FineWeb-like rules on."""
    from bench import data as bd

    shutil.move(str(bd.project(bd.corpus(mb / 1000, 0)[0], part_mb=PART_MB)), root)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["clean"].update(WEB)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def set_parts(root: Path, **parts) -> None:
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["parts"] = {**params["parts"], **parts}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def stage(root: Path, name: str, env: dict) -> tuple[float, float | None]:
    """(the stage's own "done in" time, the clean stage's parts phase: the engine's "cleaned in")."""
    r = subprocess.run([str(BIN / "shardline"), "stage", name], cwd=root, env={**env, "PREFECT_LOGGING_LEVEL": "INFO"},
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"shardline stage {name} failed:\n{r.stdout}\n{r.stderr}")
    done = float(re.findall(rf"{name}: done in ([\d.]+)s", r.stderr)[-1])
    parts = re.findall(r"cleaned in ([\d.]+)s", r.stderr)
    return done, float(parts[-1]) if parts else None


def clean_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((root / "data/clean").rglob("part-*.parquet")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def fmt(xs: list[float]) -> str:
    return med_range(xs, ".2f", unit=" s", width=6, gap="  ")


def clean_on_dask(repeats: int, mb: float, tmp: Path, env: dict) -> dict:
    root = project(tmp / "proj", mb)
    stage(root, "download", env)
    size = sum(f.stat().st_size for f in (root / "data/raw").rglob("*") if f.is_file() and f.name != "manifest.json")
    n_cores = os.cpu_count() or 1
    clusters = {n: DaskCluster(tmp, env=env, cores=cores, name=f"dask-{n}")
                for n, cores in ((1, [0]), (2, [0, 1 % n_cores]))}
    runners = {"local pool of 2": {"runner": "threads", "workers": 2, "address": None},
               "dask, 1 worker": {"runner": "dask", "workers": 0, "address": clusters[1].address},
               "dask, 2 workers": {"runner": "dask", "workers": 0, "address": clusters[2].address}}
    times: dict[str, list[float]] = {k: [] for k in runners}
    fixed: dict[str, list[float]] = {k: [] for k in runners}
    reference = None
    try:
        for parts in runners.values():  # untimed: workers import the project and load the rules
            shutil.rmtree(root / "data/clean", ignore_errors=True)
            set_parts(root, **parts)
            stage(root, "clean", env)
            reference = reference or clean_digest(root)
        for i in range(repeats):
            for name, parts in in_order(runners.items(), i):
                shutil.rmtree(root / "data/clean")
                set_parts(root, **parts)
                done, parts_s = stage(root, "clean", env)
                times[name].append(done)
                fixed[name].append(done - parts_s)
                if clean_digest(root) != reference:
                    raise SystemExit(f"clean parts on {name} differ from the first run's")
        n_parts = len(list((root / "data/clean").rglob("part-*.parquet")))
        many = _fixed_with_parts(root, env, runners["dask, 2 workers"], PART_MB / 4)
    finally:
        for c in clusters.values():
            c.close()
    print(f"\nclean stage, FineWeb-like rules, {size / 1e6:.0f} MB in {n_parts} parts ({repeats} repeats, order "
          "reversed each; clean parts byte-identical every time):")
    for name in runners:
        print(f"  {name:16s} {fmt(times[name])}   {size / 1e6 / statistics.median(times[name]):.2f} MB/s")
    pairs = [a / b for a, b in zip(times["dask, 1 worker"], times["dask, 2 workers"])]
    versus = [a / b for a, b in zip(times["dask, 2 workers"], times["local pool of 2"])]
    targets = Targets()
    targets.check("  speed-up 2 vs 1 Dask worker, worst repeat", min(pairs), ">=", SPEEDUP_TARGET, "x", repeats=pairs)
    targets.check("  2 Dask workers / the local pool of 2, time, worst repeat", max(versus), "<=", 1.05, "x",
                  repeats=versus)
    print(f"  driver's fixed seconds (stage wall - parts phase), {n_parts} parts: "
          + ", ".join(f"{name} {statistics.median(fixed[name]):.2f}" for name in runners)
          + f"; 2 Dask workers, {many['parts']} parts: {many['fixed']:.2f}")
    return {"mb": size / 1e6, "parts": n_parts, "speedup": min(pairs), "versus local": max(versus),
            "fixed": {k: statistics.median(v) for k, v in fixed.items()}, "fixed many parts": many,
            "missed": targets.missed}


def _fixed_with_parts(root: Path, env: dict, parts: dict, part_mb: float) -> dict:
    """The driver's fixed seconds with smaller parts (more of them), on the runner `parts`."""
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["clean"]["part_mb"] = part_mb
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        set_parts(root, **parts)
        shutil.rmtree(root / "data/clean", ignore_errors=True)
        stage(root, "clean", env)  # untimed: the new parts' spans found
        shutil.rmtree(root / "data/clean")
        done, parts_s = stage(root, "clean", env)
        return {"parts": len(list((root / "data/clean").rglob("part-*.parquet"))), "fixed": done - parts_s}
    finally:
        params["clean"]["part_mb"] = PART_MB
        (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mib", type=float, default=256)
    ap.add_argument("--skip-stream", action="store_true", help="only the Dask clean benchmark")
    args = ap.parse_args()
    env = {**os.environ, **OFFLINE, "PATH": f"{BIN}:{os.environ['PATH']}", "PREFECT_LOGGING_LEVEL": "WARNING"}
    with tempfile.TemporaryDirectory() as tmp:
        results = {"clean on dask": clean_on_dask(args.repeats, args.mib * 2**20 / 1e6, Path(tmp), env)}
    if not args.skip_stream:
        from bench import stream

        print("\nloader streaming from a local S3 server (moto) vs local disk:")
        results["loader streaming"] = stream.run(repeats=args.repeats)
        stream.report(results["loader streaming"])
    t = results["clean on dask"]
    print(f"\nsummary: clean stage (FineWeb-like rules, {t['mb']:.0f} MB) 2 vs 1 Dask worker {t['speedup']:.2f}x at the "
          f"worst repeat; 2 Dask workers / local pool {t['versus local']:.2f}x; driver's fixed seconds "
          f"{t['fixed']['dask, 2 workers']:.2f} ({t['parts']} parts), {t['fixed many parts']['fixed']:.2f} "
          f"({t['fixed many parts']['parts']} parts)"
          + ("" if args.skip_stream else "; loader from S3 vs local, after the first batch: cold "
             f"{results['loader streaming']['ratio']['steady']['s3 cold']:.2f}x, warm "
             f"{results['loader streaming']['ratio']['steady']['s3 warm']:.2f}x"))
    if t["missed"]:
        sys.exit("FAIL: " + "; ".join(t["missed"]))


if __name__ == "__main__":
    main()
