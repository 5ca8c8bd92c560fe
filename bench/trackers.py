"""What the trackers cost a default run: the shipped params.yaml's training (its steps, evals and
checkpoints) with log.backends all three (TensorBoard, W&B offline, MLflow's local sqlite store)
against none.

    python -m bench.trackers [--repeats 2] [--steps N]

Builds the shipped line's shards once (bench.train_loop.build), then runs `train.run` fresh (no
checkpoints, metrics, tracker files or tracker state) with and without the trackers, interleaved,
the order alternating between repeats so machine noise hits both alike. Training time is the
wall time of `train.run`: setup, every step, evals, checkpoints and the trackers' own start and
close (they send from a process of their own; the run waits for it to finish at its end). Target:
<= 1% more, at the worst ABBA pair of same-repeat ratios (bench.verdict.abba: whichever side
runs second in a repeat is faster, so a pair of opposite orders is what cancels it); the median step time of each side is
shown beside it, so the cost in the loop and the cost at the ends can be told apart. `python -m
bench` runs it after bench.train, as its own section of bench/REPORT.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.verdict import Targets, abba, in_order
from shardline.context import RunContext
from shardline.core import config
from shardline import paramsfile
from shardline.core.layout import Layout
from shardline.training import train as T

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.01
ALL = ["tensorboard", "wandb", "mlflow"]


def params(steps: int | None, backends: list[str], logs: Path) -> config.Params:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["train"] = {**raw["train"], "nproc_per_node": 1, "device": "cpu", **({"steps": steps} if steps else {})}
    raw["log"] = {**raw.get("log", {}), "backends": backends, "dir": str(logs)}
    return paramsfile.parse(raw)


def one(layout: Layout, p: config.Params) -> dict:
    for d in (layout.data / "checkpoints", layout.data / "metrics", layout.trackers):
        shutil.rmtree(d, ignore_errors=True)
    said: list[str] = []
    t0 = time.perf_counter()
    T.run(p, layout, RunContext(log=said.append))
    wall = time.perf_counter() - t0
    failed = [s for s in said if s.startswith("log: ")]
    if failed:
        sys.exit(f"a tracker failed, the comparison would not be like for like: {failed[0]}")
    recs = [json.loads(ln) for ln in layout.train_log.read_text().splitlines() if ln]
    return {"wall": wall, "step_s": statistics.median(r["step_s"] for r in recs), "steps": len(recs)}


def measure(layout: Layout, repeats: int, steps: int | None) -> dict:
    runs: dict[str, list[dict]] = {"none": [], "all": []}
    for i in range(repeats):
        for side in in_order(("none", "all"), i):
            # a fresh folder each run (MLflow keeps its store's connection for the process: a deleted
            # and recreated mlflow.db would be another file under the same name)
            logs = layout.root / f"tracker-logs-{i}-{side}"
            runs[side].append(one(layout, params(steps, ALL if side == "all" else [], logs)))
            print(f"  repeat {i + 1} {side:4}: {runs[side][-1]['wall']:.2f} s", flush=True)
    return runs


def report(runs: dict, targets: Targets) -> None:
    ratios = [a["wall"] / n["wall"] for a, n in zip(runs["all"], runs["none"])]
    pairs = abba(ratios)
    steps = runs["none"][0]["steps"]
    for side in ("none", "all"):
        w = [r["wall"] for r in runs[side]]
        s = [r["step_s"] * 1e3 for r in runs[side]]
        print(f"  log.backends {'all three' if side == 'all' else 'none':10} train.run wall {statistics.median(w):7.2f} s "
              f"({min(w):.2f} - {max(w):.2f}); median step {statistics.median(s):.1f} ms ({min(s):.1f} - {max(s):.1f})")
    print(f"  same-repeat ratios all/none (none ran first in repeat 1, 3, ...): {', '.join(f'{x:.3f}' for x in ratios)}")
    targets.check(f"  trackers (all three) / none, a default run's training time ({steps} steps), worst ABBA pair",
                  max(pairs), "<=", TARGET, "x", repeats=pairs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2, help="even (whole ABBA pairs); each side's default run is "
                    "~3 minutes here")
    ap.add_argument("--steps", type=int, help="train.steps (default: the shipped params.yaml's)")
    a = ap.parse_args(argv)
    a.repeats = max(2, a.repeats + a.repeats % 2)
    from bench.train_loop import build

    with tempfile.TemporaryDirectory(prefix="shardline-bench-trackers-") as tmp:
        layout = build(Path(tmp))
        targets = Targets()
        report(measure(layout, a.repeats, a.steps), targets)
    return 1 if targets.missed else 0


if __name__ == "__main__":
    sys.exit(main())
