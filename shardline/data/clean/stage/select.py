"""Clean phase 2: which kept documents train, which are held out, which go as duplicates.

Contract (docs/architecture.md, "Data contracts: Clean parts"):
- Near-duplicates first, when `clean.near_dedup` is on: each clean part's MinHash band keys are
  a part of their own in the stage frame (stage `minhash`: `part-NNNNN.minhash.npy` and its
  marker, keyed by the clean part's key and the near_dedup settings), so a kill costs at most the
  part in flight, a new source signs only its own parts, and changing near_dedup re-signs but
  does not re-clean. Then `minhash.clusters` over every part.
- Then one pass in global order (sources in params order, parts, rows), held-out documents
  first, then training ones. A held-out document goes when it repeats an earlier held-out one
  (exactly, with dedup; or in its cluster, with near_dedup). A training document goes when it is
  a copy of a held-out document (`heldout_copies`, always: split integrity) or in a cluster with
  one (`heldout_near_copies`), else when it repeats an earlier training document exactly
  (`dedup`) or is in a cluster that already kept one (`near_dedup`). So each cluster keeps its
  first member, and no training document is a near-copy of a held-out one.
- Each part's selection `part-NNNNN.split.json`: {key, ctx, heldout, dropped, why, tally};
  `why[reason]` lists [row, part of the kept document it repeats, that row]. ctx = hash(every
  part key, the split settings, dedup, near_dedup): the same in every selection of one run.
- Dropped samples of phase 2 join phase 1's (the same lowest-u rule) in
  data/clean/<source>/dropped/<reason>.jsonl; a near-duplicate's row gives the exact Jaccard
  similarity of its shingles with the document it repeats.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow.parquet as pq

from shardline.core import chaos, fsio
from shardline.core.config import Params
from shardline.core.filenames import selection_of, signatures_marker_of, signatures_of
from shardline.core.parallel import Mapper
from shardline.core.progress import Sink
from shardline.data import frame, staging
from shardline.data.clean.stage import minhash, split

Log = Callable[[str], None]
MINHASH_VERSION = 1
_SIGN_BATCH = 1024  # documents signed at once: a few MB of shingle arrays
REASONS = ("dedup", "near_dedup", "heldout_copies", "heldout_near_copies")


def _sign(part: frame.Part) -> tuple[list[Path], dict]:
    src, cfg = part.work
    rows, keys, docs = [], [], 0
    for batch in pq.ParquetFile(src).iter_batches(columns=["text"], batch_size=_SIGN_BATCH):  # bounded memory
        r, k = minhash.sign(batch.column(0).to_pylist(), cfg)
        rows.append(r + docs)
        keys.append(k)
        docs += batch.num_rows
    signed = np.concatenate(rows or [np.zeros(0, np.int64)])
    minhash.write_signatures(signatures_of(src), signed, np.concatenate(keys or [np.zeros((0, cfg.bands), np.uint64)]))
    return [signatures_of(src)], {"docs": docs, "signed": len(signed)}


def sign_plan(parts: list[frame.Part], params: Params) -> list[frame.Part]:
    cfg = params.clean.near_dedup
    settings = cfg.model_dump(mode="json", exclude={"memory_mb"})
    versions = [MINHASH_VERSION, importlib.metadata.version("rensa")]  # another rensa may sign differently
    return [frame.Part("minhash", p.name, fsio.stable_hash([p.key, settings, versions]),
                       str(signatures_marker_of(p.work.out)), Path(p.work.out).stat().st_size,
                       (p.work.out, cfg)) for p in parts]


def near_clusters(parts: list[frame.Part], params: Params, log: Log, mapper: Mapper, sink: Sink | None,
                  staged: "staging.Staging | None" = None) -> tuple[dict[int, int], list[frame.Part]]:
    """(global number -> cluster root for clustered documents, the signature parts)."""
    cfg = params.clean.near_dedup
    if cfg is None:
        return {}, []
    signing = sign_plan(parts, params)
    _, skipped = frame.run("minhash", signing, _sign, mapper, log, sink, staged, lambda p: [(p.work[0], None)])
    roots = minhash.clusters([signatures_of(p.work.out) for p in parts], cfg.bands, cfg.memory_mb)
    log(f"clean: near_dedup: {len(signing) - skipped} part(s) signed, {len(set(roots.values()))} cluster(s) "
        f"of {len(roots)} document(s)")
    return roots, signing


def context(parts: list[frame.Part], params: Params) -> str:
    """What every selection of this run depends on: all parts (in order), the split settings, dedup."""
    near = params.section("clean")["near_dedup"]
    return fsio.stable_hash([[p.key for p in parts], params.eval.split(), params.clean.dedup]
                            + ([near] if near is not None else []))  # no near_dedup: the ctx of before


def _columns(part: frame.Part, *names: str) -> dict:
    t = pq.read_table(part.work.out, columns=list(names))
    return {n: t.column(n).to_pylist() if n == "hash" else t.column(n).to_numpy() for n in names}


class _Pass:
    """The state of the one pass in global order: first copies and cluster representatives."""

    def __init__(self, parts: list[frame.Part], roots: dict[int, int], dedup: bool):
        self.parts, self.roots, self.dedup = parts, roots, dedup
        self.held_hash: dict[bytes, int] = {}
        self.held_rep: dict[int, int] = {}
        self.train_hash: dict[bytes, int] = {}
        self.train_rep: dict[int, int] = {}

    def held(self, g: int, h: bytes) -> tuple[str, int] | None:
        return self._first(g, h, [], self.held_hash, self.held_rep)

    def train(self, g: int, h: bytes) -> tuple[str, int] | None:
        root = self.roots.get(g)
        split = [("heldout_copies", self.held_hash.get(h)), ("heldout_near_copies", self.held_rep.get(root))]
        return self._first(g, h, split, self.train_hash, self.train_rep)

    def _first(self, g: int, h: bytes, before: list, hashes: dict, reps: dict) -> tuple[str, int] | None:
        """The first reason in order (`before`, then dedup, then near_dedup) with the document it
        repeats; None keeps the document, which becomes its cluster's representative on this side."""
        root = self.roots.get(g)
        reasons = [*before, ("dedup", hashes.get(h) if self.dedup else None), ("near_dedup", reps.get(root))]
        why = next(((r, of) for r, of in reasons if of is not None), None)
        if why is None and root is not None:
            reps[root] = g
        hashes.setdefault(h, g)
        return why

    def name_of(self, g: int) -> list:
        return [self.parts[g >> 32].name, g & 0xFFFFFFFF]


