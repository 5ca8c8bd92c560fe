"""Held-out evaluation: it never changes training, survives a SIGKILL in the middle, lands in the
metrics, the manifests and the card, and `shardline eval` agrees with a loss computed by hand."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import yaml

from shardline.results import card_eval
from tests.conftest import env_for, run, write_params
from tests.integration.test_train import SL, built, final_state, losses, project  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow
EVAL = {"every": 6, "blocks": 24}


def rows(root):
    return [json.loads(ln) for ln in (root / "data/metrics/train.jsonl").read_text().splitlines()]


def exact(row: dict) -> dict:
    """A row without its timings (and what follows from them: slow-step calls)."""
    ev = row.get("eval")
    return {"step": row["step"], "loss": row["loss"], "lr": row["lr"], "tokens": row["tokens"],
            "batches": row["batches"], "eval": ev and {"total": ev["total"], "sources": ev["sources"]}}


def files(root) -> dict:
    """sha256 of every file of the newest checkpoint, train_state and RNG included."""
    last = sorted((root / "data/checkpoints").glob("step-*"))[-1]
    return {k: v["sha256"] for k, v in json.loads((last / "manifest.json").read_text())["files"].items()}


def test_eval_on_trains_bit_identically_to_eval_off_and_records_every_eval(built, tmp_path):
    on = project(built, tmp_path / "on", train={"steps": 14}, eval=EVAL)
    off = project(built, tmp_path / "off", train={"steps": 14}, eval={**EVAL, "every": 0})
    run([SL, "stage", "train"], on)
    run([SL, "stage", "train"], off)
    assert losses(on) == losses(off) and files(on) == files(off)
    # every 6 steps, at every checkpoint (every 4) and at the last step
    assert [r["step"] for r in rows(on) if "eval" in r] == [4, 6, 8, 12, 14]
    assert not any("eval" in r for r in rows(off))
    last = rows(on)[-1]["eval"]
    assert set(last["sources"]) == {"code", "more"} and last["sources"]["code"]["tokens"] == 24 * 32
    # the total runs are compared by weighs the sources equally; the run's own mix has a total of its own
    w = {"code": 0.75, "more": 0.25}
    assert last["total"]["weighting"] == "equal"
    assert last["total"]["loss"] == pytest.approx(sum(v["loss"] for v in last["sources"].values()) / 2, rel=1e-12)
    assert last["total_own_mix"]["loss"] == pytest.approx(sum(w[n] * v["loss"] for n, v in last["sources"].items()),
                                                          rel=1e-12)
    # the latest eval is a DVC metric; every eval is a row of eval.csv; each manifest holds its step's, with
    # each document's sums (which a train.jsonl row leaves out)
    metric = json.loads((on / "data/metrics/eval.json").read_text())
    keep = ("loss", "bpb", "docs", "doc_loss", "loss_ci", "bpb_ci")
    assert metric == {"step": 14, "total": last["total"], "total_own_mix": last["total_own_mix"],
                      "sources": {n: {k: v[k] for k in keep} for n, v in last["sources"].items()}}
    csv = (on / "data/metrics/eval.csv").read_text().splitlines()
    assert csv[0] == ("step,val_loss,val_bpb,val_loss_own_mix,val_bpb_own_mix,code_loss,code_bpb,more_loss,more_bpb")
    assert len(csv) == 6
    for step in (12, 14):
        m = json.loads((on / f"data/checkpoints/step-{step:09d}/manifest.json").read_text())
        assert {k: v for k, v in m["eval"].items() if k != "docs"} == next(r["eval"] for r in rows(on) if r["step"] == step)
        assert set(m["eval"]["docs"]) == {"code", "more"}
        assert sum(m["eval"]["docs"]["code"]["targets"]) == m["eval"]["sources"]["code"]["tokens"]
    text = run([SL, "lineage", "latest"], on).stdout
    assert f"eval (held-out) at step 14: loss {last['total']['loss']:.4f}" in text
    # judged afterwards, the checkpoint gives back the eval its manifest holds, bit for bit
    judged = json.loads(run([SL, "eval", "step-000000014", "--json"], on).stdout)
    assert {k: v for k, v in judged["recorded"].items() if k != "docs"} == last
    assert {n: v["loss"] for n, v in judged["sources"].items()} == {n: v["loss"] for n, v in last["sources"].items()}
    assert judged["docs"] == judged["recorded"]["docs"]  # every document's sums too


def test_sigkill_during_eval_resumes_bit_identically(built, tmp_path):
    ref = project(built, tmp_path / "ref", train={"steps": 14}, eval=EVAL)
    run([SL, "stage", "train"], ref)
    crash = project(built, tmp_path / "crash", train={"steps": 14}, eval=EVAL)
    # evals at steps 4, 6, 8, 12, 14, each 2 sources x 24 blocks / 4 per batch = 12 batches: kill
    # after the 3rd batch of the eval at step 12 (before its checkpoint), then, resumed, after the
    # 20th eval batch of that run (step 14's eval when it resumed from step 8). Saves are
    # asynchronous: under load a kill can land while the previous save is still being written (CI
    # saw it), and the next run rightly resumes from the one before, so each kill still lands in an
    # eval but which one depends on timing; what must hold is that every run resumes from the
    # newest checkpoint on disk and the end is bit-identical.
    newest = None
    for spec in ("train.eval#39", "train.eval#20"):
        r = run([SL, "stage", "train"], crash, check=False, env=env_for(SHARDLINE_CHAOS=spec))
        assert r.returncode == -signal.SIGKILL, r.stderr
        if newest:
            assert f"resuming from {newest}" in r.stderr
        newest = max(p.parent.name for p in (crash / "data/checkpoints").glob("step-*/manifest.json"))
    resumes = json.loads((crash / "data/checkpoints" / newest / "train_state.json").read_text())["resumes"] + 1
    r = run([SL, "stage", "train"], crash)
    assert f"resuming from {newest}" in r.stderr
    assert [exact(r) for r in rows(crash)] == [exact(r) for r in rows(ref)]  # one row per step, timings aside
    assert [r["step"] for r in rows(crash)] == list(range(1, 15))
    # weights, optimizer, RNG and scaler bit for bit; the train state differs only in its resume count
    assert {k: v for k, v in files(crash).items() if k != "train_state.json"} == \
        {k: v for k, v in files(ref).items() if k != "train_state.json"}
    state = [json.loads((r / "data/checkpoints/step-000000014/train_state.json").read_text()) for r in (ref, crash)]
    assert state[1].pop("resumes") == resumes and state[0].pop("resumes") == 0 and state[0] == state[1]


HAND = r"""
import json, math, sys
import numpy as np, torch, tokenizers
from torch.nn import functional as F
from shardline.model import build, resolve

