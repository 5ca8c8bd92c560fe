"""tokenize stage: clean parts -> data/tokenizer/tokenizer.json + data/tokens/<source>/part-NNNNN.bin.

Contract:
- The tokenizer (tokenizer_prep.py) is trained (byte-level BPE, `shardline.data.tokenizer`) on the training side of the
  cleaned text (never on held-out documents): about `tokenizer.train_max_mb` of it, the
  documents whose keyed content hash falls in that share of the hash space (the same documents
  however the corpus is packaged), sources in params order, each in document order; or copied
  from `tokenizer.path`, or from `train.init_from`'s model directory (the EOS and BOS it names
  checked before anything on disk changes). `data/tokenizer/meta.json` records its key, sha256
  (the tokenizer hash in every lineage), vocab size, EOS and BOS ids, and the sha256 of the file
  it was copied from; a re-run with the same key reuses it.
- Each clean part becomes `part-NNNNN.bin` (the ids of its training documents, EOS after each
  and `tokenizer.bos_token` before each when set; uint16 when the vocab fits, else uint32) and, when it holds any, `val/part-NNNNN.bin` (its
  held-out documents, each cut to its first eval.doc_bytes bytes: `capped`), each a part of the stage frame (`shardline.data.frame`): its done-marker
  `.json` {key, files, stats: tokens, docs, sha256, format_version} is written last, so a token
  part is done iff its marker holds the current key. key = hash(the clean part's key and
  selection for that side, tokenizer sha256, the format version when it is not 1, and on the
  held-out side eval.doc_bytes): a part of
  another format is redone, never taken as done; version 1 adds nothing, so parts made before
  markers carried a version keep their keys (and read as version 1). Parts are encoded on
  threads (the encoders release the GIL). The token file format and index are
  shardline.core.shardformat's. `index.json` per side (`<source>/` and `<source>/val/`) lists
  them: it is removed before any part of its source is rewritten and written last, so an index
  never vouches for a mix of two runs' parts.
- The encoder is the fastest backend proven id-identical on a probe of this data; the choice
  and its reason go in `data/tokens/<source>/index.json` but never change a single id.

Design: docs/architecture.md (The stage frame; Data contracts: Tokens).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from shardline.core import fsio, shardformat
from shardline.data import frame, staging, tokenizer
from shardline.data.clean.stage import parts as clean
from shardline.data.tokenizer_prep import prepare_tokenizer, unindex
from shardline.core.config import Params
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import (CLEAN_PARTS, SIDES, clean_marker_of, clean_split_of, selection_of,
                                      token_marker_of, token_part)
from shardline.core.parallel import Mapper, thread_map
from shardline.core.progress import Sink

Log = Callable[[str], None]
PROBE_DOCS = 256
PROBE_CHARS = 4096  # per probe doc: the proof covers every source's text, not whole files (HF is the slow side)
# what the format version adds to a part's key: nothing at 1, so parts made before markers carried one keep theirs
VERSION_KEY = [] if shardformat.FORMAT_VERSION == 1 else [{"format_version": shardformat.FORMAT_VERSION}]


@dataclass(frozen=True)
class Work:
    """One side of one clean part to encode (a few hundred bytes: see Recipe)."""

    source: str
    src: str      # the clean part
    side: str     # train | val
    out: str      # its token file
    recipe: "Recipe"
    eos: int
    dtype: str
    bos: int | None = None
    cap: int | None = None  # eval.doc_bytes, on the held-out side: each document's first bytes only


def capped(text: str, cap: int | None) -> str:
    """The first `cap` UTF-8 bytes of `text`, cut at a character boundary (all of it when None)."""
    if cap is None or len(text) * 4 <= cap:  # at most 4 bytes a character: no cut possible
        return text
    return text.encode()[:cap].decode("utf-8", "ignore")


def clean_parts(params: Params, layout: Layout) -> dict[str, list[Path]]:
    out = {}
    for s in params.sources:
        parts = sorted((layout.clean / s.name).glob(CLEAN_PARTS))
        if not parts:
            raise BadInput(f"{layout.rel(layout.clean / s.name)}: no clean parts; run 'dvc repro clean' first")
        out[s.name] = parts
    return out


@dataclass(frozen=True)
class Recipe:
    """How to rebuild the driver's encoder in any process: tasks carry this (a few hundred bytes),
    not the encoder (Dask hashes and pickles every task's arguments; an encoder is ~100 KB and
    rebuilding tiktoken's core on each unpickle cost the driver seconds of CPU per stage)."""

    path: str     # data/tokenizer/tokenizer.json, on the filesystem every worker shares
    sha256: str   # what it must hash to: a worker never encodes with another tokenizer
    backend: str  # the backend the driver chose (and proved identical on its probe)


_ENCODERS: dict[tuple[str, str], "tokenizer.Encoder"] = {}  # (sha256, backend) -> encoder
_CHECKED: set[str] = set()  # tokenizer files found to hash to their recipe's sha256
_ENCODERS_LOCK = threading.Lock()


def encoder_for(recipe: Recipe) -> "tokenizer.Encoder":
    """This process's encoder for `recipe`, built once (threads share it). Kept by what it is,
    not where its file lies (a worker sharing only a store fetches the file for each part); every
    file it is asked for by is checked against the recipe's sha256 once."""
    with _ENCODERS_LOCK:
        if recipe.path not in _CHECKED:
            got = fsio.sha256_file(recipe.path)
            if got != recipe.sha256:
                raise BadInput(f"{recipe.path}: sha256 {got[:12]} is not the tokenizer this stage started with "
                               f"({recipe.sha256[:12]}); was data/tokenizer changed mid-stage? re-run the stage")
            _CHECKED.add(recipe.path)
        enc = _ENCODERS.get((recipe.sha256, recipe.backend))
        if enc is None:
            enc = _ENCODERS[recipe.sha256, recipe.backend] = tokenizer.Encoder.build(tokenizer.load(recipe.path),
                                                                                     backend=recipe.backend)
        return enc


def encode_part(part: frame.Part) -> tuple[list[Path], dict]:
    """One side of one clean part: its token file and tallies (the frame skips a part already done)."""
    w: Work = part.work
    encoder = encoder_for(w.recipe)
    dtype = shardformat.DTYPES[w.dtype]
    eos = np.array([w.eos], dtype=np.uint32)
    bos = () if w.bos is None else (np.array([w.bos], dtype=np.uint32),)
    docs = tokens = 0
    with fsio.atomic_writer(w.out, point="tokenize.write") as f:
        for batch in clean.documents(w.src, w.side):
            if w.cap is not None:
                batch = [capped(t, w.cap) for t in batch]
            pieces = []
            for ids in encoder.encode_arrays(batch):
                pieces += (*bos, ids, eos)
            arr = np.concatenate(pieces).astype(dtype)  # ids < vocab_size: uint16 holds them when it fits
            f.write(arr.tobytes())
            docs += len(batch)
            tokens += len(arr)
    return [Path(w.out)], {"tokens": tokens, "docs": docs, "sha256": fsio.sha256_file(w.out),
                           "format_version": shardformat.FORMAT_VERSION}


def part_inputs(part: frame.Part) -> list[tuple[str, None]]:
    """What encoding a part reads (shardline.data.staging): its clean part, the part's marker and
    selection, the clean stage's split.json, the tokenizer."""
    w: Work = part.work
    return [(f, None) for f in (w.src, str(clean_marker_of(w.src)), str(selection_of(w.src)), str(clean_split_of(w.src)),
                                w.recipe.path)]


def _probe(parts: dict[str, list[Path]]) -> list[str]:
    texts: list[str] = []
    for ps in parts.values():  # the first documents of every source: code, prose, unicode alike
        for batch in clean.documents(ps[0], "train", batch_size=PROBE_DOCS // len(parts) + 1):
            texts += [t[:PROBE_CHARS] for t in batch]
            break
    return texts


def plan(params: Params, layout: Layout, parts: dict[str, list[Path]], recipe: Recipe, tmeta: dict) -> list[frame.Part]:
    """A part per side of every clean part (no empty held-out files), keyed by the clean part's key
    and selection for that side and the tokenizer."""
    out = []
    for name, ps in parts.items():
        for p in ps:
            sel, rows = clean.read_selection(p), clean.part_meta(p)["stats"]["docs_kept"]
            docs = {"val": len(sel["heldout"]), "train": rows - len(set(sel["heldout"]) | set(sel["dropped"]))}
            for side in SIDES if sel["heldout"] else ("train",):
                tok = token_part(layout.tokens_of(name, side), p)
                # bos only when set, the format version only past 1: older lines' parts keep their keys
                cap = params.eval.doc_bytes if side == "val" else None
                key = fsio.stable_hash([clean.side_key(p, side), tmeta["sha256"], tmeta["eos_id"], tmeta["dtype"]]
                                       + ([tmeta["bos_id"]] if tmeta.get("bos_id") is not None else [])
                                       + VERSION_KEY + ([{"doc_bytes": cap}] if cap is not None else []))
                size = p.stat().st_size * docs[side] // max(rows, 1)  # progress: the side's share of the part, by documents
                out.append(frame.Part("tokenize", f"{name}/{'' if side == 'train' else 'val/'}{p.stem}", key,
                                      str(token_marker_of(tok)), size,
                                      Work(name, str(p), side, str(tok), recipe, tmeta["eos_id"], tmeta["dtype"],
                                           tmeta.get("bos_id"), cap)))
    return out


def run(params: Params, layout: Layout, log: Log = print, mapper: Mapper = thread_map,
        sink: Sink | None = None) -> dict[str, dict]:
    """Returns {source: {side: index}}."""
    parts = clean_parts(params, layout)
    tok, tmeta = prepare_tokenizer(params, layout, parts, log)
    encoder = tokenizer.Encoder.build(tok, backend=params.tokenizer.backend, probe_texts=_probe(parts))
    log(f"tokenize: encoder {encoder.backend}: {encoder.reason}")
    recipe = Recipe(str(layout.tokenizer_json), tmeta["sha256"], encoder.backend)
    with _ENCODERS_LOCK:
        _ENCODERS[recipe.sha256, recipe.backend] = encoder  # in-process runners (threads) reuse the proven one
        _CHECKED.add(recipe.path)
    jobs = plan(params, layout, parts, recipe, tmeta)
    for name in parts:
        layout.tokens_of(name, "val").mkdir(parents=True, exist_ok=True)
        fsio.remove_temps(layout.tokens / name)
        if any(frame.finished(j) is None for j in jobs if j.work.source == name):
            unindex(layout.tokens / name)  # parts change in place: no index may vouch for old and new mixed
    markers, skipped = frame.run("tokenize", jobs, encode_part, mapper, log, sink, staging.of(params, layout), part_inputs)
    log(f"tokenize: {len(jobs)} token part(s) of {sum(map(len, parts.values()))} clean part(s), {skipped} already "
        f"done, {len(jobs) - skipped} encoded")
    indexes = {}
    for name in parts:
        d = layout.tokens / name
        keep = set()
        for side in SIDES:
            mine = [(Path(j.work.out), m) for j, m in zip(jobs, markers)
                    if j.work.source == name and j.work.side == side]
            entries = [{"file": out.name, "bytes": m["files"][out.name],
                        **{k: v for k, v in m["stats"].items() if k != "format_version"}} for out, m in mine]
            index = shardformat.token_index(name, side, tmeta, encoder.backend, encoder.reason, entries)
            where = layout.tokens_of(name, side)
            keep |= {out for out, _ in mine} | {token_marker_of(out) for out, _ in mine}
            keep.add(shardformat.write_index(where, index))
            indexes.setdefault(name, {})[side] = index
        frame.sweep(d, keep)
    fsio.prune_dirs(layout.tokens, set(parts))
    log("tokenize: " + ", ".join(f"{n}: {ix['train']['tokens']:,} tokens (+ {ix['val']['tokens']:,} held out)"
                                 for n, ix in indexes.items()))
    return indexes
