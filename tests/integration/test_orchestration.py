"""Deployments, crash recovery, retries and retraining on a real Prefect server (127.0.0.1)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, init_repo, run, small_params, stdlib_files, up_to_date, write_params
from harness.servers import FlakyServer

pytestmark = pytest.mark.slow
SL, DVC, PREFECT = str(BIN / "shardline"), str(BIN / "dvc"), str(BIN / "prefect")
TRAIN = {"steps": 40, "checkpoint_every": 8, "warmup_steps": 2, "threads": 1}


def make(root: Path, sources: list[dict] | None = None, **sections) -> Path:
    init_repo(root)
    if sources is None:
        src = root.parent / f"{root.name}-input"
        src.mkdir()
        for f in stdlib_files(10):
            shutil.copy(f, src / f"{f.parent.name}_{f.name}")
        sources = [{"name": "code", "uri": str(src), "format": "txt"}]
    sections["train"] = {**TRAIN, **sections.get("train", {})}
    write_params(root, small_params(sources, **sections))
    return root


def api(env: dict, path: str, body: dict | None = None):
    import urllib.request

    req = urllib.request.Request(env["PREFECT_API_URL"] + path, method="POST" if body is not None else "GET",
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def task_runs(env: dict, flow_run_id: str) -> list[dict]:
    return api(env, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})


def flow_runs(env: dict, flow_name: str) -> list[dict]:
    return api(env, "/flow_runs/filter", {"flows": {"name": {"any_": [flow_name]}}, "sort": "START_TIME_DESC"})


class Runner:
    """`shardline serve` in its own process group (so SIGKILL reaches its flow-run children)."""

    def __init__(self, root: Path, env: dict):
        # stage logs in serve.log; the runner asks for scheduled runs every second, not every 10 s
        # (Prefect's default): each deployment run here waited ~5-10 s for its runner to look
        self.root = root
        self.env = {**env, "PREFECT_LOGGING_LEVEL": "INFO", "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
        port = env["PREFECT_API_URL"].split(":")[-1].split("/")[0]
        self.log = open(root / "serve.log", "ab")
        start = self.log.tell()
        self.proc = subprocess.Popen([SL, "serve", "--port", port], cwd=root, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 90
        while not self._deployed() or b"orphaned run(s) marked Crashed" not in (root / "serve.log").read_bytes()[start:]:
            assert self.proc.poll() is None and time.time() < deadline, (root / "serve.log").read_text()
            time.sleep(0.5)

    def _deployed(self) -> bool:
        try:
            d = api(self.env, "/deployments/name/shardline-pipeline/line")
        except OSError:
            return False
        return d["parameters"].get("root") == str(self.root)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def deployment_run(env: dict, root: Path, name: str = "shardline-pipeline/line", watch: bool = True):
    args = [PREFECT, "deployment", "run", name] + (["--watch", "--watch-timeout", "300"] if watch else [])
    r = run(args, root, check=False, env=env, timeout=400)
    run_id = next(ln.split()[-1] for ln in r.stdout.splitlines() if "UUID:" in ln)
    return r, run_id


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """`dvc repro` of the default test project, once: what a deployment's line must equal. Other
    projects read its input folder, so that their params (and dvc.lock) can equal its own."""
    ref = make(tmp_path_factory.mktemp("reference") / "ref")
    run([DVC, "repro"], ref)
    return ref


def like(ref: Path, root: Path) -> Path:
    """A project with `ref`'s params, sources included."""
    return make(root, sources=yaml.safe_load((ref / "params.yaml").read_text())["sources"])


def test_deployment_runs_the_line_like_dvc_repro(tmp_path, prefect_server, reference):
    root = like(reference, tmp_path / "p")
    runner = Runner(root, prefect_server)
    try:
        r, run_id = deployment_run(prefect_server, root)
    finally:
        runner.stop()
    fr = api(prefect_server, f"/flow_runs/{run_id}")
    assert fr["state"]["type"] == "COMPLETED", r.stdout + (root / "serve.log").read_text()
    names = sorted(t["name"] for t in task_runs(prefect_server, run_id))
    assert names == sorted(f"stage-{s}" for s in ("plugins", "download", "clean", "tokenize", "shard", "train", "report"))
    assert up_to_date(run([DVC, "status"], root).stdout)
    a, b = (yaml.safe_load((d / "dvc.lock").read_text())["stages"] for d in (root, reference))
    for stage in ("download", "clean", "tokenize", "shard"):
        assert a[stage] == b[stage], stage
    assert (root / "data/reports/evidence.md").exists()
    arts = api(prefect_server, "/artifacts/filter", {"artifacts": {"key": {"any_": ["evidence-card"]}}})
    cards = [x["data"] for x in arts if "Shardline evidence card" in (x.get("data") or "")]
    # the plot inside the artifact (the UI cannot reach a train.png beside it: test_prefect_ui.py);
    # the card on disk keeps its link
    assert cards and all("](train.png)" not in c for c in cards) and any("](data:image/png;base64," in c for c in cards)
    assert "](train.png)" in (root / "data/reports/evidence.md").read_text()
    for stage in ("download", "clean", "tokenize", "shard", "train"):  # one progress artifact per stage, to 100%
        progress = api(prefect_server, "/artifacts/filter", {"artifacts": {"key": {"any_": [f"{stage}-progress"]}}})
        assert progress and max(p["data"] for p in progress) == 100, stage
    retrain = api(prefect_server, "/deployments/name/shardline-retrain/retrain")
    assert not retrain["paused"] and retrain["schedules"][0]["schedule"]["cron"] == "0 3 * * *"
    assert retrain["schedules"][0]["active"]  # stopping the runner did not pause the schedule


