"""Tokenizers teams bring: a SentencePiece-style tokenizer.json (Metaspace or Llama 2's normalizer,
byte fallback) and a vocabulary over 65,535 (uint32 token files and shards) run the whole line;
BOS starts every document when set; bits per byte counts the bytes of the decoded text, checked
against counts made by hand on non-ASCII text."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from shardline.model import ModelConfig, build
from shardline.training.evaluate import Blocks, HeldOut, evaluate, token_bytes
from tests.conftest import make_project, run, stdlib_files
from harness.hf_models import sentencepiece_tokenizer, wide_tokenizer
from tests.integration.test_train import SL

# by hand: n a ï(2) v e ␠ c a f é(2) = 12; 日本語 (3 x 3) ␠ o k = 12; x ␠ ␠ y ␠ 🙂(4) = 9
DOCS, HAND = ["naïve café", "日本語 ok", "x  y 🙂"], 12 + 12 + 9


@pytest.fixture(scope="module")
def texts():
    return [p.read_text() for p in stdlib_files(8)] + ["naïve café — Ünïcödé 日本語 ok", "x  y 🙂 ß"] * 3


def tokenizers_of(texts):
    from shardline.data.tokenizer import train_bpe

    return {"byte-level": (train_bpe(texts, vocab_size=400, special_tokens=["<|endoftext|>", "<s>"]),
                           "<|endoftext|>", "<s>"),
            "metaspace": (sentencepiece_tokenizer(texts, 500, "metaspace"), "</s>", "<s>"),
            "llama2": (sentencepiece_tokenizer(texts, 500, "llama2"), "</s>", "<s>")}


@pytest.mark.parametrize("name", ["byte-level", "metaspace", "llama2"])
@pytest.mark.parametrize("bos", [False, True])
def test_bits_per_byte_counts_the_bytes_of_the_decoded_text(name, bos, texts, tmp_path):
    tok, eos, bos_token = tokenizers_of(texts)[name]
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    eos_id, bos_id = tok.token_to_id(eos), tok.token_to_id(bos_token)
    ids = [eos_id]  # the block starts after another document: every document here is a whole one
    for d in DOCS:
        ids += ([bos_id] if bos else []) + tok.encode(d, add_special_tokens=False).ids + [eos_id]
    assert tok.decode(ids, skip_special_tokens=True).replace(" ", "") == "".join(DOCS).replace(" ", "")
    block = np.array([ids], dtype=np.int64)
    held = HeldOut([Blocks("s", block, 1, 3, len(ids))], token_bytes(path), len(ids) - 1, "x",
                   boundaries=(eos_id, bos_id) if bos else (eos_id,))
    x, y = torch.from_numpy(block[:, :-1]), torch.from_numpy(block[:, 1:])
    assert held.target_bytes(x, y) == HAND
    # and through evaluate(), with a real model: its bits per byte divide by the same count
    torch.manual_seed(0)
    model = build(ModelConfig("llama", vocab_size=tok.get_vocab_size(), seq_len=len(ids) - 1, n_layer=1, n_head=2,
                              d_model=16, ffn_hidden=32))
    ev = evaluate(model, held, {"s": 1.0}, batch=1, device=torch.device("cpu"))["sources"]["s"]
    assert ev["bytes"] == HAND and ev["bpb"] == pytest.approx(ev["loss"] * ev["tokens"] / math.log(2) / HAND)


def test_each_token_decoded_alone_would_miscount(texts, tmp_path):
    """What the count replaced: decoding a SentencePiece token alone drops its ▁ (a space) and turns a
    lone byte-fallback byte into U+FFFD (3 bytes). The table must not be that."""
    tok = tokenizers_of(texts)["metaspace"][0]
    tok.save(str(tmp_path / "t.json"))
    mid, start = token_bytes(tmp_path / "t.json")
    word = next(i for t, i in sorted(tok.get_vocab().items()) if len(t) == 2 and t[0] == "▁" and t[1].isascii())
    byte = tok.token_to_id("<0xF0>")
    assert (mid[word], start[word], len(tok.decode([word]).encode())) == (2, 1, 1)
    assert (mid[byte], len(tok.decode([byte]).encode())) == (1, 3)


def line(tmp_path, texts, tok, **sections):
    src = tmp_path / "input"
    src.mkdir()
    for i, t in enumerate(texts):
        (src / f"doc{i:02d}.txt").write_text(t)
    tok_path = tmp_path / "tokenizer.json"
    tok.save(str(tok_path))
    params, layout = make_project(tmp_path / "p", [{"name": "s", "uri": str(src), "format": "txt",
                                                    "txt_unit": "file"}],
                                  **{"shard": {"seq_len": 32, "target_mb": 0.01}, "eval": {"every": 2, "min_docs": 2},
                                     "train": {"steps": 4, "checkpoint_every": 4}, **sections,
                                     "tokenizer": {"path": str(tok_path), **sections.get("tokenizer", {})}})
    for stage in ("download", "clean", "tokenize", "shard", "train"):
        run([SL, "stage", stage], layout.root)
    return layout


@pytest.mark.slow
def test_a_sentencepiece_tokenizer_with_bos_runs_the_line(texts, tmp_path):
    tok = sentencepiece_tokenizer(texts, 500, "llama2")
    layout = line(tmp_path, texts, tok, tokenizer={"eos_token": "</s>", "bos_token": "<s>"})
    meta = json.loads((layout.tokenizer / "meta.json").read_text())
    assert (meta["eos_id"], meta["bos_id"], meta["dtype"]) == (2, 1, "uint16")
    ids = np.fromfile(sorted((layout.tokens / "s").glob("part-*.bin"))[0], dtype="<u2")
    assert ids[0] == 1 and ids[-1] == 2 and np.all(ids[1:][ids[:-1] == 2] == 1)  # <s> doc </s> <s> doc </s>
    docs = np.split(ids, np.flatnonzero(ids == 2) + 1)[:-1]
    from shardline.data.clean.stage import run as clean

    first = next(clean.documents(sorted((layout.clean / "s").glob("part-*.parquet"))[0], "train"))[0]
    assert tok.decode(docs[0].tolist(), skip_special_tokens=True) == first  # the text, back from its ids
    ev = json.loads(run([SL, "eval", "latest", "--json"], layout.root).stdout)["sources"]["s"]
    assert ev["bytes"] > 0 and 0 < ev["bpb"] < 20
    lin = json.loads(run([SL, "lineage", "latest", "--json"], layout.root).stdout)
    assert lin["special_ids"] == {"eos": 2, "bos": 1}
    r = json.loads(run([SL, "sample", "latest", "--prompt", "def", "--temperature", "0", "--max-new-tokens", "3",
                        "--json"], layout.root).stdout)
    assert r["prompt_ids"][0] == 1  # a prompt starts a document as training documents did


@pytest.mark.slow
def test_a_vocabulary_over_65535_runs_the_line_in_uint32(texts, tmp_path):
    tok = wide_tokenizer(texts)
    assert tok.get_vocab_size() > 65_535
    layout = line(tmp_path, texts, tok, model={"n_layer": 1, "n_head": 2, "d_model": 16})
    shards = json.loads((layout.shards / "s" / "index.json").read_text())
    assert shards["dtype"] == "uint32"
    blocks = np.fromfile(layout.shards / "s" / shards["shards"][0]["file"], dtype="<u4")
    assert len(blocks) * 4 == shards["shards"][0]["bytes"] and blocks.max() > 65_535
    assert (blocks[blocks > 0] > 66_000).all()  # every ordinary id is past the fillers
    ev = json.loads(run([SL, "eval", "latest", "--json"], layout.root).stdout)["sources"]["s"]
    assert ev["tokens"] > 0 and math.isfinite(ev["loss"]) and ev["bytes"] > 0
    out = tmp_path / "hf"
    run([SL, "export", "latest", str(out)], layout.root)
    assert json.loads((out / "config.json").read_text())["vocab_size"] == tok.get_vocab_size()
    shutil.rmtree(out)
