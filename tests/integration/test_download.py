import hashlib
import json
import os
import re

import pytest

from shardline.core import fsio
from shardline.data import download
from shardline.core.errors import BadInput, ChecksumMismatch
from tests.conftest import make_project
from harness.servers import FlakyServer


def test_local_glob_dir_and_file_uri(tmp_path, code_dir):
    params, layout = make_project(tmp_path / "p", [
        {"name": "g", "uri": str(code_dir / "*.py"), "format": "txt"},
        {"name": "d", "uri": f"file://{code_dir}", "format": "txt"},
    ])
    m = download.run(params, layout, log=lambda _: None)
    assert [f["path"] for f in m["g"]["files"]] == sorted(os.listdir(code_dir))
    assert m["g"]["files"] == m["d"]["files"]
    for f in m["g"]["files"]:
        assert fsio.sha256_file(layout.raw / "g" / "files" / f["path"]) == f["sha256"]
    assert json.loads((layout.raw / "g" / "manifest.json").read_text()) == m["g"]


def test_builtin_sources_are_found_at_run_time(tmp_path):
    params, layout = make_project(tmp_path, [{"name": "code", "uri": "builtin://python-stdlib", "format": "txt"},
                                             {"name": "prose", "uri": "builtin://pydoc-topics", "format": "jsonl"}])
    m = download.run(params, layout, log=lambda _: None)
    paths = [f["path"] for f in m["code"]["files"]]
    assert "os.py" in paths and "json/decoder.py" in paths
    assert not any(p.startswith("test/") or "/test_" in p or p.startswith("test_") for p in paths)
    assert m["code"]["bytes"] > 5e6 and m["prose"]["bytes"] > 2e5


def test_rerun_skips_and_removes_what_params_no_longer_name(tmp_path, code_dir):
    params, layout = make_project(tmp_path / "p", [{"name": "g", "uri": str(code_dir), "format": "txt"}])
    download.run(params, layout, log=lambda _: None)
    victim = sorted(code_dir.iterdir())[0]
    stale = layout.raw / "g" / "files" / victim.name
    victim.unlink()
    (layout.raw / "old").mkdir()
    before = {p: p.stat().st_mtime_ns for p in (layout.raw / "g" / "files").iterdir() if p != stale}
    download.run(params, layout, log=lambda _: None)
    assert not stale.exists() and not (layout.raw / "old").exists()
    assert {p: p.stat().st_mtime_ns for p in (layout.raw / "g" / "files").iterdir()} == before


def test_http_source_with_sha256(tmp_path, code_dir):
    blob = b"".join(p.read_bytes() for p in sorted(code_dir.iterdir()))
    with FlakyServer({"/corpus.txt": blob}, seed=3, p_drop=0.3, p_503=0.3) as srv:
        params, layout = make_project(tmp_path / "p", [{"name": "web", "uri": srv.url("/corpus.txt"), "format": "txt",
                                                        "sha256": hashlib.sha256(blob).hexdigest()}],
                                      download={"backoff_s": 0.01})
        m = download.run(params, layout, log=lambda _: None)
        assert (layout.raw / "web" / "files" / "corpus.txt").read_bytes() == blob
        assert m["web"]["files"][0]["origin"] == srv.url("/corpus.txt")
        assert srv.sent["/corpus.txt"] <= 1.5 * len(blob)


def test_wrong_sha256_promotes_nothing(tmp_path):
    with FlakyServer({"/a.txt": b"hello world\n" * 100}) as srv:
        params, layout = make_project(tmp_path, [{"name": "web", "uri": srv.url("/a.txt"), "format": "txt",
                                                  "sha256": "0" * 64}])
        with pytest.raises(ChecksumMismatch, match="expected 0000.*got .*params.yaml"):
            download.run(params, layout, log=lambda _: None)
    files = layout.raw / "web" / "files"
    assert not any(files.iterdir()) and not (layout.raw / "web" / "manifest.json").exists()


def test_no_match_and_sha_on_many_files_are_clear_errors(tmp_path, code_dir):
    params, layout = make_project(tmp_path / "p", [{"name": "g", "uri": str(tmp_path / "nope/*.txt"), "format": "txt"}])
    with pytest.raises(BadInput, match=r"sources\[g\].uri: .* matched no files"):
        download.run(params, layout, log=lambda _: None)
    params, layout = make_project(tmp_path / "q", [{"name": "g", "uri": str(code_dir), "format": "txt",
                                                    "sha256": "a" * 64}])
    with pytest.raises(BadInput, match="a sha256 pins exactly one file"):
        download.run(params, layout, log=lambda _: None)


