"""tokenize stage: clean parts -> data/tokenizer/tokenizer.json + data/tokens/<source>/part-NNNNN.bin.

Contract:
- The tokenizer is trained (byte-level BPE, `shardline.data.tokenizer`) on the training side of the
  cleaned text (never on held-out documents), parts taken round-robin across sources in params
  order up to `tokenizer.train_max_mb`, or copied
  from `tokenizer.path`. `data/tokenizer/meta.json` records its key, sha256 (the tokenizer hash
  in every lineage), vocab size and EOS id; a re-run with the same key reuses it.
- Each clean part becomes `part-NNNNN.bin` (the ids of its training documents, EOS after each;
  uint16 when the vocab fits, else uint32) and, when it holds any, `val/part-NNNNN.bin` (its
  held-out documents); each then gets its `.json` {key, tokens, docs, sha256}: the json is
  written last, so a token part is done iff its json exists with the current key.
  key = hash(the clean part's key and selection for that side, tokenizer sha256). Parts are
  encoded in parallel. `index.json` per side (`<source>/` and `<source>/val/`) lists them: it
  is removed before any part of its source is rewritten and written last, so an index never
  vouches for a mix of two runs' parts.
- The encoder is the fastest backend proven id-identical on a probe of this data; the choice
  and its reason go in `data/tokens/<source>/index.json` but never change a single id.
"""

from __future__ import annotations

import functools

import itertools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from shardline.core import chaos, fsio
from shardline.data import clean, tokenizer
from shardline.core.config import Params
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.parallel import Mapper, thread_map
from shardline.data.shard import DTYPES, dtype_for

Log = Callable[[str], None]
PROBE_DOCS = 256
PROBE_CHARS = 4096  # per probe doc: the proof covers every source's text, not whole files (HF is the slow side)


@dataclass(frozen=True)
class Job:
    """One clean part: its training documents and, when it holds any, its held-out ones (one
    task, so a cluster runs as many tasks as there are parts)."""

    source: str
    src: Path
    outs: tuple[tuple[str, Path, str], ...]  # (side, token file, key) per side

    @property
    def name(self) -> str:
        return f"{self.source}/{self.src.stem}"


def clean_parts(params: Params, layout: Layout) -> dict[str, list[Path]]:
    out = {}
    for s in params.sources:
        parts = sorted((layout.clean / s.name).glob("part-*.parquet"))
        if not parts:
            raise BadInput(f"{layout.rel(layout.clean / s.name)}: no clean parts; run 'dvc repro clean' first")
        out[s.name] = parts
    return out


def _training_texts(parts: dict[str, list[Path]], max_bytes: float) -> Iterator[str]:
    taken = 0
    for group in itertools.zip_longest(*parts.values()):
        for path in filter(None, group):
            for batch in clean.documents(path, "train"):
                for text in batch:
                    if taken >= max_bytes:
                        return
                    taken += len(text.encode())
                    yield text


def prepare_tokenizer(params: Params, layout: Layout, parts: dict[str, list[Path]], log: Log = print):
    """Train or copy the tokenizer unless the one on disk has the current key."""
    cfg = params.tokenizer
    out, meta_path = layout.tokenizer / "tokenizer.json", layout.tokenizer / "meta.json"
    given = Path(cfg.path) if cfg.path else None
    if given is not None and not given.is_absolute():
        given = layout.root / given
    basis = fsio.sha256_file(given) if given else [clean.side_key(p, "train") for ps in parts.values() for p in ps]
    settings = {k: v for k, v in params.section("tokenizer").items() if k != "backend"}  # ids never depend on it
    key = fsio.stable_hash({"tokenizer": settings, "basis": basis})
    if meta_path.exists() and out.exists():
        meta = fsio.read_json(meta_path)
        if meta["key"] == key and fsio.sha256_file(out) == meta["sha256"]:
            log(f"tokenize: tokenizer up to date ({meta['sha256'][:12]})")
            return tokenizer.load(out), meta
    layout.tokenizer.mkdir(parents=True, exist_ok=True)
    for name in parts:  # every token part changes with the tokenizer: no index may outlive it
        _unindex(layout.tokens / name)
    if given:
        tok = tokenizer.load(given)
    else:
        tok = tokenizer.train_bpe(_training_texts(parts, cfg.train_max_mb * 2**20), vocab_size=cfg.vocab_size,
                                  special_tokens=cfg.special_tokens, min_frequency=cfg.min_frequency)
    sha = tokenizer.save(tok, out)
    vocab = tok.get_vocab_size()
    meta = {"key": key, "sha256": sha, "vocab_size": vocab, "eos_token": cfg.eos_token,
            "eos_id": tokenizer.token_id(tok, cfg.eos_token), "dtype": dtype_for(vocab),
            "source": str(cfg.path) if cfg.path else "trained"}
    fsio.write_json(meta_path, meta)
    log(f"tokenize: tokenizer {'loaded' if given else 'trained'}: vocab {vocab}, sha256 {sha[:12]}")
    return tok, meta


