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
TOKENIZER = "c3c33e2fe319edbcc40c18afcf6dee9abe38c95a97bf1c8f42d8481eecca49d1"
SHARDS = {
    "code/shard-00000.bin": "05352f072b2b9c39bf65cc0bf3413841732fc7cfb9aa968655ed3c2035310bae",
    "code/shard-00001.bin": "8f27ca6bcf2f31762ee690af134f69b3c644b56730ea9a01bab2e891a30210f2",
    "code/shard-00002.bin": "a78145f99741a6e888ac71bca2af1dc337a833e62ff3c12a24ea438ae504cb52",
    "code/shard-00003.bin": "0afd99defdea8f49ce2b81836859d5b2944eeb864d02994f937ce2c633653127",
    "code/shard-00004.bin": "d4b3b66690c2186b4fef1ee62575f9eaeae0de32f67ef98e3185a27eae6f5e61",
    "code/shard-00005.bin": "6228a9e25b04d05fe2fc40c3ded1c08af700c6e9f7f7efe8ee3e1d2765486f54",
    "code/val/shard-00000.bin": "d9c42eca0314010c404461c679b48187cbb3edd476ddb6880e0a93b312157cb4",
    "prose/shard-00000.bin": "eff94490c68c39bb8d66eae3310227301e97bcd6fe4d0a96b20484211ab6d950",
    "prose/val/shard-00000.bin": "1fbc06c9437adb11919c518981f5a2a6e07691cb85ea575bf0c3d5a8d40fd05d",
}
# The shard indexes too, so a field added or changed shows here. Recorded again (with the tokenizer
# and shards) when the held-out split was keyed by content and the BPE sample chosen by content
# hash (clean CODE_VERSION 5): which documents are held out, and so the tokenizer, moved once.
INDEXES = {
    "code/index.json": "ddf011c3591b70b37e61ca3b8ac100c8e6fdd04538157746c63c9dc513a142f9",
    "code/val/index.json": "8a9a66585463039b0b5e88be20328f115d0b719c53fe4c6f9c1ab37fe684e66d",
    "prose/index.json": "0271be3afc1f550d2999fcb1fe433c69e051f4611d7839bb6f573199a7cea120",
    "prose/val/index.json": "e27994290462826be05a893d78bd54ca59f8f30785ad40e3e64ff3062f7c8d5d",
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
