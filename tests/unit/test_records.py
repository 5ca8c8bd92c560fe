"""The checkpoint's typed records (shardline/training/records.py): a manifest today's writer wrote
reads and writes back byte for byte; the writer through the records writes those bytes; another
version, a missing field or one of the wrong type is one line naming the file and the field; and
no module but the records indexes a manifest's or a lineage's JSON."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from shardline import __version__
from shardline.core import config, fsio
from shardline import paramsfile
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.training import checkpoint, lineage
from shardline.training.records import Code, Lineage, Manifest

REPO = Path(__file__).resolve().parents[2]

# manifest.json as checkpoint.save wrote it before the records existed (commit 7cf53d6), for the
# inputs `_inputs` makes: step 4, a tensor file and the train state, an eval, and a lineage from
# lineage.collect holding every field (init, continued_from, a rollback, a source's own rules)
TODAY = (
    '{"created": 1796448673.45887, "eval": {"sources": {"code": {"bpb": 1.25, "loss": 2.5, "tokens": 64}}, '
    '"total": {"bpb": 1.25, "loss": 2.5}}, "files": {"model.pt": {"bytes": 1577, '
    '"sha256": "d8a10423c89e4a64c2ea3689d0b4b3dbc0fe0ad27c144df5e3e88c532fb6db8a"}, '
    '"train_state.json": {"bytes": 15, '
    '"sha256": "e3bb5b995ff1c4fc1eee68f2cc6cf74d51a0ceae500398870fd13259e6f474b5"}}, "format": "full", '
    '"format_version": 1, "lineage": {"clean_rule_inputs": null, "clean_rules": {"c4": null, '
    '"decontaminate": null, "dedup": true, "drop_samples": 20, "fineweb": null, "gopher_quality": null, '
    '"gopher_repetition": null, "language": null, "max_bad_fraction": 0.01, "max_chars": 1000000, '
    '"max_line_chars": 2000, "max_repeated_line_fraction": 0.3, "max_replacement_fraction": 0.01, '
    '"min_alpha_fraction": 0.25, "min_chars": 64, "near_dedup": null, "normalize": "NFC", "part_mb": 4.0, '
    '"pii": null, "strip_control": true, "url_blocklist": null, "whitespace": true}, '
    '"code": {"commit": null, "dirty": null}, "continued_from": {"changes": ["mix: ..."], '
    '"checkpoint": "step-000000002", "data_version": {"dvc_md5": null, '
    '"shards_sha256": "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", '
    '"tokenizer_sha256": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}, "eval": null, '
    '"eval_now": null, "mix": {"code": 1.0}, "step": 2}, "data_change": ["mix: saved {\'code\': 1.0}, '
    'now {\'code\': 0.75, \'prose\': 0.25}"], '
    '"data_version": {"dvc_md5": "dddddddddddddddddddddddddddddddd.dir", '
    '"shards_sha256": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", '
    '"tokenizer_sha256": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}, '
    '"init": {"architecture": "LlamaForCausalLM", "from": "/models/tiny", '
    '"weights_sha256": {"model.safetensors": "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"}}, '
    '"mix": {"code": 0.75, "prose": 0.25}, "params": {"loader": {"cache_dir": ".shardline/cache", '
    '"cache_mb": 4096.0, "debug_batch_hashes": false, "global_batch": 32, "num_workers": 0, "prefetch": 2, '
    '"seed": 1234, "shards_uri": null, "verify": "full"}, "model": {"arch": "gpt2", "bias": false, '
    '"d_model": 128, "dropout": 0.1, "ffn_hidden": null, "ffn_multiple_of": 256, "gelu": "exact", '
    '"head_dim": null, "n_head": 4, "n_kv_head": null, "n_layer": 2, "norm_eps": 1e-05, "qk_norm": false, '
    '"rope_theta": 10000.0, "tie_embeddings": true}, "shard": {"seq_len": 256, "target_mb": 64.0}, '
    '"tokenizer": {"backend": "auto", "bos_token": null, "eos_token": "<|endoftext|>", "min_frequency": 2, '
    '"path": null, "special_tokens": ["<|endoftext|>"], "train_max_mb": 32.0, "vocab_size": 8192}, '
    '"train": {"activation_checkpointing": "none", "allow_data_change": false, "attention": "causal", '
    '"beta1": 0.9, "beta2": 0.95, "checkpoint_every": 50, "checkpoint_format": null, "checkpoint_uri": null, '
    '"compile": false, "decay_fraction": 0.2, "deterministic": true, "device": "auto", '
    '"dist_timeout_s": 60.0, "fresh_on_data_change": false, "grad_accum": 1, "grad_clip": 1.0, '
    '"init_from": null, "keep_every": 0, "keep_last": 2, "lr": 0.003, "max_rollbacks": 3, "max_skipped": 5, '
    '"min_lr": 0.0003, "nproc_per_node": 1, "precision": "fp32", "profile": null, "schedule": "cosine", '
    '"seed": 1337, "slow_step_factor": 3.0, "spike_factor": 2.0, "spike_patience": 3, "spike_window": 50, '
    '"steps": 200, "strategy": "ddp", "threads": 0, "warmup_steps": 20, "weight_decay": 0.1}}, '
    '"parent": "step-000000002", "rollbacks": [{"batches": ["ab12"], "n": 1, "step": 3}], '
    '"run": {"prefect_flow_run_id": "run-1"}, "source_clean_rules": {"prose": {"min_chars": 5}}, '
    '"sources": [{"files": [{"path": "code.txt", '
    '"sha256": "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"}], "name": "code", '
    '"uri": "code.txt"}, {"files": null, "name": "prose", "uri": "prose.txt"}], "special_ids": {"bos": 1, '
    '"eos": 0}}, "step": 4, "versions": {"numpy": "2.4.6", "python": "3.11.7", "shardline": "0.1.0", '
    '"torch": "2.13.0+cpu"}}')
VOLATILE = ("created", "versions")  # the time and the library versions of the run that wrote it
WHERE = "/runs/ck/step-000000004"


def today() -> dict:
    return json.loads(TODAY)


def _inputs(root: Path) -> tuple[config.Params, Lineage]:
    """What wrote TODAY: a two-source project with a tokenizer and one source's download manifest."""
    params = paramsfile.parse({"sources": [{"name": "code", "uri": "code.txt", "format": "txt"},
                                       {"name": "prose", "uri": "prose.txt", "format": "txt",
                                        "clean": {"min_chars": 5}}],
                           "mix": {"code": 0.75, "prose": 0.25}})
    layout = Layout.at(root)
    layout.tokenizer_meta.parent.mkdir(parents=True)
    fsio.write_json(layout.tokenizer_meta, {"sha256": "b" * 64, "eos_id": 0, "bos_id": 1})
    layout.manifest("code").parent.mkdir(parents=True)
    fsio.write_json(layout.manifest("code"), {"files": [{"path": "code.txt", "sha256": "c" * 64, "bytes": 3}]})
    layout.clean_split.parent.mkdir(parents=True)  # the clean stage's split: each source's held-out fingerprint
    fsio.write_json(layout.clean_split, {"heldout": {"code": {"sha256": "9" * 64, "docs": 3},
                                                     "prose": {"sha256": "8" * 64, "docs": 1}}})
    lin = lineage.collect(
        params, layout, "a" * 64, parent="step-000000002", run_id="run-1", shards_md5="d" * 32 + ".dir",
        data_change=["mix: saved {'code': 1.0}, now {'code': 0.75, 'prose': 0.25}"],
        continued_from={"checkpoint": "step-000000002", "step": 2, "mix": {"code": 1.0}, "changes": ["mix: ..."],
                        "data_version": {"shards_sha256": "e" * 64, "dvc_md5": None, "tokenizer_sha256": "b" * 64},
                        "eval": None, "eval_now": None},
        rollbacks=[{"n": 1, "step": 3, "batches": ["ab12"]}],
        init={"from": "/models/tiny", "architecture": "LlamaForCausalLM",
              "weights_sha256": {"model.safetensors": "f" * 64}})
    return params, dataclasses.replace(lin, code=Code(None, None))  # TODAY's was not in a git checkout


