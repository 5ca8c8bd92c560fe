"""Dataset sources (`dataset:` in a source, shardline/data/hfdatasets.py): read through `datasets`,
offline, from folders these tests build: a repository in the Hub's layout, what save_to_disk
writes, and the local Hub cache (its own layout: refs/<branch> -> commit, snapshots/<commit>/)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardline.core import extras
from shardline.core import fsio
from shardline.core.errors import BadInput, ConfigError
from shardline.data import download, hfdatasets
from tests.conftest import REPO, env_for, make_project, write_params, small_params

CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
  - split: test
    path: data/test-*
- config_name: code
  data_files:
  - split: train
    path: code/train-*
---
# A test dataset
"""
TEXTS = [f"document {i}: " + "words of plain text " * (4 + i % 9) for i in range(230)]
QUIET = dict(log=lambda _: None)


def hub_repo(folder, texts=TEXTS):
    """A dataset repository in the Hub's layout: data files named by split, a card naming the configs."""
    (folder / "data").mkdir(parents=True)
    (folder / "code").mkdir()
    pq.write_table(pa.table({"text": texts[:150], "n": list(range(150))}), folder / "data" / "train-00000-of-00002.parquet")
    pq.write_table(pa.table({"text": texts[150:200], "n": list(range(50))}), folder / "data" / "train-00001-of-00002.parquet")
    pq.write_table(pa.table({"text": texts[200:]}), folder / "data" / "test-00000-of-00001.parquet")
    pq.write_table(pa.table({"body": ["def f():\n    return 1\n"] * 7}), folder / "code" / "train-00000-of-00001.parquet")
    (folder / "README.md").write_text(CARD)
    return folder


def no_stream(*a, **k):
    raise AssertionError("a rerun of the same version opened the stream")


@pytest.fixture
def small_files(monkeypatch):
    """Many small files and row groups, so resume and file boundaries are exercised on little data."""
    monkeypatch.setattr(hfdatasets, "ROWS", 16)
    monkeypatch.setattr(hfdatasets, "FILE_BYTES", 4000)


def texts_of(layout, manifest, column="text") -> list:
    return [t for f in manifest["files"] for t in
            pq.read_table(layout.raw_files(manifest["source"]) / f["path"]).column(column).to_pylist()]


def test_a_local_repository_streams_into_parquet_files_and_a_rerun_at_the_same_content_reads_nothing(
        tmp_path, small_files, monkeypatch):
    repo = hub_repo(tmp_path / "repo")
    params, layout = make_project(tmp_path / "p", [{"name": "web", "dataset": {"name": str(repo)}},
                                                   {"name": "code", "dataset": {"name": str(repo), "config": "code"},
                                                    "text_field": "body"}])
    m = download.run(params, layout, **QUIET)
    web = m["web"]
    assert texts_of(layout, web) == TEXTS[:200]  # the train split, in order; the test split not
    assert texts_of(layout, m["code"], "body") == ["def f():\n    return 1\n"] * 7
    assert web["dataset"] == {"name": str(repo), "config": None, "split": "train", "revision": None}
    assert web["revision"] is None and web["format"] == "parquet" and web["uri"] is None
    assert [f["path"] for f in web["files"]] == [f"train-{i:05d}.parquet" for i in range(len(web["files"]))]
    assert len(web["files"]) > 3 and sum(f["rows"] for f in web["files"]) == 200
    for f in web["files"]:
        assert fsio.sha256_file(layout.raw_files("web") / f["path"]) == f["sha256"]
    assert json.loads(layout.manifest("web").read_text()) == web and not layout.stream_note("web").exists()

    monkeypatch.setattr(hfdatasets, "open_stream", no_stream)
    mtimes = {p: p.stat().st_mtime_ns for p in layout.raw_files("web").iterdir()}
    assert download.run(params, layout, **QUIET) == m
    assert {p: p.stat().st_mtime_ns for p in layout.raw_files("web").iterdir()} == mtimes


