"""parts.store (shardline.data.staging) on a filesystem store (file://), in-process: fast checks of
what tests/integration/test_runners.py shows on Dask workers and S3. The data half staged through
the store writes the bytes of the unstaged one; a part a worker finished and the driver never took
is taken, not redone; a re-run puts nothing again; damage in the store is one line naming it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from shardline.context import RunContext
from shardline.core.errors import BadInput
from shardline.data import download, staging
from shardline.data.clean.stage import run as clean
from shardline.orchestration.tasks.invoke import invoke
from tests.conftest import make_project

HALF = ("clean", "tokenize", "shard")


def _build(root: Path, src: Path, **parts):
    params, layout = make_project(root, [{"name": "code", "uri": str(src), "format": "txt"}],
                                  clean={"part_mb": 0.05, "near_dedup": {}}, parts=parts)
    download.run(params, layout, log=lambda _: None)
    return params, layout


def _half(params, layout, stages=HALF) -> None:
    for name in stages:
        invoke(name, params, layout, RunContext(log=lambda _: None))


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in ("data/clean", "data/tokenizer", "data/tokens", "data/shards")
            for p in sorted((root / d).rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    from harness.projects import stdlib_dir

    return stdlib_dir(tmp_path_factory.mktemp("src"), 10)


def test_staged_through_a_store_the_data_half_writes_the_unstaged_bytes(tmp_path, src, monkeypatch):
    ref = _build(tmp_path / "ref", src)
    _half(*ref)
    monkeypatch.chdir(tmp_path)  # the "workers" (this process) keep their scratch here
    store = tmp_path / "store"
    params, layout = _build(tmp_path / "staged", src, store=store.as_uri())
    _half(params, layout)
    assert _tree(layout.root) == _tree(ref[1].root)
    held = {p.relative_to(store).as_posix() for p in store.rglob("*") if p.is_file()}
    assert {k for k in _tree(layout.root) if k.startswith(("data/shards/", "data/tokens/"))} <= held
    assert not list((tmp_path / staging.SCRATCH).iterdir())

    puts = []
    put = staging.put
    monkeypatch.setattr(staging, "put", lambda fs, local, remote: (puts.append(remote), put(fs, local, remote)))
    _half(params, layout)  # nothing changed: every part done, every input the store holds already
    assert puts == [], puts


def test_a_part_the_driver_never_took_is_taken_from_the_store_not_redone(tmp_path, src, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params, layout = _build(tmp_path / "p", src, store=(tmp_path / "store").as_uri())
    _half(params, layout, ("clean",))
    before = _tree(layout.root)
    part = sorted(layout.clean.rglob("part-00001.parquet"))[0]
    for f in (part, clean.clean_marker_of(part)):  # the driver died after the worker finished
        f.unlink()
    done = []
    monkeypatch.setattr(clean, "clean_part", lambda p: done.append(p.name))
    _half(params, layout, ("clean",))
    assert done == [] and _tree(layout.root) == before


def test_a_part_the_store_holds_only_in_part_is_redone_not_taken(tmp_path, src, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    params, layout = _build(tmp_path / "p", src, store=store.as_uri())
    _half(params, layout, ("clean",))
    before = _tree(layout.root)
    part = sorted(layout.clean.rglob("part-00001.parquet"))[0]
    part.unlink()
    clean.clean_marker_of(part).unlink()
    held = store / part.relative_to(layout.root)
    held.write_bytes(held.read_bytes()[:-7])  # its marker in the store vouches for other bytes
    done = []
    cleaned = clean.clean_part
    monkeypatch.setattr(clean, "clean_part", lambda p: (done.append(p.name), cleaned(p))[1])
    _half(params, layout, ("clean",))
    assert done == [part.parent.name + "/" + part.stem] and _tree(layout.root) == before


def test_an_input_outside_the_project_is_refused_naming_it(tmp_path):
    st = staging.Staging("file:///tmp/store", str(tmp_path / "project"))
    with pytest.raises(BadInput, match="lies outside the project; with parts.store the workers see only the store"):
        st.remote(tmp_path / "elsewhere" / "blocklist.txt")