def test_runner_killed_mid_training_resumes_to_the_same_weights(tmp_path, prefect_server, reference):
    root, ref = like(reference, tmp_path / "p"), reference
    runner = Runner(root, prefect_server)
    _, run_id = deployment_run(prefect_server, root, watch=False)
    metrics = root / "data/metrics/train.jsonl"
    deadline = time.time() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 20):
        assert time.time() < deadline
        time.sleep(0.05)
    runner.kill()  # the runner and the flow run it was executing
    assert api(prefect_server, f"/flow_runs/{run_id}")["state"]["type"] == "RUNNING"
    runner = Runner(root, prefect_server)  # restarting marks the orphan Crashed
    try:
        assert api(prefect_server, f"/flow_runs/{run_id}")["state"]["type"] == "CRASHED"
        _, run2 = deployment_run(prefect_server, root)
    finally:
        runner.stop()
    assert api(prefect_server, f"/flow_runs/{run2}")["state"]["type"] == "COMPLETED"
    log = (root / "serve.log").read_text()
    assert "download: up to date, skipped" in log and "resuming from step-" in log
    ckpt = sorted((root / "data/checkpoints").glob("step-*"))[-1]
    ref_ckpt = sorted((ref / "data/checkpoints").glob("step-*"))[-1]
    files = [json.loads((c / "manifest.json").read_text())["files"] for c in (ckpt, ref_ckpt)]
    assert files[0]["model.pt"] == files[1]["model.pt"] and files[0]["optimizer.pt"] == files[1]["optimizer.pt"]


def test_transient_failures_retry_and_bad_params_fail_fast(tmp_path, prefect_server):
    text = b"".join(f.read_bytes() for f in stdlib_files(6))
    with FlakyServer({"/c.txt": text}, fail_first=2) as srv:
        root = make(tmp_path / "p", sources=[{"name": "web", "uri": srv.url("/c.txt"), "format": "txt"}],
                    download={"attempts": 1}, pipeline={"retries": 3, "retry_delay_s": 0.1}, train={"steps": 2})
        r = run([SL, "pipeline"], root, env=prefect_server, check=False)
    assert r.returncode == 0, r.stderr
    run_id = flow_runs(prefect_server, "shardline-pipeline")[0]["id"]
    download = next(t for t in task_runs(prefect_server, run_id) if t["name"] == "stage-download")
    assert download["run_count"] == 3 and srv.requests["/c.txt"] == 3  # two retries, then success

    bad = make(tmp_path / "bad", shard={"seq_len": 100000})
    r = run([SL, "pipeline"], bad, env=prefect_server, check=False)
    assert r.returncode != 0
    fr = flow_runs(prefect_server, "shardline-pipeline")[0]
    assert fr["state"]["type"] == "FAILED"
    assert "stage shard failed" in fr["state"]["message"] and "shard.seq_len" in fr["state"]["message"]
    shard = next(t for t in task_runs(prefect_server, fr["id"]) if t["name"] == "stage-shard")
    assert shard["run_count"] == 1  # deterministic: no retry


def test_retrain_skips_unchanged_data_and_continues_on_new_data(tmp_path, prefect_server):
    root = make(tmp_path / "p", train={"steps": 4, "allow_data_change": True})
    src = Path(yaml.safe_load((root / "params.yaml").read_text())["sources"][0]["uri"])
    code = "from shardline.orchestration.flows.pipeline import retrain; import json; print(json.dumps(retrain('.')))"
    first = json.loads(run([sys.executable, "-c", code], root, env=prefect_server).stdout.splitlines()[-1])
    assert first["retrained"] is True
    before = json.loads(run([SL, "lineage", "latest", "--json"], root).stdout)
    t0 = time.perf_counter()
    r = run([sys.executable, "-c", code], root, env=prefect_server)
    second = json.loads(r.stdout.splitlines()[-1])
    assert second["retrained"] is False and time.perf_counter() - t0 < 60
    assert "data version unchanged, nothing to train" in second["reason"]
    assert json.loads(run([SL, "lineage", "latest", "--json"], root).stdout) == before
    (src / "extra_module.py").write_text('"""A new document arrives."""\n' + stdlib_files(1, skip=40)[0].read_text())
    again = json.loads(run([sys.executable, "-c", code], root, env=prefect_server).stdout.splitlines()[-1])
    assert again["retrained"] is True and again["stages"]["train"] != "skipped"
    after = json.loads(run([SL, "lineage", "latest", "--json"], root).stdout)
    assert after["data_version"]["shards_sha256"] != before["data_version"]["shards_sha256"]
    shard_md5 = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["shard"]["outs"][0]["md5"]
    assert after["data_version"]["dvc_md5"] == shard_md5 != before["data_version"]["dvc_md5"]  # from the flow
    assert after["run"]["prefect_flow_run_id"] not in (None, before["run"]["prefect_flow_run_id"])
    assert after["parent"] == "step-000000004" and after["data_change"]
    assert json.loads((root / "data/checkpoints/step-000000008/train_state.json").read_text())["version_start_step"] == 4
