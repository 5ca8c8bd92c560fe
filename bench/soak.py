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
sample of the last 10% of steps against the largest of the 10% from step 5,000); open files the
same at the end as at step 5,000; median step time of the last 10% of steps within 10% of that of the
10% from step 5,000; checkpoints on disk bounded by retention (never more than keep_last + the
keep_every ones + the one being written); the kill resumes exactly. Slopes are printed per 10,000
steps: logs/ and train.jsonl grow with the steps by design (a line a step), the rest must not.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from bench.verdict import Targets
from harness.projects import env_for, small_params, stdlib_sources, write_params

BIN = Path(sys.executable).parent
SL = str(BIN / "shardline")
CKPT_EVERY, KEEP_LAST, KEEP_EVERY = 250, 2, 10_000


def project(root: Path, steps: int) -> Path:
    sources = stdlib_sources(root / "input")
    write_params(root, small_params(
        sources, tokenizer={"vocab_size": 512}, shard={"seq_len": 32, "target_mb": 0.05},
        model={"n_layer": 1, "n_head": 2, "n_kv_head": 1, "d_model": 32},
        loader={"global_batch": 4}, eval={"every": 500, "blocks": 8},
        train={"steps": steps, "checkpoint_every": CKPT_EVERY, "keep_last": KEEP_LAST, "keep_every": KEEP_EVERY,
               "warmup_steps": 100, "threads": 1},
        log={"backends": ["tensorboard", "wandb", "mlflow"], "dir": "logs"}))
    for stage in ("download", "clean", "tokenize", "shard"):
        subprocess.run([SL, "stage", stage], cwd=root, check=True, capture_output=True, env=env_for())
    return root


def du(path: Path) -> int:
    """Bytes under `path`, as they are now (retention removes folders while this walks: those count 0)."""
    total = 0
    for folder, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(folder, f)).st_size
            except FileNotFoundError:
                pass
    return total


def last_step(log: Path) -> int:
    """The step of train.jsonl's last whole line (read from its end: the file grows to tens of MB)."""
    if not log.exists():
        return 0
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - 4096))
        lines = f.read().splitlines()
    for ln in reversed(lines):
        try:
            return json.loads(ln)["step"]
        except (ValueError, KeyError):
            continue
    return 0


def watch(root: Path, kill_past: int | None = None) -> tuple[list[dict], int]:
    """Run the train stage, sampling it every second; SIGKILL it once past step `kill_past`."""
    proc = subprocess.Popen([SL, "stage", "train"], cwd=root, env=env_for(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    me, samples = psutil.Process(proc.pid), []
    while proc.poll() is None:
        time.sleep(0.5)
        try:
            tree = [me, *me.children(recursive=True)]
            rss = sum(p.memory_info().rss for p in tree)
            fds = sum(p.num_fds() for p in tree)
        except psutil.NoSuchProcess:
            continue
        ck = root / "data/checkpoints"
        step = last_step(root / "data/metrics/train.jsonl")
        samples.append({"step": step, "rss": rss, "fds": fds, "checkpoints": du(ck),
                        "ckpt_dirs": len(os.listdir(ck)) if ck.exists() else 0,
                        "data": du(root / "data") - du(ck), "logs": du(root / "logs")})
        if kill_past is not None and step > kill_past:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return samples, -9
    if proc.returncode:
        raise SystemExit(f"train failed ({proc.returncode}):\n{proc.stderr.read().decode()[-3000:]}")
    return samples, 0


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


def final_weights(root: Path) -> dict[str, str]:
    last = sorted((root / "data/checkpoints").glob("step-*"))[-1]
    files = json.loads((last / "manifest.json").read_text())["files"]
    return {last.name: {k: v["sha256"] for k, v in files.items() if k in ("model.pt", "optimizer.pt")}}


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
    early, late = window(samples, start, start + (n - start) / 10), window(samples, n - n / 10, n)
    rss0, rss1 = max(s["rss"] for s in early), max(s["rss"] for s in late)
    fds0, fds1 = max(s["fds"] for s in early), max(s["fds"] for s in late)
    st0 = statistics.median(r["step_s"] for r in recs if start <= r["step"] <= start + (n - start) / 10)
    st1 = statistics.median(r["step_s"] for r in recs if r["step"] > n - n / 10)
    dirs = max(s["ckpt_dirs"] for s in samples)
    bound = KEEP_LAST + n // KEEP_EVERY + 1
    print(f"{n:,} steps in {wall / 60:.1f} min ({n / wall:.0f} steps/s, {len(samples)} samples)")
    print(f"resident memory (trainer + trackers): {rss0 / 2**20:.0f} MiB at step {start:,}.. -> "
          f"{rss1 / 2**20:.0f} MiB at the end ({100 * (rss1 / rss0 - 1):+.1f}%); slope "
          f"{slope(samples, 'rss', start) / 2**20:+.2f} MiB per 10k steps")
    print(f"open files: {fds0} -> {fds1}; slope {slope(samples, 'fds', start):+.2f} per 10k steps")
    print(f"median step time: {1e3 * st0:.2f} ms -> {1e3 * st1:.2f} ms ({100 * (st1 / st0 - 1):+.1f}%)")
    print(f"checkpoints on disk: at most {dirs} folders, {max(s['checkpoints'] for s in samples) / 2**20:.1f} MiB "
          f"(retention's bound {bound}); slope {slope(samples, 'checkpoints', start) / 2**20:+.3f} MiB per 10k steps")
    print(f"data/ but checkpoints: slope {slope(samples, 'data', start) / 2**20:+.2f} MiB per 10k steps "
          "(train.jsonl and eval.csv: a line a step, by design)")
    print(f"logs/ (trackers): slope {slope(samples, 'logs', start) / 2**20:+.2f} MiB per 10k steps (by design: every step)")
    print(f"killed at step {killed_at:,}, resumed: final weights {'identical' if same else 'DIFFERENT'}")
    t = Targets()
    t.check("resident memory growth from step 5,000 to the end", 100 * (rss1 / rss0 - 1), "<=", 5, "%")
    t.check("open files, end minus step 5,000", fds1 - fds0, "<=", 0, "")
    t.check("median step time growth", 100 * (st1 / st0 - 1), "<=", 10, "%")
    t.check("checkpoint folders on disk", dirs, "<=", bound, "")
    t.check("a kill near the end resumes to the same weights", float(same), ">=", 1, "", ok=same)
    t.exit()


if __name__ == "__main__":
    main()
