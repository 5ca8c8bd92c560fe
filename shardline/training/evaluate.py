"""Held-out evaluation: loss and bits per byte per source, on a fixed set of held-out blocks.

Contract:
- `HeldOut.open` reads each source's held-out shards (data/shards/<source>/val/, or
  `<shards_uri>/<source>/val/` when the loader streams) and takes `eval.blocks` of their blocks,
  spread evenly over them (all of them when there are fewer): the same blocks on every call,
  verified against val/index.json before use and then kept in memory. From the store, each shard
  is read whole under Remote.policy (shardline.core.transfer: a fault mid-body is continued, one
  that outlasts the policy is a FetchError naming the URL) and is ShardCorrupt only when two reads
  agree on bytes the index does not name; from disk, ShardCorrupt at once.
- Loss is the mean next-token cross-entropy (nats) over every target of those blocks. Bits per
  byte = sum of the targets' losses / ln 2 / the UTF-8 bytes of the text those targets decode to
  (`token_bytes`: per token, inside a document or as its first token, so a SentencePiece piece's
  `▁` and byte-fallback bytes count as in the decoded text, not as each token decoded alone;
  special tokens spell none, their loss counts): a figure that compares across tokenizers.
- The model is run as it trained: its own attention (causal or by document). The total weighs the sources by the normalised mix, over the sources that
  have held-out blocks.
- `evaluate` runs in eval mode without gradients, inside torch.random.fork_rng, and restores the
  mode it found: training's RNG streams are never touched, so a run with eval on trains
  bit-identically to the same run with eval off. Under torchrun each rank scores every world-th
  batch and the sums are all-reduced (under fsdp a rank short of batches scores a padding batch
  weighted 0, so every rank joins the same all-gathers).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from torch.nn import functional as F

from shardline.core import chaos, fsio, shardformat, transfer
from shardline.core.errors import BadInput, ShardCorrupt
from shardline.data import tokenizer
from shardline.model.loss import chunk_rows
from shardline.training import noise
from shardline.training.tokenbytes import token_bytes
from shardline.stream.remote import FetchError, Remote, read_indexes, whole


@dataclass
class Blocks:
    """One source's evaluated held-out blocks, and which document each of their targets belongs to."""

    name: str
    ids: np.ndarray  # int64 [n, seq_len + 1]
    available: int   # held-out blocks the source has (the budget takes `len(ids)` of them)
    docs: int
    tokens: int
    doc_of: np.ndarray | None = None  # int64 [n, seq_len]: each target's document, an index into doc_ids
    doc_ids: np.ndarray | None = None  # int64: those documents' ordinals in the source's held-out stream

    def __post_init__(self) -> None:
        if self.doc_of is None:  # no document boundaries known: each block counts as one document
            self.doc_of = np.repeat(np.arange(len(self.ids), dtype=np.int64)[:, None], self.ids.shape[1] - 1, axis=1)
            self.doc_ids = np.arange(len(self.ids), dtype=np.int64)


def boundary_ids(tokenizer_meta: dict) -> tuple[int, ...]:
    """The ids after which a document starts: EOS, and BOS when the line puts one (data/tokenizer/meta.json)."""
    return tuple(i for i in (tokenizer_meta.get("eos_id"), tokenizer_meta.get("bos_id")) if i is not None)


def spread(available: int, budget: int) -> np.ndarray:
    """`budget` block positions spread evenly over `available` (all when fewer)."""
    n = min(available, budget)
    return (np.arange(n, dtype=np.int64) * available) // max(n, 1)