def test_hf_source_pins_the_revision_and_fetches_only_the_glob_from_the_local_hub_cache(tmp_path, monkeypatch):
    """hf:// runs through huggingface_hub's snapshot_download. Offline (HF_HUB_OFFLINE=1) the local Hub
    cache answers: it is built here in the cache's own layout (refs/<branch> -> commit, snapshots/<commit>/)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "datasets--org--web"
    snap = repo / "snapshots" / commit
    (snap / "data").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    rows = [f"document number {i} " * 5 for i in range(50)]
    pq.write_table(pa.table({"text": rows[:30]}), snap / "data" / "train-00000.parquet")
    pq.write_table(pa.table({"text": rows[30:]}), snap / "data" / "train-00001.parquet")
    pq.write_table(pa.table({"text": ["held out"]}), snap / "data" / "test-00000.parquet")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    uri = "hf://datasets/org/web@main/data/train-*.parquet"
    params, layout = make_project(tmp_path / "p", [{"name": "web", "uri": uri, "format": "parquet"}])
    m = download.run(params, layout, log=lambda _: None)["web"]
    assert m["revision"] == commit and [f["path"] for f in m["files"]] == ["data/train-00000.parquet",
                                                                             "data/train-00001.parquet"]
    assert all(f["revision"] == commit for f in m["files"])  # each file says which commit it came from
    got = [t for f in m["files"] for t in pq.read_table(layout.raw_files("web") / f["path"]).column("text").to_pylist()]
    assert got == rows
    for bad, says in [("hf://datasets/org/web@v9/data/*.parquet", "must be in the local Hub cache"),
                      ("hf://datasets/org/web/data/*.parquet", "write hf://datasets/<org>/<name>@<revision>/<glob>"),
                      ("hf://datasets/org/web@main/nothing/*.parquet", "matched no files at commit " + commit)]:
        params, layout = make_project(tmp_path / "q", [{"name": "web", "uri": bad, "format": "parquet"}])
        with pytest.raises(BadInput, match=re.escape(says)):
            download.run(params, layout, log=lambda _: None)


def test_a_list_of_uris_is_one_source_in_order_and_names_must_not_clash(tmp_path, code_dir):
    files = sorted(code_dir.glob("*.py"))[:3]
    params, layout = make_project(tmp_path / "p", [{"name": "l", "uri": [str(files[2]), str(files[0])], "format": "txt"}])
    m = download.run(params, layout, log=lambda _: None)["l"]
    assert [f["path"] for f in m["files"]] == [files[2].name, files[0].name] and m["uri"] == [str(files[2]), str(files[0])]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / files[0].name).write_text("x")
    params, layout = make_project(tmp_path / "q", [{"name": "l", "uri": [str(files[0]), str(tmp_path / "other" / files[0].name)],
                                                    "format": "txt"}])
    with pytest.raises(BadInput, match=f"would both be stored as '{files[0].name}'"):
        download.run(params, layout, log=lambda _: None)


def test_an_http_file_changed_on_the_server_is_fetched_again_by_its_etag(tmp_path):
    files = {"/a.jsonl": b'{"text": "first version"}\n', "/b.jsonl": b'{"text": "stays"}\n'}
    with FlakyServer(files) as srv:
        params, layout = make_project(tmp_path, [{"name": "web", "uri": [srv.url("/a.jsonl"), srv.url("/b.jsonl")],
                                                  "format": "jsonl"}])
        first = download.run(params, layout, log=lambda _: None)["web"]["files"]
        assert [f["etag"] for f in first] == ['"' + hashlib.sha256(d).hexdigest()[:16] + '"' for d in files.values()]
        gets = srv.requests.copy()
        assert download.run(params, layout, log=lambda _: None)["web"]["files"] == first and srv.requests == gets
        srv.files["/a.jsonl"] = b'{"text": "second version"}\n'
        logs: list[str] = []
        again = download.run(params, layout, log=logs.append)["web"]["files"]
    assert again[1] == first[1] and again[0]["sha256"] == hashlib.sha256(srv.files["/a.jsonl"]).hexdigest()
    assert (layout.raw_files("web") / "a.jsonl").read_bytes() == srv.files["/a.jsonl"]
    assert any("changed on the server (ETag" in line for line in logs)


def test_a_run_killed_between_the_file_and_the_manifest_still_records_the_files_etag(tmp_path):
    """The chaos suite found it (bench.chaos --seed 1): a download killed after an HTTP file was
    promoted but before the manifest was written lost the file's ETag on the rerun, so the
    manifest differed from an unkilled run's. The note beside the file keeps it until the manifest
    records it; a resume asks If-Range with it."""
    from shardline.data import http

    body = b'{"text": "one version"}\n' * 50
    with FlakyServer({"/a.jsonl": body}) as srv:
        params, layout = make_project(tmp_path, [{"name": "web", "uri": srv.url("/a.jsonl"), "format": "jsonl"}])
        dest = layout.raw_files("web") / "a.jsonl"
        http.fetch(srv.url("/a.jsonl"), dest)  # what the killed run did: the file, promoted; no manifest
        files = download.run(params, layout, log=lambda _: None)["web"]["files"]
    assert files[0]["etag"] == '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
    assert sorted(p.name for p in dest.parent.iterdir()) == ["a.jsonl"]  # the note goes once the manifest holds it
