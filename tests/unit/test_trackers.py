"""What a tracker gets of a step record (literal answers), and the log section's checks."""

from __future__ import annotations

import pytest

from shardline.core import config
from shardline.core.errors import ConfigError
from shardline.training.tracking import run_tags, series


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
    lin = {"data_version": {"shards_sha256": "f" * 64}, "code": {"commit": None}, "params": {"model": {"arch": "llama"}},
           "mix": {f"source{i}": 0.01 for i in range(30)}}
    tags = run_tags(lin)
    assert tags["data"] == "f" * 12 and tags["code"] == "none" and tags["model"] == "llama"
    assert all(len(f"{k}:{v}") <= 64 for k, v in tags.items())


@pytest.mark.parametrize("log, says", [
    ({"backends": ["tensorbord"]}, "log.backends[0]: must be one of 'tensorboard', 'wandb' or 'mlflow', got 'tensorbord'"),
    ({"backends": ["wandb", "wandb"]}, "log.backends: lists wandb twice"),
    ({"wandb_mode": "cloud"}, "log.wandb_mode: must be one of 'offline' or 'online', got 'cloud'"),
    ({"flush_s": 0}, "log.flush_s: must be > 0.0, got 0"),
])
def test_a_bad_log_section_names_its_field(log, says):
    with pytest.raises(ConfigError) as e:
        config.parse({"sources": [{"name": "a", "uri": "x.txt", "format": "txt"}], "log": log})
    assert says in str(e.value)


def test_a_profile_needs_a_start_step():
    with pytest.raises(ConfigError) as e:
        config.parse({"sources": [{"name": "a", "uri": "x.txt", "format": "txt"}], "train": {"profile": {"steps": 2}}})
    assert "train.profile.start_step: required" in str(e.value)
