"""How many bytes of text each token id spells: what turns a loss into bits per byte.

Contract: `token_bytes(tokenizer.json)` gives, per id, the UTF-8 bytes it adds to the decoded text
(inside a document, and as a document's first token), so that bits per byte = summed loss / ln 2 /
the bytes the targets spell is the figure of decoding the whole text, whatever the tokenizer:
comparable across tokenizers (shardline.training.evaluate; shardline diff across runs trained on
other tokenizers).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np


def token_bytes(tokenizer_json: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes each token id adds to the decoded text: (inside a document, as a document's first
    token). They differ where the decoder drops what the encoder put before a document (a
    SentencePiece-style `▁` prefix); special tokens spell none. Byte-level BPE spells each byte as
    one character and byte-fallback tokens (`<0xE6>`) one byte each, whatever their neighbours;
    any other token is decoded after an anchor token and alone, so the counts are those of
    decoding the whole text, not of each token decoded on its own."""
    from shardline.data.bytebpe import U2B
    from shardline.data.tokenizer import load

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
        if byte_level and all(c in U2B for c in text):
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
