"""The default line end to end: `dvc repro` against the Prefect pipeline flow, full and no-op.

    python -m bench.pipeline [--repeats 3] [--train-steps 10]

Each repeat builds the shipped params.yaml (embedded default sources; train.steps lowered to
--train-steps so the entry points' overhead is not drowned by minutes of training) in fresh
temp repos,
interleaving the two entry points so machine noise hits both alike. Prints medians with
min-max, per-stage times parsed from the stage logs, and the pipeline/dvc ratios: the
overhead of running stages as Prefect task runs and recording them with `dvc commit`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.measure import med_range
from shardline.orchestration.flows.server import OFFLINE, local_server

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def fresh_repo(root: Path, train_steps: int) -> Path:
    root.mkdir(parents=True)
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["train"]["steps"] = train_steps
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for cmd in (["git", "init", "-q"], [str(BIN / "dvc"), "init", "-q"],
                [str(BIN / "dvc"), "config", "core.analytics", "false"]):
        subprocess.run(cmd, cwd=root, check=True)
    return root


def timed(cmd: list[str], cwd: Path, env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{cmd} failed:\n{r.stdout}\n{r.stderr}")
    return dt, r.stdout + r.stderr


def fmt(xs: list[float]) -> str:
    return med_range(xs, ".2f", unit=" s", width=7, gap="   ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--train-steps", type=int, default=10)
    args = ap.parse_args()
    env = {**__import__("os").environ, **OFFLINE, "PATH": f"{BIN}:{__import__('os').environ['PATH']}"}
    rows: dict[str, list[float]] = {}
    stages: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, local_server(Path(tmp) / "prefect") as penv:
        penv = {**env, **penv, "PREFECT_LOGGING_LEVEL": "WARNING"}
        for i in range(args.repeats):
            a = fresh_repo(Path(tmp) / f"dvc-{i}", args.train_steps)
            dt, out = timed([str(BIN / "dvc"), "repro"], a, env)
            rows.setdefault("dvc repro (full)", []).append(dt)
            for name, secs in re.findall(r"^(\w+): done in ([\d.]+)s", out, re.M):
                stages.setdefault(name, []).append(float(secs))
            rows.setdefault("dvc repro (no-op)", []).append(timed([str(BIN / "dvc"), "repro"], a, env)[0])
            b = fresh_repo(Path(tmp) / f"prefect-{i}", args.train_steps)
            rows.setdefault("pipeline flow (full)", []).append(timed([str(BIN / "shardline"), "pipeline"], b, penv)[0])
            rows.setdefault("pipeline flow (no-op)", []).append(
                timed([str(BIN / "shardline"), "pipeline"], b, penv)[0])
            la, lb = (yaml.safe_load((r / "dvc.lock").read_text())["stages"] for r in (a, b))
            same = all(la[s] == lb[s] for s in ("download", "clean", "tokenize", "shard"))
            print(f"repeat {i + 1}/{args.repeats}: data stages' dvc.lock identical: {same} "
                  "(train outputs hold timings and run ids, so they differ by design)", flush=True)
    print(f"\ndefault line (shipped params.yaml), median of {args.repeats}, min-max")
    for name, xs in stages.items():
        print(f"  stage {name:<12} {fmt(xs)}")
    for name, xs in rows.items():
        print(f"  {name:<22} {fmt(xs)}")
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\nratio pipeline/dvc, full:  {med['pipeline flow (full)'] / med['dvc repro (full)']:.2f}x")
    print(f"ratio pipeline/dvc, no-op: {med['pipeline flow (no-op)'] / med['dvc repro (no-op)']:.2f}x")


if __name__ == "__main__":
    main()
