"""Same documents, same shards: how a corpus is packaged (one file or many, its name, its
compression) moves no document between training and held-out and changes no byte of a shard."""

from __future__ import annotations

import bz2
import gzip
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import make_project, run, stdlib_files

pytestmark = pytest.mark.slow


def records() -> list[bytes]:
    """~700 JSON lines of real text: the stdlib's files, cut at blank lines into documents."""
    out = []
    for f in stdlib_files(60):
        for i, chunk in enumerate(f.read_text().split("\n\n")):
            if len(chunk) > 80:
                out.append(json.dumps({"text": chunk, "n": i}).encode() + b"\n")
    return out


def packaged(root: Path, how: str, lines: list[bytes]) -> Path:
    d = root / f"raw-{how}"
    d.mkdir(parents=True)
    if how == "one":
        (d / "corpus.jsonl").write_bytes(b"".join(lines))
    elif how == "cut":  # six gzip files, named so that their order is the corpus's
        step = -(-len(lines) // 6)
        for k in range(6):
            (d / f"part-{k}.jsonl.gz").write_bytes(gzip.compress(b"".join(lines[k * step:(k + 1) * step])))
    else:  # one bzip2 file under another name
        (d / "mirror-2026.json.bz2").write_bytes(bz2.compress(b"".join(lines)))
    return d


def line_of(root: Path, raw: Path) -> dict[str, bytes]:
    # tokenizer.train_max_mb below the text's size: the BPE sample is a choice among documents
    make_project(root, [{"name": "web", "uri": str(raw), "format": "jsonl", "text_field": "text"}],
                 clean={"part_mb": 0.1, "min_chars": 16}, tokenizer={"vocab_size": 400, "train_max_mb": 0.2},
                 eval={"fraction": 0.1, "min_docs": 4, "max_docs": 1000})
    code = ("import sys; from shardline.cli.main import main\n"
            "for s in ('download', 'clean', 'tokenize', 'shard'):\n"
            "    rc = main(['--root', sys.argv[1], 'stage', s])\n"
            "    assert rc in (0, None), (s, rc)\n")
    run([sys.executable, "-c", code, str(root)], root)
    shards = root / "data/shards"
    out = {str(p.relative_to(shards)): p.read_bytes() for p in sorted(shards.rglob("*")) if p.is_file()}
    # the held-out set's fingerprint, which every checkpoint's lineage records
    out["heldout"] = json.loads((root / "data/clean/split.json").read_text())["heldout"]
    return out


def test_one_corpus_packaged_three_ways_gives_the_same_shards_and_held_out_set(tmp_path):
    lines = records()
    assert sum(map(len, lines)) > 0.5 * 2**20  # more than the BPE sample and several clean parts
    got = {how: line_of(tmp_path / how, packaged(tmp_path, how, lines)) for how in ("one", "cut", "renamed")}
    assert any(name.startswith("web/val/shard-") for name in got["one"])  # a held-out set to compare
    assert got["one"]["heldout"]["web"]["docs"] > 0
    assert got["cut"] == got["one"] and got["renamed"] == got["one"]
    parts = {how: len(list((tmp_path / how / "data/clean/web").glob("part-*.parquet"))) for how in got}
    assert len(set(parts.values())) > 1, parts  # the packagings were cut into different parts
