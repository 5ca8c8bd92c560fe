"""Tokenizer throughput, side by side on one corpus and one vocabulary.

    python -m bench.tokenize [--corpus PATH ...] [--repeats 5] [--vocab-size 8192]

Trains a byte-level BPE once, then times, interleaved (so machine noise hits all alike):
  (a) Encoder.build(backend="auto").encode_batch over ~8 parts in ThreadPoolExecutor(2),
      as the pipeline calls it;
  (b) raw HF encode_batch_fast over all docs;  (c) raw HF encode_batch;
  (d) raw tiktoken encode_to_numpy (encode_ordinary's ids as one buffer, ~20% faster than its
      list) on the same vocabulary, over ~64 chunks of docs in a long-lived ThreadPoolExecutor(2):
      the fastest reasonable use on 2 cores (it releases the GIL; encode_ordinary_batch would
      start 8 threads and a future per doc);
  (e) raw tiktoken encode_ordinary in a plain loop, one thread (what (a) runs per part), for information;
  (s) the tokenize stage itself (`shardline.data.tokenize.run`: parquet parts in, token parts out,
      fsync'd), on the same docs as clean parts (rules off), tokenizer already trained.
Reports median tokens/s, min-max, and the ratios of (s) and (a) to (b) and (d). On a small, shared machine
single runs are noisy: quote medians and ratios, not absolute numbers.
Corpus: .txt split into paragraphs, .jsonl "text" fields, anything else one doc per file.
Default: the .txt corpora in ../shared/corpora if present, else ~4 MB of stdlib .py files.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import tempfile
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shardline.data import bytebpe, tokenizer as T

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
DEFAULT = [CORPORA / f for f in ("tinyshakespeare.txt", "wikitext2-valid.txt", "wikitext2-test.txt")]


def load_docs(paths: list[Path]) -> list[str]:
    docs: list[str] = []
    for p in paths:
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".jsonl":
            docs += [json.loads(line)["text"] for line in text.splitlines() if line.strip()]
        elif p.suffix == ".txt":
            docs += [d for d in re.split(r"\n[ \t]*\n", text) if d.strip()]
        else:
            docs.append(text)
    return docs


def stdlib_files(max_bytes: int = 4_000_000) -> list[Path]:
    out, n = [], 0
    for p in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        if "site-packages" in p.parts or n >= max_bytes:
            continue
        try:
            p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out.append(p)
        n += p.stat().st_size
    return out


class StageRun:
    """The real tokenize stage over the docs as clean parts; each call re-encodes every part."""

    def __init__(self, docs: list[str], vocab_size: int, mb: float):
        from shardline import paramsfile
        from shardline.data import download, tokenize
        from shardline.data.clean.stage import run as clean
        from shardline.core.layout import Layout

        self.tmp = tempfile.TemporaryDirectory()
        root = Path(self.tmp.name)
        (root / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
        off = {k: None for k in ("min_chars", "max_chars", "max_line_chars", "max_repeated_line_fraction",
                                 "min_alpha_fraction", "max_replacement_fraction")}
        self.params = paramsfile.parse({
            "sources": [{"name": "bench", "uri": str(root / "docs.jsonl"), "format": "jsonl"}],
            "clean": {**off, "normalize": "none", "strip_control": False, "whitespace": False, "dedup": False,
                      "part_mb": max(mb / 8, 0.01)},
            "eval": {"fraction": 0, "min_docs": 0, "every": 0},  # every doc on the training side
            "tokenizer": {"vocab_size": vocab_size}})
        self.layout = Layout.at(root)
        self.tokenize = tokenize
        download.run(self.params, self.layout, log=lambda _: None)
        clean.run(self.params, self.layout, log=lambda _: None)
        tokenize.run(self.params, self.layout, log=lambda _: None)  # trains once, outside the timing

    def __call__(self) -> int:
        shutil.rmtree(self.layout.tokens)
        ix = self.tokenize.run(self.params, self.layout, log=lambda _: None)
        return sum(x["train"]["tokens"] for x in ix.values())

    def close(self) -> None:
        self.tmp.cleanup()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, action="append", help="text file (repeatable)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--vocab-size", type=int, default=8192)
    args = ap.parse_args(argv)
    paths = args.corpus or ([p for p in DEFAULT if p.is_file()] or stdlib_files())
    docs = load_docs(paths)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    print(f"corpus: {len(paths)} files, {len(docs)} docs, {mb:.1f} MB")

    t0 = time.perf_counter()
    tok = T.train_bpe(docs, vocab_size=args.vocab_size, special_tokens=["<|endoftext|>"])
    t1 = time.perf_counter()
    enc = T.Encoder.build(tok, backend="auto", probe_texts=docs[:200])
    t2 = time.perf_counter()
    print(f"train vocab {tok.get_vocab_size()}: {t1 - t0:.1f}s; Encoder.build: {t2 - t1:.2f}s -> "
          f"backend={enc.backend} ({enc.reason})")
    try:
        raw_tt = bytebpe.to_tiktoken(tok)
    except bytebpe.NotConvertible as e:
        raw_tt = None
        print(f"(d) skipped: {e}")

    k = max(1, len(docs) // 8)
    parts = [docs[i:i + k] for i in range(0, len(docs), k)]
    c = max(1, len(docs) // 64)
    chunks = [docs[i:i + c] for i in range(0, len(docs), c)]  # (d): ~64 tasks, no per-doc futures
    pool = ThreadPoolExecutor(2)  # long-lived, as in a pipeline worker
    stage = StageRun(docs, args.vocab_size, mb)

    methods = {
        "(a) Encoder auto, 8 parts, 2 threads":
            lambda: sum(len(ids) for part in pool.map(enc.encode_batch, parts) for ids in part),
        "(b) HF encode_batch_fast":
            lambda: sum(len(e.ids) for e in tok.encode_batch_fast(docs, add_special_tokens=False)),
        "(c) HF encode_batch":
            lambda: sum(len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False)),
    }
    if raw_tt is not None:
        def one(d: str):  # encode_ordinary's ids as one uint32 buffer: tiktoken's fastest call
            return raw_tt.encode_to_numpy(d, disallowed_special=())

        methods["(d) tiktoken encode_to_numpy, 2 threads"] = \
            lambda: sum(pool.map(lambda chunk: sum(len(one(d)) for d in chunk), chunks))
        # what the Encoder's tiktoken backend runs per part (no per-doc thread-pool futures)
        methods["(e) tiktoken encode_ordinary loop"] = \
            lambda: sum(len(raw_tt.encode_ordinary(d)) for d in docs)
    methods["(s) tokenize stage (tokenize.run)"] = stage
    rates: dict[str, list[float]] = {m: [] for m in methods}
    counts: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, fn in methods.items():
            t = time.perf_counter()
            n = fn()
            rates[name].append(n / (time.perf_counter() - t))
            counts[name] = n
    pool.shutdown()
    stage.close()
    counts["(s) tokenize stage (tokenize.run)"] -= len(docs)  # the stage adds one EOS per document
    if len(set(counts.values())) != 1:  # same vocab, same docs: every path must agree
        raise SystemExit(f"token counts differ between methods: {counts}")

    med = {m: statistics.median(r) for m, r in rates.items()}
    print(f"\n{counts[next(iter(counts))]:,} tokens per pass, median of {args.repeats} interleaved runs")
    print(f"{'method':40} {'median tok/s':>13} {'min - max tok/s':>23}")
    for m, r in rates.items():
        print(f"{m:40} {med[m]:13,.0f} {min(r):11,.0f} - {max(r):<11,.0f}")
    b, d = med["(b) HF encode_batch_fast"], med.get("(d) tiktoken encode_to_numpy, 2 threads")
    for key in ("(s) tokenize stage (tokenize.run)", "(a) Encoder auto, 8 parts, 2 threads"):
        print(f"\nratio {key[:3]}/(b) vs raw HF encode_batch_fast: {med[key] / b:.2f}x")
        if d:
            print(f"ratio {key[:3]}/(d) vs raw tiktoken, 2 threads:  {med[key] / d:.2f}x")


if __name__ == "__main__":
    main()
