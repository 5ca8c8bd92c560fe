"""The data half of the line (download -> clean -> tokenize -> shard) as a user runs it, at 1 GB and 4 GB.

    python -m bench.data [--gb 1] [--repeats 2] [--baseline REV] [--no-scale] [--no-quality] [--quick] [--keep]
                         [--no-sources]

Then bench.sources (compressed jsonl, Common Crawl WARC, decontamination, 10,000 small files;
its own docstring says how), unless --no-sources.

Corpus: JSONL {"id", "text"}, distinct documents (a unique header line + 3-30 real paragraphs from
../shared/corpora/*.jsonl, else the stdlib sources and pydoc_data prose; ~5.5 KB each), seeded,
cached with its sha256 in /tmp/shardline-bench-data/. 1 source document in 20 is kept out of it.
Each run: a fresh project (this params.yaml, one jsonl source, clean.part_mb 64) and each stage as
its own `shardline stage NAME` process: wall, CPU (user+sys, children included), peak RSS (wait4:
the largest process) and tree PSS (the sum over its process tree, sampled at 10 Hz). At the base
size also tokenize with the tokenizer kept (encode only; BPE training = full - that) and raw limits
on the same data: tiktoken encode_to_numpy (encode_ordinary's ids as one buffer, its fastest call) on 2 threads over the clean texts (ids checked equal),
json.loads of the corpus in 2 processes, a read+write+fsync copy of the token parts.
Targets (PASS/FAIL at the low end of the repeats, exit 1 on a FAIL): data half (sum of the 4 stage walls)
<= 80 s per GB and >= 2x the speed of engine --baseline (56b5288, main when issue 24 opened), run in the
same benchmark on the same corpus (its own params.yaml, from a git archive of that commit); peak
RSS of every stage <= 1 GiB; encode-only >= 3x raw tiktoken, every part's ids identical to tiktoken's
(each token part's sha256 against raw tiktoken's ids and EOS, as the stage writes them); BPE training <= 10 s; at 4x the
size, total <= 4.2x and peak RSS <= 1.1x (or <= 1 GiB); a tokenizer trained on a 256 MiB sample
(every k-th training document) compresses the held-out documents' paragraphs (bytes/token) at
most 1% worse than the stage's (bench.curation runs the FineWeb-like rules on the same corpora). Caveat: ~3 MB of unique paragraphs recombined make any sample look
alike and hold few distinct words (BPE training and the sample check are easier than on web text).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psutil
import yaml

from bench.verdict import Targets

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO.parent / "shared" / "corpora"
CACHE = Path("/tmp/shardline-bench-data")
MiB, GB = 2**20, 10**9
STAGES = ("download", "clean", "tokenize", "shard")
VERSION = 4  # of the generator: part of the cache check


def engine(name: str):
    """An engine module of the data stages (imported in the child that measures, not here)."""
    return importlib.import_module(f"shardline.data.{name}")


def code_version() -> str:
    """The engine's source, hashed: a benchmark during which it changed mixes two versions."""
    files = sorted(p for d in ("shardline", "flows") for p in (REPO / d).rglob("*.py"))
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:12]


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