def test_a_manifest_of_today_reads_and_writes_back_byte_for_byte():
    m = Manifest.from_json(today(), WHERE)
    assert json.dumps(m.to_json(), sort_keys=True) == TODAY
    assert list(m.to_json()) == ["format_version", "step", "format", "files", "lineage", "eval", "versions",
                                 "created"]  # the writer's order, for a reader that does not sort
    assert list(m.lineage.to_json())[:3] == ["data_version", "special_ids", "clean_rules"]
    assert (m.step, m.format, m.files["train_state.json"].bytes, m.lineage.parent) == (4, "full", 15, "step-000000002")
    assert (m.lineage.data_version.shards_sha256, m.lineage.init.source, m.lineage.special_ids.bos) == \
        ("a" * 64, "/models/tiny", 1)


def test_the_writer_through_the_records_writes_todays_bytes(tmp_path):
    params, lin = _inputs(tmp_path)
    path = checkpoint.save(tmp_path / "ck", 4, {"model.pt": {"w": torch.arange(4, dtype=torch.float32)}},
                           {"step": 4}, lin, {"total": {"loss": 2.5, "bpb": 1.25},
                                              "sources": {"code": {"loss": 2.5, "bpb": 1.25, "tokens": 64}}})
    wrote = (path / "manifest.json").read_bytes()
    got, want = json.loads(wrote), today()
    for k in VOLATILE:
        want[k] = got[k]
    # model.pt's bytes are torch.save's; the sections' values are the config's defaults: both are
    # someone else's to change, the rest of the file is the records' to keep
    want["files"]["model.pt"] = {"bytes": (path / "model.pt").stat().st_size,
                                 "sha256": fsio.sha256_file(path / "model.pt")}
    want["lineage"]["clean_rules"] = params.section("clean")
    want["lineage"]["params"] = {k: params.section(k) for k in ("loader", "model", "shard", "tokenizer", "train")}
    # lineage version 4 (TODAY's is 1): the version is written, with each source's held-out fingerprint
    # (2), the code of each rule (3: none here, no clean stage ran), the vocabulary and the plug-ins (4: none)
    want["lineage"].update(format_version=4, heldout={"code": "9" * 64, "prose": "8" * 64}, clean_rule_code=None,
                           vocab_size=None, plugins=None)
    assert wrote == json.dumps(want, sort_keys=True).encode()
    assert checkpoint.verify(path) == (True, "ok") and checkpoint.load(path)[2] == Manifest.from_json(got, path)