def test_new_content_in_the_folder_is_a_new_version_and_the_old_files_go(tmp_path, small_files):
    repo = hub_repo(tmp_path / "repo")
    params, layout = make_project(tmp_path / "p", [{"name": "web", "dataset": {"name": str(repo)}}])
    first = download.run(params, layout, **QUIET)["web"]
    pq.write_table(pa.table({"text": TEXTS[:40], "n": list(range(40))}), repo / "data" / "train-00001-of-00002.parquet")
    second = download.run(params, layout, **QUIET)["web"]
    assert second["content"] != first["content"] and texts_of(layout, second) == TEXTS[:150] + TEXTS[:40]
    assert sorted(p.name for p in layout.raw_files("web").iterdir()) == [f["path"] for f in second["files"]]


def test_save_to_disk_folders_a_dataset_and_a_dataset_dict(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"text": TEXTS[:30], "n": list(range(30))}).save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": TEXTS[:20]}),
                          "validation": datasets.Dataset.from_dict({"text": TEXTS[20:25]})}).save_to_disk(str(tmp_path / "dict"))
    params, layout = make_project(tmp_path / "p", [{"name": "one", "dataset": {"name": "../one"}},
                                                   {"name": "val", "dataset": {"name": "../dict", "split": "validation"}}])
    m = download.run(params, layout, **QUIET)
    assert texts_of(layout, m["one"]) == TEXTS[:30] and texts_of(layout, m["val"]) == TEXTS[20:25]
    assert m["one"]["content"] and m["one"]["dataset"]["name"] == "../one"  # relative: the project root's
    for ds, says in [({"name": "../dict", "split": "test"},
                      "sources[x].dataset.split: 'test' is not a split of ../dict (splits: train, validation)"),
                     ({"name": "../one", "config": "en"}, "sources[x].dataset.config: 'en', but ../one is a "
                      "save_to_disk folder, which has no configs; remove the config")]:
        params, layout = make_project(tmp_path / "q", [{"name": "x", "dataset": ds}])
        with pytest.raises(BadInput, match=re.escape(says)):
            download.run(params, layout, **QUIET)


def test_a_hub_dataset_resolves_its_revision_to_a_commit_from_the_local_hub_cache(tmp_path, monkeypatch):
    commit = "89abcdef0123456789abcdef0123456789abcdef"
    cache = tmp_path / "hub" / "datasets--org--web"
    hub_repo(cache / "snapshots" / commit)
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    params, layout = make_project(tmp_path / "p", [{"name": "web", "dataset": {"name": "org/web", "split": "test",
                                                                                "revision": "main"}}])
    m = download.run(params, layout, **QUIET)["web"]
    assert m["revision"] == commit and all(f["revision"] == commit for f in m["files"])
    assert m["dataset"] == {"name": "org/web", "config": None, "split": "test", "revision": "main"}
    assert m["content"] is None and texts_of(layout, m) == TEXTS[200:]
    # the commit itself is the same version as the branch that named it: nothing is read again
    params, layout = make_project(tmp_path / "p", [{"name": "web", "dataset": {"name": "org/web", "split": "test",
                                                                                "revision": commit}}])
    monkeypatch.setattr(hfdatasets, "open_stream", no_stream)
    assert download.run(params, layout, **QUIET)["web"]["files"] == m["files"]
    monkeypatch.undo()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    params, layout = make_project(tmp_path / "q", [{"name": "web", "dataset": {"name": "org/web", "revision": "v9"}}])
    with pytest.raises(BadInput, match=re.escape("sources[web].dataset.name: 'org/web' at 'v9' is neither a local "
                                                 "folder nor a Hub dataset that resolves")):
        download.run(params, layout, **QUIET)