def _unindex(d: Path) -> None:
    """Remove a source's token indexes, durably, before any of its parts is rewritten: a stage
    that then fails (killed, a full disk) leaves no index over a mix of old and new parts, or
    over old ids from another tokenizer, and the shard stage refuses the source by name."""
    for where in (d, d / "val"):
        if (where / "index.json").exists():
            (where / "index.json").unlink()
            fsio.fsync_dir(where)


def _done(out: Path, key: str) -> dict | None:
    marker = out.with_suffix(".json")
    if not marker.exists() or not out.exists():
        return None
    meta = fsio.read_json(marker)
    return meta if meta["key"] == key and out.stat().st_size == meta["bytes"] else None


@dataclass(frozen=True)
class Recipe:
    """How to rebuild the driver's encoder in any process: tasks carry this (a few hundred bytes),
    not the encoder (Dask hashes and pickles every task's arguments; an encoder is ~100 KB and
    rebuilding tiktoken's core on each unpickle cost the driver seconds of CPU per stage)."""

    path: str     # data/tokenizer/tokenizer.json, on the filesystem every worker shares
    sha256: str   # what it must hash to: a worker never encodes with another tokenizer
    backend: str  # the backend the driver chose (and proved identical on its probe)


_ENCODERS: dict[Recipe, "tokenizer.Encoder"] = {}
_ENCODERS_LOCK = threading.Lock()


def encoder_for(recipe: Recipe) -> "tokenizer.Encoder":
    """This process's encoder for `recipe`, built once (threads share it)."""
    with _ENCODERS_LOCK:
        enc = _ENCODERS.get(recipe)
        if enc is None:
            got = fsio.sha256_file(recipe.path)
            if got != recipe.sha256:
                raise BadInput(f"{recipe.path}: sha256 {got[:12]} is not the tokenizer this stage started with "
                               f"({recipe.sha256[:12]}); was data/tokenizer changed mid-stage? re-run the stage")
            enc = _ENCODERS[recipe] = tokenizer.Encoder.build(tokenizer.load(recipe.path), backend=recipe.backend)
        return enc


def encode_part(job: Job, recipe: Recipe, eos: int, dtype: np.dtype) -> dict[str, dict]:
    """Each side of one clean part; {side: its token part's meta, with "skipped"}."""
    return {side: _encode(job.src, side, out, key, recipe, eos, dtype) for side, out, key in job.outs}


def _encode(src: Path, side: str, out: Path, key: str, recipe: Recipe, eos: int, dtype: np.dtype) -> dict:
    done = _done(out, key)
    if done:
        return {**done, "skipped": True}
    encoder = encoder_for(recipe)
    docs = tokens = 0
    with fsio.atomic_writer(out, point="tokenize.write") as f:
        for batch in clean.documents(src, side):
            ids = encoder.encode_batch(batch)
            n = sum(map(len, ids)) + len(ids)
            arr = np.fromiter(itertools.chain.from_iterable(x + [eos] for x in ids), dtype=dtype, count=n)
            f.write(arr.tobytes())
            docs += len(ids)
            tokens += n
    chaos.point("tokenize.part")  # ids on disk, their .json not yet: the part is not done
    meta = {"key": key, "file": out.name, "tokens": tokens, "docs": docs,
            "bytes": tokens * dtype.itemsize, "sha256": fsio.sha256_file(out)}
    fsio.write_json(out.with_suffix(".json"), meta)
    chaos.done("tokenize", f"{out.parent.parent.name}/{out.parent.name}/{out.name}")
    return {**meta, "skipped": False}


