"""The trackers (log.backends: TensorBoard, W&B offline, MLflow on a local store), read back by
their own readers (harness.trackers), hold exactly train.jsonl's series after kills and a
rollback; the run's lineage goes in as config and tags; a tracker that fails never stops training."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from harness import trackers as read
from shardline.training.tracking import series
from tests.conftest import env_for
from tests.integration.test_cli import SL
from tests.integration.test_guard import GUARDS, records, train
from tests.integration.test_train import built, project  # noqa: F401 (the fixture)

ALL = {"backends": ["tensorboard", "wandb", "mlflow"], "run_name": "watched"}


def expected(root: Path) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for r in records(root):
        for k, v in series(r).items():
            out.setdefault(k, {})[r["step"]] = v
    return out


def as_float32(s: dict) -> dict:  # TensorBoard keeps a scalar as float32
    return {k: {step: float(np.float32(v)) for step, v in vs.items()} for k, vs in s.items()}


def test_each_tracker_holds_train_jsonl_after_two_kills_one_during_a_rollback(built, tmp_path):
    root = project(built, tmp_path / "p", train=GUARDS, log=ALL)
    # killed at step 10 (checkpoint 8 behind it), then, resumed, inside the rollback of the spike at 16-18
    assert train(root, check=False, SHARDLINE_CHAOS="train.step#10").returncode == -signal.SIGKILL
    assert train(root, check=False, SHARDLINE_CHAOS="train.rollback").returncode == -signal.SIGKILL
    out = train(root)
    assert "log:" not in out.stdout + out.stderr  # no tracker failed
    want = expected(root)
    assert sorted(want["train/loss"]) == [s for s in range(1, 41) if s != 24]  # step 24's loss was NaN: skipped
    assert sorted(want["guard/skip"]) == [24, 30] and sorted(want["guard/rollbacks"]) == [13]
    assert len(want["eval/loss"]) >= 10 and "eval/code/bpb" in want

    tb = read.tensorboard(root / "logs/tensorboard/watched")
    assert tb == as_float32(want)

    runs = read.wandb_runs(root / "logs")
    newest = json.loads((root / ".shardline/trackers").glob("*.json").__next__().read_text())["backends"]
    run = runs[newest["wandb"]["run_id"]]
    assert run["history"] == want and run["name"] == "watched"
    # after a kill W&B gets a new run, superseding the last (how many wrote a file depends on when the kills fell)
    assert run["config"]["supersedes"] is not None and run["config"]["supersedes"] != newest["wandb"]["run_id"]

    ml = read.mlflow(f"sqlite:///{root / 'logs/mlflow.db'}", "shardline")
    assert list(ml) == ["watched"]  # the superseded runs are deleted (restorable), not shown
    assert ml["watched"]["history"] == want

    lin = json.loads(sorted((root / "data/checkpoints").glob("step-*/manifest.json"))[-1].read_text())["lineage"]
    assert run["config"]["data_version"] == lin["data_version"]["shards_sha256"]
    assert run["config"]["mix"] == lin["mix"] and run["config"]["model"] == lin["params"]["model"]
    assert run["config"]["clean_rules"] == lin["clean_rules"]
    assert ml["watched"]["tags"]["shardline.data_version"] == lin["data_version"]["shards_sha256"]
    assert ml["watched"]["params"]["model.n_layer"] == str(lin["params"]["model"]["n_layer"])


def test_a_run_continued_after_a_clean_end_keeps_its_tracker_runs(built, tmp_path):
    root = project(built, tmp_path / "p", log=ALL, train={"steps": 12})
    train(root, plan="")
    p = root / "params.yaml"
    p.write_text(p.read_text().replace("steps: 12", "steps: 20"))
    train(root, plan="")
    want = expected(root)
    assert sorted(want["train/loss"]) == list(range(1, 21))
    assert len(read.wandb_runs(root / "logs")) == 1  # resumed: it was closed at step 12 and holds nothing past it
    assert read.tensorboard(root / "logs/tensorboard/watched") == as_float32(want)
    assert next(iter(read.wandb_runs(root / "logs").values()))["history"] == want
    assert read.mlflow(f"sqlite:///{root / 'logs/mlflow.db'}", "shardline")["watched"]["history"] == want


def trackers_of(pid: int) -> list[int]:
    """The trackers' processes process `pid` started, found by their command line."""
    want = [b"shardline.training.tracking.child", str(pid).encode()]
    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and (p / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")[-2:] == want:
                found.append(int(p.name))
        except OSError:  # it ended while looked at
            pass
    return found


def idle(pids: list[int]) -> bool:
    try:
        return bool(pids) and all(os.sched_getscheduler(p) == os.SCHED_IDLE for p in pids)
    except OSError:  # ended while looked at
        return False


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists() or not hasattr(os, "SCHED_IDLE"),
                    reason="finds processes through /proc; SCHED_IDLE is Linux's")
def test_a_killed_training_takes_its_trackers_process_with_it(built, tmp_path):
    # an MLflow server that takes the connection and never answers: the trackers' process is busy
    # in a backend, never reading stdin, so only the kernel (its parent-death signal) can end it.
    # It is killed once the child runs at idle priority (set just before that signal is asked for)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        root = project(built, tmp_path / "p", train={"steps": 5000, "checkpoint_every": 5000},
                       log={"backends": ["mlflow"], "mlflow_uri": f"http://127.0.0.1:{server.getsockname()[1]}"})
        proc = subprocess.Popen([SL, "stage", "train"], cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env_for(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="600"))
        metrics = root / "data/metrics/train.jsonl"
        try:
            end = time.monotonic() + 120
            while not (idle(trackers_of(proc.pid)) and metrics.exists() and metrics.read_text().count("\n") >= 2):
                assert proc.poll() is None and time.monotonic() < end, "training ended (or took too long) first"
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        end = time.monotonic() + 5
        while trackers_of(proc.pid) and time.monotonic() < end:
            time.sleep(0.05)
        left = trackers_of(proc.pid)
        for pid in left:  # not to linger after a failure
            os.kill(pid, signal.SIGKILL)
    assert left == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_trackers_that_fail_never_stop_training_and_say_so_once(built, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(full)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (not root): no real full disk to write to")
    try:
        root = project(built, tmp_path / "p", train={"steps": 40},
                       log={"backends": ["tensorboard", "mlflow"], "dir": str(full),
                            "mlflow_uri": f"http://127.0.0.1:{_closed_port()}", "flush_s": 0.01})
        out = train(root, plan="", MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="2")
    finally:
        subprocess.run(["umount", str(full)], check=False)
    said = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.startswith("log: ")]
    assert len(said) == 2, said
    assert any(ln.startswith("log: tensorboard failed (OSError") and "No space left" in ln for ln in said), said
    assert any(ln.startswith("log: mlflow failed") for ln in said), said
    assert [r["step"] for r in records(root)] == list(range(1, 41))  # every step trained and recorded
