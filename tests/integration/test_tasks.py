"""Downstream tasks through lm-evaluation-harness, offline, on a small local task this file writes:
`shardline eval --tasks` reports what lm-eval's own command reports on the export, to the last
bit; eval.tasks during training never changes training, lands in the step record, the manifest,
eval.json and the card, and equals `shardline eval --tasks` on the same checkpoint; results of a
checkpoint survive training's rewrite of eval.json while they are this run's, and never after."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.conftest import BIN, env_for, run, stdlib_files, write_params
from tests.integration.test_evaluate import files, rows
from tests.integration.test_train import SL, built, losses, project  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow
pytest.importorskip("lm_eval")  # the tasks extra, in dev; HF_HUB_OFFLINE=1 / HF_DATASETS_OFFLINE=1 (conftest)
EXAMPLES = 10


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """A multiple-choice task on real code: which of four line endings ends this line (acc, acc_norm)."""
    d = tmp_path_factory.mktemp("task")
    lines = [ln.strip() for ln in stdlib_files(1, skip=30)[0].read_text().splitlines() if len(ln.strip()) > 30]
    docs = []
    for i in range(EXAMPLES):
        cut = [(ln[:len(ln) // 2], ln[len(ln) // 2:]) for ln in lines[4 * i:4 * i + 4]]
        answer = i % 4
        docs.append({"question": cut[answer][0], "choices": [end for _, end in cut], "answer": answer})
    (d / "lines.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    (d / "line_end.yaml").write_text(yaml.safe_dump({
        "task": "line_end", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(d / "lines.jsonl")}},
        "test_split": "test", "output_type": "multiple_choice", "doc_to_text": "{{question}}",
        "doc_to_choice": "choices", "doc_to_target": "answer",
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in ("acc", "acc_norm")]}))
    return d / "line_end.yaml"


def lm_evals_own(model_dir, task, out) -> dict:
    """lm-eval's command on an exported directory: its results file's numbers for the task."""
    run([str(BIN / "lm_eval"), "--model", "hf", "--model_args", f"pretrained={model_dir}", "--tasks", str(task),
         "--include_path", str(task.parent), "--output_path", str(out)], model_dir.parent, env=env_for())
    (found,) = out.rglob("results_*.json")
    r = json.loads(found.read_text())
    return {**r["results"]["line_end"], "samples": r["n-samples"]["line_end"]["effective"]}


def test_shardline_eval_tasks_is_lm_evals_own_command_and_survives_training(built, task, tmp_path):
    root = project(built, tmp_path / "p", train={"steps": 8})
    run([SL, "stage", "train"], root)
    r = run([SL, "eval", "latest", "--tasks", str(task), "--json"], root)
    ours = json.loads(r.stdout)
    assert "eval: kept in data/metrics/tasks.json" in r.stderr and ours["kept"] == "data/metrics/tasks.json"
    run([SL, "export", "latest", str(tmp_path / "hf")], root)
    theirs = lm_evals_own(tmp_path / "hf", task, tmp_path / "lm-eval-out")
    got = ours["tasks"]["line_end"]
    print(f"shardline eval --tasks: {got}; lm_eval: {theirs}")
    assert got == {"acc": theirs["acc,none"], "acc_stderr": theirs["acc_stderr,none"],  # exact: the same bits
                   "acc_norm": theirs["acc_norm,none"], "acc_norm_stderr": theirs["acc_norm_stderr,none"],
                   "samples": EXAMPLES}
    assert 0 < got["acc"] < 1 or 0 < got["acc_norm"] < 1  # a task that tells models apart, not all right or wrong
    # eval.json (a DVC metric) shows them, numbers only; the card has its table
    metric = json.loads((root / "data/metrics/eval.json").read_text())
    assert metric["tasks"] == {"line_end": {**got, "step": 8}} and metric["step"] == 8 and "total" in metric
    run([SL, "stage", "report"], root)
    card = (root / "data/reports/evidence.md").read_text()
    assert "## Downstream tasks (lm-evaluation-harness)" in card
    assert f"| line_end | acc | {got['acc']:.4f} | {got['acc_stderr']:.4f} | {EXAMPLES} | 8 |" in card
    # training rewrites eval.json from train.jsonl at its end: the results of this run's checkpoint stay
    r = run([SL, "stage", "train"], root)
    assert "nothing to train" in r.stderr
    assert json.loads((root / "data/metrics/eval.json").read_text())["tasks"] == metric["tasks"]
    # another timeline at the same step (another seed, from scratch): they are not its results
    for gone in (root / "data/checkpoints", root / ".shardline"):  # .shardline/kept: links a start would resume from
        shutil.rmtree(gone)
    (root / "data/metrics/train.jsonl").unlink()
    p = yaml.safe_load((root / "params.yaml").read_text())
    write_params(root, {**p, "train": {**p["train"], "seed": 99}})
    run([SL, "stage", "train"], root)
    after = json.loads((root / "data/metrics/eval.json").read_text())
    assert after["step"] == 8 and "tasks" not in after


def test_tasks_in_training_keep_training_bit_identical_and_equal_shardline_eval(built, task, tmp_path):
    on = project(built, tmp_path / "on", train={"steps": 12},
                 eval={"tasks": [str(task)], "tasks_every": 2, "tasks_limit": 6})
    off = project(built, tmp_path / "off", train={"steps": 12})
    r = run([SL, "stage", "train"], on)
    assert "train: downstream tasks line_end at one checkpoint in 2 and the last step, 6 examples each" in r.stderr
    run([SL, "stage", "train"], off)
    # dropout draws from torch's RNG every step (TINY): a task run that moved it would change every later loss
    assert losses(on) == losses(off) and files(on) == files(off)  # weights, optimizer, RNG state, loader: bit for bit
    # checkpoints every 4 steps, tasks at every 2nd of them (step 8) and at the last step
    assert [r["step"] for r in rows(on) if "tasks" in r.get("eval", {})] == [8, 12]
    last = rows(on)[-1]["eval"]
    assert set(last["tasks"]) == {"line_end"} and last["tasks"]["line_end"]["samples"] == 6 and last["tasks_s"] > 0
    manifest = json.loads((on / "data/checkpoints/step-000000012/manifest.json").read_text())
    assert manifest["eval"]["tasks"] == last["tasks"]
    metric = json.loads((on / "data/metrics/eval.json").read_text())
    assert metric["tasks"] == {"line_end": {**last["tasks"]["line_end"], "step": 12}}
    # the model as training exported it in memory scores as its checkpoint does through `shardline eval`; a
    # checkpoint copied out of data/checkpoints is judged and shown, never taken for one of this run's
    other = tmp_path / "elsewhere" / "step-000000008"
    shutil.copytree(on / "data/checkpoints/step-000000008", other)
    r = run([SL, "eval", str(other), "--tasks", str(task), "--limit", "6", "--json"], on)
    assert json.loads(r.stdout)["tasks"] == next(x["eval"]["tasks"] for x in rows(on) if x["step"] == 8)
    assert "eval: not kept in eval.json: not under data/checkpoints" in r.stderr
    assert not (on / "data/metrics/tasks.json").exists()
    assert json.loads((on / "data/metrics/eval.json").read_text())["tasks"] == metric["tasks"]


def test_a_bad_eval_tasks_entry_stops_training_before_a_step(built, tmp_path):
    root = project(built, tmp_path / "p", train={"steps": 4}, eval={"tasks": ["tasks/line_end.yaml"]})
    r = run([SL, "stage", "train"], root, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"error: eval.tasks[0]: tasks/line_end.yaml: no such task YAML ({root}/tasks/line_end.yaml)" in r.stderr
    assert not (root / "data/checkpoints").exists() or not list((root / "data/checkpoints").glob("step-*"))