def _probe(parts: dict[str, list[Path]]) -> list[str]:
    texts: list[str] = []
    for ps in parts.values():  # the first documents of every source: code, prose, unicode alike
        for batch in clean.documents(ps[0], "train", batch_size=PROBE_DOCS // len(parts) + 1):
            texts += [t[:PROBE_CHARS] for t in batch]
            break
    return texts


def run(params: Params, layout: Layout, log: Log = print, mapper: Mapper = thread_map) -> dict[str, dict]:
    """Returns {source: {side: index}}."""
    parts = clean_parts(params, layout)
    tok, tmeta = prepare_tokenizer(params, layout, parts, log)
    encoder = tokenizer.Encoder.build(tok, backend=params.tokenizer.backend, probe_texts=_probe(parts))
    log(f"tokenize: encoder {encoder.backend}: {encoder.reason}")
    recipe = Recipe(str(layout.tokenizer / "tokenizer.json"), tmeta["sha256"], encoder.backend)
    with _ENCODERS_LOCK:
        _ENCODERS[recipe] = encoder  # in-process runners (threads) reuse the proven one
    dtype = DTYPES[tmeta["dtype"]]
    jobs = []
    for name, ps in parts.items():
        for p in ps:
            sides = clean.SIDES if clean.read_selection(p)["heldout"] else ("train",)  # no empty val files
            jobs.append(Job(name, p, tuple(
                (side, layout.tokens / name / ("" if side == "train" else "val") / f"{p.stem}.bin",
                 fsio.stable_hash([clean.side_key(p, side), tmeta["sha256"], tmeta["eos_id"], tmeta["dtype"]]))
                for side in sides)))
    for name in parts:
        (layout.tokens / name / "val").mkdir(parents=True, exist_ok=True)
        fsio.remove_temps(layout.tokens / name)
        if any(not _done(out, key) for j in jobs if j.source == name for _, out, key in j.outs):
            _unindex(layout.tokens / name)  # parts change in place: no index may vouch for old and new mixed
    results = mapper(functools.partial(encode_part, recipe=recipe, eos=tmeta["eos_id"], dtype=dtype), jobs)
    done = [(j.source, side, out, r[side]) for j, r in zip(jobs, results) for side, out, _ in j.outs]
    skipped = sum(r["skipped"] for *_, r in done)
    log(f"tokenize: {len(done)} token part(s) of {len(jobs)} clean part(s), {skipped} already done, "
        f"{len(done) - skipped} encoded")
    indexes = {}
    for name in parts:
        d = layout.tokens / name
        keep = set()
        for side in clean.SIDES:
            mine = [(out, r) for source, s, out, r in done if source == name and s == side]
            entries = [{k: r[k] for k in ("file", "tokens", "docs", "bytes", "sha256")} for _, r in mine]
            index = {"source": name, "side": side, "dtype": tmeta["dtype"], "tokenizer_sha256": tmeta["sha256"],
                     "eos_id": tmeta["eos_id"], "encoder": encoder.backend, "encoder_reason": encoder.reason,
                     "parts": entries, "tokens": sum(e["tokens"] for e in entries),
                     "docs": sum(e["docs"] for e in entries)}
            where = d if side == "train" else d / "val"
            keep |= {out for out, _ in mine} | {out.with_suffix(".json") for out, _ in mine} | {where / "index.json"}
            fsio.write_json(where / "index.json", index)
            indexes.setdefault(name, {})[side] = index
        fsio.prune(d, keep)
    fsio.prune_dirs(layout.tokens, set(parts))
    log("tokenize: " + ", ".join(f"{n}: {ix['train']['tokens']:,} tokens (+ {ix['val']['tokens']:,} held out)"
                                 for n, ix in indexes.items()))
    return indexes

