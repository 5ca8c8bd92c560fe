"""How a source's raw files become clean parts: small files share a part, a big file is cut into
spans at record boundaries (`filespans.spans`), each span a part of its own.

Contract: parts are sized by the bytes a file decodes to, so a compressed file is parted exactly
as its plain copy. Finding a compressed file's spans means decoding it; the spans found are kept
in data/clean/spans.json, keyed by the file's sha256, format and part size, so a rerun (or
`shardline explain`) does not decode the corpus again to plan. A manifest written before
compressed files were read is completed from the files' own bytes.
"""

from __future__ import annotations

from pathlib import Path

from shardline.core import fsio
from shardline.core.config import Source
from shardline.core.layout import Layout
from shardline.core.parallel import thread_map
from shardline.data import compressed, filespans


def load_spans(layout: Layout) -> dict:
    """The spans found so far, by file key: an entry that is not a list of spans (start >= 0, end
    past it or -1, first line >= 0) is dropped and found again, like a file that is unreadable or
    holds another type: they are a saving, a pure function of the file's bytes."""
    try:
        known = fsio.read_json(layout.spans)
    except (OSError, ValueError):  # none yet, or unreadable
        return {}
    return {k: v for k, v in known.items() if _spans(v)} if isinstance(known, dict) else {}


def _spans(value) -> bool:
    ints = lambda s: all(isinstance(x, int) and not isinstance(x, bool) for x in s)  # noqa: E731
    return isinstance(value, list) and bool(value) and all(
        isinstance(s, list) and len(s) == 3 and ints(s) and s[0] >= 0 and (s[1] > s[0] or s[1] == -1) and s[2] >= 0
        for s in value)


def save_spans(layout: Layout, spans: dict) -> Path:
    if not layout.spans.exists() or load_spans(layout) != spans:
        fsio.write_json(layout.spans, spans)
    return layout.spans


def group(source: Source, raw_dir: Path, files: list[dict], part_bytes: float, known: dict) -> list[list[tuple]]:
    """[(path, sha256, span, decoded bytes, codec), ...] per part. `known` maps a compressed file's
    key to its spans; `known["new"]`, when there, collects every key used (found or known)."""
    if source.format in ("jsonl", "txt"):
        files = [f if "compression" in f or not (c := compressed.codec(raw_dir / f["path"])) else
                 {**f, "compression": c, "decoded_bytes": compressed.decoded_size(raw_dir / f["path"], c)[0]}
                 for f in files]

    def key(f: dict) -> str:
        return f"{f['sha256']}:{source.format}:{source.txt_unit}:{part_bytes:g}"

    def cut(f: dict) -> list[filespans.Span]:
        return filespans.spans(raw_dir / f["path"], source, f.get("decoded_bytes", f["bytes"]), part_bytes,
                             f.get("compression"))

    # finding a compressed file's spans decodes it: on threads (the decoders release the GIL)
    decode = [f for f in files if f.get("compression") and f["decoded_bytes"] > part_bytes]
    todo = [f for f in decode if key(f) not in known]
    found = {key(f): [filespans.Span(*s) for s in known[key(f)]] for f in decode if key(f) in known}
    found.update(zip(map(key, todo), thread_map(cut, todo)))
    if "new" in known:
        known["new"].update({k: [list(s) for s in v] for k, v in found.items()})
    groups: list[list[tuple]] = [[]]
    size = 0
    for f in files:
        decoded = f.get("decoded_bytes", f["bytes"])
        for span in found.get(key(f)) or cut(f):
            if groups[-1] and size >= part_bytes:
                groups.append([])
                size = 0
            groups[-1].append((f["path"], f["sha256"], span, decoded, f.get("compression")))
            size += decoded if span.end < 0 else part_bytes
    return [g for g in groups if g]


def span_bytes(span: filespans.Span, file_bytes: int) -> int:
    return (span.end if span.end >= 0 else file_bytes) - span.start
