"""The tokenize stage's first step: the tokenizer the line encodes with, trained or brought, and
data/tokenizer/meta.json beside it.

Contract: `prepare_tokenizer(params, layout, parts, log)` returns (the tokenizer, its meta) and
makes them only when the one on disk lacks the current key (the tokenizer settings and what it is
made from: the clean parts' training sides, or the sha256 of the tokenizer.json given by
tokenizer.path or train.init_from). It trains byte-level BPE on the training documents whose keyed
content hash (`SAMPLE_KEY`) falls in `tokenizer.train_max_mb`'s share of the hash space, sources in
params order: the same documents however the corpus is packaged. Its EOS and BOS are checked
(BadInput naming the field and the tokenizer's special tokens) before anything on disk changes;
then every source's token indexes go (`unindex`) before the tokenizer is written, as no index may
outlive the tokenizer its ids came from.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Callable, Iterator

from shardline.core import fsio, shardformat
from shardline.core.config import Params
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import SIDES, side_dir
from shardline.data import tokenizer
from shardline.data.clean.stage import parts as clean

Log = Callable[[str], None]


SAMPLE_KEY = b"shardline/bpe-sample/v1"


def _sampled(digests: list, share: float) -> list[bool]:
    """Whether each document (by its text's digest, the clean parts' `hash`) is in the sample:
    a keyed hash below `share` of the hash space, so the choice is the document's own."""
    cut = int(min(share, 1.0) * 2**64)
    return [int.from_bytes(hashlib.blake2b(d, key=SAMPLE_KEY, digest_size=8).digest(), "little") < cut
            for d in digests]


def _training_texts(parts: dict[str, list[Path]], max_bytes: float) -> Iterator[str]:
    """The BPE sample: every training document whose keyed content hash falls in the first
    max_bytes / (all training bytes) of the hash space, sources in params order, each in
    document order. It spans the corpus, and it is the same documents in the same order however
    the corpus was packaged (part boundaries, file names, compression): so is the tokenizer.
    The sizes come first from two small columns; then the texts are read once."""
    total = sum(sum(bs) for ps in parts.values() for p in ps for bs in clean.documents(p, "train", column="bytes"))
    share = max_bytes / total if total else 1.0
    for ps in parts.values():
        for path in ps:
            texts = clean.documents(path, "train", batch_size=2048)
            for digests in clean.documents(path, "train", batch_size=2048, column="hash"):
                yield from itertools.compress(next(texts), _sampled(digests, share))


def prepare_tokenizer(params: Params, layout: Layout, parts: dict[str, list[Path]], log: Log = print):
    """Train or copy the tokenizer unless the one on disk has the current key."""
    cfg = params.tokenizer
    out, meta_path = layout.tokenizer_json, layout.tokenizer_meta
    given = Path(params.tokenizer_given) if params.tokenizer_given else None
    field = "train.init_from" if params.train.init_from else "tokenizer.path"
    if given is not None and not given.is_absolute():
        given = layout.under_root(given)
    if given is not None and not given.is_file():
        raise BadInput(f"{given}: not found ({field}); a model directory needs the tokenizer.json that "
                       "tokenizer.save_pretrained writes for a fast tokenizer" if params.train.init_from else
                       f"{given}: not found (tokenizer.path); point it at a tokenizer.json")
    basis = fsio.sha256_file(given) if given else [clean.side_key(p, "train") for ps in parts.values() for p in ps]
    # ids never depend on the backend; an unset bos_token leaves the key of a line made before it existed
    settings = {k: v for k, v in params.section("tokenizer").items()
                if k != "backend" and not (k == "bos_token" and v is None)}
    key = fsio.stable_hash({"tokenizer": settings, "basis": basis})
    try:  # a damaged meta.json (or tokenizer.json) is no tokenizer: made again
        meta = tokenizer.read_meta(meta_path, layout) if out.exists() else None
    except (OSError, BadInput):
        meta = None
    if meta is not None and meta.get("key") == key and fsio.sha256_file(out) == meta["sha256"]:
        log(f"tokenize: tokenizer up to date ({meta['sha256'][:12]})")
        return tokenizer.load(out), meta
    if given:
        tok = tokenizer.load(given)
    else:
        tok = tokenizer.train_bpe(_training_texts(parts, cfg.train_max_mb * 2**20), vocab_size=cfg.vocab_size,
                                  special_tokens=cfg.special_tokens, min_frequency=cfg.min_frequency)
    ids = {k: _special_id(tok, k, getattr(cfg, k), given) for k in ("eos_token", "bos_token")}  # before any change
    layout.tokenizer.mkdir(parents=True, exist_ok=True)
    for name in parts:  # every token part changes with the tokenizer: no index may outlive it
        unindex(layout.tokens / name)
    sha = tokenizer.save(tok, out)
    vocab = tok.get_vocab_size()
    meta = {"key": key, "sha256": sha, "vocab_size": vocab, "eos_token": cfg.eos_token, "eos_id": ids["eos_token"],
            "bos_token": cfg.bos_token, "bos_id": ids["bos_token"], "dtype": shardformat.dtype_for(vocab),
            "source": str(given) if given else "trained", "given_sha256": basis if given else None}
    fsio.write_json(meta_path, meta)
    log(f"tokenize: tokenizer {'loaded' if given else 'trained'}: vocab {vocab}, sha256 {sha[:12]}")
    return tok, meta


def _special_id(tok, field: str, token: str | None, given: Path | None) -> int | None:
    """The id of tokenizer.eos_token / bos_token, or BadInput naming the field and what the
    tokenizer does have."""
    if token is None:
        return None
    i = tok.token_to_id(token)
    if i is None:
        specials = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
        raise BadInput(f"tokenizer.{field}: {token!r} is not in {given or 'the trained tokenizer'}; its special "
                       f"tokens are {specials[:12]}: set tokenizer.{field} to one of them")
    return i


def unindex(d: Path) -> None:
    """Remove a source's token indexes, durably, before any of its parts is rewritten: a stage
    that then fails (killed, a full disk) leaves no index over a mix of old and new parts, or
    over old ids from another tokenizer, and the shard stage refuses the source by name."""
    for side in SIDES:
        shardformat.remove_index(side_dir(d, side))