def select(parts: list[frame.Part], params: Params, log: Log, mapper: Mapper, sink: Sink | None = None,
           staged: "staging.Staging | None" = None) -> tuple[dict[str, split.Threshold], dict]:
    """The held-out split, then dedup and near-dedup; one selection per part (the signatures on
    workers that share only `staged`'s store, when given). Returns the thresholds and the
    near_dedup summary ({} when off)."""
    thresholds = {s.name: split.threshold((_columns(p, "u")["u"] for p in parts if p.work.source.name == s.name),
                                          params.eval) for s in params.sources}
    roots, signing = near_clusters(parts, params, log, mapper, sink, staged)
    run = _Pass(parts, roots, params.clean.dedup)
    ctx = context(parts, params)
    held: dict[str, tuple[list[int], dict]] = {}
    for i, part in enumerate(parts):  # held-out documents first, in global order
        c = _columns(part, "hash", "u")
        keep, why = [], {r: [] for r in REASONS}
        for r in np.flatnonzero(thresholds[part.work.source.name].mask(c["u"])).tolist():
            dup = run.held(i << 32 | r, c["hash"][r])
            if dup is None:
                keep.append(r)
            else:
                why[dup[0]].append([r, *run.name_of(dup[1])])
        held[part.name] = (keep, why)
    changed = 0
    for i, part in enumerate(parts):
        c = _columns(part, "hash", "bytes")
        keep, why = held[part.name]
        skip = set(keep) | {row for rows in why.values() for row, *_ in rows}
        for r, h in enumerate(c["hash"]):
            if r not in skip and (dup := run.train(i << 32 | r, h)) is not None:
                why[dup[0]].append([r, *run.name_of(dup[1])])
        why = {k: sorted(v) for k, v in why.items() if v}
        size = lambda rows: int(c["bytes"][rows].sum()) if rows else 0  # noqa: E731
        dropped = sorted(row for rows in why.values() for row, *_ in rows)
        sel = {"key": part.key, "ctx": ctx, "heldout": keep, "dropped": dropped, "why": why,
               "tally": {"heldout": {"docs": len(keep), "bytes": size(keep)},
                         **{k: {"docs": len(why.get(k, [])), "bytes": size([r for r, *_ in why.get(k, [])])}
                            for k in REASONS}}}
        if _write_selection(part, sel):
            changed += 1
            chaos.done("clean", f"{part.name} selection")
            chaos.point("clean.dedup")
    for name, t in thresholds.items():
        log(f"clean: {name}: {t.held} document(s) held out ({split.DECIDED_BY[t.clamp]})")
    if changed:
        log(f"clean: {changed} part selection(s) updated")
    near = {} if params.clean.near_dedup is None else {
        "clusters": len(set(roots.values())), "docs_in_clusters": len(roots),
        "threshold": round((1 / params.clean.near_dedup.bands) ** (1 / params.clean.near_dedup.rows), 4)}
    return thresholds, near


def _write_selection(part: frame.Part, sel: dict) -> bool:
    """Write the selection unless the same bytes are there; True when written."""
    data = (json.dumps(sel, sort_keys=True) + "\n").encode()
    path = selection_of(part.work.out)
    if path.exists() and path.read_bytes() == data:
        return False
    fsio.write_bytes(path, data)
    return True


def signature_files(parts: list[frame.Part], params: Params) -> set[Path]:
    """What near_dedup keeps on disk per part (for the stage's sweep)."""
    if params.clean.near_dedup is None:
        return set()
    return {f for p in parts for f in (signatures_of(p.work.out), signatures_marker_of(p.work.out))}

