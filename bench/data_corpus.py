"""bench.data's corpus: JSONL {"id", "text"} of distinct documents (a unique header line + 3-30 real
paragraphs from ../shared/corpora/*.jsonl, else the stdlib sources and pydoc_data prose; ~5.5 KB
each), seeded, generated once and cached with its sha256 in /tmp/shardline-bench-data/ (CACHE);
1 source document in 20 is kept out of it, for the tokenizer sample check. bench.curation,
bench.sources, bench.scale and bench.cleanprofile run on the same corpus (`corpus(gb, seed)`).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sysconfig
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.measure import MiB

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO.parent / "shared" / "corpora"
CACHE = Path("/tmp/shardline-bench-data")
GB = 10**9
VERSION = 4  # of the generator: part of the cache check


def _paragraphs(text: str) -> list[str]:
    out = []
    for p in re.split(r"\n[ \t]*\n", text):
        for q in (p.split("\n") if len(p) > 3000 else [p]):  # wikitext: one paragraph per line
            if (q := q.strip()) and max(map(len, q.split("\n"))) <= 2000:
                out.append(q)
    return out


def pool() -> tuple[list[str], list[str]]:
    """(corpus paragraphs, held-out paragraphs), deduplicated, in a fixed order."""
    if CORPORA.is_dir() and sorted(CORPORA.glob("*.jsonl")):
        docs = [(f"{f.name}:{d['id']}", d["text"]) for f in sorted(CORPORA.glob("*.jsonl"))
                for d in map(json.loads, f.read_text(encoding="utf-8").splitlines()) if d.get("text")]
    else:
        from pydoc_data.topics import topics
        lib = Path(sysconfig.get_paths()["stdlib"])
        docs = [(f"pydoc:{k}", v) for k, v in sorted(topics.items())] + [
            (str(p.relative_to(lib)), p.read_text(encoding="utf-8", errors="replace"))
            for p in sorted(lib.rglob("*.py")) if not {"site-packages", "test", "tests"} & set(p.parts)]
    held = {i for i, _ in docs if hashlib.sha256(i.encode()).digest()[0] % 20 == 0}
    heldout = list(dict.fromkeys(q for i, t in docs if i in held for q in _paragraphs(t)))
    hs = set(heldout)
    train = dict.fromkeys(q for i, t in docs if i not in held for q in _paragraphs(t))
    return [q for q in train if q not in hs], heldout


def make_corpus(path: Path, target_bytes: int, seed: int = 0) -> dict:
    """Write >= target_bytes of JSONL to `path` (same seed and size: same bytes); return its facts."""
    esc = [json.dumps(p, ensure_ascii=False)[1:-1].encode() for p in pool()[0]]
    rng, h, n, size, buf, held = random.Random(seed), hashlib.sha256(), 0, 0, [], 0
    tmp, t0 = path.with_name(path.name + ".tmp"), time.perf_counter()
    with open(tmp, "wb") as f:
        while size < target_bytes:
            body = b"\\n\\n".join(rng.choices(esc, k=rng.randint(3, 30)))
            lines = [ln for ln in map(bytes.strip, body.split(b"\\n")) if ln]
            if len(body) < 100 or len(set(lines)) < len(lines) / 2 + 1:  # clean's min_chars, repeated lines
                continue
            buf.append(line := b'{"id": "doc-%09d", "text": "Document %d\\n\\n%s"}\n' % (n, n, body))
            n, size, held = n + 1, size + len(line), held + len(line)
            if held >= 32 * MiB or size >= target_bytes:
                h.update(chunk := b"".join(buf))
                f.write(chunk)
                buf, held = [], 0
        os.fsync(f.fileno())
    os.replace(tmp, path)
    took = time.perf_counter() - t0
    return {"version": VERSION, "seed": seed, "target_bytes": target_bytes, "bytes": size, "docs": n,
            "sha256": h.hexdigest(), "pool": hashlib.sha256(b"\0".join(esc)).hexdigest(),
            "gen_s": round(took, 2), "gen_mb_s": round(size / took / 1e6)}


def corpus(gb: float, seed: int) -> tuple[Path, dict]:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"corpus-{gb:g}-{seed}.jsonl"
    side = path.with_name(path.name + ".json")
    digest = hashlib.sha256(b"\0".join(json.dumps(p, ensure_ascii=False)[1:-1].encode() for p in pool()[0]))
    if path.exists() and side.exists():
        meta = json.loads(side.read_text())
        if (meta.get("version"), meta["bytes"], meta["pool"]) == (VERSION, path.stat().st_size, digest.hexdigest()):
            return path, meta
    with ProcessPoolExecutor(1) as ex:  # in a child, as extras(): this process's peak RSS stays small
        side.write_text(json.dumps(meta := ex.submit(make_corpus, path, int(gb * GB), seed).result(), indent=1))
    print(f"generated {path}: {meta['docs']:,} docs, {meta['bytes'] / 1e6:,.0f} MB in {meta['gen_s']} s "
          f"({meta['gen_mb_s']} MB/s), sha256 {meta['sha256'][:16]}", flush=True)
    return path, meta
