"""The state the line keeps for itself in the project (issue 52, point 1), edited or damaged: emptied,
cut short, of another type, garbage. Bookkeeping that can be rebuilt is made again (said where a
person would wonder), never a traceback and never read as something it is not; what cannot be
rebuilt is one line naming the file and what restores it (tests/unit/test_written_back.py holds the
files under data/, the rollback ledger among them; tests/integration/test_hfdatasets.py the stream
note of a dataset source).

Each case damages one real file the line wrote and calls the code that reads it back."""

from __future__ import annotations

import io
import json
import shutil

import pytest

from shardline.core import fsio
from shardline.core.layout import Layout
from shardline.core.filenames import partial_note_of, partial_of, step_dir
from shardline.data import grouping, objects, staging
from shardline.stream.remote import upload_shards
from shardline.training import checkpoint
from shardline.training.tracking.child import Worker
from tests.unit.test_loader import make_shards

GARBAGE = {"emptied": b"", "cut short": b'{"a": [1, 2', "an array": b"[1, 2]\n", "a string": b'"x"\n',
           "not text": b"\xc3(\x00\xff", "entries of another type": b'{"a": "x", "b": [1], "c": null}\n'}


@pytest.mark.parametrize("damage", list(GARBAGE))
def test_staged_json_damaged_holds_nothing_and_every_file_is_put_again(tmp_path, damage):
    layout = Layout.at(tmp_path)
    local = layout.clean_part("s/part-00000")
    fsio.write_bytes(local, b"a clean part")
    st = staging.Staging(str(tmp_path / "store"), str(tmp_path))
    record = staging.Record(st)
    assert staging.put_inputs(st, [local], record) == 1
    record.save()
    assert staging.put_inputs(st, [local], staging.Record(st)) == 0  # the record's saving
    layout.staged_record.write_bytes(GARBAGE[damage])
    assert staging.put_inputs(st, [local], staging.Record(st)) == 1  # no saving left: put again, and whole
    assert (tmp_path / "store" / layout.rel(local)).read_bytes() == b"a clean part"


@pytest.mark.parametrize("damage", list(GARBAGE))
def test_push_receipts_damaged_vouch_for_nothing_and_every_shard_is_sent(tmp_path, damage):
    local, store = make_shards(tmp_path / "local", {"a": [3, 2]}), tmp_path / "store"
    receipts = tmp_path / "pushed.json"
    assert upload_shards(local, str(store), ["a"], receipts=receipts, log=lambda _: None) == 3
    receipts.write_bytes(GARBAGE[damage])
    assert upload_shards(local, str(store), ["a"], receipts=receipts, log=lambda _: None) == 3
    assert upload_shards(local, str(store), ["a"], receipts=receipts, log=lambda _: None) == 1  # made again


def test_push_receipts_with_an_entry_of_another_shape_send_that_shard_again(tmp_path):
    local, store = make_shards(tmp_path / "local", {"a": [3, 2]}), tmp_path / "store"
    receipts = tmp_path / "pushed.json"
    upload_shards(local, str(store), ["a"], receipts=receipts, log=lambda _: None)
    kept = json.loads(receipts.read_text())
    first = sorted(kept)[0]
    receipts.write_text(json.dumps({**kept, first: "sent"}))
    assert upload_shards(local, str(store), ["a"], receipts=receipts, log=lambda _: None) == 1 + 1


@pytest.mark.parametrize("damage", list(GARBAGE))
def test_a_partial_downloads_damaged_note_discards_the_partial_bytes_and_fetches_the_object_whole(tmp_path, damage):
    src = tmp_path / "bucket" / "obj.txt"
    src.parent.mkdir()
    src.write_bytes(b"the object's bytes " * 100)
    [obj] = objects.list_objects(f"file://{src}")
    dest = tmp_path / "raw" / "obj.txt"
    dest.parent.mkdir()
    partial_of(dest).write_bytes(b"bytes of another version")
    partial_note_of(dest).write_bytes(GARBAGE[damage])
    assert objects.fetch_object(obj.url, dest, obj.meta) == fsio.sha256_bytes(src.read_bytes())
    assert dest.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("value", ["x", [[0, 10]], [[0, "10", 0]], [[5, 2, 0]], [], {"a": 1}, [[0, 10, -1]]])
def test_spans_json_entries_of_another_shape_are_dropped_and_found_again(tmp_path, value):
    layout = Layout.at(tmp_path)
    good = [[0, 100, 0], [100, -1, 7]]
    fsio.write_json(layout.spans, {"good": good, "bad": value})
    assert grouping.load_spans(layout) == {"good": good}
    layout.spans.write_bytes(b"[1, 2]")
    assert grouping.load_spans(layout) == {}


@pytest.mark.parametrize("damage", list(GARBAGE) + ["backends of another shape"])
def test_the_trackers_state_damaged_is_said_once_and_each_tracker_writes_its_run_again(tmp_path, damage):
    from shardline.core.sections_watch import Log
    from tests.unit.test_trackers import LIN

    state = tmp_path / ".shardline" / "trackers" / "abc.json"
    state.parent.mkdir(parents=True)
    state.write_bytes(b'{"backends": {"tensorboard": 3}}' if damage == "backends of another shape" else
                      GARBAGE[damage])
    out = io.StringIO()
    worker = Worker(out, Log(backends=()), state, "run")
    worker.open(tmp_path, LIN, [], 0)  # as the trackers' process opens them: no tracker here, only their state
    assert worker.known == {} and out.getvalue() == (
        "log: .shardline/trackers/abc.json is damaged (not the trackers' state); each tracker writes its run again "
        "from train.jsonl\n")
    assert json.loads(state.read_text()) == {"run_name": "run", "backends": {}}  # made again
    fsio.write_json(state, {"run_name": "run", "backends": {"tensorboard": {"durable": 4}}})
    assert Worker(io.StringIO(), None, state, "run").recorded(tmp_path) == {"tensorboard": {"durable": 4}}


def test_a_kept_folder_of_another_name_is_left_alone_not_read_as_a_step(tmp_path):
    root, kept = tmp_path / "data" / "checkpoints", tmp_path / ".shardline" / "kept"
    for d in (step_dir(root, 4), step_dir(kept / "run", 4), kept / "run" / "step-latest", kept / "run" / "step-4.bak"):
        d.mkdir(parents=True)
    (step_dir(root, 4) / "manifest.json").write_text("{}")
    shutil.copy(step_dir(root, 4) / "manifest.json", step_dir(kept / "run", 4) / "manifest.json")
    said: list[str] = []
    assert checkpoint.tidy_kept(kept, root, None, said.append) == [] and said == []
    assert (kept / "run" / "step-latest").is_dir()  # not the line's: untouched
