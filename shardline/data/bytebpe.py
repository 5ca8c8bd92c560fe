"""A byte-level BPE tokenizer.json as tiktoken runs it, only where the two provably give the same
ids: what the tokenize stage's tiktoken backend is built from (tokenizer.Encoder).

Contract: `to_tiktoken(tok)` returns a tiktoken Encoding of the HF tokenizer `tok`, or raises
`NotConvertible` saying which static check failed (the checks that make tiktoken's merge rule
equal to HF's: see its docstring); the split pattern, `GPT2_PATTERN`, is HF ByteLevel's, and the
probe comparison in tokenizer.Encoder covers the regex engines' difference. `U2B` maps the
characters ByteLevel spells bytes with back to the bytes (the same mapping HF uses).
"""

from __future__ import annotations

import json

import tiktoken
import tokenizers
from tokenizers import pre_tokenizers

# HF ByteLevel(use_regex=True) splits with exactly this (GPT-2) pattern; tiktoken must too.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

def _unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode, which ByteLevel uses to spell bytes as chars."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in keep]
    table = {chr(b): b for b in keep}
    table.update({chr(256 + n): b for n, b in enumerate(shifted)})
    return table


U2B = _unicode_to_byte()
assert set(U2B) == set(pre_tokenizers.ByteLevel.alphabet())  # same mapping HF uses


class NotConvertible(Exception):
    pass


def to_tiktoken(tok: tokenizers.Tokenizer) -> tiktoken.Encoding:
    """Build an equivalent tiktoken Encoding, or raise NotConvertible with the reason.

    tiktoken repeatedly merges the adjacent pair whose concatenation has the lowest rank
    (rank = output id); HF merges the adjacent pair listed earliest in `merges`. These agree
    when (1) every multi-byte token comes from exactly one merge and ids rise in merge order
    (so rank order == merge order) and (2) HF's merges rebuild each token from its own bytes:
    then tiktoken can never join a pair HF has no merge for (HF, encoding the token alone, would
    pass through that same pair and be stuck). The split regex is the remaining risk (HF uses
    Oniguruma, tiktoken fancy-regex), which the probe comparison covers.
    """
    spec = json.loads(tok.to_str())
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise NotConvertible(f"model is {model.get('type')}, not BPE")
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"):
        if model.get(key):
            raise NotConvertible(f"BPE model sets {key}={model[key]!r}")
    if spec.get("normalizer") is not None:
        raise NotConvertible(f"has a normalizer ({spec['normalizer'].get('type')})")
    pre = spec.get("pre_tokenizer") or {}
    if (pre.get("type"), pre.get("add_prefix_space"), pre.get("use_regex")) != ("ByteLevel", False, True):
        raise NotConvertible(f"pre-tokenizer is not ByteLevel(add_prefix_space=False, "
                              f"use_regex=True): {json.dumps(pre, sort_keys=True)}")
    added = spec.get("added_tokens") or []
    plain = [a["content"] for a in added if not a.get("special")]
    if plain:  # HF splits these out of text before BPE even with encode_special_tokens
        raise NotConvertible(f"has {len(plain)} added non-special tokens, e.g. {plain[0]!r}")
    specials = {a["content"]: a["id"] for a in added}
    special_ids = set(specials.values())
    vocab: dict[str, int] = model.get("vocab") or {}
    ranks: dict[bytes, int] = {}
    for s, i in vocab.items():
        if i in special_ids:
            continue  # tiktoken gets these as special_tokens, never from ordinary text
        if not all(c in U2B for c in s):
            raise NotConvertible(f"vocab token {s!r} (id {i}) is not byte-level")
        ranks[bytes(U2B[c] for c in s)] = i
    n_single = sum(len(b) == 1 for b in ranks)
    if n_single != 256:
        raise NotConvertible(f"vocab has {n_single} of the 256 single-byte tokens")
    if model.get("ignore_merges") and any(all(c in U2B for c in s) for s in specials):
        # HF would look whole pieces up in a vocab that also holds the special tokens
        raise NotConvertible("ignore_merges=True with byte-level-spelled special tokens")
    made: set[int] = set()
    prev = -1
    for n, m in enumerate(model.get("merges") or []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m  # old and new merges formats
        i = vocab.get(a + b)
        if i is None or i in special_ids:
            raise NotConvertible(f"merge {n} ({a!r}, {b!r}) yields no ordinary vocab token")
        if i in made:
            raise NotConvertible(f"token {a + b!r} is produced by two merges (merge {n} repeats it)")
        if i < prev:
            raise NotConvertible(f"ids not in merge order: merge {n} yields id {i} after id {prev}")
        made.add(i)
        prev = i
    orphans = [i for b, i in ranks.items() if len(b) > 1 and i not in made]
    if orphans:
        raise NotConvertible(f"{len(orphans)} multi-byte tokens come from no merge, "
                              f"e.g. {tok.id_to_token(orphans[0])!r}")
    for s, i in vocab.items():  # ~10 ms for 8k tokens
        if len(s) > 1 and i not in special_ids and [t.id for t in tok.model.tokenize(s)] != [i]:
            raise NotConvertible(f"token {s!r} (id {i}) is not rebuilt from its own bytes by "
                                  "the merges (reachable only by another merge path)")
    return tiktoken.Encoding("shardline-bpe", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens=specials)
