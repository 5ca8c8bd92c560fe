"""docs/extending.md's four examples, used from outside the package as a user would: each package
is written from the guide itself and built and installed by pip, and the real `shardline` command
and `dvc repro` run in a subprocess whose PYTHONPATH holds them, on a tiny project. The rule drops
what it should, with its reason, in stats.json; the stage runs; the architecture trains, samples
and evaluates, refuses document attention it does not say it has, and export says in one line it
has no mapping; the tracker receives every step's metrics; a new release of the rule re-runs clean
under `dvc repro`, and an unchanged one nothing."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.plugins import build_install, guide
from harness.projects import init_repo
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
        build_install(site, example)
    docs = [f.read_text() for f in stdlib_files(10)]
    docs[2:2] = CASINO[:2]  # not at the end: what follows a dropped document is still read
    docs.append(CASINO[2])
    (root / "web.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    proj = root / "proj"
    proj.mkdir()
    params = small_params([{"name": "web", "uri": str(root / "web.jsonl"), "format": "jsonl"}],
                          clean={"banned_words": ["casino", "jackpot"]},
                          train={"steps": 2, "checkpoint_every": 2, "attention": "causal"},  # TokenMLP has no document
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
def test_the_architecture_samples_and_evaluates_and_export_says_it_has_no_mapping(trained, tmp_path):
    proj, _ = trained
    env = env_for(PYTHONPATH=str(proj.parent / "site-packages"))
    lineage = json.loads((proj / "data/checkpoints/step-000000002/manifest.json").read_text())["lineage"]
    assert lineage["plugins"] == {"architectures": {"token_mlp": "shardline-token-mlp 0.1.0"},
                                  "trackers": {"jsonl": "shardline-jsonl-tracker 0.1.0"}}
    assert lineage["vocab_size"] == json.loads((proj / "data/tokenizer/meta.json").read_text())["vocab_size"]
    said = run([SL, "sample", "latest", "--prompt", "def ", "--max-new-tokens", "4", "--json"], proj, env=env).stdout
    said = json.loads(said)
    assert (said["step"], said["seq_len"]) == (2, 64)
    # four new ids, or fewer ending on EOS: the network ran for every one of them
    assert (len(said["ids"]), said["stopped"]) == (4, "max_new_tokens") or \
        (said["stopped"] == "eos" and said["ids"][-1] == said["eos_id"] and len(said["ids"]) < 4)
    ev = run([SL, "eval", "latest", "--json"], proj, env=env).stdout
    assert json.loads(ev)["total"]["loss"] > 0
    r = run([SL, "export", "latest", str(tmp_path / "out")], proj, env=env, check=False)
    assert (r.returncode, r.stderr.strip()) == (2, "error: model.arch 'token_mlp' has no mapping to transformers (its "
                                                   "class sets no `hf`): only gpt2 and llama export; sample, eval "
                                                   "and judge take any architecture")


def test_an_architecture_without_document_attention_is_refused_under_it(cleaned, tmp_path):
    proj, env = cleaned
    shutil.copytree(proj, tmp_path / "p", ignore=shutil.ignore_patterns("checkpoints", "metrics"))  # trained may have run
    params = (tmp_path / "p/params.yaml").read_text()
    (tmp_path / "p/params.yaml").write_text(params.replace("attention: causal", "attention: document"))
    for stage in ("tokenize", "shard"):
        run([SL, "stage", stage], tmp_path / "p", env=env)
    r = run([SL, "stage", "train"], tmp_path / "p", env=env, check=False)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        "error: plug-in 'token_mlp' (architectures, token_mlp:TokenMLP, from shardline-token-mlp 0.1.0): "
        "train.attention is document, but TokenMLP does not say it restarts attention at each document (no "
        "`document_attention = True` on its class); set train.attention: causal in params.yaml")
    assert not list((tmp_path / "p/data/checkpoints").glob("step-*"))


@pytest.mark.timeout(300)
def test_a_new_release_of_the_rule_re_runs_clean_under_dvc_repro(tmp_path):
    rule = guide()["rule"]
    site = build_install(tmp_path / "site", rule)
    docs = [f.read_text() for f in stdlib_files(6)] + CASINO
    (tmp_path / "web.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    proj = tmp_path / "proj"
    init_repo(proj)
    write_params(proj, small_params([{"name": "web", "uri": str(tmp_path / "web.jsonl"), "format": "jsonl"}],
                                    clean={"banned_words": ["casino"]}))
    env = env_for(PYTHONPATH=str(site))
    dvc = str(BIN / "dvc")

    def banned() -> dict:
        return json.loads((proj / "data/clean/stats.json").read_text())["sources"]["web"]["rules"]["banned_words"]

    run([dvc, "repro", "clean"], proj, env=env)
    assert banned()["docs"] == 2
    assert json.loads((proj / "data/plugins/clean.json").read_text()) == {"banned_words": "shardline-banned-words 0.1.0"}
    again = run([dvc, "repro", "clean"], proj, env=env).stdout
    assert "Stage 'clean' didn't change, skipping" in again
    # 0.2.0 counts a jackpot as a casino: the same settings now drop the third page too
    build_install(site, rule, version="0.2.0",
                  edit=lambda text: text.replace("lowered = doc.text.lower()",
                                                 "lowered = doc.text.lower().replace('jackpot', 'casino')"))
    upgraded = run([dvc, "repro", "clean"], proj, env=env).stdout
    assert "Running stage 'clean'" in upgraded, upgraded
    assert banned()["docs"] == 3
    assert json.loads((proj / "data/plugins/clean.json").read_text()) == {"banned_words": "shardline-banned-words 0.2.0"}
    assert "Stage 'clean' didn't change, skipping" in run([dvc, "repro", "clean"], proj, env=env).stdout


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
