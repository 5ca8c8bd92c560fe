"""bench.data's raw limits, on the same data as the stages it sets them beside: tiktoken's
encode_to_numpy on 2 threads over the clean texts (its ids checked equal to every token part the
stage wrote), json.loads of the corpus in 2 processes, a read+write+fsync copy of the token parts;
and the tokenizer sample check (bytes/token on held-out paragraphs: the stage's tokenizer against
one trained on a sample). Run in a child process of bench.data (`extras`), so the texts it holds
never raise the parent's peak RSS.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

from bench.data_corpus import pool
from bench.measure import MiB


def engine(name: str):
    """An engine module of the data stages (imported in the child that measures, not here)."""
    return importlib.import_module(f"shardline.data.{name}")


def _parse(path: str, start: int, end: int) -> int:
    n = 0
    with open(path, "rb") as f:
        if start:
            f.seek(start - 1)
            f.readline()  # the line across `start` is the other half's
        while f.tell() < end:
            n += len(json.loads(f.readline())["text"])
    return n


def same_ids(root: Path, enc) -> tuple[int, str]:
    """Every token part the stage wrote, byte for byte, against raw tiktoken's ids (plus EOS) of
    the same documents: the encoder the stage chose gave tiktoken's ids on the whole corpus.
    Returns the parts checked and the encoder; exits naming the first part that differs."""
    C, checked = engine("clean.stage.parts"), 0
    for side, where in (("train", root / "data/tokens/web"), ("val", root / "data/tokens/web/val")):
        index = json.loads((where / "index.json").read_text())
        eos = np.array([index["eos_id"]], np.uint32)
        for entry in index["parts"]:
            docs = (t for b in C.documents(root / "data/clean/web" / f"{Path(entry['file']).stem}.parquet", side)
                    for t in b)
            ids = [a for t in docs for a in (enc.encode_to_numpy(t, disallowed_special=()), eos)]
            data = np.concatenate(ids).astype(index["dtype"]).tobytes() if ids else b""
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                sys.exit(f"{where / entry['file']}: its ids are not raw tiktoken's ({index['encoder']} wrote it)")
            checked += 1
    return checked, index["encoder"]


def extras(root: Path, corpus_path: Path, tokens: int, quality_mb: float | None) -> dict:
    """The raw limits on this run's data, and the tokenizer sample check."""
    C, T, bpe = engine("clean.stage.parts"), engine("tokenizer"), engine("bytebpe")
    parts = sorted((root / "data/clean/web").glob("part-*.parquet"))
    train, val = ([t for p in parts for b in C.documents(p, side) for t in b] for side in ("train", "val"))
    texts = train + val
    enc = bpe.to_tiktoken(T.load(root / "data/tokenizer/tokenizer.json"))
    one = lambda t: enc.encode_to_numpy(t, disallowed_special=())  # noqa: E731 (fastest: one buffer, no int list)
    chunks = [texts[i:i + 64] for i in range(0, len(texts), 64)]  # 64 docs a task: no per-doc futures
    with ThreadPoolExecutor(2) as ex:
        t0 = time.perf_counter()
        n = sum(ex.map(lambda c: sum(len(one(t)) for t in c), chunks))
        r = {"tok_s": time.perf_counter() - t0}
    if n + len(texts) != tokens:  # the stage adds one EOS per document
        sys.exit(f"raw tiktoken gave {n:,} tokens + {len(texts):,} EOS, the stage {tokens:,}")
    r["identical"], r["encoder"] = same_ids(root, enc)
    size = corpus_path.stat().st_size
    with ProcessPoolExecutor(2) as ex:
        t0 = time.perf_counter()
        sum(ex.map(_parse, [str(corpus_path)] * 2, [0, size // 2], [size // 2, size]))
        r["clean_s"] = time.perf_counter() - t0
    out, r["copy_bytes"], t0 = root / "copy", 0, time.perf_counter()
    for src in sorted((root / "data/tokens").rglob("*.bin")):
        (dst := out / src.relative_to(root / "data/tokens")).parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb") as a, open(dst, "wb") as b:
            r["copy_bytes"] += b.write(a.read())
            os.fsync(b.fileno())
    r["copy_s"] = time.perf_counter() - t0
    shutil.rmtree(out)
    return {"raw": r, "quality": quality(root, train, quality_mb) if quality_mb else None}


def quality(root: Path, train: list[str], mb: float) -> dict:
    """Bytes/token on the held-out paragraphs: the stage's tokenizer vs one trained (same settings)
    on `mb` MiB of the training texts, every k-th document."""
    T, heldout = engine("tokenizer"), pool()[1]
    cfg = yaml.safe_load((root / "params.yaml").read_text())["tokenizer"]
    total = sum(len(t.encode()) for t in train)
    step = max(1.0, total / (mb * MiB))
    sample = [t for i, t in enumerate(train) if int((i + 1) / step) > int(i / step)]
    t0 = time.perf_counter()
    tok = T.train_bpe(iter(sample), vocab_size=cfg["vocab_size"], special_tokens=cfg["special_tokens"],
                      min_frequency=cfg["min_frequency"])
    took, nbytes = time.perf_counter() - t0, sum(len(t.encode()) for t in heldout)
    bpt = lambda tk: nbytes / sum(len(e.ids) for e in tk.encode_batch(heldout, add_special_tokens=False))
    return {"sample_mb": sum(len(t.encode()) for t in sample) / MiB, "train_mb": total / MiB, "train_s": took,
            "cap_mb": cfg.get("train_max_mb"), "heldout_kb": nbytes / 1e3, "sample": bpt(tok),
            "stage": bpt(T.load(root / "data/tokenizer/tokenizer.json"))}
