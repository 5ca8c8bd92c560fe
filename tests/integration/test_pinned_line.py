"""The default line's bytes, pinned: the shipped params.yaml on its embedded default sources (the
standard library's .py files and pydoc's topics), download through shard, must give these exact
shards and tokenizer.

Unlike tests/unit/test_pinned.py, whose literals come from independent implementations, these
sha256s are what the line gives today, recorded once: a BPE trainer and a whole corpus cannot be
re-derived by hand. That is allowed here only because this test's one purpose is to notice a
change: any edit to cleaning, the held-out split, tokenizer training, encoding or shard packing
that moves a single byte of the default line fails it. If the change is intended, bump the format
version it concerns (shardformat.FORMAT_VERSION for token parts and shards) and record the new
hashes from a run, saying why in the commit.

The embedded data is the running Python's own standard library, so the pins hold for the
Python they were recorded with (PYTHON); on another the test skips rather than blame the code.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from shardline import stages
from shardline.core import config
from shardline.core.layout import Layout
from tests.conftest import REPO

PYTHON = (3, 11, 7)
# sha256 of "<source>/<path> <sha256 of its bytes>\n" over every raw file, sorted: the input itself
RAW = "9e7482e0726f2535049324f1a9664a55f89ba9f2e95ac9f912fbfb4b39168ee1"
TOKENIZER = "45f0516f6fc51083b1ced392bf37ba79a5a72a2f51dbc11ba5f2141e16a4ae91"
SHARDS = {
    "code/shard-00000.bin": "1945f9b482e27989f99ce1d73466a6a28fbbe465626c88777330e950ddcff530",
    "code/shard-00001.bin": "874570f7b60588e858ee156889ea4393b67317dbb01df1c1fb98f8d3db4a75ff",
    "code/shard-00002.bin": "0ed7197502af56d687e4fdfee127d427bfc2fd910348529000c586d999b05f7e",
    "code/shard-00003.bin": "02f77d82702100986afb1f9ec05112d31bec709ce525e2889bc3ca0fbc8e2446",
    "code/shard-00004.bin": "db98cf883d3678ca40662fda4effbe533942d583aeebf817cd2636e25661e964",
    "code/shard-00005.bin": "1f38bc173d8efd9eb557bbe09d6d9378c0f1fadf3d46690ddd56786d048ddb0c",
    "code/val/shard-00000.bin": "07690dffb2e4cebf6503cca04129efce00d36053a85f05abe0077ed1bee38187",
    "prose/shard-00000.bin": "6b1d698da61c97bb211d71b433c9d795361dba06753dad7614430faa3f15af61",
    "prose/val/shard-00000.bin": "57b02b53c56987a05ad19c19eb8fe6a529d898eb2b226816eb36bbc82919db92",
}
# The shard indexes too, so a field added or changed shows here. Each is the index this line wrote
# before format_version existed with "format_version": 1 added (checked when it was added).
INDEXES = {
    "code/index.json": "e1cfcba87aca874f119dcda2db695d2be1fa6d6d3dc274c5ea308fbcea04b304",
    "code/val/index.json": "5b5a469f2e366d029e41171f6eeba1f92c4e9fe9944a1d63f50cbe63b04d2b0c",
    "prose/index.json": "fb8a87be25ee597084fc8491ba930cd0dcb3e8f80ded8c5d4fb362ece2fbda33",
    "prose/val/index.json": "78f9dbdc7135d9721b75a23e7101a78fce2927fafa1a72a774072af686dbf1db",
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def line(tmp_path_factory) -> Layout:
    """The default line, download..shard, run once in a temp project (about 10 s)."""
    if sys.version_info[:3] != PYTHON:
        pytest.skip(f"the default data is this Python's standard library; the pins are for Python {PYTHON}")
    root = tmp_path_factory.mktemp("default-line")
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    params, layout = config.load(root / "params.yaml"), Layout.at(root)
    for stage in ("download", "clean", "tokenize", "shard"):
        stages.run_of(stage)(params, layout, log=lambda _: None)
    return layout


def test_raw_input_is_the_recorded_standard_library(line):
    files = sorted(p for p in line.raw.rglob("*") if p.is_file() and "files" in p.relative_to(line.raw).parts)
    listing = "".join(f"{p.relative_to(line.raw).parts[0]}/{'/'.join(p.relative_to(line.raw).parts[2:])} {_sha(p)}\n"
                      for p in files)
    assert hashlib.sha256(listing.encode()).hexdigest() == RAW


def test_tokenizer_is_pinned(line):
    assert _sha(line.tokenizer_json) == TOKENIZER


def test_shards_are_pinned(line):
    got = {p.relative_to(line.shards).as_posix(): _sha(p) for p in sorted(line.shards.rglob("shard-*.bin"))}
    assert got == SHARDS


def test_shard_indexes_are_pinned(line):
    got = {p.relative_to(line.shards).as_posix(): _sha(p) for p in sorted(line.shards.rglob("index.json"))}
    assert got == INDEXES


def test_every_index_and_token_marker_says_format_version_one(line):
    indexes = sorted(line.tokens.rglob("index.json")) + sorted(line.shards.rglob("index.json"))
    markers = sorted(p for p in line.tokens.rglob("part-*.json"))
    assert len(indexes) == 8 and markers
    assert {json.loads(p.read_text())["format_version"] for p in indexes} == {1}
    assert {json.loads(p.read_text())["stats"]["format_version"] for p in markers} == {1}