root, ckpt = sys.argv[1], sys.argv[2]
sd = torch.load(f"{root}/data/checkpoints/{ckpt}/model.pt", weights_only=True)
lin = json.load(open(f"{root}/data/checkpoints/{ckpt}/manifest.json"))["lineage"]
model = build(resolve(lin["params"]["model"], vocab_size=sd["lm_head.weight"].shape[0],
                      seq_len=lin["params"]["shard"]["seq_len"], attention=lin["params"]["train"]["attention"],
                      eos_id=lin["special_ids"]["eos"]))
model.load_state_dict(sd)
model.eval()
tok = tokenizers.Tokenizer.from_file(f"{root}/data/tokenizer/tokenizer.json")
out = {}
for src in ("code", "more"):
    ix = json.load(open(f"{root}/data/shards/{src}/val/index.json"))
    blocks = np.concatenate([np.fromfile(f"{root}/data/shards/{src}/val/{s['file']}", dtype=np.uint16)
                             for s in ix["shards"]]).astype(np.int64).reshape(-1, ix["seq_len"] + 1)
    with torch.no_grad():
        logits, _ = model(torch.from_numpy(blocks[:, :-1]))
    y = torch.from_numpy(blocks[:, 1:]).reshape(-1)
    nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y, reduction="sum").item()
    # the bytes the targets spell: each block's targets decoded (special tokens spell nothing)
    nbytes = sum(len(tok.decode(row.tolist()).encode()) for row in blocks[:, 1:])
    out[src] = {"loss": nll / len(y), "bpb": nll / math.log(2) / nbytes, "blocks": len(blocks)}
