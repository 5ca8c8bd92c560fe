"""A stage's output as a datasets.Dataset (shardline/data/views.py), held equal to what the stages
wrote: the clean documents `stage.documents` reads, and the blocks of the shard files."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from shardline.core import extras, shardformat
from shardline.core.errors import BadInput
from shardline.data import download, shard, tokenize, views
from shardline.data.clean.stage import run as clean
from tests.conftest import make_project
from tests.integration.test_hfdatasets import TEXTS, hub_repo

QUIET = dict(log=lambda _: None)


def line(tmp_path, code_dir, **sections):
    repo = tmp_path / "repo"
    if not repo.exists():
        hub_repo(repo, [t + " and more words" * (i % 3) for i, t in enumerate(TEXTS)])
    params, layout = make_project(tmp_path / "p", [{"name": "web", "dataset": {"name": str(repo)}},
                                                   {"name": "code", "uri": str(code_dir), "format": "txt"}],
                                  eval={"fraction": 0.1, "min_docs": 2, "every": 0}, **sections)
    for stage in (download, clean, tokenize, shard):
        stage.run(params, layout, **QUIET)
    return layout


def documents(layout, source: str, side: str, column: str = "text") -> list:
    return [t for part in sorted((layout.clean / source).glob("part-*.parquet"))
            for batch in clean.documents(part, side, column=column) for t in batch]


def test_clean_parts_open_as_a_memory_mapped_dataset_equal_to_what_tokenize_reads(tmp_path, code_dir):
    layout = line(tmp_path, code_dir)
    for source in ("web", "code"):
        for side in ("train", "val"):
            ds = views.clean_dataset(layout.root, source, side, cache_dir=str(tmp_path / "cache"))
            assert ds["text"] == documents(layout, source, side) and ds["id"] == documents(layout, source, side, "id")
            assert len(ds) > 0 and ds.cache_files and ds.cache_files[0]["filename"].startswith(str(tmp_path / "cache"))
    assert views.clean_dataset(layout.root, "web", cache_dir=str(tmp_path / "cache"))["id"][:2] == [
        "train-00000.parquet:1", "train-00000.parquet:2"]
    # parts rewritten under the same names (stricter rules): the view follows them, not its cache
    layout = line(tmp_path, code_dir, clean={"part_mb": 0.05, "min_chars": 200})
    ds = views.clean_dataset(layout.root, "web", cache_dir=str(tmp_path / "cache"))
    assert ds["text"] == documents(layout, "web", "train") and min(map(len, ds["text"])) >= 200


def test_token_blocks_open_as_a_dataset_equal_to_the_shards(tmp_path, code_dir):
    layout = line(tmp_path, code_dir)
    for side in ("train", "val"):
        ds = views.blocks_dataset(layout.root, side=side).with_format("numpy")[:]  # every row, as arrays
        want, where = [], []
        for source in ("code", "web"):  # by name
            index = shardformat.verify(layout.shards_of(source, side))
            for entry in index["shards"]:
                blocks = shardformat.blocks(layout.shards_of(source, side) / entry["file"], np.dtype("<u2"), 65)
                want.append(blocks)
                where += [(source, entry["file"], b) for b in range(len(blocks))]
        assert len(ds["block"]) == len(where) > 0
        assert np.array_equal(ds["input_ids"], np.concatenate(want))
        assert list(zip(ds["source"], ds["shard"], ds["block"].tolist())) == where
    one = views.blocks_dataset(layout.root, "web")
    assert set(one["source"]) == {"web"} and len(one) == shardformat.verify(layout.shards_of("web"))["total_blocks"]
    assert (one.features["input_ids"].length, one.features["input_ids"].feature.dtype) == (65, "uint16")  # as stored
    with pytest.raises(BadInput, match="data/shards/nope/index.json: missing; run 'dvc repro shard' first"):
        views.blocks_dataset(layout.root, "nope")
    with pytest.raises(BadInput, match="side: 'test'; give one of train, val"):
        views.clean_dataset(layout.root, "web", "test")


def test_without_datasets_installed_a_view_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # what `import datasets` meets where it is not installed
    with pytest.raises(extras.MissingExtra, match=re.escape("needs datasets: pip install 'shardline[hf]'")):
        views.blocks_dataset(tmp_path)
