"""A long training run watched from outside, for bench.soak and its short version in the tests.

`project(root, steps)` builds a small real project (the standard library's text) whose training has
everything on: held-out eval, checkpoints with retention, all three trackers; `watch(root)` runs its
train stage as a user does and samples the process tree twice a second (resident memory, open files,
disk, the step reached), SIGKILLing it once past a step when asked; `final_weights` is the newest
checkpoint's model and optimizer, by sha256.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from harness.projects import env_for, small_params, stdlib_sources, write_params
from shardline.training.checkpoint import read_manifest

BIN = Path(sys.executable).parent
SL = str(BIN / "shardline")
CKPT_EVERY, KEEP_LAST, KEEP_EVERY = 250, 2, 10_000


def project(root: Path, steps: int, keep_every: int = KEEP_EVERY) -> Path:
    sources = stdlib_sources(root / "input")
    write_params(root, small_params(
        sources, tokenizer={"vocab_size": 512}, shard={"seq_len": 32, "target_mb": 0.05},
        model={"n_layer": 1, "n_head": 2, "n_kv_head": 1, "d_model": 32},
        loader={"global_batch": 4}, eval={"every": 500, "blocks": 8},
        train={"steps": steps, "checkpoint_every": CKPT_EVERY, "keep_last": KEEP_LAST, "keep_every": keep_every,
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
    # its lines to a file: a pipe nobody reads while it runs fills at 64 KiB (some 200 lines: a soak prints
    # more) and blocks the trainer in its next write, a hang that looked like a stuck run
    err = open(root / "train.stderr", "ab")
    proc = subprocess.Popen([SL, "stage", "train"], cwd=root, env=env_for(), stdout=subprocess.DEVNULL,
                            stderr=err, start_new_session=True)
    err.close()
    me, samples = psutil.Process(proc.pid), []
    while proc.poll() is None:
        time.sleep(0.5)
        try:
            tree = [me, *me.children(recursive=True)]
            rss = sum(p.memory_info().rss for p in tree)
            fds = {f"{p.pid} {p.name()}": p.num_fds() for p in tree}
        except psutil.NoSuchProcess:
            continue
        ck = root / "data/checkpoints"
        step = last_step(root / "data/metrics/train.jsonl")
        samples.append({"step": step, "rss": rss, "fds": sum(fds.values()), "fds_by": fds, "checkpoints": du(ck),
                        "ckpt_dirs": len(os.listdir(ck)) if ck.exists() else 0,
                        "data": du(root / "data") - du(ck), "logs": du(root / "logs")})
        if kill_past is not None and step > kill_past:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return samples, -9
    if proc.returncode:
        raise SystemExit(f"train failed ({proc.returncode}):\n{(root / 'train.stderr').read_text()[-3000:]}")
    return samples, 0


def fd_growth(samples: list[dict]) -> dict[str, tuple[int, int]]:
    """Each process's open files early in its life and at its end: {"pid name": (most in the second fifth
    of its samples, most in the last fifth)}. Per process and its own life, because the trackers' process
    starts when it has imported its libraries, seconds after the trainer, later still on a loaded machine:
    a sum over the tree compares a tree without it with a tree with it."""
    lives: dict[str, list[int]] = {}
    for s in samples:
        for who, n in s["fds_by"].items():
            lives.setdefault(who, []).append(n)
    return {who: (max(n[len(n) // 5:max(len(n) // 5 + 1, 2 * len(n) // 5)]), max(n[-max(1, len(n) // 5):]))
            for who, n in lives.items() if len(n) >= 10}


def final_weights(root: Path) -> dict[str, str]:
    last = sorted((root / "data/checkpoints").glob("step-*"))[-1]
    files = read_manifest(last).files
    return {last.name: {k: v.sha256 for k, v in files.items() if k in ("model.pt", "optimizer.pt")}}
