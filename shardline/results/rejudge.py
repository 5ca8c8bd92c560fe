"""Two runs judged on the same held-out documents when their own held-out sets differ.

Contract: `common(a, b, source)` is the documents held out in both runs (by content: the clean
parts' `hash`), in hash order, with their text (from A's clean parts); `judge(run, texts, ...)`
scores a run's model on them as training's eval does (shardline.training.evaluate: its own
attention, per document sums), each document cut to its first `doc_bytes` bytes, encoded with the
run's own tokenizer (the line's encoder: HF's ids), EOS after each (BOS before, when the run put
one), packed into blocks of its seq_len + 1 (the tail shorter than a block is not scored). So two
runs with different tokenizers are compared on the same text: their bits per byte are comparable,
and their losses per token only when the tokenizers are the same. A result is kept under
.shardline/judged/ by what decides it (the checkpoint's manifest, the tokenizer, the documents,
doc_bytes): asked again, it is read, not recomputed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import CLEAN_PARTS, MANIFEST
from shardline.data.clean.stage.parts import documents
from shardline.results.runs import Run
from shardline.training import noise


def held(run: Run, source: str, column: str) -> list:
    return [v for part in sorted((run.layout.clean / source).glob(CLEAN_PARTS))
            for batch in documents(part, "val", column=column) for v in batch]


def common(a: Run, b: Run, source: str) -> list[tuple[bytes, str]]:
    """(hash, text) of the documents held out in both runs, in hash order."""
    theirs = set(held(b, source, "hash"))
    mine = dict(zip(held(a, source, "hash"), held(a, source, "text")))
    return sorted((h, t) for h, t in mine.items() if h in theirs)


def _tokenizer(run: Run) -> Path:
    path, want = run.layout.tokenizer_json, run.lineage.data_version.tokenizer_sha256
    if not path.exists() or fsio.sha256_file(path) != want:
        raise BadInput(f"{run.name}: its tokenizer ({(want or '?')[:12]}…) is not at hand in "
                       f"{run.layout.rel(run.layout.tokenizer)}; name its revision to compare it on other documents")
    return path


def judge(run: Run, texts: dict[str, list[tuple[bytes, str]]], doc_bytes: int | None, here: Layout) -> dict[str, noise.Docs]:
    """source -> each document's sums for `run`'s model on `texts` (ordinals: positions in the list); the
    result is kept in `here`'s project (.shardline/judged/)."""
    tok_path = _tokenizer(run)
    key = fsio.stable_hash({"checkpoint": fsio.sha256_file(run.checkpoint / MANIFEST), "tokenizer": fsio.sha256_file(tok_path),
                            "docs": {s: hashlib.sha256(b"".join(h for h, _ in v)).hexdigest() for s, v in texts.items()},
                            "doc_bytes": doc_bytes, "v": 1})
    kept = here.judged_result(key)
    try:  # a result damaged or of another shape is judged again: it is a saving, made by the lines below
        return {s: noise.Docs.of(d) for s, d in fsio.read_json(kept).items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    import torch

    from shardline.data import tokenizer
    from shardline.data.tokenize import capped
    from shardline.results.trained import load_model
    from shardline.training.evaluate import Blocks, HeldOut, evaluate, token_bytes

    model, state, manifest = load_model(run.checkpoint)
    special = manifest.lineage.special_ids
    enc = tokenizer.Encoder.build(tokenizer.load(tok_path), backend="hf")
    width = state["loader"]["seq_len"] + 1
    blocks = []
    for source, docs in texts.items():
        bos = [np.array([special.bos])] if special.bos is not None else []
        pieces = [p for d in enc.encode_arrays([capped(t, doc_bytes) for _, t in docs]) for p in (*bos, d, [special.eos])]
        stream = np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, np.int64)
        rows = stream[:len(stream) // width * width].reshape(-1, width)
        # a target's document: the EOS up to its input, inclusive (a target after EOS starts the next)
        ordinal = np.cumsum(rows.reshape(-1) == special.eos).reshape(rows.shape)[:, :-1]
        doc_ids, doc_of = np.unique(ordinal, return_inverse=True)
        blocks.append(Blocks(source, rows, len(rows), len(docs), int(rows.size), doc_of.reshape(ordinal.shape), doc_ids))
    boundaries = [i for i in (special.eos, special.bos) if i is not None]
    held_out = HeldOut(blocks, token_bytes(tok_path), width - 1, run.lineage.data_version.tokenizer_sha256, boundaries)
    ev = evaluate(model, held_out, {}, batch=32, device=torch.device("cpu"))
    out = {s: noise.Docs.of(ev["docs"][s]) for s in texts if s in ev["docs"]}
    fsio.write_json(kept, {s: d.to_json() for s, d in out.items()})
    return out
