"""Which documents a training step saw: `shardline explain --step N`, and the card's slowest and
highest-loss steps.

Contract: `saw(layout, params, step)` answers, for every row of step N's global batch (each of its
train.grad_accum micro-batches), the row's source, its block (shard, block in shard) and the
documents it holds with their token ranges (shardline.data.provenance), without reading raw data
or the model. The position of the step in the loader's order comes from train.jsonl: every
record lists the global batches the step consumed (`batches`, their hashes) and those a rollback
set aside before it (`skipped_batches`), and the latest valid checkpoint's loader state anchors
the count (a fresh run's first step starts at position 0). The order itself is the loader's pure
function of (seed, mix, data) with the run's own seed, mix and global batch (the checkpoint's
loader state; params.yaml's without one). Each batch's hash is checked against the record: a step
whose batches the order does not give (shards or settings changed since the run) is one BadInput
saying so, never another step's documents.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from shardline.core import fsio
from shardline.core.config import Params
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import TRAIN_STATE
from shardline.data.provenance import Stream
from shardline.stream.order import Order, batch_hash, open_sources
from shardline.training import checkpoint
from shardline.training.steplog import read_records


def positions(rows: Sequence[Mapping], anchor: tuple[int, int] | None, global_batch: int) -> dict[int, list[int]]:
    """step -> the loader position of each global batch it consumed. `anchor`: (step, blocks
    consumed after it), a checkpoint's; None: position 0 before the first record."""
    by_step = {r["step"]: r for r in rows}
    out: dict[int, list[int]] = {}
    if anchor is None:
        at, steps = 0, sorted(by_step)
    else:
        at, first = anchor[1], anchor[0]
        for s in sorted((s for s in by_step if s <= first), reverse=True):  # back from the anchor
            r = by_step[s]
            at -= global_batch * len(r.get("batches", []))
            out[s] = [at + global_batch * i for i in range(len(r.get("batches", [])))]
            at -= global_batch * len(r.get("skipped_batches", []))
        at, steps = anchor[1], sorted(s for s in by_step if s > first)
    for s in steps:  # forward
        r = by_step[s]
        at += global_batch * len(r.get("skipped_batches", []))
        out[s] = [at + global_batch * i for i in range(len(r.get("batches", [])))]
        at += global_batch * len(r.get("batches", []))
    return out


class Steps:
    """A run's steps placed in its loader's order, with the documents behind each block."""

    def __init__(self, layout: Layout, params: Callable[[], Params]):
        """`params`: gives params.yaml's settings, asked for only when no checkpoint holds the run's."""
        self.layout = layout
        self.rows = read_records(layout.train_log) if layout.train_log.exists() else []
        if not self.rows:
            raise BadInput(f"{layout.rel(layout.train_log)}: no training steps recorded; train first ('dvc repro "
                           "train')")
        latest = checkpoint.latest_valid(layout.checkpoints, lambda _: None)
        state = fsio.read_json(latest / TRAIN_STATE) if latest is not None else None  # verified with its manifest
        if state is None:
            p = params()
            state_loader = {"seed": p.loader.seed, "mix": p.mix, "global_batch": p.loader.global_batch}
        loader = state["loader"] if state else state_loader
        self.global_batch = int(loader["global_batch"])
        self.sources = open_sources(layout.shards, list(loader["mix"]))
        self.order = Order(self.sources, loader["mix"], int(loader["seed"]))
        anchor = (state["step"], state["loader"]["blocks_consumed"]) if state else None
        self.at = positions(self.rows, anchor, self.global_batch)
        self.by_step = {r["step"]: r for r in self.rows}
        self.streams: dict[str, Stream] = {}

    def saw(self, step: int) -> dict:
        if step not in self.by_step:
            have = sorted(self.by_step)
            raise BadInput(f"step {step}: not in {self.layout.rel(self.layout.train_log)} (it holds steps "
                           f"{have[0]}-{have[-1]})")
        rec, out = self.by_step[step], []
        for micro, (pos, want) in enumerate(zip(self.at[step], rec.get("batches", []))):
            ids = self.order.blocks(pos, self.global_batch)
            if batch_hash(ids) != want:
                raise BadInput(f"step {step}: the loader's order at position {pos:,} gives batch {batch_hash(ids)}, "
                               f"but {self.layout.rel(self.layout.train_log)} records {want}: the shards, the mix or "
                               "the seed changed since that run ('dvc checkout' its data version first)")
            for row, (s, shard, block) in enumerate(ids.tolist()):
                src = self.sources[s]
                width = src.index["seq_len"] + 1
                k = int(src.starts[shard]) + block  # the block's number in the source's stream
                stream = self.streams.setdefault(src.name, Stream(self.layout, src.name))
                out.append({"micro": micro, "row": row, "source": src.name, "shard": shard, "block": block,
                            "docs": [p.to_json() for p in stream.pieces(k * width, width)]})
        return {"step": step, "loss": rec.get("loss"), "step_s": rec.get("step_s"), "rows": out}


def render(r: dict) -> str:
    loss = "" if r["loss"] is None else f", loss {r['loss']:.4f}"
    lines = [f"step {r['step']}{loss}: {len(r['rows'])} blocks"]
    for x in r["rows"]:
        docs = "; ".join(f"{d['id']} tokens {d['tokens'][0]}-{d['tokens'][1]} of {d['of']}" for d in x["docs"])
        lines.append(f"  {x['micro']}.{x['row']:<3} {x['source']} shard {x['shard']} block {x['block']}: {docs}")
    return "\n".join(lines)


def named(layout: Layout, params: Params, steps: dict[str, int], most: int = 3) -> dict[str, dict]:
    """For the card: {label: step's documents, the first `most` ids per source} for each labelled step."""
    at = Steps(layout, lambda: params)
    out = {}
    for label, step in steps.items():
        r = at.saw(step)
        ids: dict[str, list[str]] = {}
        for x in r["rows"]:
            for d in x["docs"]:
                ids.setdefault(x["source"], [])
                if d["id"] not in ids[x["source"]]:
                    ids[x["source"]].append(d["id"])
        out[label] = {"step": step, "docs": {n: (v[:most], len(v)) for n, v in ids.items()}}
    return out