class HeldOut:
    """The fixed held-out blocks of every source, with what a bits-per-byte figure needs."""

    def __init__(self, blocks: list[Blocks], token_bytes: tuple[np.ndarray, np.ndarray], seq_len: int,
                 tokenizer_sha256: str, boundaries: Sequence[int] = ()):
        self.blocks = blocks
        self.mid_bytes, self.start_bytes = (torch.from_numpy(t) for t in token_bytes)
        self.boundaries = torch.tensor(sorted(boundaries), dtype=torch.long)
        self.seq_len, self.tokenizer_sha256 = seq_len, tokenizer_sha256
        self.signature: str | None = None  # set by `open` (held-out shards of the line)

    def bytes_of(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """UTF-8 bytes each target of `y` spells, after its input `x` (the token before it): a target
        after EOS or BOS is the first token of a document."""
        return torch.where(torch.isin(x, self.boundaries), self.start_bytes[y], self.mid_bytes[y])

    def target_bytes(self, x: torch.Tensor, y: torch.Tensor) -> int:
        """UTF-8 bytes the targets `y` spell in all."""
        return int(self.bytes_of(x, y).sum())

    @classmethod
    def open(cls, shards_dir: str | Path, names: Sequence[str], budget: int, tokenizer_json: str | Path,
             remote: Remote | None = None, boundaries: Sequence[int] = (), eos: int | None = None) -> "HeldOut":
        """`boundaries`: the EOS and BOS ids (a token after one starts a document); `eos`: the EOS id,
        which ends every document (its documents are then told apart; None: a block counts as one)."""
        val = [f"{n}/val" for n in names]
        indexes = read_indexes(shards_dir, val, remote, ": no held-out shards; re-run 'dvc repro' (the clean, "
                               "tokenize and shard stages write them), or set eval.every: 0")
        shape = shardformat.geometry(indexes, shards_dir, "held-out shards", "re-run 'dvc repro shard'")
        blocks = []
        for name, ix in zip(names, indexes):
            ids, doc_of, doc_ids = _read(Path(shards_dir) / f"{name}/val", ix, spread(ix["total_blocks"], budget),
                                         shape.np_dtype, shape.width, remote and (remote, f"{name}/val"), eos)
            blocks.append(Blocks(name, ids, ix["total_blocks"], ix["docs"], ix["total_tokens"], doc_of, doc_ids))
        held = cls(blocks, token_bytes(tokenizer_json), shape.seq_len, shape.tokenizer_sha256, boundaries)
        # which blocks were scored, by content: two evals with the same signature scored the same
        # tokens, so their documents pair one to one (shardline diff)
        held.signature = fsio.stable_hash({n: [[e["sha256"] for e in ix["shards"]], min(ix["total_blocks"], budget), eos]
                                           for n, ix in zip(names, indexes)})
        return held

    @classmethod
    def for_training(cls, params, layout, remote: Remote | None, seq_len: int, tokenizer_sha256: str,
                     log: Callable[[str], None]) -> "HeldOut | None":
        """The held-out set of a training run (None, said so, when no source has a block)."""
        meta = tokenizer.read_meta(layout.tokenizer_meta, layout)
        held = cls.open(layout.shards, [s.name for s in params.sources], params.eval.blocks,
                        layout.tokenizer_json, remote, boundary_ids(meta), meta.get("eos_id"))
        if held.seq_len != seq_len or held.tokenizer_sha256 != tokenizer_sha256:
            raise BadInput(f"{layout.rel(layout.shards)}: the held-out shards (val/) were made with another seq_len or "
                           "tokenizer than the training shards; re-run 'dvc repro shard'")
        empty = [b.name for b in held.blocks if not len(b.ids)]
        if len(empty) == len(held.blocks):
            log("train: no source has a held-out block (too few held-out tokens); evaluation is off for this run. "
                "Raise eval.fraction or eval.min_docs")
            return None
        if empty:
            log(f"train: no held-out block for {', '.join(empty)}: not evaluated (raise eval.min_docs or eval.fraction)")
        log(f"train: eval every {params.eval.every} steps on {held.describe()}")
        return held

    def describe(self) -> str:
        return ", ".join(f"{b.name}: {len(b.ids)} of {b.available} held-out blocks ({len(b.doc_ids)} documents)"
                         for b in self.blocks)


def _read(shard_dir: Path, index: dict, positions: np.ndarray, dtype: np.dtype, width: int,
          remote: tuple[Remote, str] | None, eos: int | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The blocks at `positions` (int64 [n, width]) and, with `eos`, each target's document: (index
    into the documents, their ordinals in the source's held-out stream). Documents are counted by
    the EOS before them, so every shard is read (the held-out side is bounded: eval.max_docs
    documents of at most eval.doc_bytes each); a target after EOS starts the next document."""
    starts = shardformat.block_starts(index)
    shard_of = np.searchsorted(starts, positions, side="right") - 1
    out = np.empty((len(positions), width), dtype=np.int64)
    first = np.zeros(len(positions), dtype=np.int64)  # documents ended before each chosen block
    ended = 0
    for s, entry in enumerate(index["shards"]):
        rows = shard_of == s
        if eos is None and not rows.any():
            continue
        blocks = _shard(shard_dir, entry, dtype, width, remote)
        if rows.any():
            out[rows] = blocks[positions[rows] - starts[s]]
        if eos is not None:
            before = ended + np.concatenate([[0], np.cumsum(np.count_nonzero(blocks == eos, axis=1))])
            first[rows] = before[positions[rows] - starts[s]]
            ended = int(before[-1])
    if eos is None:
        return out, None, None
    ordinal = first[:, None] + np.cumsum(out[:, :-1] == eos, axis=1)  # the document of each target
    doc_ids, doc_of = np.unique(ordinal, return_inverse=True)
    return out, doc_of.reshape(ordinal.shape).astype(np.int64), doc_ids


def _shard(shard_dir: Path, entry: dict, dtype: np.dtype, width: int, remote: tuple[Remote, str] | None) -> np.ndarray:
    """One shard's blocks, verified (read from disk, or fetched whole from the store)."""
    if remote is None:
        shardformat.verify_shard(shard_dir, entry)
        return shardformat.blocks(shard_dir / entry["file"], dtype, width)
    store, name = remote
    url = f"{store.uri.rstrip('/')}/{name}/{entry['file']}"

    def fetch() -> bytes:  # every byte the store's size names, a fault mid-body continued by Range
        return whole(store, f"{name}/{entry['file']}")

    def judge(data: bytes) -> tuple[str, ShardCorrupt | None]:
        got = fsio.sha256_bytes(data)
        if len(data) == entry["bytes"] and got == entry["sha256"]:
            return got, None
        return got, ShardCorrupt(f"{url}: {len(data)} bytes, sha256 {got[:12]}… (the same bytes twice); val/"
                                 f"index.json says {entry['bytes']} bytes, {entry['sha256'][:12]}…; re-publish it "
                                 "('shardline push-shards')")

    # a hash that fails once may be a fault on the way: only the same bytes again are the store's
    return shardformat.blocks_of(transfer.agreed(url, fetch, judge, policy=store.policy, error=FetchError),
                                 dtype, width)


def evaluate(model: torch.nn.Module, held: HeldOut, mix: Mapping[str, float], *, batch: int,
             device: torch.device, autocast=None, rank: int = 0, world: int = 1,
             all_sum: Callable[[torch.Tensor], torch.Tensor] | None = None, pad: bool = False) -> dict:
    """Loss and bits per byte per source, per token and per document with their intervals, and the
    totals (see the module contract)."""
    import contextlib

    t0 = time.perf_counter()
    work = [(s, i) for s, b in enumerate(held.blocks) for i in range(0, len(b.ids), batch)]
    mine = work[rank::world]
    rounds = -(-len(work) // world) if pad else len(mine)
    sums = torch.zeros((len(held.blocks), 3), dtype=torch.float64)  # nll (nats), targets, bytes
    per_doc = [torch.zeros((len(b.doc_ids), 3), dtype=torch.float64) for b in held.blocks]  # the same, per document
    was_training = model.training
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        model.eval()
        try:
            for i in range(rounds):
                s, at = mine[i] if i < len(mine) else work[0]  # a padding batch, weighted 0
                ids = held.blocks[s].ids[at:at + batch]
                x = torch.from_numpy(ids[:, :-1]).to(device)
                y = torch.from_numpy(ids[:, 1:]).to(device)
                with autocast or contextlib.nullcontext():
                    logits, _ = model(x)
                flat, yf = logits.reshape(-1, logits.size(-1)), y.reshape(-1)
                rows = chunk_rows(flat, flat.size(-1)) or flat.size(0)  # no whole fp32 copy; per row, the same bits
                nll = torch.cat([F.cross_entropy(flat[r:r + rows].float(), yf[r:r + rows], reduction="none")
                                 for r in range(0, flat.size(0), rows)])
                if i < len(mine):
                    nbytes = held.bytes_of(x.cpu(), y.cpu())
                    sums[s, 0] += nll.double().sum().cpu()
                    sums[s, 1] += y.numel()
                    sums[s, 2] += int(nbytes.sum())
                    doc = torch.from_numpy(held.blocks[s].doc_of[at:at + batch].reshape(-1))
                    per_doc[s].index_add_(0, doc, torch.stack([nll.double().cpu(), torch.ones_like(doc, dtype=torch.float64),
                                                              nbytes.reshape(-1).double()], dim=1))
                chaos.point("train.eval")
        finally:
            model.train(was_training)
    if all_sum is not None and world > 1:
        flat = all_sum(torch.cat([sums.reshape(-1), *(d.reshape(-1) for d in per_doc)]).to(device)).cpu()
        sums, at = flat[:sums.numel()].reshape(sums.shape), sums.numel()
        for j, d in enumerate(per_doc):
            per_doc[j], at = flat[at:at + d.numel()].reshape(d.shape), at + d.numel()
    return summarize(sums, per_doc, held, mix, time.perf_counter() - t0)


def summarize(sums: torch.Tensor, per_doc: list[torch.Tensor], held: HeldOut, mix: Mapping[str, float],
              seconds: float) -> dict:
    """Per source: loss and bits per byte over its tokens (as always), the per-document loss, the
    documents scored and each figure's 95% interval over documents (shardline.training.noise);
    `total`: the sources weighted equally, the one weighting every comparison of runs uses;
    `total_own_mix`: weighted by this run's mix (what its training loss averages over)."""
    sources, weights, docs = {}, {}, {}
    for (nll, targets, nbytes), d, b in zip(sums.tolist(), per_doc, held.blocks):
        if targets == 0:
            continue  # no held-out block: nothing to score
        docs[b.name] = noise.Docs(d[:, 0].numpy(), d[:, 1].numpy(), d[:, 2].numpy(), b.doc_ids)
        sources[b.name] = {"loss": nll / targets, "bpb": nll / math.log(2) / max(nbytes, 1),
                           "doc_loss": float(docs[b.name].figures()["doc_loss"][0]), "blocks": len(b.ids),
                           "tokens": int(targets), "bytes": int(nbytes), "docs": len(docs[b.name]),
                           **{f"{k}_ci": v for k, v in noise.interval(docs[b.name]).items()}}
        weights[b.name] = float(mix.get(b.name, 0.0))
    norm = sum(weights.values()) or 1.0
    own = {k: sum(weights[n] / norm * sources[n][k] for n in sources) for k in ("loss", "bpb")}
    equal = {k: sum(sources[n][k] for n in sources) / max(len(sources), 1) for k in ("loss", "bpb", "doc_loss")}
    ci = noise.total_interval(list(docs.values())) if docs else {}
    own_ci = noise.total_interval(list(docs.values()), list(weights.values())) if sum(weights.values()) > 0 else {}
    tokens = sum(s["tokens"] for s in sources.values())
    return {"sources": sources,
            "total": {**equal, **{f"{k}_ci": v for k, v in ci.items()}, "weighting": "equal"},
            "total_own_mix": {**own, **{f"{k}_ci": own_ci[k] for k in ("loss", "bpb") if k in own_ci},
                              "weights": {n: w / norm for n, w in weights.items()}},
            "docs": {n: d.to_json() for n, d in docs.items()}, "heldout_blocks": held.signature,
            "seconds": seconds, "tokens_per_s": tokens / seconds if seconds > 0 else None}


def due(step: int, target: int, params) -> bool:
    """Whether training evaluates after `step`: every eval.every steps, at every checkpoint and at
    the last step (never with eval.every 0)."""
    every, ck = params.eval.every, params.train.checkpoint_every
    return bool(every) and (step % every == 0 or step % ck == 0 or step == target)


KEPT = ("loss", "bpb", "tokens", "docs", "doc_loss", "loss_ci", "bpb_ci", "doc_loss_ci")


def compact(ev: dict) -> dict:
    """What a train.jsonl row and a manifest keep of an evaluation (the manifest also keeps "docs",
    each document's sums, which a row drops: `shardline diff` pairs two runs' documents by them)."""
    return {"total": {k: v for k, v in ev["total"].items() if k in (*KEPT, "weighting")},
            "total_own_mix": {k: v for k, v in ev["total_own_mix"].items() if k in ("loss", "bpb", "loss_ci", "bpb_ci",
                                                                                  "weights")},
            "sources": {n: {k: v[k] for k in KEPT if k in v} for n, v in ev["sources"].items()},
            "docs": ev["docs"], "heldout_blocks": ev["heldout_blocks"], "eval_s": ev["seconds"],
            "tokens_per_s": ev["tokens_per_s"]}


def as_row(ev: dict) -> dict:
    """A manifest's evaluation as its step's train.jsonl row keeps it (each document's sums stay in the
    manifest: `shardline diff` pairs runs by them)."""
    return {k: v for k, v in ev.items() if k != "docs"}
