"""What `dvc metrics show` and `dvc exp show` print by default (issue 50): headline.json, the one
metrics file dvc.yaml declares, a few figures of eval.json and train.json; those two, with
stats.json, lines of ~3,300 characters and 244 columns and more when they were the metrics."""

from __future__ import annotations

import json

import yaml

from shardline.core.layout import Layout
from shardline.core.filenames import HEADLINE_JSON
from shardline.training.steplog import write_derived
from tests.conftest import REPO


def row(step: int, tps: float, bpb: dict | None = None, tasks: dict | None = None) -> dict:
    r = {"step": step, "loss": 5.0, "lr": 0.1, "tokens": 64 * step, "step_s": 0.1, "data_wait_s": 0.0,
         "tokens_per_s": tps}
    if bpb is not None:
        r["eval"] = {"total": {"loss": 4.0, "bpb": bpb.pop("total"), "weighting": "equal"}, "eval_s": 0.1,
                     "sources": {n: {"loss": 4.0, "bpb": v} for n, v in bpb.items()},
                     **({"tasks": tasks, "tasks_s": 1.0} if tasks else {})}
    return r


def test_the_headline_is_each_sources_bpb_the_total_and_the_median_tokens_per_s(tmp_path):
    rows = [row(1, 900.0), row(2, 1000.4, {"code": 1.234567, "prose": 2.0, "total": 1.5}), row(3, 2000.0),
            row(4, 1100.6, {"code": 1.111149, "prose": 1.9, "total": 1.40005})]
    write_derived(rows, tmp_path)
    assert json.loads((tmp_path / HEADLINE_JSON).read_text()) == {
        "step": 4, "bpb": {"code": 1.1111, "prose": 1.9}, "bpb_total": 1.4001,
        "tokens_per_s": 1050}  # the median of 900, 1000.4, 1100.6 and 2000 is 1050.5: rounded half to even


def test_a_source_named_total_and_tasks_keep_their_own_places(tmp_path):
    rows = [row(2, 10.0, {"total": 1.0}, tasks={"arc": {"acc": 0.5, "samples": 5}})]
    rows[0]["eval"]["sources"] = {"total": {"loss": 4.0, "bpb": 3.0}}
    write_derived(rows, tmp_path)
    assert json.loads((tmp_path / HEADLINE_JSON).read_text()) == {
        "step": 2, "bpb": {"total": 3.0}, "bpb_total": 1.0, "tokens_per_s": 10,
        "tasks": {"arc": {"acc": 0.5, "samples": 5, "step": 2}}}  # asked for: shown, as eval.json has them


def test_no_eval_yet_is_a_headline_without_figures(tmp_path):
    write_derived([row(1, 5.0)], tmp_path)
    assert json.loads((tmp_path / HEADLINE_JSON).read_text()) == {"step": None, "tokens_per_s": 5}


def test_dvc_yaml_declares_the_headline_alone_as_metrics_and_the_rest_as_outputs():
    dag = yaml.safe_load((REPO / "dvc.yaml").read_text())
    layout = Layout.at(REPO)
    declared = [m for s in dag["stages"].values() for m in s.get("metrics", [])] + dag.get("metrics", [])
    assert [str(m if isinstance(m, str) else next(iter(m))) for m in declared] == [
        layout.rel(layout.metrics / HEADLINE_JSON)]
    outs = {o if isinstance(o, str) else next(iter(o)) for o in dag["stages"]["train"]["outs"]}
    assert {layout.rel(layout.train_summary), layout.rel(layout.metrics / "eval.json")} <= outs