@pytest.mark.parametrize("dataset, field, says", [
    ({"split": "validation"}, "text", "sources[web].dataset.split: 'validation' is not a split of {repo} (splits: train, test)"),
    ({"config": "prose"}, "text", "sources[web].dataset.config: 'prose' is not a config of {repo} (configs: default, code)"),
    ({}, "content", "sources[web].text_field: 'content' is not a column of {repo} (columns: text, n); "
                    "set sources[web].text_field"),
    ({}, "n", "sources[web].text_field: column 'n' of {repo} is Value('int64'), not text; name a string column"),
    ({"revision": "v1"}, "text", "sources[web].dataset.revision: 'v1', but {repo} is a local folder"),
    ({"name": "nobody/nothing"}, "text", "sources[web].dataset.name: 'nobody/nothing' at 'main' is neither a local "
                                         "folder nor a Hub dataset that resolves"),
])
def test_a_wrong_name_config_split_or_field_is_one_line_naming_the_source_and_field(tmp_path, dataset, field, says):
    repo = hub_repo(tmp_path / "repo")
    params, layout = make_project(tmp_path / "p", [{"name": "web", "dataset": {"name": str(repo), **dataset},
                                                    "text_field": field}])
    with pytest.raises(BadInput) as e:
        download.run(params, layout, **QUIET)
    assert str(e.value).startswith(says.format(repo=repo)) and "\n" not in str(e.value)
    assert not layout.manifest("web").exists()


def test_params_take_a_uri_or_a_dataset(tmp_path):
    from shardline import paramsfile

    for source, says in [({"dataset": {"name": "a/b"}, "uri": "x.txt"}, "sources[0].uri: give a uri (files) or a dataset"),
                         ({}, "sources[0].uri: missing; give a uri (files) or a dataset"),
                         ({"dataset": {"name": "a/b"}, "format": "jsonl"}, "sources[0].format: a dataset source is "
                          "written as parquet files; leave format out"),
                         ({"dataset": {"name": "a/b", "splt": "x"}}, "sources[0].dataset.splt")]:
        write_params(tmp_path, small_params([{"name": "s", **({"format": "txt"} if "dataset" not in source else {}),
                                              **source}]))
        with pytest.raises(ConfigError, match=re.escape(says)):
            paramsfile.load(tmp_path / "params.yaml")


def run_download(root: str) -> None:
    """The download stage in this process, as `shardline stage download` runs it, with small files
    (the kill test's subprocess)."""
    from shardline import paramsfile
    from shardline.core.layout import Layout

    hfdatasets.ROWS, hfdatasets.FILE_BYTES = 16, 4000
    download.run(paramsfile.load(f"{root}/params.yaml"), Layout.at(root))


def test_a_killed_download_resumes_after_its_last_file_and_writes_an_unbroken_runs_files(tmp_path):
    repo = hub_repo(tmp_path / "repo")
    cmd = lambda root: [sys.executable, "-c", f"from tests.integration.test_hfdatasets import run_download; "
                                              f"run_download({str(root)!r})"]
    for root in (tmp_path / "killed", tmp_path / "whole"):
        root.mkdir()
        write_params(root, small_params([{"name": "web", "dataset": {"name": str(repo)}}]))
    log = tmp_path / "chaos.log"
    r = subprocess.run(cmd(tmp_path / "killed"), cwd=REPO, capture_output=True, text=True, timeout=120,
                       env=env_for(SHARDLINE_CHAOS="download.file#3", SHARDLINE_CHAOS_LOG=str(log),
                                   SHARDLINE_CHAOS_DONE_LOG=str(log)))
    assert r.returncode == -9, r.stderr
    raw = tmp_path / "killed" / "data" / "raw" / "web"
    assert not (raw / "manifest.json").exists() and len(json.loads((raw / "stream.json").read_text())["files"]) == 3
    r = subprocess.run(cmd(tmp_path / "killed"), cwd=REPO, capture_output=True, text=True, timeout=120,
                       env=env_for(SHARDLINE_CHAOS_DONE_LOG=str(log)))
    assert r.returncode == 0 and "resuming after 3 file(s) written" in r.stdout + r.stderr, r.stderr
    done = [ln.split()[2] for ln in log.read_text().splitlines() if ln.startswith("done ")]
    assert len(done) == len(set(done)) > 3  # no file written twice over the two runs
    subprocess.run(cmd(tmp_path / "whole"), cwd=REPO, check=True, capture_output=True, timeout=120, env=env_for())
    killed, whole = (json.loads((root / "data" / "raw" / "web" / "manifest.json").read_text())
                     for root in (tmp_path / "killed", tmp_path / "whole"))
    assert killed == whole and [f"web/{f['path']}" for f in whole["files"]] == done


