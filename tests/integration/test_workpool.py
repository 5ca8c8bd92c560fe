"""The work-pool path on a real Prefect server (127.0.0.1) and real `prefect worker` processes.

`shardline deploy` puts prefect.yaml's deployments on a process pool with params.yaml's cron; a
worker killed mid-training together with its flow run (as a machine crash does) leaves the run
Running, the next `shardline worker` marks it Crashed, and the re-run resumes to the weights an
uninterrupted `dvc repro` trains. A transient fault is retried inside the deployment run, as
under `shardline serve`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run, stdlib_files
from harness.servers import FlakyServer
from tests.integration.test_orchestration import DVC, SL, Runner, api, deployment_run, make, task_runs

pytestmark = pytest.mark.slow
CRON = "17 4 * * 1"  # not params.yaml's default: the deployment's cron can only come from the project's


class Worker(Runner):
    """`shardline worker` (the orphan sweep, then `prefect worker start --pool shardline`) in its
    own process group; the flow runs it starts get sessions of their own."""

    def __init__(self, root: Path, env: dict):  # returns at once: runs queue until it polls
        self.root, self.env = root, {**env, "PREFECT_LOGGING_LEVEL": "INFO", "PREFECT_WORKER_QUERY_SECONDS": "1"}
        self.log = open(root / "worker.log", "ab")
        self.start = self.log.tell()
        self.proc = subprocess.Popen([SL, "worker"], cwd=root, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def swept(self) -> str:
        root, start, deadline = self.root, self.start, time.time() + 60
        while b"orphaned run(s) marked Crashed" not in (root / "worker.log").read_bytes()[start:]:
            assert self.proc.poll() is None and time.time() < deadline, (root / "worker.log").read_text()
            time.sleep(0.2)
        return (root / "worker.log").read_bytes()[start:].decode()

    def crash(self, run_pid: int) -> None:
        """Kill the worker and the flow-run process (its own session) together, as a machine crash or
        an OOM-killed container does: stopped first, so neither can report the other's death."""
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for group in (run_pid, self.proc.pid):
                os.killpg(group, sig)
        self.proc.wait()


def test_worker_killed_mid_training_resumes_to_the_same_weights(tmp_path, prefect_server):
    text = b"".join(f.read_bytes() for f in stdlib_files(10))
    with FlakyServer({"/c.txt": text}, fail_first=1) as srv:
        sources = [{"name": "web", "uri": srv.url("/c.txt"), "format": "txt", "txt_unit": "blank_lines"}]
        root, ref = (make(tmp_path / d, sources=sources, download={"attempts": 1}, retrain={"cron": CRON})
                     for d in ("p", "ref"))
        shutil.copy(REPO / "prefect.yaml", root)
        worker = Worker(root, prefect_server)  # starting meanwhile: it creates the pool if it is first
        out = run([SL, "deploy"], root, env=prefect_server).stdout
        assert f"cron {CRON!r}" in out
        _, run_id = deployment_run(prefect_server, root, watch=False)
        metrics, reference = root / "data/metrics/train.jsonl", None
        deadline = time.time() + 240
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 20):
            assert time.time() < deadline and worker.proc.poll() is None, (root / "worker.log").read_text()
            if reference is None and srv.requests["/c.txt"] >= 2:  # the 503 went to the deployment run
                reference = subprocess.Popen([DVC, "repro"], cwd=ref, env=prefect_server, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE, text=True)  # on the other core meanwhile
            time.sleep(0.05)
        worker.crash(int(api(prefect_server, f"/flow_runs/{run_id}")["infrastructure_pid"]))
        assert api(prefect_server, f"/flow_runs/{run_id}")["state"]["type"] == "RUNNING"  # nobody left to say
        worker = Worker(root, prefect_server)  # its sweep marks the orphan Crashed before it polls
        try:
            r, run2 = deployment_run(prefect_server, root)  # queued behind the orphan until then
            assert f"({run_id}) as Crashed" in worker.swept()  # so it was still Running then
        finally:
            worker.stop()
        assert api(prefect_server, f"/flow_runs/{run_id}")["state"]["type"] == "CRASHED"
        assert reference is not None and reference.wait(timeout=240) == 0, reference.stderr.read()
    log = (root / "worker.log").read_text()
    assert api(prefect_server, f"/flow_runs/{run2}")["state"]["type"] == "COMPLETED", r.stdout + log
    assert "download: up to date, skipped" in log and "resuming from step-" in log
    download = next(t for t in task_runs(prefect_server, run_id) if t["name"] == "stage-download")
    assert download["run_count"] == 2 and srv.requests["/c.txt"] == 3  # a retry in run 1, then the reference's
    retrain = api(prefect_server, "/deployments/name/shardline-retrain/retrain")
    assert retrain["work_pool_name"] == "shardline" and [s["schedule"]["cron"] for s in retrain["schedules"]] == [CRON]
    ckpt = sorted((root / "data/checkpoints").glob("step-*"))[-1]
    ref_ckpt = sorted((ref / "data/checkpoints").glob("step-*"))[-1]
    assert ckpt.name == ref_ckpt.name
    files = [json.loads((c / "manifest.json").read_text())["files"] for c in (ckpt, ref_ckpt)]
    assert files[0]["model.pt"] == files[1]["model.pt"] and files[0]["optimizer.pt"] == files[1]["optimizer.pt"]


def test_deploy_and_worker_without_a_server_say_so_in_one_line(tmp_path):
    from shardline.orchestration.flows.server import free_port, server_env

    root = make(tmp_path / "p")
    shutil.copy(REPO / "prefect.yaml", root)
    url = f"http://127.0.0.1:{free_port()}/api"  # nothing listens there
    for cmd in ([SL, "deploy"], [SL, "worker"]):
        r = run(cmd, root, check=False, env={**server_env(tmp_path / "home", 1), "PREFECT_API_URL": url})
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"no Prefect server answers at PREFECT_API_URL={url}" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
