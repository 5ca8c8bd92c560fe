"""The held-out split: stable under growth, one side per document, dedup across it, and a
tokenizer that never saw held-out text. Real text: pydoc's prose topics (always present) and,
when ../shared/corpora is there, WikiText-2."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from shardline.core import config, shardformat
from shardline.data import download, tokenize, shard
from shardline.data.clean.stage import split, run as clean
from tests.conftest import CORPORA, make_project

QUIET = dict(log=lambda _: None)


def cfg(**kw) -> config.Eval:
    return config.Eval(**{"every": 0, **kw})


def held_ids(ids: list[str], c: config.Eval, source: str = "s") -> set[str]:
    u = np.array([split.hash_id(source, i) for i in ids], dtype=np.uint64)
    t = split.threshold([u[: len(u) // 2], u[len(u) // 2:]], c)  # two "parts"
    return {i for i, h in zip(ids, t.mask(u)) if h}


def test_unclamped_side_is_a_function_of_the_id_alone():
    ids = [f"f{i}.txt:{j}" for i in range(50) for j in range(1, 40, 3)]
    c = cfg(fraction=0.1, min_docs=0, max_docs=10_000)
    held = held_ids(ids, c)
    cut = int(0.1 * 2**64)
    assert held == {i for i in ids if split.hash_id("s", i) < cut}
    assert 0.07 < len(held) / len(ids) < 0.13  # the hash spreads: about the fraction
    assert held_ids(ids, c, source="t") != held  # keyed by the source too


def test_growth_never_moves_a_training_document_to_held_out():
    """Adding documents: with no clamp binding nothing moves at all; with a clamp, only held-out ->
    training (never the other way, which would put trained-on text in a later held-out set)."""
    rnd = random.Random(5)
    for trial in range(200):
        n = rnd.randint(1, 400)
        pool = [f"doc{trial}-{k}.jsonl:{rnd.randint(1, 10**6)}" for k in range(n + rnd.randint(1, 400))]
        c = cfg(fraction=rnd.choice([0.0, 0.01, 0.05, 0.3]), min_docs=rnd.randint(0, 8), max_docs=rnd.randint(8, 30))
        before, after = pool[:n], pool
        h1, h2 = held_ids(before, c), held_ids(after, c)
        t1 = set(before) - h1
        if len(before) >= 2 * c.min_docs:  # below that the half-cap grows with the source (documented)
            assert not (t1 & h2), (trial, c)
        u = [split.hash_id("s", i) for i in before]
        below = sum(x < int(c.fraction * 2**64) for x in u)
        below2 = sum(split.hash_id("s", i) < int(c.fraction * 2**64) for i in after)
        if c.min_docs <= below and below2 <= c.max_docs and len(before) >= 2 * c.min_docs:
            assert h1 <= h2 and t1 <= set(after) - h2, (trial, c)  # unclamped both times: nobody moved


def test_clamps_hold_out_between_min_and_max_never_over_half():
    ids = [f"a.jsonl:{i}" for i in range(1, 1001)]
    assert len(held_ids(ids, cfg(fraction=0.0, min_docs=7, max_docs=100))) == 7
    assert len(held_ids(ids, cfg(fraction=0.5, min_docs=0, max_docs=20))) == 20
    assert len(held_ids(ids[:6], cfg(fraction=0.0, min_docs=5, max_docs=100))) == 3  # half of 6
    assert held_ids(ids[:1], cfg(fraction=0.0, min_docs=5, max_docs=100)) == set()
    assert len(held_ids(ids, cfg(fraction=0.0, min_docs=0, max_docs=100))) == 0


def _sides(layout, name: str) -> tuple[list[str], list[str]]:
    out = []
    for side in ("train", "val"):
        out.append([i for p in sorted((layout.clean / name).glob("part-*.parquet"))
                    for b in clean.documents(p, side, column="id") for i in b])
    return out[0], out[1]


def _prose(tmp: Path) -> list[dict]:
    """Real prose: the reference-manual topics that ship with Python (pydoc_data), one per line."""
    from pydoc_data.topics import topics

    return [{"text": topics[k]} for k in sorted(topics)]


def _corpus_docs(tmp: Path, which: str) -> list[dict]:
    if which == "pydoc":
        return _prose(tmp)
    p = CORPORA / {"wikitext": "wikitext2-valid.jsonl", "shakespeare": "tinyshakespeare.jsonl"}[which]
    if not p.exists():
        pytest.skip(f"real corpus {p} not present")
    return [json.loads(ln) for ln in p.read_text().splitlines()]


@pytest.mark.parametrize("which", ["pydoc", "wikitext"])
def test_adding_documents_and_files_moves_no_document_across(tmp_path, which):
    docs = _corpus_docs(tmp_path, which)
    d = tmp_path / "in"
    d.mkdir()
    half = len(docs) // 2
    (d / "a.jsonl").write_text("".join(json.dumps(x) + "\n" for x in docs[:half]))
    src = [{"name": "prose", "uri": str(d), "format": "jsonl"}]
    sections = {"eval": {"fraction": 0.2, "min_docs": 1, "max_docs": 10_000}, "clean": {"part_mb": 0.05}}
    params, layout = make_project(tmp_path / "p", src, **sections)
    download.run(params, layout, **QUIET)
    clean.run(params, layout, **QUIET)
    train1, val1 = _sides(layout, "prose")
    assert val1 and train1
    # the source grows: documents appended to its file, and a new file
    (d / "a.jsonl").write_text("".join(json.dumps(x) + "\n" for x in docs[:half + 5]))
    (d / "b.jsonl").write_text("".join(json.dumps(x) + "\n" for x in docs[half + 5:]))
    download.run(params, layout, **QUIET)
    clean.run(params, layout, **QUIET)
    train2, val2 = _sides(layout, "prose")
    assert set(val1) <= set(val2) and set(train1) <= set(train2)
    assert len(val2) > len(val1)  # the new documents were split too
    assert not set(train2) & set(val2)


def _ngrams(tokens: np.ndarray, n: int) -> set[bytes]:
    t = np.ascontiguousarray(tokens.astype(np.uint32))
    return {t[i:i + n].tobytes() for i in range(len(t) - n + 1)}


def _shard_tokens(shard_dir: Path) -> list[np.ndarray]:
    ix = json.loads((shard_dir / "index.json").read_text())
    return [np.fromfile(shard_dir / s["file"], dtype=shardformat.DTYPES[ix["dtype"]]) for s in ix["shards"]]


def _line(params, layout):
    for stage in (download, clean, tokenize, shard):
        stage.run(params, layout, **QUIET)


@pytest.mark.parametrize("which", ["pydoc", "wikitext"])
def test_no_held_out_text_in_training_shards_even_when_copied_there(tmp_path, which):
    """Every held-out document is also planted in the training files (another file, another
    source): exact dedup across the split drops the training copies, and (on corpora whose
    documents do not quote each other) no 24-token run of the held-out shards occurs in the
    training shards. pydoc's topics do quote each other ('compound' holds 'if', 'while', 'with'...):
    that overlap is near-duplication, which exact dedup does not claim to see."""
    docs = _corpus_docs(tmp_path, which)
    d = tmp_path / "in"
    k = 2 * len(docs) // 3
    for name, part in (("a", docs[:k]), ("b", docs[k:])):
        (d / name).mkdir(parents=True)
        (d / name / "docs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in part))
    sections = {"eval": {"fraction": 0.1, "min_docs": 0}, "clean": {"part_mb": 0.1},  # no clamp: growth moves none
                "tokenizer": {"vocab_size": 1024}, "shard": {"seq_len": 64, "target_mb": 0.1}}
    src = [{"name": s, "uri": str(d / s), "format": "jsonl"} for s in ("a", "b")]
    params, layout = make_project(tmp_path / "p", src, **sections)
    download.run(params, layout, **QUIET)
    clean.run(params, layout, **QUIET)
    held = [t for s in ("a", "b") for p in sorted((layout.clean / s).glob("part-*.parquet"))
            for b in clean.documents(p, "val") for t in b]
    assert len(held) >= 4
    for s in ("a", "b"):  # every held-out document, copied into the training files of both sources
        (d / s / "copies.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in held))
    _line(params, layout)
    stats = json.loads((layout.clean / "stats.json").read_text())
    def texts(side):
        return sorted(t for s in ("a", "b") for p in sorted((layout.clean / s).glob("part-*.parquet"))
                      for b in clean.documents(p, side) for t in b)

    # each held-out text stays held out (a copy in the other source may hash to held out there too)
    # and is on no training side; the training copies were dropped as such, and counted
    assert set(texts("val")) == set(held) and not set(texts("train")) & set(held)
    assert all(stats["sources"][s]["heldout_copies"]["docs"] > 0 for s in ("a", "b"))
    if which == "pydoc":
        return
    n = 24
    val = set().union(*(_ngrams(t, n) for s in ("a", "b") for t in _shard_tokens(layout.shards / s / "val")))
    train = [t for s in ("a", "b") for t in _shard_tokens(layout.shards / s)]
    assert val and sum(len(_ngrams(t, n) & val) for t in train) == 0
    # the check can fail: the planted copies, tokenized, share every n-gram with the held-out shards
    from shardline.data.tokenizer import Encoder, load

    enc = Encoder.build(load(layout.tokenizer / "tokenizer.json"), backend="hf")
    planted = np.array([i for ids in enc.encode_batch(held) for i in ids])
    assert len(_ngrams(planted, n) & val) > 0.5 * len(val)


def _text_landing(make, fraction: float, sides: dict[str, str]) -> str:
    """A text (`make(k)` for the first k that works) whose content hash puts it on the side
    `sides[source]` names in each source, at `eval.fraction` alone (no clamp binding)."""
    cut = int(fraction * 2**64)
    for k in range(1000):
        text = make(k)
        digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
        if all((split.hash_doc(src, digest) < cut) == (side == "val") for src, side in sides.items()):
            return text
    raise AssertionError("no such text")


def test_training_copy_of_a_held_out_document_is_dropped_even_without_dedup(tmp_path):
    """The split is by content, so within a source every copy of a text is on one side; the same
    text in another source may hash to training there: the held-out copy wins wherever it sits in
    the order, and dedup: false keeps training duplicates but never a copy of a held-out document."""
    ev = {"fraction": 0.5, "min_docs": 0, "max_docs": 10, "every": 0}
    text = _text_landing(lambda k: f"The same paragraph of honest prose, long enough to pass every rule, number {k}.",
                         0.5, {"s": "val", "t": "train"})
    other = _text_landing(lambda k: f"A different paragraph that stays on the training side of the split, {k}.",
                          0.5, {"s": "train", "t": "train"})
    d = tmp_path / "in"
    for src, names, texts in (("t", ["a.txt", "b.txt", "c.txt"], [text, other, other]), ("s", ["z.txt"], [text])):
        (d / src).mkdir(parents=True)
        for n, t in zip(names, texts):
            (d / src / n).write_text(t)
    for dedup, expect_train in ((True, ["b.txt:1"]), (False, ["b.txt:1", "c.txt:1"])):
        # t, first in the order, holds the training copy; s, after it, the held-out one
        params, layout = make_project(tmp_path / f"p{dedup}", [{"name": "t", "uri": str(d / "t"), "format": "txt"},
                                                               {"name": "s", "uri": str(d / "s"), "format": "txt"}],
                                      eval=ev, clean={"dedup": dedup})
        download.run(params, layout, **QUIET)
        stats = clean.run(params, layout, **QUIET)
        assert _sides(layout, "s") == ([], ["z.txt:1"]) and _sides(layout, "t") == (expect_train, [])
        assert stats["sources"]["t"]["heldout_copies"]["docs"] == 1
        assert stats["sources"]["s"]["heldout"] == {"docs": 1, "bytes": len(text), "clamp": None}


def test_tokenizer_never_trains_on_held_out_text(tmp_path, code_dir):
    """A canary word repeated in one held-out document leaves no trace in the vocabulary; the
    same canary in a training document does (so the check can fail)."""
    ev = {"fraction": 0.3, "min_docs": 0, "max_docs": 10, "every": 0}

    def vocab_with(canary_side: str) -> set[str]:
        canary = _text_landing(lambda k: f"Canary words follow, {k}.\n" + "\n".join(["qzxvkjwq " * 19 + "qzxvkjwq"] * 250),
                               ev["fraction"], {"code": canary_side})
        d = tmp_path / canary_side
        shutil.copytree(code_dir, d)
        (d / "canary.txt").write_text(canary)
        params, layout = make_project(tmp_path / f"p-{canary_side}", [{"name": "code", "uri": str(d), "format": "txt"}],
                                      eval=ev, clean={"max_repeated_line_fraction": None}, tokenizer={"vocab_size": 2048})
        for stage in (download, clean, tokenize):
            stage.run(params, layout, **QUIET)
        assert ("canary.txt:1" in _sides(layout, "code")[1]) == (canary_side == "val")
        return set(json.loads((layout.tokenizer / "tokenizer.json").read_text())["model"]["vocab"])

    assert not [t for t in vocab_with("val") if "qzx" in t or "vkj" in t]
    assert any("qzxvkjwq" in t for t in vocab_with("train"))