def baseline(rev: str) -> Path | None:
    """The engine at commit `rev`, unpacked once (git archive) under CACHE; None, and said, when
    this clone does not hold it. Its stages run from there, on this environment's libraries."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "-q", f"{rev}^{{commit}}"],
                         capture_output=True, text=True).stdout.strip()
    if not sha:
        print(f"baseline {rev}: not in this clone (a shallow clone?): the same-run ratio is skipped")
        return None
    tree = CACHE / f"engine-{sha[:12]}"
    if not (tree / "params.yaml").exists():
        tmp = Path(tempfile.mkdtemp(prefix=tree.name, dir=CACHE))
        archive = subprocess.run(["git", "-C", str(REPO), "archive", sha], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        os.replace(tmp, tree)
    return tree


def project(path: Path, engine_tree: Path = REPO, part_mb: float = 64) -> Path:
    """A fresh project in /tmp whose one source, `web`, is `path` (a file, directory or glob)."""
    root = Path(tempfile.mkdtemp(prefix="shardline-bench-data-"))
    params = yaml.safe_load((engine_tree / "params.yaml").read_text())
    params["sources"] = [{"name": "web", "uri": str(path.resolve()), "format": "jsonl", "text_field": "text"}]
    params["clean"]["part_mb"], params["mix"] = part_mb, {"web": 1.0}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def run_stage(root: Path, name: str, engine_tree: Path = REPO) -> dict:
    """One `shardline stage NAME` process, timed as a whole; another engine tree runs its own CLI
    (`-m` from its directory: its packages come first on sys.path, before the editable install)."""
    exe = Path(sys.executable).parent / "shardline"
    # the command's module, as each tree's layout had it: shardline/cli/, then cli/, and flows/cli.py before that
    cli = next(m for m, f in (("shardline.cli.main", "shardline/cli/main.py"), ("cli.main", "cli/main.py"),
                              ("flows.cli", "flows/cli.py")) if (engine_tree / f).exists())
    cmd = [str(exe)] if exe.exists() and engine_tree == REPO else [sys.executable, "-m", cli]
    tree, done, log = [0], threading.Event(), root / f"{name}.log"

    def pss(q: psutil.Process) -> int:
        try:
            return q.memory_full_info().pss
        except psutil.Error:  # gone meanwhile
            return 0

    def sample() -> None:  # the whole tree: a stage may run its parts in worker processes
        while not done.wait(0.1):
            try:
                tree[0] = max(tree[0], sum(map(pss, [top := psutil.Process(p.pid), *top.children(recursive=True)])))
            except psutil.Error:
                return

    with open(log, "wb") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen([*cmd, "--root", str(root), "stage", name], cwd=engine_tree, stdout=out, stderr=out,
                             env={**os.environ, "PYTHONPATH": str(engine_tree)} if engine_tree != REPO else None)
        (th := threading.Thread(target=sample, daemon=True)).start()
        _, status, ru = os.wait4(p.pid, 0)
        wall, p.returncode = time.perf_counter() - t0, os.waitstatus_to_exitcode(status)
        done.set()
        th.join()
    if p.returncode:
        sys.exit(f"stage {name} failed (exit {p.returncode}) in {root}:\n{log.read_text(errors='replace')[-3000:]}")
    rss = ru.ru_maxrss * 1024 / MiB  # KiB on Linux
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss": rss, "tree": max(tree[0] / MiB, rss),
            "pss": tree[0] / MiB}  # pss alone: a child's ru_maxrss starts at its parent's size (fork)


def _parse(path: str, start: int, end: int) -> int:
    n = 0
    with open(path, "rb") as f:
        if start:
            f.seek(start - 1)
            f.readline()  # the line across `start` is the other half's
        while f.tell() < end:
            n += len(json.loads(f.readline())["text"])
    return n


def same_ids(root: Path, enc) -> tuple[int, str]:
    """Every token part the stage wrote, byte for byte, against raw tiktoken's ids (plus EOS) of
    the same documents: the encoder the stage chose gave tiktoken's ids on the whole corpus.
    Returns the parts checked and the encoder; exits naming the first part that differs."""
    C, checked = engine("clean.stage"), 0
    for side, where in (("train", root / "data/tokens/web"), ("val", root / "data/tokens/web/val")):
        index = json.loads((where / "index.json").read_text())
        eos = np.array([index["eos_id"]], np.uint32)
        for entry in index["parts"]:
            docs = (t for b in C.documents(root / "data/clean/web" / f"{Path(entry['file']).stem}.parquet", side)
                    for t in b)
            ids = [a for t in docs for a in (enc.encode_to_numpy(t, disallowed_special=()), eos)]
            data = np.concatenate(ids).astype(index["dtype"]).tobytes() if ids else b""
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                sys.exit(f"{where / entry['file']}: its ids are not raw tiktoken's ({index['encoder']} wrote it)")
            checked += 1
    return checked, index["encoder"]


def extras(root: Path, corpus_path: Path, tokens: int, quality_mb: float | None) -> dict:
    """The raw limits on this run's data, and the tokenizer sample check."""
    C, T = engine("clean.stage"), engine("tokenizer")
    parts = sorted((root / "data/clean/web").glob("part-*.parquet"))
    train, val = ([t for p in parts for b in C.documents(p, side) for t in b] for side in ("train", "val"))
    texts = train + val
    enc = T._to_tiktoken(T.load(root / "data/tokenizer/tokenizer.json"))
    one = lambda t: enc.encode_to_numpy(t, disallowed_special=())  # noqa: E731 (fastest: one buffer, no int list)
    chunks = [texts[i:i + 64] for i in range(0, len(texts), 64)]  # 64 docs a task: no per-doc futures
    with ThreadPoolExecutor(2) as ex:
        t0 = time.perf_counter()
        n = sum(ex.map(lambda c: sum(len(one(t)) for t in c), chunks))
        r = {"tok_s": time.perf_counter() - t0}
    if n + len(texts) != tokens:  # the stage adds one EOS per document
        sys.exit(f"raw tiktoken gave {n:,} tokens + {len(texts):,} EOS, the stage {tokens:,}")
    r["identical"], r["encoder"] = same_ids(root, enc)
    size = corpus_path.stat().st_size
    with ProcessPoolExecutor(2) as ex:
        t0 = time.perf_counter()
        sum(ex.map(_parse, [str(corpus_path)] * 2, [0, size // 2], [size // 2, size]))
        r["clean_s"] = time.perf_counter() - t0
    out, r["copy_bytes"], t0 = root / "copy", 0, time.perf_counter()
    for src in sorted((root / "data/tokens").rglob("*.bin")):
        (dst := out / src.relative_to(root / "data/tokens")).parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb") as a, open(dst, "wb") as b:
            r["copy_bytes"] += b.write(a.read())
            os.fsync(b.fileno())
    r["copy_s"] = time.perf_counter() - t0
    shutil.rmtree(out)
    return {"raw": r, "quality": quality(root, train, quality_mb) if quality_mb else None}


def quality(root: Path, train: list[str], mb: float) -> dict:
    """Bytes/token on the held-out paragraphs: the stage's tokenizer vs one trained (same settings)
    on `mb` MiB of the training texts, every k-th document."""
    T, heldout = engine("tokenizer"), pool()[1]
    cfg = yaml.safe_load((root / "params.yaml").read_text())["tokenizer"]
    total = sum(len(t.encode()) for t in train)
    step = max(1.0, total / (mb * MiB))
    sample = [t for i, t in enumerate(train) if int((i + 1) / step) > int(i / step)]
    t0 = time.perf_counter()
    tok = T.train_bpe(iter(sample), vocab_size=cfg["vocab_size"], special_tokens=cfg["special_tokens"],
                      min_frequency=cfg["min_frequency"])
    took, nbytes = time.perf_counter() - t0, sum(len(t.encode()) for t in heldout)
    bpt = lambda tk: nbytes / sum(len(e.ids) for e in tk.encode_batch(heldout, add_special_tokens=False))
    return {"sample_mb": sum(len(t.encode()) for t in sample) / MiB, "train_mb": total / MiB, "train_s": took,
            "cap_mb": cfg.get("train_max_mb"), "heldout_kb": nbytes / 1e3, "sample": bpt(tok),
            "stage": bpt(T.load(root / "data/tokenizer/tokenizer.json"))}


def one_run(path: Path, base: bool, quality_mb: float | None, keep: bool, engine_tree: Path = REPO) -> dict:
    root, code = project(path, engine_tree), code_version()
    r = {name: run_stage(root, name, engine_tree) for name in STAGES}
    d = root / "data"
    if engine_tree != REPO:  # the baseline: its time is all that is compared
        shutil.rmtree(root, ignore_errors=True)
        return {**r, "code": engine_tree.name}
    r["tokens"] = sum(json.loads((d / f"tokens/web/{s}index.json").read_text())["tokens"] for s in ("", "val/"))
    r["shard_bytes"] = sum(f.stat().st_size for f in (d / "shards").rglob("*.bin"))
    r["stats"] = json.loads((d / "clean/stats.json").read_text()).get("sources", {}).get("web", {})
    if base:
        shutil.rmtree(d / "tokens")
        r["encode"] = run_stage(root, "tokenize")
        # in a child: the texts held must not raise this process's peak RSS, which every stage started
        # after that would report as its own (wait4's maxrss includes the vforked child before exec)
        with ProcessPoolExecutor(1) as ex:
            r.update(ex.submit(extras, root, path, r["tokens"], quality_mb).result())
    r["code"] = code if code == code_version() else f"{code}->{code_version()}"
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return r


def _fmt(xs: list[float], f: str = ".1f") -> str:
    m = statistics.median(xs)
    return f"{m:{f}}" if len(xs) == 1 else f"{m:{f}} ({min(xs):{f}}-{max(xs):{f}})"


def _rates(r: dict, key: str, mb: float) -> tuple[float, float | None]:
    """(the stage's rate, the raw limit's or None): MB/s of input (shard: of output), Mtok/s for tokenize."""
    work = {"download": mb, "clean": mb, "shard": r["shard_bytes"] / 1e6}.get(key, r["tokens"] / 1e6)
    x = r.get("raw")
    lim = x and {"clean": mb / x["clean_s"], "encode": r["tokens"] / 1e6 / x["tok_s"],
                 "shard": x["copy_bytes"] / 1e6 / x["copy_s"]}.get(key)
    return work / r[key]["wall"], lim


def table(runs: list[dict], meta: dict) -> dict:
    """Print the stage table for the runs at one size; return each repeat's values the targets use."""
    each = lambda f: [f(r) for r in runs]
    mb, base, st = meta["bytes"] / 1e6, "encode" in runs[0], runs[0]["stats"]
    print(f"\n{meta['bytes'] / GB:.2f} GB corpus, {meta['docs']:,} docs, {len(runs)} run(s): median (min-max); "
          f"engine {', '.join(r['code'] for r in runs)}")
    print("| stage | wall s | CPU s | cores used | peak RSS MB | tree PSS MB | rate | raw limit | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in STAGES + (("encode",) if base else ()):
        unit = "Mtok/s" if key in ("tokenize", "encode") else "MB/s"
        rates, raw = zip(*(_rates(r, key, mb) for r in runs))
        col = lambda f, fmt=".1f", k=key: _fmt([f(r[k]) for r in runs], fmt)
        print(f"| {'tokenize (tokenizer kept)' if key == 'encode' else key} | {col(lambda s: s['wall'])} | "
              f"{col(lambda s: s['cpu'])} | {col(lambda s: s['cpu'] / s['wall'], '.2f')} | "
              f"{col(lambda s: s['rss'], '.0f')} | {col(lambda s: s['tree'], '.0f')} | {_fmt(rates, '.2f')} {unit} | "
              + (f"{_fmt(raw, '.2f')} {unit} | {_fmt([x / y for x, y in zip(rates, raw)], '.2f')}x |"
                 if raw[0] else "- | - |"))
    ruled = {k: v["docs"] for k, v in st.get("rules", {}).items() if v.get("docs")}
    print(f"clean: {st.get('docs_in', 0):,} docs in, {st.get('docs_out', 0):,} kept for training, "
          f"{st.get('heldout', {}).get('docs', '?')} held out; exact dedup dropped {st.get('dedup', {}).get('docs')}, "
          f"the rules {sum(ruled.values())} {ruled or ''}".rstrip() + f"; {runs[0]['tokens']:,} tokens; "
          f"shards {runs[0]['shard_bytes'] / 1e6:,.0f} MB")
    peak = lambda r: max((max(r[s]["rss"], r[s]["tree"]), s) for s in STAGES)
    # the verdicts read the low end of these: the slowest total, the largest peak, the lowest ratio
    out = {"total": each(lambda r: sum(r[s]["wall"] for s in STAGES)), "peak": each(lambda r: peak(r)[0]),
           "peak_stage": peak(runs[0])[1]}
    if base:
        w = runs[0]["raw"]
        print(f"tokenize's encoder: {w['encoder']}; its ids equal raw tiktoken's in all {w['identical']} token parts")
        out["ratio"] = each(lambda r: r["raw"]["tok_s"] / r["encode"]["wall"])
        out["bpe"] = each(lambda r: r["tokenize"]["wall"] - r["encode"]["wall"])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="base corpus size, in 10^9 bytes")
    ap.add_argument("--repeats", type=int, default=2, help="runs at each size, interleaved")
    ap.add_argument("--scale", action=argparse.BooleanOptionalAction, default=True, help="also run at 4x --gb")
    ap.add_argument("--quality", action=argparse.BooleanOptionalAction, default=True, help="the tokenizer sample check")
    ap.add_argument("--quality-mb", type=float, help="its sample, MiB (default 256 per GB)")
    ap.add_argument("--quick", action="store_true", help="--gb 0.25 --no-scale: to check the benchmark itself")
    ap.add_argument("--baseline", default="56b5288", help="the engine commit the data half is timed against, "
                    "in the same run at the base size ('' for none); default: main when issue 24 opened")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the project directories (/tmp)")
    ap.add_argument("--sources", action=argparse.BooleanOptionalAction, default=True,
                    help="then bench.sources: compressed jsonl, WARC, decontamination, many files")
    a = ap.parse_args(argv)
    if a.quick:
        a.gb, a.scale = 0.25, False
    sizes = [a.gb] + ([4 * a.gb] if a.scale else [])
    corp = {gb: corpus(gb, a.seed) for gb in sizes}
    runs: dict[float, list[dict]] = {gb: [] for gb in sizes}
    old, olds = a.baseline and baseline(a.baseline), []
    for i in range(a.repeats):
        if old:
            print(f"run {i + 1}/{a.repeats} at {a.gb:g} GB, baseline engine {a.baseline} ...", flush=True)
            olds.append(one_run(corp[a.gb][0], False, None, False, old))
        for gb in sizes:
            print(f"run {i + 1}/{a.repeats} at {gb:g} GB ...", flush=True)
            qmb = (a.quality_mb or 256 * a.gb) if a.quality and gb == a.gb and i == 0 else None
            runs[gb].append(one_run(corp[gb][0], gb == a.gb, qmb, a.keep))
    res = {gb: table(runs[gb], corp[gb][1]) for gb in sizes}
    b, targets = res[a.gb], Targets()
    target = targets.check
    if len({r["code"] for rs in runs.values() for r in rs} | {code_version()}) > 1:
        print("\nWARNING: the engine's code changed during the benchmark: these figures mix versions")
    print(f"(wait4's peak RSS reads no lower than this process's own, "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)\n")

    target(f"data half at {a.gb:g} GB, sum of stage walls, slowest", max(b["total"]), "<=", 80 * a.gb, " s",
           repeats=b["total"])
    if olds:
        print(f"baseline {a.baseline} at {a.gb:g} GB, stage walls (median): " + ", ".join(
            f"{s} {statistics.median(r[s]['wall'] for r in olds):.1f} s" for s in STAGES))
        pairs = [(sum(o[s]["wall"] for s in STAGES), sum(n[s]["wall"] for s in STAGES))
                 for o, n in zip(olds, runs[a.gb])]
        then, now = min(pairs, key=lambda p: p[0] / p[1])  # the repeat with the lowest ratio
        target(f"data half speed vs engine {a.baseline} ({then:.1f} s vs {now:.1f} s), same run, same corpus, lowest",
               then / now, ">=", 2, "x", repeats=[o / n for o, n in pairs])
    for gb in sizes:
        target(f"peak RSS at {gb:g} GB (in {res[gb]['peak_stage']}), largest", max(res[gb]["peak"]), "<=", 1024,
               " MiB", repeats=res[gb]["peak"])
    target("tokenize encode-only / raw tiktoken 2 threads, lowest", min(b["ratio"]), ">=", 3, "x", repeats=b["ratio"])
    target("BPE training (full - encode-only tokenize), slowest", max(b["bpe"]), "<=", 10, " s", repeats=b["bpe"])
    if a.scale:
        s, big = res[4 * a.gb], corp[4 * a.gb][1]["bytes"] / corp[a.gb][1]["bytes"]
        times = [x / y for x, y in zip(s["total"], b["total"])]  # each repeat's two sizes ran back to back
        target(f"scale {4 * a.gb:g}/{a.gb:g} GB time, for {big:.3f}x the bytes, highest", max(times), "<=", 4.2, "x",
               repeats=times)
        rss = [x / y for x, y in zip(s["peak"], b["peak"])]
        target(f"scale {4 * a.gb:g}/{a.gb:g} GB peak RSS ({max(s['peak']):.0f} MiB; or <= 1024 MiB), highest",
               max(rss), "<=", 1.1, "x", ok=max(rss) <= 1.1 or max(s["peak"]) <= 1024, repeats=rss)
    if q := runs[a.gb][0].get("quality"):
        print(f"tokenizer sample check: the stage's (trained on <= {q['cap_mb']} MiB of {q['train_mb']:.0f} MiB) "
              f"{q['stage']:.4f} bytes/token; {q['sample_mb']:.0f} MiB sample (trained in {q['train_s']:.1f} s) "
              f"{q['sample']:.4f}; on {q['heldout_kb']:.0f} kB of held-out paragraphs")
        target("tokenizer sample cost, bytes/token stage / sample - 1", 100 * (q["stage"] / q["sample"] - 1), "<=", 1,
               "%")
    if a.sources:
        print("\nbench.sources (python -m bench.sources):", flush=True)
        r = subprocess.run([sys.executable, "-m", "bench.sources", *(["--keep"] if a.keep else [])], cwd=REPO)
        targets.missed += [f"bench.sources exited {r.returncode} (its targets above)"] if r.returncode else []
    targets.exit()


if __name__ == "__main__":
    main()