def test_without_datasets_installed_a_dataset_source_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    repo = hub_repo(tmp_path / "repo")
    params, layout = make_project(tmp_path / "p", [{"name": "web", "dataset": {"name": str(repo)}}])
    monkeypatch.setitem(sys.modules, "datasets", None)  # what `import datasets` meets where it is not installed
    with pytest.raises(extras.MissingExtra, match=re.escape("sources[web].dataset needs datasets: pip install 'shardline[hf]'")):
        download.run(params, layout, **QUIET)


def cut(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def saved_to_disk(folder, split=None):
    import datasets

    ds = datasets.Dataset.from_dict({"text": TEXTS[:120]})
    (datasets.DatasetDict({split: ds}) if split else ds).save_to_disk(str(folder))
    return folder


# a local dataset damaged: (how the folder is made, what is done to it, the file named, what is said of it)
DAMAGED = {
    "parquet cut": (hub_repo, lambda f: cut(f / "data" / "train-00001-of-00002.parquet"),
                    "data/train-00001-of-00002.parquet", "damaged (ArrowInvalid: Parquet magic bytes not found in footer"),
    "parquet emptied": (hub_repo, lambda f: (f / "data" / "train-00000-of-00002.parquet").write_bytes(b""),
                        "data/train-00000-of-00002.parquet", "damaged (ArrowInvalid: Parquet file size is 0 bytes)"),
    "arrow cut": (saved_to_disk, lambda f: cut(f / "data-00000-of-00001.arrow"), "data-00000-of-00001.arrow",
                  "damaged (OSError: Expected to be able to read"),
    "arrow missing": (saved_to_disk, lambda f: (f / "data-00000-of-00001.arrow").unlink(), "data-00000-of-00001.arrow",
                      "missing (state.json names it)"),
    "state.json cut": (saved_to_disk, lambda f: cut(f / "state.json"), "state.json", "damaged (JSONDecodeError: "),
    "state.json an array": (saved_to_disk, lambda f: (f / "state.json").write_text("[]"), "state.json",
                            "damaged (holds a JSON array, not an object)"),
    "dataset_dict.json of the wrong type": (lambda f: saved_to_disk(f, "train"),
                                            lambda f: (f / "dataset_dict.json").write_text('{"splits": 3}'),
                                            "dataset_dict.json",
                                            "damaged (field 'splits' is a JSON number, not a list of names)"),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_local_dataset_is_one_line_naming_its_file_and_what_was_written_stays(tmp_path, small_files, case,
                                                                                        capfd):
    make, damage, name, said = DAMAGED[case]
    folder = make(tmp_path / "dataset")
    params, layout = make_project(tmp_path / "p", [{"name": "web", "dataset": {"name": str(folder)}}])
    whole = download.run(params, layout, **QUIET)["web"]  # the intact dataset, downloaded once
    shutil.rmtree(layout.raw)
    damage(folder)
    capfd.readouterr()
    with pytest.raises(BadInput) as e:
        download.run(params, layout, **QUIET)
    assert str(e.value).startswith(f"sources[web].dataset: {folder / name}: {said}") and "\n" not in str(e.value)
    assert str(e.value).endswith(f"; restore that file of {folder} (or fetch the dataset again), then re-run: the files "
                                 "written so far are kept"), str(e.value)
    out, err = capfd.readouterr()
    assert out + err == ""  # datasets' own log lines ("Failed to read file ...") and pyarrow's "Exception ignored" too
    assert not layout.manifest("web").exists()
    if case == "parquet cut":  # the first parquet's records came through: kept, with the note that names them
        note = json.loads(layout.stream_note("web").read_text())
        assert note["files"] and all((layout.raw_files("web") / f["path"]).is_file() for f in note["files"])
        shutil.rmtree(folder)
        make(folder)  # the file restored: the unbroken run's files
        assert download.run(params, layout, **QUIET)["web"] == whole


def test_a_damaged_file_in_the_local_hub_cache_is_named_too(tmp_path, monkeypatch):
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = hub_repo(tmp_path / "hub" / "datasets--org--web" / "snapshots" / commit)
    (tmp_path / "hub" / "datasets--org--web" / "refs").mkdir()
    (tmp_path / "hub" / "datasets--org--web" / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cut(snapshot / "data" / "test-00000-of-00001.parquet")
    params, layout = make_project(tmp_path / "p", [{"name": "web", "dataset": {"name": "org/web", "split": "test"}}])
    with pytest.raises(BadInput) as e:
        download.run(params, layout, **QUIET)
    assert str(e.value).startswith(f"sources[web].dataset: {snapshot / 'data' / 'test-00000-of-00001.parquet'}: "
                                   "damaged (ArrowInvalid: "), str(e.value)


def stopped_after(monkeypatch, files: int):
    """hfdatasets writing `files` files, then stopping as a kill would (the note holds them)."""
    write, made = hfdatasets._write_file, []

    def once(*a, **k):
        if len(made) == files:
            raise KeyboardInterrupt
        made.append(write(*a, **k))
        return made[-1]

    monkeypatch.setattr(hfdatasets, "_write_file", once)


def moved(note: dict) -> dict:
    """The note with its stream's position set back to the start: a state `datasets` reads without a
    word, and the records of the files written would come again."""
    note = json.loads(json.dumps(note))
    note["state"]["examples_iterable"]["batch_idx"] = 0
    return note


NOTE_DAMAGE = {"emptied": (lambda n: "", "empty"),
               "cut short": (lambda n: json.dumps(n)[:40], "not valid JSON (truncated or damaged)"),
               "an array": (lambda n: "[]", "holds a JSON array, not the note's object"),
               "its state emptied": (lambda n: json.dumps({**n, "state": {}}), "does not match its digest (edited or damaged)"),
               "its position moved": (lambda n: json.dumps(moved(n)), "does not match its digest (edited or damaged)"),
               "a file entry of the wrong type": (lambda n: json.dumps({**n, "files": [{"path": 3}]}),
                                                  "does not match its digest (edited or damaged)")}


@pytest.mark.parametrize("case", list(NOTE_DAMAGE))
def test_a_damaged_stream_note_is_said_and_the_stream_starts_over_to_an_unbroken_runs_files(tmp_path, small_files,
                                                                                          monkeypatch, case):
    repo = hub_repo(tmp_path / "repo")
    params, layout = make_project(tmp_path / "whole", [{"name": "web", "dataset": {"name": str(repo)}}])
    whole = download.run(params, layout, **QUIET)["web"]
    params, layout = make_project(tmp_path / "p", [{"name": "web", "dataset": {"name": str(repo)}}])
    with monkeypatch.context() as m:
        stopped_after(m, 3)
        with pytest.raises(KeyboardInterrupt):
            download.run(params, layout, **QUIET)
    note = layout.stream_note("web")
    damage, said = NOTE_DAMAGE[case]
    good = json.loads(note.read_text())
    assert len(good["files"]) == 3 and good["state"]["examples_iterable"]["batch_idx"] > 0
    note.write_text(damage(good))
    lines = []
    got = download.run(params, layout, log=lines.append)["web"]
    assert got == whole and texts_of(layout, got) == TEXTS[:200]  # no record twice, none skipped
    assert [ln for ln in lines if "stream.json" in ln] == [
        f"download: data/raw/web/stream.json: {said}; the stream starts over (the files it wrote are written again)"]
    assert not any("resuming" in ln for ln in lines)
