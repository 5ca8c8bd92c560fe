"""Downstream task results as the line keeps them (shardline.training.task_results): lm-eval's
results as numbers, `shardline eval --tasks` results kept per checkpoint, and eval.json's "tasks",
which shows a kept result only while train.jsonl holds the record of its checkpoint's step."""

from __future__ import annotations

import json

from shardline.training import task_results
from shardline.training.steplog import write_derived

# what lm_eval.simple_evaluate returns, trimmed to what numbers() reads (shapes as 0.4.13 gives them)
RESULTS = {"results": {"arc": {"alias": "arc", "sample_len": 5, "acc,none": 0.4, "acc_stderr,none": 0.2449,
                               "acc_norm,none": 0.6, "acc_norm_stderr,none": "N/A"},
                       "gsm": {"alias": "gsm", "exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.1,
                               "exact_match,none": float("nan")}},
           "n-samples": {"arc": {"original": 100, "effective": 5}, "gsm": {"original": 8, "effective": 8}}}


def row(step: int, loss: float, tasks: dict | None = None) -> dict:
    r = {"step": step, "loss": loss, "lr": 0.1, "tokens": 64 * step, "step_s": 0.1, "data_wait_s": 0.0,
         "tokens_per_s": 640.0, "batches": [f"b{step}"]}
    if tasks is not None:
        r["eval"] = {"total": {"loss": 5.0, "bpb": 2.0}, "sources": {"s": {"loss": 5.0, "bpb": 2.0}}, "eval_s": 0.1,
                     "tasks": tasks, "tasks_s": 3.0}
    return r


def test_numbers_keep_every_finite_number_under_lm_evals_names():
    assert task_results.numbers(RESULTS) == {
        "arc": {"acc": 0.4, "acc_stderr": 0.2449, "acc_norm": 0.6, "samples": 5},
        "gsm": {"exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.1, "samples": 8}}


def test_latest_takes_the_newest_per_task_and_a_kept_result_only_of_this_timeline(tmp_path):
    rows = [row(4, 6.0, {"arc": {"acc": 0.2}}), row(8, 5.5), row(12, 5.0, {"arc": {"acc": 0.3}})]
    kept = tmp_path / "tasks.json"
    task_results.record(kept, "step-000000008", rows[1], {"gsm": {"exact_match": 0.5}})
    task_results.record(kept, "step-000000012", rows[2], {"arc": {"acc": 0.35}})  # by hand, at training's step
    assert task_results.latest(rows, task_results.read(kept)) == {
        "arc": {"acc": 0.35, "step": 12},  # the same step: the result judged after training wins
        "gsm": {"exact_match": 0.5, "step": 8}}
    # another timeline reached step 8 (another loss, other batches): its record is not the one kept beside it
    other = [row(4, 6.0), {**row(8, 5.25), "batches": ["x"]}]
    assert task_results.latest(other, task_results.read(kept)) == {}
    # a second task judged on the same checkpoint joins the first; on another timeline's it replaces them
    task_results.record(kept, "step-000000008", rows[1], {"arc": {"acc": 0.1}})
    assert set(task_results.read(kept)["step-000000008"]["tasks"]) == {"gsm", "arc"}
    task_results.record(kept, "step-000000008", other[1], {"arc": {"acc": 0.9}})
    assert task_results.read(kept)["step-000000008"]["tasks"] == {"arc": {"acc": 0.9}}


def test_eval_json_keeps_its_keys_and_adds_tasks_only_when_some_ran(tmp_path):
    rows = [row(4, 6.0, {"arc": {"acc": 0.2, "samples": 5}}), row(8, 5.5)]
    write_derived(rows, tmp_path)
    metric = json.loads((tmp_path / "eval.json").read_text())
    # a row of before the equal-weight total: its `total` was its own mix's, and the equal one is its sources' mean
    assert metric == {"step": 4, "total": {"loss": 5.0, "bpb": 2.0, "weighting": "equal"},
                      "total_own_mix": {"loss": 5.0, "bpb": 2.0}, "sources": {"s": {"loss": 5.0, "bpb": 2.0}},
                      "tasks": {"arc": {"acc": 0.2, "samples": 5, "step": 4}}}  # numbers only: no tasks_s
    write_derived([row(4, 6.0)], tmp_path)
    assert "tasks" not in json.loads((tmp_path / "eval.json").read_text())


def test_the_card_table_pairs_each_metric_with_its_stderr():
    lines = task_results.table({"gsm": {"exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.1,
                                        "acc": 0.5, "samples": 8, "step": 12}})
    assert lines[2:] == ["| gsm | exact_match,strict-match | 0.2500 | 0.1000 | 8 | 12 |",
                         "| gsm | acc | 0.5000 |  | 8 | 12 |"]