def test_a_sharded_manifest_lists_its_ranks_and_reads_back(tmp_path):
    _, lin = _inputs(tmp_path)
    files = {"dcp/__0_0.distcp": {"bytes": 10, "sha256": "1" * 64}, "dcp/__1_0.distcp": {"bytes": 11, "sha256": "2" * 64}}
    m = checkpoint.manifest_of(6, {**files, "train_state.json": {"bytes": 12, "sha256": "3" * 64}}, lin, None,
                               [{"dcp/__0_0.distcp": {}}, {"dcp/__1_0.distcp": {}}])
    got = m.to_json()
    # manifest_of's answer before the records (7cf53d6), less its volatile fields and the lineage
    assert {k: v for k, v in got.items() if k not in (*VOLATILE, "lineage")} == {
        "format_version": 1, "step": 6, "format": "sharded", "eval": None,
        "files": {**files, "train_state.json": {"bytes": 12, "sha256": "3" * 64}},
        "ranks": [["dcp/__0_0.distcp"], ["dcp/__1_0.distcp"]]}
    assert Manifest.from_json(json.loads(json.dumps(got)), WHERE).ranks == (("dcp/__0_0.distcp",), ("dcp/__1_0.distcp",))


def test_a_manifest_from_before_the_version_field_and_later_fields_reads_as_version_one():
    old = today()
    del old["format_version"], old["eval"], old["lineage"]["init"], old["lineage"]["special_ids"]
    del old["lineage"]["rollbacks"]
    m = Manifest.from_json(old, WHERE)
    assert (m.format_version, m.eval, m.lineage.init, m.lineage.special_ids.eos, m.lineage.rollbacks) == \
        (1, None, None, None, ())
    assert m.to_json() == old  # what the file left out stays out: a re-export writes what it read


