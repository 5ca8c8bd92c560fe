"""docs/extending.md's four examples, used from outside the package as a user would: each is
installed as pip installs a distribution (its module and a .dist-info with its entry points, read
from the guide itself), and the real `shardline` command runs in a subprocess whose PYTHONPATH
holds them, on a tiny project. The rule drops what it should, with its reason, in stats.json; the
stage runs; the architecture trains; the tracker receives every step's metrics."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.plugins import guide, install
from tests.conftest import BIN, env_for, run, small_params, stdlib_files, write_params

SL = str(BIN / "shardline")
CASINO = ["Win big at our casino tonight: the finest tables in the city are waiting for you.",
          "The new CASINO on the river opens its doors to every visitor on Friday evening.",
          "Yesterday a jackpot of a million was paid out to a retired teacher from the north."]


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory):
    """A project whose one source holds real text and three pages the example rule bans, cleaned
    with the example plug-ins installed; (root, the environment that sees them)."""
    examples = guide()
    assert sorted(examples) == ["architecture", "rule", "stage", "tracker"]
    root = tmp_path_factory.mktemp("extending")
    site = root / "site-packages"
    for example in examples.values():
        install(site, example)
    docs = [f.read_text() for f in stdlib_files(10)]
    docs[2:2] = CASINO[:2]  # not at the end: what follows a dropped document is still read
    docs.append(CASINO[2])
    (root / "web.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    proj = root / "proj"
    proj.mkdir()
    params = small_params([{"name": "web", "uri": str(root / "web.jsonl"), "format": "jsonl"}],
                          clean={"banned_words": ["casino", "jackpot"]}, train={"steps": 2, "checkpoint_every": 2},
                          log={"backends": ["jsonl"]})
    params["model"] = {"arch": "token_mlp", "n_layer": 2, "n_head": 2, "d_model": 32}  # no llama field: refused
    write_params(proj, params)
    env = env_for(PYTHONPATH=str(site))
    for stage in ("download", "clean"):
        run([SL, "stage", stage], proj, env=env)
    return proj, env


@pytest.fixture(scope="module")
def trained(cleaned):
    proj, env = cleaned
    for stage in ("tokenize", "shard", "train"):
        out = run([SL, "stage", stage], proj, env=env)
    return proj, out.stdout + out.stderr


@pytest.mark.timeout(180)
def test_the_rule_drops_what_it_should_with_its_reason_in_stats(cleaned):
    proj, env = cleaned
    stats = json.loads((proj / "data/clean/stats.json").read_text())
    assert stats["sources"]["web"]["rules"]["banned_words"] == {"docs": 3, "bytes": sum(len(t) for t in CASINO)}
    assert stats["rules_order"]["web"][-2:] == ["max_replacement_fraction", "banned_words"]  # after the filters
    sample = [json.loads(ln) for ln in (proj / "data/clean/web/dropped/banned_words.jsonl").read_text().splitlines()]
    assert sorted((s["id"], s["value"], s["detail"]) for s in sample) == [
        ("web.jsonl:13", 1, "says 'jackpot'"), ("web.jsonl:3", 1, "says 'casino'"), ("web.jsonl:4", 1, "says 'casino'")]
    said = run([SL, "explain", "web.jsonl:4"], proj, env=env).stdout  # asked again, of the same rule
    assert said.strip() == "web.jsonl:4: dropped by banned_words: measured 1, limit 0; says 'casino' (web, web/part-00000)"


@pytest.mark.timeout(120)
def test_the_stage_runs_and_a_misspelt_one_is_one_line(cleaned):
    proj, env = cleaned
    out = run([SL, "stage", "doc_counts"], proj, env=env)
    stats = json.loads((proj / "data/clean/stats.json").read_text())
    assert json.loads((proj / "data/doc_counts.json").read_text()) == {"web": stats["sources"]["web"]["docs_out"]}
    assert f"doc_counts: {stats['sources']['web']['docs_out']} documents in 1 source(s)" in out.stdout + out.stderr
    wrong = run([SL, "stage", "doc_count"], proj, env=env, check=False)
    assert wrong.returncode == 2 and wrong.stderr.strip() == (
        "error: stage: 'doc_count' is no stage (did you mean 'doc_counts'?); known stages: download, clean, tokenize, "
        "shard, train, report (built in); doc_counts (plug-in of shardline-doc-counts 0.1.0)")


@pytest.mark.timeout(240)
def test_the_architecture_trains(trained):
    proj, said = trained
    rows = [json.loads(ln) for ln in (proj / "data/metrics/train.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["loss"] > 0 for r in rows)
    assert "train: fresh start, token_mlp with " in said
    manifest = json.loads((proj / "data/checkpoints/step-000000002/manifest.json").read_text())
    assert manifest["lineage"]["params"]["model"]["arch"] == "token_mlp"


@pytest.mark.timeout(240)
def test_the_tracker_receives_every_step(trained):
    proj, _ = trained
    steps = {r["step"]: r for r in map(json.loads, (proj / "data/metrics/train.jsonl").read_text().splitlines())}
    (sent,) = (proj / "logs/jsonl").glob("*.jsonl")
    head, *got = map(json.loads, sent.read_text().splitlines())
    assert head["config"]["model"]["arch"] == "token_mlp" and head["tags"]["model"] == "token_mlp"
    assert [(g["step"], g["train/loss"]) for g in got] == [(s, r["loss"]) for s, r in steps.items()]


def test_without_the_distribution_a_name_is_one_line(cleaned, tmp_path):
    proj, _ = cleaned
    shutil.copy(proj / "params.yaml", tmp_path / "params.yaml")
    r = run([SL, "params"], tmp_path, check=False)  # no plug-in on its path
    assert r.returncode == 2
    assert "model.arch: 'token_mlp' is no architecture; known architectures: gpt2, llama (built in)" in r.stderr
    assert "log.backends: 'jsonl' is no tracker; known trackers: tensorboard, wandb, mlflow (built in)" in r.stderr
    assert "clean.banned_words: unknown key; known rules: url_blocklist, normalize" in r.stderr