print(json.dumps(out))
"""


def test_shardline_eval_agrees_with_a_loss_computed_by_hand(built, tmp_path):
    root = project(built, tmp_path / "p", train={"steps": 8}, eval={"every": 0, "blocks": 100_000})
    run([SL, "stage", "train"], root)
    got = json.loads(run([SL, "eval", "step-000000008", "--json"], root).stdout)
    hand = json.loads(subprocess.run([sys.executable, "-c", HAND, str(root), "step-000000008"], capture_output=True,
                                     text=True, check=True, env=env_for()).stdout)
    for src, h in hand.items():
        assert got["judged_on"]["blocks"][src] == [h["blocks"], h["blocks"]]  # the budget covers every block
        assert got["sources"][src]["loss"] == pytest.approx(h["loss"], rel=1e-5)
        assert got["sources"][src]["bpb"] == pytest.approx(h["bpb"], rel=1e-5)
    assert got["same_data"] and got["same_mix"] and got["step"] == 8
    text = run([SL, "eval", "latest"], root).stdout
    assert "NOTE" not in text and f"{got['sources']['code']['loss']:8.4f}" in text


def test_continued_run_attributes_the_change_per_source(built, tmp_path):
    root = project(built, tmp_path / "p", train={"steps": 8}, eval=EVAL)
    run([SL, "stage", "train"], root)
    before_own = json.loads((root / "data/checkpoints/step-000000008/manifest.json").read_text())["eval"]
    p = yaml.safe_load((root / "params.yaml").read_text())
    p["mix"] = {"code": 0.25, "more": 0.75}
    p["train"]["allow_data_change"] = True
    write_params(root, p)
    # the parent, judged on today's params: same data, other mix, said so
    judged = run([SL, "eval", "step-000000008"], root).stdout
    assert "NOTE: trained on mix {'code': 0.75, 'more': 0.25}" in judged
    run([SL, "stage", "train"], root)
    lin = json.loads(run([SL, "lineage", "latest", "--json"], root).stdout)
    origin = lin["continued_from"]
    assert origin["checkpoint"] == "step-000000008" and origin["changes"][0].startswith("mix:")
    assert origin["eval"] == before_own
    # the same model on the same held-out set: only the mix weights of the total change
    assert origin["eval_now"]["sources"] == before_own["sources"]
    run([SL, "stage", "report"], root)
    card = (root / "data/reports/evidence.md").read_text()
    after = json.loads((root / "data/metrics/eval.json").read_text())
    b, a = origin["eval_now"]["sources"]["more"]["loss"], after["sources"]["more"]["loss"]
    assert "### Before and after: continued from `step-000000008` (step 8)" in card
    # the total of a before and an after of two mixes: under one weighting for both, named
    eb = sum(v["loss"] for v in origin["eval_now"]["sources"].values()) / 2
    ea = sum(v["loss"] for v in after["sources"].values()) / 2
    assert f"| total (sources weighted equally) | {eb:.4f} | {ea:.4f} | {ea - eb:+.4f} |" in card
    assert f"| more | {b:.4f} | {a:.4f} | {a - b:+.4f} [" in card  # with its interval: both scored the same blocks
    assert "## Held-out split" in card and "## Held-out evaluation" in card


def test_metric_drift_is_flagged_past_the_tolerance():
    def row(step, loss):
        return {"step": step, "eval": {"sources": {"code": {"loss": loss, "bpb": 1.0}}, "total": {}}}

    lines = card_eval.drift([row(10, 4.0), row(20, 4.079), row(30, 4.2)], tolerance=0.02)
    assert lines == ["- metric drift: code val loss rose 4.0790 -> 4.2000 (+3.0%) from step 20 to 30 "
                     "(> eval.drift_tolerance 2%)"]


def test_no_held_out_block_turns_eval_off_and_judging_says_why(built, tmp_path):
    root = project(built, tmp_path / "p", train={"steps": 4}, eval={"fraction": 0.0001, "min_docs": 0, "every": 2})
    for stage in ("clean", "tokenize", "shard"):
        run([SL, "stage", stage], root)
    r = run([SL, "stage", "train"], root)
    assert "no source has a held-out block" in r.stderr and "evaluation is off for this run" in r.stderr
    assert not any("eval" in row for row in rows(root))
    r = run([SL, "eval", "latest"], root, check=False)
    assert r.returncode == 2 and "nothing to judge on" in r.stderr and "Traceback" not in r.stderr