def test_a_new_lineage_writes_its_version_and_held_out_sets_and_moves_on_after_a_save(tmp_path):
    _, lin = _inputs(tmp_path)
    assert (lin.to_json()["format_version"], lin.to_json()["heldout"]) == (4, {"code": "9" * 64, "prose": "8" * 64})
    old = Lineage.from_json(today()["lineage"], "/out/lineage.json")  # version 1: no such field, and none written
    assert (old.format_version, old.heldout, old.clean_rule_code) == (1, None, None)
    assert {"format_version", "heldout", "clean_rule_code"}.isdisjoint(old.to_json())
    nxt = lin.after("step-000000004")
    assert (nxt.parent, nxt.data_change, nxt.mix) == ("step-000000004", (), lin.mix)
    assert nxt.to_json()["data_change"] == [] and lin.parent == "step-000000002"  # frozen: the old one stays


def test_sources_of_several_uris_and_of_a_hub_dataset_read_back(tmp_path):
    """A source's uri may be a list (params.yaml takes one) or null (a `dataset:` source, whose
    request and resolved commit the lineage records instead); both failed to read back once typed."""
    from tests.conftest import small_params

    params = paramsfile.parse(small_params([
        {"name": "code", "uri": ["a.txt", "b.txt"], "format": "txt"},
        {"name": "hub", "dataset": {"name": "org/set", "config": "small", "revision": "main"}}]))
    layout = Layout.at(tmp_path)
    fsio.write_json(layout.manifest("hub"), {"revision": "c" * 40, "files": [{"path": "train-00000.parquet",
                                                                             "sha256": "d" * 64}]})
    got = lineage.sources(params, layout)
    assert [s.to_json() for s in got] == [
        {"name": "code", "uri": ["a.txt", "b.txt"], "files": None},
        {"name": "hub", "uri": None, "files": [{"path": "train-00000.parquet", "sha256": "d" * 64}],
         "dataset": {"name": "org/set", "config": "small", "split": "train", "revision": "main",
                     "resolved": "c" * 40}}]
    lin = dataclasses.replace(_inputs(tmp_path / "p")[1], sources=got, rollbacks=())
    back = Lineage.from_json(json.loads(json.dumps(lin.to_json())), "lineage.json")
    assert back.to_json() == lin.to_json() and back.sources[0].uri == ("a.txt", "b.txt")
    assert "source hub: dataset org/set at " + "c" * 40 + " (1 files)" in lineage.describe(
        Manifest.from_json({**today(), "lineage": lin.to_json()}, "m.json"))


def test_an_exported_lineage_reads_back_alone():
    lin = today()["lineage"]
    assert Lineage.from_json(lin, "/out/lineage.json").to_json() == lin


@pytest.mark.parametrize("where, version, says", [
    ("manifest", 2, f"/runs/ck/step-000000004/manifest.json: format_version 2, but this shardline ({__version__}) "
                    "reads format 1; it was written by shardline 9.9.0: use that release for it, or move "
                    "step-000000004 out of /runs/ck to resume from an older checkpoint"),
    ("manifest", "1", f"/runs/ck/step-000000004/manifest.json: format_version '1', but this shardline "
                      f"({__version__}) reads format 1; it was written by shardline 9.9.0: use that release"),
    ("lineage", 5, f"/runs/ck/step-000000004/manifest.json: lineage.format_version 5, but this shardline "
                   f"({__version__}) reads lineage format 1 to 4; it was written by shardline 9.9.0: use that release"),
])
def test_another_version_is_one_line_naming_it_and_the_release(where, version, says):
    m = today()
    m["versions"]["shardline"] = "9.9.0"
    (m if where == "manifest" else m["lineage"])["format_version"] = version
    m["lineage"]["params"] = "not even looked at"  # the version is read before any field
    with pytest.raises(BadInput) as e:
        Manifest.from_json(m, WHERE)
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_a_lineage_json_of_another_version_names_what_reads_it():
    with pytest.raises(BadInput) as e:
        Lineage.from_json({**today()["lineage"], "format_version": 5}, "/out/lineage.json")
    assert str(e.value) == (f"/out/lineage.json: format_version 5, but this shardline ({__version__}) reads format 1 to 4; "
                            "it was written by another shardline release (lineage.json does not say which): read it "
                            "with that release")


def _drop(*keys):
    def edit(m):
        *path, last = keys
        for k in path:
            m = m[k]
        del m[last]
    return edit


def _set(value, *keys):
    def edit(m):
        *path, last = keys
        for k in path:
            m = m[k]
        m[last] = value
    return edit


