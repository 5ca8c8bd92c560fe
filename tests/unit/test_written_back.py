"""Every JSON or parquet file the line wrote and reads back, damaged (issue 44, point 1): emptied,
cut short, of the wrong type, missing a field, of a newer format. The reader that takes it answers
one line naming the file, what is wrong and what rebuilds or restores it (`dvc repro -f -s
<stage>`, `dvc checkout <path>`), never a traceback, and touches nothing else.

The files are a real line's: download, clean, tokenize and shard run once on a few stdlib files;
each case damages one file of a fresh copy and calls the stage or reader that reads it, in-process."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from shardline.core import fsio
from shardline import paramsfile
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.remedies import remedy
from shardline.data import download, shard, tokenize
from shardline.data.clean.stage import run as clean
from shardline.stream import loader
from shardline.training import guard, lineage, steplog
from shardline.training.network import _tokenizer_meta
from tests.conftest import make_project, stdlib_files


@pytest.fixture(scope="module")
def line(tmp_path_factory):
    root = tmp_path_factory.mktemp("line")
    src = root / "in"
    src.mkdir()
    for f in stdlib_files(6):
        shutil.copy(f, src / f"{f.parent.name}_{f.name}")
    params, layout = make_project(root, [{"name": "s", "uri": str(src), "format": "txt"}])
    for stage in (download, clean, tokenize, shard):
        stage.run(params, layout, log=lambda _: None)
    return root


@pytest.fixture
def project(line, tmp_path):
    root = tmp_path / "p"
    shutil.copytree(line, root)
    params_file = root / "params.yaml"  # its sources' uri is the fixture's folder: still there, unchanged
    return paramsfile.load(params_file), Layout.at(root)


def _files(layout: Layout) -> dict[str, str]:
    return {layout.rel(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(layout.data.rglob("*"))
            if p.is_file()}


DAMAGE = {"empty": lambda b: b"", "cut": lambda b: b[: len(b) // 2], "array": lambda b: b"[1, 2]\n",
          "no fields": lambda b: b"{}\n", "not text": lambda b: b"\xc3(" + b[2:]}
# the start of what each damage is said to be (the file named before it, the remedy after)
SAID = {"empty": "empty", "cut": "not valid JSON (", "array": "holds a JSON array, not an object",
        "no fields": "no field '", "not text": "not UTF-8 text (damaged)"}

# file (under the project) -> (what reads it, its remedy)
READERS = {
    "data/raw/s/manifest.json": (lambda p, l: clean.run(p, l, log=lambda _: None),
                                 "rebuild it with 'dvc repro -f -s download', or restore it with 'dvc checkout data/raw'"),
    "data/clean/s/part-00000.split.json": (lambda p, l: tokenize.run(p, l, log=lambda _: None),
                                           "rebuild it with 'dvc repro -f -s clean', or restore it with "
                                           "'dvc checkout data/clean'"),
    "data/clean/split.json": (lambda p, l: tokenize.run(p, l, log=lambda _: None),
                              "rebuild it with 'dvc repro -f -s clean', or restore it with 'dvc checkout data/clean'"),
    "data/clean/stats.json": (lambda p, l: lineage.collect(p, l, "x"),
                              "rebuild it with 'dvc repro -f -s clean', or restore it with 'dvc checkout data/clean'"),
    "data/tokenizer/meta.json": (_tokenizer_meta, "rebuild it with 'dvc repro -f -s tokenize', or restore it with "
                                                  "'dvc checkout data/tokenizer'"),
    "data/tokens/s/index.json": (lambda p, l: shard.run(p, l, log=lambda _: None),
                                 "rebuild it with 'dvc repro -f -s tokenize', or restore it with 'dvc checkout data/tokens'"),
    "data/shards/s/index.json": (lambda p, l: loader.open_sources(l.shards, ["s"]),
                                 "rebuild it with 'dvc repro -f -s shard', or restore it with 'dvc checkout data/shards'"),
    "data/shards/s/val/index.json": (lambda p, l: loader.open_sources(l.shards, ["s"]) and
                                     shard.shardformat.verify(l.shards / "s" / "val"),
                                     "rebuild it with 'dvc repro -f -s shard', or restore it with 'dvc checkout data/shards'"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("rel", list(READERS))
def test_a_damaged_file_the_line_wrote_is_one_line_naming_it_and_its_rebuild(project, rel, damage):
    params, layout = project
    path = layout.root / rel
    path.write_bytes(DAMAGE[damage](path.read_bytes()))
    before = _files(layout)
    read, remedy = READERS[rel]
    with pytest.raises(BadInput) as e:
        read(params, layout)
    msg = str(e.value)
    assert "\n" not in msg and msg.split(": ", 1)[0] in (rel, str(path)), msg
    assert msg.split(": ", 1)[1].startswith(SAID[damage]) and msg.endswith(f"; {remedy}"), msg
    assert _files(layout) == before  # nothing else touched


def test_a_clean_part_that_is_no_parquet_and_a_damaged_done_marker_are_named(project):
    params, layout = project
    part = layout.clean_part("s/part-00000")
    remedy = "rebuild it with 'dvc repro -f -s clean', or restore it with 'dvc checkout data/clean'"
    for cut, said in ((lambda b: b[: len(b) // 2], "not a readable clean part (Parquet magic bytes not found"),
                      (lambda b: b[:200] + bytes(300) + b[500:], "not a readable clean part (")):
        data = part.read_bytes()
        part.write_bytes(cut(data))
        with pytest.raises(BadInput) as e:
            list(clean.documents(part))
        assert str(e.value).startswith(f"{part}: {said}") and str(e.value).endswith(remedy), str(e.value)
        part.write_bytes(data)
    marker = clean.clean_marker_of(part)
    marker.write_text("[1]")
    with pytest.raises(BadInput) as e:
        clean.read_selection(part)
    assert str(e.value) == f"{marker}: not a clean part's done-marker (truncated or damaged); {remedy}"


def test_a_newer_format_of_an_index_names_the_rebuild_and_the_release(project):
    params, layout = project
    path = layout.tokens / "s" / "index.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "format_version": 2}))
    with pytest.raises(BadInput) as e:
        shard.run(params, layout, log=lambda _: None)
    assert str(e.value).startswith("data/tokens/s/index.json: format_version 2, but this shardline (") and \
        str(e.value).endswith("reads format 1; rebuild it with this release ('dvc repro -f -s tokenize'), or read it "
                              "with the shardline release that wrote it")


def test_an_index_entry_of_the_wrong_type_is_named_by_its_field(project):
    params, layout = project
    path = layout.shards / "s" / "index.json"
    index = json.loads(path.read_text())
    index["shards"][0]["blocks"] = "12"
    path.write_text(json.dumps(index))
    with pytest.raises(BadInput) as e:
        loader.open_sources(layout.shards, ["s"])
    assert str(e.value) == (f"{path}: field 'shards[0].blocks' is a JSON string, not a number; rebuild it with "
                            "'dvc repro -f -s shard', or restore it with 'dvc checkout data/shards'")


def test_a_damaged_tokenizer_meta_is_made_again_by_the_stage_that_writes_it(project):
    params, layout = project
    meta = layout.tokenizer_meta
    good = meta.read_bytes()
    meta.write_bytes(good[:10])
    tokenize.run(params, layout, log=lambda _: None)
    assert json.loads(meta.read_bytes())["sha256"] == json.loads(good)["sha256"]


def test_train_jsonl_a_torn_last_append_is_dropped_at_resume_a_damaged_line_named(tmp_path):
    layout = Layout.at(tmp_path)
    log = layout.train_log
    log.parent.mkdir(parents=True)
    rows = [json.dumps({"step": i, "loss": 5.0 - i}) for i in (1, 2, 3)]
    log.write_text(rows[0] + "\n" + rows[1] + "\n" + rows[2][:9])  # a kill inside the third append
    steplog.truncate_records(log, 2)
    assert log.read_text() == rows[0] + "\n" + rows[1] + "\n"
    log.write_text(rows[0] + "\n" + rows[1][:7] + "\n" + rows[2] + "\n")  # damaged inside
    for read in (steplog.read_records, lambda p: steplog.truncate_records(p, 3)):
        with pytest.raises(BadInput) as e:
            read(log)
        assert str(e.value) == (f"{log}:2: not a step record (a JSON object with its step): truncated or damaged; "
                                "restore it with 'dvc checkout data/metrics/train.jsonl' (training rewrites only what "
                                "follows its checkpoint)")


def test_a_damaged_rollback_ledger_is_named_not_taken_as_empty(tmp_path):
    ck = tmp_path / "data" / "checkpoints"
    ck.mkdir(parents=True)
    (ck / "rollbacks.json").write_text('{"rollbacks": [{"step": 4')
    with pytest.raises(BadInput, match=r"rollbacks.json: not a rollback ledger \(truncated or damaged\); restore it"):
        guard.read_ledger(ck)
    (ck / "rollbacks.json").write_text('{"rollbacks": []}')
    assert guard.read_ledger(ck) == []


@pytest.mark.parametrize("data, said", [
    (b"", "empty"), (b'{"a": 1', "not valid JSON (Expecting ',' delimiter: line 1 column 8; truncated or damaged)"),
    (b"[1]", "holds a JSON array, not an object"), (b'{"a": "1"}', "field 'a' is a JSON string, not a number"),
    (b'{"a": true}', "field 'a' is a JSON boolean, not a number"), (b'{"b": 1}', "no field 'a'"),
    (b'{"a": 1, "format_version": 3}', "format_version 3, but this shardline ("),
])
def test_read_record_says_what_is_wrong(tmp_path, data, said):
    path = tmp_path / "x.json"
    path.write_bytes(data)
    with pytest.raises(BadInput) as e:
        fsio.read_record(path, "REMEDY", keys={"a": int}, version=1)
    assert str(e.value).startswith(f"{path}: {said}") and str(e.value).endswith("REMEDY" if "format" not in said else
                                                                                "REMEDY, or read it with the shardline "
                                                                                "release that wrote it"), str(e.value)
    path.write_bytes(b'{"a": 1}')
    assert fsio.read_record(path, "REMEDY", keys={"a": int}, version=1) == {"a": 1}


def test_the_remedy_names_the_stage_and_the_dvc_output_of_each_folder(tmp_path):
    layout = Layout.at(tmp_path)
    said = {p: remedy(layout, tmp_path / p) for p in ("data/raw/s/manifest.json", "data/tokenizer/meta.json",
                                                      "data/metrics/eval.json", "data/checkpoints/x", "elsewhere.json")}
    assert said == {
        "data/raw/s/manifest.json": "rebuild it with 'dvc repro -f -s download', or restore it with 'dvc checkout data/raw'",
        "data/tokenizer/meta.json": "rebuild it with 'dvc repro -f -s tokenize', or restore it with "
                                    "'dvc checkout data/tokenizer'",
        "data/metrics/eval.json": "rebuild it with 'dvc repro -f -s train', or restore it with "
                                  "'dvc checkout data/metrics/eval.json'",
        "data/checkpoints/x": "rebuild it with 'dvc repro -f -s train', or restore it with 'dvc checkout data/checkpoints'",
        "elsewhere.json": "rebuild it with the stage that writes it ('dvc repro -f -s STAGE')"}
