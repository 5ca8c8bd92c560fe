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

import json
import math
import re
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
from shardline.stream.remote import FetchError, Remote, read_indexes, whole


@dataclass
class Blocks:
    """One source's evaluated held-out blocks."""

    name: str
    ids: np.ndarray  # int64 [n, seq_len + 1]
    available: int   # held-out blocks the source has (the budget takes `len(ids)` of them)
    docs: int
    tokens: int


def token_bytes(tokenizer_json: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes each token id adds to the decoded text: (inside a document, as a document's first
    token). They differ where the decoder drops what the encoder put before a document (a
    SentencePiece-style `▁` prefix); special tokens spell none. Byte-level BPE spells each byte as
    one character and byte-fallback tokens (`<0xE6>`) one byte each, whatever their neighbours;
    any other token is decoded after an anchor token and alone, so the counts are those of
    decoding the whole text, not of each token decoded on its own."""
    from shardline.data.tokenizer import _U2B, load

    tok = load(Path(tokenizer_json))
    spec = json.loads(tok.to_str())
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    byte_level = (spec.get("decoder") or {}).get("type") == "ByteLevel"
    fallback = bool((spec.get("model") or {}).get("byte_fallback"))
    mid = np.zeros(tok.get_vocab_size(), dtype=np.int64)
    start = np.zeros_like(mid)
    plain = []
    for text, i in tok.get_vocab().items():
        if text in special:
            continue
        if byte_level and all(c in _U2B for c in text):
            mid[i] = start[i] = len(text)
        elif fallback and _BYTE_TOKEN.fullmatch(text):
            mid[i] = start[i] = 1
        else:
            plain.append(i)
    if plain:
        anchor = tok.encode("a", add_special_tokens=False).ids[-1]
        base = len(tok.decode([anchor]).encode())
        pairs = tok.decode_batch([[anchor, i] for i in plain], skip_special_tokens=True)
        alone = tok.decode_batch([[i] for i in plain], skip_special_tokens=True)
        mid[plain] = [len(t.encode()) - base for t in pairs]
        start[plain] = [len(t.encode()) for t in alone]
    return mid, start


_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


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

    def target_bytes(self, x: torch.Tensor, y: torch.Tensor) -> int:
        """UTF-8 bytes the targets `y` spell, each after its input `x` (the token before it): a target
        after EOS or BOS is the first token of a document."""
        first = torch.isin(x, self.boundaries)
        return int(torch.where(first, self.start_bytes[y], self.mid_bytes[y]).sum())

    @classmethod
    def open(cls, shards_dir: str | Path, names: Sequence[str], budget: int, tokenizer_json: str | Path,
             remote: Remote | None = None, boundaries: Sequence[int] = ()) -> "HeldOut":
        """`boundaries`: the EOS and BOS ids (a token after one starts a document)."""
        val = [f"{n}/val" for n in names]
        indexes = read_indexes(shards_dir, val, remote, ": no held-out shards; re-run 'dvc repro' (the clean, "
                               "tokenize and shard stages write them), or set eval.every: 0")
        shape = shardformat.geometry(indexes, shards_dir, "held-out shards", "re-run 'dvc repro shard'")
        blocks = [Blocks(name, _read(Path(shards_dir) / f"{name}/val", ix, spread(ix["total_blocks"], budget),
                                     shape.np_dtype, shape.width, remote and (remote, f"{name}/val")),
                         ix["total_blocks"], ix["docs"], ix["total_tokens"])
                  for name, ix in zip(names, indexes)]
        return cls(blocks, token_bytes(tokenizer_json), shape.seq_len, shape.tokenizer_sha256, boundaries)

    @classmethod
    def for_training(cls, params, layout, remote: Remote | None, seq_len: int, tokenizer_sha256: str,
                     log: Callable[[str], None]) -> "HeldOut | None":
        """The held-out set of a training run (None, said so, when no source has a block)."""
        held = cls.open(layout.shards, [s.name for s in params.sources], params.eval.blocks,
                        layout.tokenizer_json, remote, boundary_ids(tokenizer.read_meta(layout.tokenizer_meta, layout)))
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
        return ", ".join(f"{b.name}: {len(b.ids)} of {b.available} held-out blocks" for b in self.blocks)


def _read(shard_dir: Path, index: dict, positions: np.ndarray, dtype: np.dtype, width: int,
          remote: tuple[Remote, str] | None) -> np.ndarray:
    starts = shardformat.block_starts(index)
    shard_of = np.searchsorted(starts, positions, side="right") - 1
    out = np.empty((len(positions), width), dtype=np.int64)
    for s in np.unique(shard_of).tolist():
        entry = index["shards"][s]
        rows = shard_of == s
        out[rows] = _shard(shard_dir, entry, dtype, width, remote)[positions[rows] - starts[s]]
    return out


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
    """Loss and bits per byte per source and mix-weighted, on `held` (see the module contract)."""
    import contextlib

    t0 = time.perf_counter()
    work = [(s, b.ids[i:i + batch]) for s, b in enumerate(held.blocks) for i in range(0, len(b.ids), batch)]
    mine = work[rank::world]
    rounds = -(-len(work) // world) if pad else len(mine)
    sums = torch.zeros((len(held.blocks), 3), dtype=torch.float64)  # nll (nats), targets, bytes
    was_training = model.training
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        model.eval()
        try:
            for i in range(rounds):
                s, ids = mine[i] if i < len(mine) else work[0]  # a padding batch, weighted 0
                x = torch.from_numpy(ids[:, :-1]).to(device)
                y = torch.from_numpy(ids[:, 1:]).to(device)
                with autocast or contextlib.nullcontext():
                    logits, _ = model(x)
                flat, yf = logits.reshape(-1, logits.size(-1)), y.reshape(-1)
                rows = chunk_rows(flat, flat.size(-1)) or flat.size(0)  # no whole fp32 copy; per row, the same bits
                nll = torch.cat([F.cross_entropy(flat[r:r + rows].float(), yf[r:r + rows], reduction="none")
                                 for r in range(0, flat.size(0), rows)])
                if i < len(mine):
                    sums[s, 0] += nll.double().sum().cpu()
                    sums[s, 1] += y.numel()
                    sums[s, 2] += held.target_bytes(x.cpu(), y.cpu())
                chaos.point("train.eval")
        finally:
            model.train(was_training)
    if all_sum is not None and world > 1:
        sums = all_sum(sums.to(device)).cpu()
    return summarize(sums, held, mix, time.perf_counter() - t0)


def summarize(sums: torch.Tensor, held: HeldOut, mix: Mapping[str, float], seconds: float) -> dict:
    sources, weights = {}, {}
    for (nll, targets, nbytes), b in zip(sums.tolist(), held.blocks):
        if targets == 0:
            continue  # no held-out block: nothing to score
        sources[b.name] = {"loss": nll / targets, "bpb": nll / math.log(2) / max(nbytes, 1),
                           "blocks": len(b.ids), "tokens": int(targets), "bytes": int(nbytes)}
        weights[b.name] = float(mix.get(b.name, 0.0))
    norm = sum(weights.values()) or 1.0
    total = {k: sum(weights[n] / norm * sources[n][k] for n in sources) for k in ("loss", "bpb")}
    tokens = sum(s["tokens"] for s in sources.values())
    return {"sources": sources, "total": {**total, "weights": {n: w / norm for n, w in weights.items()}},
            "seconds": seconds, "tokens_per_s": tokens / seconds if seconds > 0 else None}


def due(step: int, target: int, params) -> bool:
    """Whether training evaluates after `step`: every eval.every steps, at every checkpoint and at
    the last step (never with eval.every 0)."""
    every, ck = params.eval.every, params.train.checkpoint_every
    return bool(every) and (step % every == 0 or step % ck == 0 or step == target)


def compact(ev: dict) -> dict:
    """What a train.jsonl row and a manifest keep of an evaluation."""
    return {"total": {k: ev["total"][k] for k in ("loss", "bpb")},
            "sources": {n: {k: v[k] for k in ("loss", "bpb", "tokens")} for n, v in ev["sources"].items()},
            "eval_s": ev["seconds"], "tokens_per_s": ev["tokens_per_s"]}
