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

The corpus is made in bench/data_corpus.py, the raw limits and the sample check run in
data_limits.py, each stage process is timed by bench.measure.run_timed; this module runs and judges.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml

# bench.curation, bench.sources, bench.scale and bench.cleanprofile read the corpus, its cache and
# units through this module (bd.corpus, bd.CACHE, bd.MiB, bd.GB), as they did before it was split
from bench.data_corpus import CACHE, GB, REPO, MiB, corpus
from bench.data_limits import extras
from bench.measure import run_timed
from bench.verdict import Targets

STAGES = ("download", "clean", "tokenize", "shard")


def code_version() -> str:
    """The engine's source, hashed: a benchmark during which it changed mixes two versions."""
    files = sorted(p for d in ("shardline", "flows") for p in (REPO / d).rglob("*.py"))
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:12]


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
    env = {**os.environ, "PYTHONPATH": str(engine_tree)} if engine_tree != REPO else None
    log = root / f"{name}.log"
    r = run_timed([*cmd, "--root", str(root), "stage", name], engine_tree, log, env)
    if r["returncode"]:
        sys.exit(f"stage {name} failed (exit {r['returncode']}) in {root}:\n{log.read_text(errors='replace')[-3000:]}")
    return {"wall": r["wall"], "cpu": r["cpu"], "rss": r["rss"], "tree": max(r["pss"], r["rss"]),
            "pss": r["pss"]}  # pss alone: a child's ru_maxrss starts at its parent's size (fork)


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
