"""What a tracker gets of a step record (literal answers), the log section's checks, and the
trackers' own process: a failing or hanging backend, its CPU priority."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from pathlib import Path
from typing import Callable

import pytest

from shardline.core import config
from shardline import paramsfile
from shardline.core.errors import ConfigError
from shardline.training.records import DataVersion, Lineage
from shardline.training.tracking import Trackers, run_config, run_tags, series
from shardline.training.tracking.mlflow_run import MLflow


LIN = Lineage.from_json({
    "data_version": {"shards_sha256": "a" * 64, "dvc_md5": None, "tokenizer_sha256": "b" * 64},
    "params": {"tokenizer": {}, "model": {"arch": "gpt2"}, "train": {}, "loader": {}, "shard": {}}, "mix": {"a": 1.0},
    "clean_rules": {}, "sources": [], "code": {"commit": None, "dirty": False}, "run": {"prefect_flow_run_id": None},
    "parent": None, "data_change": []}, "a test's lineage")


def test_a_record_becomes_these_series_and_a_null_stays_out():
    rec = {"step": 7, "loss": 2.5, "lr": 0.001, "grad_norm": None, "tokens_per_s": 1000.0, "mfu": 0.25,
           "data_wait_s": 0.5, "step_s": 2.0, "slow": None, "guard": "skip", "batches": ["ab"],
           "rollbacks": [{"n": 1}, {"n": 2}],
           "eval": {"total": {"loss": 3.0, "bpb": 1.5}, "sources": {"code": {"loss": 2.0, "bpb": 1.0, "tokens": 9}},
                    "eval_s": 0.1, "tasks": {"mc": {"acc": 0.5, "samples": 10}}, "tasks_s": 2.0}}
    assert series(rec) == {"train/loss": 2.5, "train/lr": 0.001, "perf/tokens_per_s": 1000.0, "perf/mfu": 0.25,
                           "perf/data_wait_s": 0.5, "perf/step_s": 2.0, "guard/skip": 1.0, "guard/rollbacks": 2.0,
                           "eval/loss": 3.0, "eval/bpb": 1.5, "eval/code/loss": 2.0, "eval/code/bpb": 1.0,
                           "downstream/mc/acc": 0.5, "downstream/mc/samples": 10.0}
    assert series({"step": 1, "loss": float("nan"), "lr": 0.1, "guard": "spike"}) == {"train/lr": 0.1, "guard/spike": 1.0}


def test_run_tags_are_short_enough_for_wandb():
    lin = dataclasses.replace(LIN, data_version=DataVersion("f" * 64, None, None), params={
        **LIN.params, "model": {"arch": "llama"}}, mix={f"source{i}": 0.01 for i in range(30)})
    tags = run_tags(lin)
    assert tags["data"] == "f" * 12 and tags["code"] == "none" and tags["model"] == "llama"
    assert all(len(f"{k}:{v}") <= 64 for k, v in tags.items())


@pytest.mark.parametrize("log, says", [
    ({"backends": ["tensorbord"]}, "log.backends: 'tensorbord' is no tracker (did you mean 'tensorboard'?); known "
                                   "trackers: tensorboard, wandb, mlflow (built in)"),
    ({"backends": ["wandb", "wandb"]}, "log.backends: lists wandb twice"),
    ({"wandb_mode": "cloud"}, "log.wandb_mode: must be one of 'offline' or 'online', got 'cloud'"),
    ({"flush_s": 0}, "log.flush_s: must be > 0.0, got 0"),
])
def test_a_bad_log_section_names_its_field(log, says):
    with pytest.raises(ConfigError) as e:
        paramsfile.parse({"sources": [{"name": "a", "uri": "x.txt", "format": "txt"}], "log": log})
    assert says in str(e.value)


def test_a_profile_needs_a_start_step():
    with pytest.raises(ConfigError) as e:
        paramsfile.parse({"sources": [{"name": "a", "uri": "x.txt", "format": "txt"}], "train": {"profile": {"steps": 2}}})
    assert "train.profile.start_step: required" in str(e.value)


# ---- the trackers' process (real backends, a real child process)


def _trackers(tmp_path: Path, said: list, **log) -> Trackers:
    cfg = config.Log(**{"dir": str(tmp_path / "logs"), **log})
    return Trackers(cfg, tmp_path, tmp_path / "state.json", "unit", LIN, said.append)


def _listening() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s


def _wait_for(what: Callable[[], bool], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while not what():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def test_a_backend_that_fails_to_open_is_said_once_and_close_returns(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the child inherits them
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    said: list[str] = []
    t = _trackers(tmp_path, said, backends=["mlflow"], mlflow_uri=f"http://127.0.0.1:{port}", close_timeout_s=60,
                  flush_s=0.05)
    t.open([{"step": 1, "loss": 2.0}], 1)
    assert _wait_for((tmp_path / "state.json").exists, 60)  # opened (and failed): recorded
    for s in range(2, 30):
        t.step({"step": s, "loss": 1.0})
        time.sleep(0.01)
    t0 = time.monotonic()
    t.close()
    assert time.monotonic() - t0 < 60
    assert len(said) == 1 and said[0].startswith("log: mlflow failed (MlflowException") \
        and said[0].endswith("training goes on without it, train.jsonl holds every step"), said
    assert json.loads((tmp_path / "state.json").read_text()) == {"run_name": "unit", "backends": {}}


def test_a_tracker_still_sending_at_close_is_stopped_within_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "600")
    said: list[str] = []
    with _listening() as server:  # takes the connection, never answers
        t = _trackers(tmp_path, said, backends=["mlflow"], mlflow_uri=f"http://127.0.0.1:{server.getsockname()[1]}",
                      close_timeout_s=3)
        t.open([], 0)
        proc = t.proc
        t.step({"step": 1, "loss": 1.0})
        t0 = time.monotonic()
        t.close()
        took = time.monotonic() - t0
    assert took < 3 + 5, took
    assert proc.poll() is not None  # gone before close returned: a re-open never overlaps two writers
    assert len(said) == 1 and said[0].startswith("log: a tracker was still sending after log.close_timeout_s 3 s"), said


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_trackers_process_runs_at_idle_priority(tmp_path):
    said: list[str] = []
    t = _trackers(tmp_path, said, backends=["tensorboard"])
    t.open([{"step": 1, "loss": 2.0}], 1)
    try:
        assert _wait_for((tmp_path / "state.json").exists, 60)  # its backends opened: well past lowering itself
        assert os.sched_getscheduler(t.proc.pid) == os.SCHED_IDLE
    finally:
        t.close()
    assert said == []
    assert json.loads((tmp_path / "state.json").read_text())["backends"] == {"tensorboard": {"durable": 1}}


def test_an_mlflow_run_a_killed_open_never_recorded_is_deleted_by_the_next(tmp_path):
    from mlflow.tracking import MlflowClient

    cfg, rows = config.Log(backends=["mlflow"]), [(1, {"train/loss": 1.0})]

    def opened(key: str) -> str:
        return MLflow(tmp_path / "logs", "unit", cfg, key).open(None, 1, rows, run_config(LIN), run_tags(LIN))["run_id"]

    opened("abc")  # killed before its state was recorded: the next open has no run id on record either
    kept, other = opened("abc"), opened("xyz")  # another identity of the same name is not touched
    c = MlflowClient(f"sqlite:///{tmp_path / 'logs' / 'mlflow.db'}")
    runs = c.search_runs([c.get_experiment_by_name("shardline").experiment_id])
    assert {r.info.run_id for r in runs} == {kept, other}
    assert not [p.name for p in (tmp_path / "logs").iterdir() if ".tmp-" in p.name]  # the store was made whole
