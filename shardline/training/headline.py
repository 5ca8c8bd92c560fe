"""data/metrics/headline.json: the few figures `dvc metrics show` and `dvc exp show` print by default.

Contract: `headline(evaluation, tokens_per_s)` is a pure function of the latest held-out
evaluation as eval.json holds it (`sources.<name>.bpb` and `total.bpb`, the comparable total: the
sources weighted equally, whatever each run's mix, so `dvc exp show` compares like with like; any
other key, an interval, a loss, is left to eval.json) and the median tokens/s over every step on
record (train.json's median_tokens_per_s, computed by the same function):
`{"step": <the eval's step>, "bpb": {<source>: ...}, "bpb_total": ..., "tokens_per_s": ...}`, bits
per byte to 4 decimals and tokens/s whole; and eval.json's `tasks` as they are, when downstream
tasks ran (eval.tasks, `shardline eval --tasks`: asked for, so shown). The full figures stay in eval.json, train.json and
data/clean/stats.json, which dvc.yaml declares as plain outputs: they print when asked for
(`dvc metrics show data/metrics/eval.json`). Why: with each of them a metric, `dvc metrics show`
printed lines of ~3,300 characters and `dvc exp show` 244 columns (issue 50).
"""

from __future__ import annotations


def headline(evaluation: dict, tokens_per_s: float | None) -> dict:
    """The headline metrics of a run: held-out bits per byte per source and in total, tokens/s."""
    out: dict = {"step": evaluation.get("step")}
    if evaluation.get("sources"):  # an eval on record ("total" outside "bpb": a source may be named so)
        out["bpb"] = {n: round(v["bpb"], 4) for n, v in evaluation["sources"].items()}
        out["bpb_total"] = round(evaluation["total"]["bpb"], 4)
    out["tokens_per_s"] = None if tokens_per_s is None else round(tokens_per_s)
    if evaluation.get("tasks"):
        out["tasks"] = evaluation["tasks"]
    return out