@pytest.mark.parametrize("edit, says", [
    (_drop("step"), "step: missing"),
    (_set("4", "step"), "step: must be an integer, got '4'"),
    (_set(True, "step"), "step: must be an integer, got True"),
    (_set("zip", "format"), "format: must be 'full' or 'sharded', got 'zip'"),
    (_drop("files", "model.pt", "sha256"), 'files["model.pt"].sha256: missing'),
    (_set(-1.5, "files", "model.pt", "bytes"), 'files["model.pt"].bytes: must be an integer, got -1.5'),
    (_set([], "lineage"), "lineage: must be an object, got []"),
    (_drop("lineage", "data_version"), "lineage.data_version: missing"),
    (_set(None, "lineage", "data_version", "shards_sha256"), "lineage.data_version.shards_sha256: must be a string, got None"),
    (_set("1", "lineage", "mix", "code"), 'lineage.mix["code"]: must be a number, got \'1\''),
    (_drop("lineage", "params", "train"), "lineage.params.train: must be an object, got None"),
    (_set(3, "lineage", "sources", 1, "files"), "lineage.sources[1].files: must be a list, got 3"),
    (_set("yes", "lineage", "code", "dirty"), "lineage.code.dirty: must be true or false or null, got 'yes'"),
    (_set(7, "lineage", "init", "from"), "lineage.init.from: must be a string, got 7"),
    (_set(1, "lineage", "shards"), "lineage.shards: is not a field of this format"),
])
def test_a_bad_field_is_one_line_naming_the_file_and_the_field(edit, says):
    m = today()
    edit(m)
    with pytest.raises(BadInput) as e:
        Manifest.from_json(m, WHERE)
    msg = str(e.value)
    assert msg.startswith(f"/runs/ck/step-000000004/manifest.json: {says}; ") and "\n" not in msg
    assert msg.endswith("or move step-000000004 out of /runs/ck to resume from an older checkpoint")


def test_verify_raises_the_line_and_never_calls_such_a_checkpoint_invalid(tmp_path):
    """Retention removes invalid checkpoints: one this release cannot read is not invalid, it stops."""
    _, lin = _inputs(tmp_path)
    path = checkpoint.save(tmp_path / "ck", 4, {}, {"step": 4}, lin)
    m = json.loads((path / "manifest.json").read_text())
    m["lineage"]["data_change"] = "mix"
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BadInput, match=r"manifest.json: lineage.data_change: must be a list, got 'mix'"):
        checkpoint.verify(path)


# ---- no reader indexes the JSON itself

TREE = ("shardline", "bench", "harness", "tasks", "flows")
# the download's manifest.json (data/raw/<source>/) is another record, read in shardline/data/
NOT_CHECKPOINTS = ("shardline/data/",)
DICT_READS = re.compile(r"""\bmanifest\[|\bmanifest\.get\(|\[\s*["']lineage["']\s*\]|\.get\(\s*["']lineage["']|"""
                        r"""\blin\[|\blin\.get\(|(read_json|json\.loads?)\(.*(\bMANIFEST\b|manifest\.json|HF_LINEAGE)""")


def dict_reads(text: str) -> list[int]:
    """Lines that index the JSON, or read a manifest's JSON other than straight into a record."""
    return [n for n, line in enumerate(text.splitlines(), 1) if DICT_READS.search(line) and "from_json(" not in line]


def test_no_module_but_the_records_indexes_a_manifest_or_a_lineage():
    found = [f"{p.relative_to(REPO)}:{n}" for d in TREE for p in sorted((REPO / d).rglob("*.py"))
             if p.name != "records.py" and not str(p.relative_to(REPO)).startswith(NOT_CHECKPOINTS)
             for n in dict_reads(p.read_text())]
    assert not found, ("read these through shardline.training.records (Manifest, Lineage), not as dicts:\n"
                       + "\n".join(found))


@pytest.mark.parametrize("line", ['step = manifest["step"]', "ev = manifest.get('eval')", 'lin = m["lineage"]',
                                  'mix = lin["mix"]', 'm = json.loads((path / MANIFEST).read_text())',
                                  'm = json.loads((p / "manifest.json").read_text())'])
def test_the_check_catches_a_dict_read(line):
    assert dict_reads(f"x = 1\n{line}\nm = Manifest.from_json(read_json(url, MANIFEST), url)\n") == [2]
