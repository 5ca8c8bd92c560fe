"""A week-long run in an afternoon: a tiny model trained for many steps with everything on, watched for
what grows.

    python -m bench.soak [--steps 50000] [--kill-at 49200]

A real project (Python's own standard-library text, harness.projects), a 1-layer model small enough
for ~100 steps a second, `shardline stage train` as a user runs it with held-out eval every 500 steps,
checkpoints every 250 with retention (keep_last 2, keep_every 10,000), all three trackers
(TensorBoard, W&B offline, MLflow) and the monitor. The training process tree is sampled every
half second: resident memory (the trainer and the trackers' process), open files, the disk under data/
(checkpoints apart) and logs/, and the step reached. Then a second run of the same project, SIGKILLed
once past --kill-at and resumed, must end on the same weights, byte for byte (its final checkpoint's
model.pt and optimizer.pt against the first run's).

Targets (issue 52, point 3): resident memory grows <= 5% from step 5,000 to the end (the largest
sample of the last 10% of steps, before the run's end, against the largest of the 10% from step
5,000; what the run's end adds, train.jsonl read whole, is printed apart); open files, each process
against itself (the trackers' process starts seconds after the trainer), at most one more in the
last fifth of its life than before it (mlflow's journal, open while it writes); median step time of
the last 10% of steps within 10% of that of the 10% from step 5,000; checkpoints on disk bounded by retention (never more than keep_last + the
keep_every ones + the one being written); the kill resumes exactly. Slopes are printed per 10,000
steps: logs/ and train.jsonl grow with the steps by design (a line a step), the rest must not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.verdict import Targets
from harness.soak import KEEP_EVERY, KEEP_LAST, fd_growth, final_weights, last_step, project, watch


def window(samples: list[dict], lo: float, hi: float) -> list[dict]:
    """The samples taken between steps lo and hi (at least the one nearest to them)."""
    inside = [s for s in samples if lo <= s["step"] <= hi]
    return inside or [min(samples, key=lambda s: abs(s["step"] - (lo + hi) / 2))]


def slope(samples: list[dict], key: str, start: int) -> float:
    """Growth of `key` per 10,000 steps from `start`, by least squares."""
    xs = [s for s in samples if s["step"] >= start]
    if len(xs) < 3:
        return float("nan")
    return float(np.polyfit([s["step"] for s in xs], [s[key] for s in xs], 1)[0] * 10_000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50_000)
    ap.add_argument("--kill-at", type=int, default=None, help="default: 98.4%% of --steps")
    ap.add_argument("--from", dest="start", type=int, default=None, help="the step memory is judged from "
                    "(default 5,000, or a tenth of --steps when fewer)")
    args = ap.parse_args()
    start = args.start or min(5_000, args.steps // 10)
    kill_at = args.kill_at or int(args.steps * 0.984)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        a = project(Path(tmp) / "a", args.steps)
        t0 = time.perf_counter()
        samples, _ = watch(a)
        wall = time.perf_counter() - t0
        recs = [json.loads(ln) for ln in (a / "data/metrics/train.jsonl").read_text().splitlines()]
        b = project(Path(tmp) / "b", args.steps)
        watch(b, kill_past=kill_at)
        killed_at = last_step(b / "data/metrics/train.jsonl")
        watch(b)
        same = final_weights(a) == final_weights(b)
    n = args.steps
    # the last tenth of the steps, before the run's end (its summary reads train.jsonl whole: said apart below)
    early, late = window(samples, start, start + (n - start) / 10), window(samples, n - n / 10, n - 1)
    finishing = [s["rss"] for s in samples if s["step"] >= n]
    rss0, rss1 = max(s["rss"] for s in early), max(s["rss"] for s in late)
    growth = fd_growth(samples)
    fd_worst = max(late - early for early, late in growth.values())
    st0 = statistics.median(r["step_s"] for r in recs if start <= r["step"] <= start + (n - start) / 10)
    st1 = statistics.median(r["step_s"] for r in recs if r["step"] > n - n / 10)
    dirs = max(s["ckpt_dirs"] for s in samples)
    bound = KEEP_LAST + n // KEEP_EVERY + 1
    print(f"{n:,} steps in {wall / 60:.1f} min ({n / wall:.0f} steps/s, {len(samples)} samples)")
    print(f"resident memory (trainer + trackers): {rss0 / 2**20:.0f} MiB at step {start:,}.. -> "
          f"{rss1 / 2**20:.0f} MiB at the end ({100 * (rss1 / rss0 - 1):+.1f}%); slope "
          f"{slope(samples, 'rss', start) / 2**20:+.2f} MiB per 10k steps")
    if finishing:
        print(f"at the end, past the last step (train.jsonl read whole for train.json and the CSVs): "
              f"{max(finishing) / 2**20:.0f} MiB")
    print("open files, each process before the last fifth of its life -> in it: " + ", ".join(
        f"{who.split()[1]} {early} -> {late}" for who, (early, late) in growth.items()))
    print(f"median step time: {1e3 * st0:.2f} ms -> {1e3 * st1:.2f} ms ({100 * (st1 / st0 - 1):+.1f}%)")
    print(f"checkpoints on disk: at most {dirs} folders, {max(s['checkpoints'] for s in samples) / 2**20:.1f} MiB "
          f"(retention's bound {bound}); slope {slope(samples, 'checkpoints', start) / 2**20:+.3f} MiB per 10k steps")
    print(f"data/ but checkpoints: slope {slope(samples, 'data', start) / 2**20:+.2f} MiB per 10k steps "
          "(train.jsonl and eval.csv: a line a step, by design)")
    print(f"logs/ (trackers): slope {slope(samples, 'logs', start) / 2**20:+.2f} MiB per 10k steps (by design: every step)")
    print(f"killed at step {killed_at:,}, resumed: final weights {'identical' if same else 'DIFFERENT'}")
    t = Targets()
    t.check("resident memory growth from step 5,000 to the end", 100 * (rss1 / rss0 - 1), "<=", 5, "%")
    # one more for a moment: mlflow's sqlite journal, open while it writes (a leak a checkpoint would be 200)
    t.check("open files of any process, its last fifth minus its life before", fd_worst, "<=", 1, "")
    t.check("median step time growth", 100 * (st1 / st0 - 1), "<=", 10, "%")
    t.check("checkpoint folders on disk", dirs, "<=", bound, "")
    t.check("a kill near the end resumes to the same weights", float(same), ">=", 1, "", ok=same)
    t.exit()


if __name__ == "__main__":
    main()
