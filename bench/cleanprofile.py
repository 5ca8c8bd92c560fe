"""Where a clean part's seconds go, with the FineWeb-like rules on: one 64 MB part of bench.data's
corpus cleaned in one process (one core), by an engine tree (this checkout, or another commit's).

    python -m bench.cleanprofile [--mb 64] [--baseline 881c38e]

The part is planned and cleaned by the engine's own stage code (`clean_part`), with timers put
around what it calls: reading the records (readers.read, JSON included), each rule of the chain,
the words (spaCy's, words.py: counted once per document, where the first rule asks), the parquet
write and the rest (hashes, the split's hash, the row's columns, the dropped samples). The word
split is taken out of the rule that first asked for it, so each rule set's line is its own
measures. A timer costs ~0.3 us a call; the rows say what share of the part's wall each took.
bench.curation prints it for this tree and for --baseline, the engine before the rules were
compiled (issue 41).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

WEB = {"language": {}, "gopher_repetition": {}, "gopher_quality": {}, "c4": {}, "fineweb": {}}


def _first(names: tuple[str, ...]):
    """The first of `names` the tree has (a module that moved since the baseline's commit)."""
    for name in names[:-1]:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
    return importlib.import_module(names[-1])


def _profile(tree: str, root: str, warm: bool = False) -> dict:
    """In a child whose sys.path starts with `tree`: clean the project's first part, timed by piece
    (`warm`: its second, after the first untimed, as a worker's later parts run)."""
    sys.path.insert(0, tree)
    layout_mod = importlib.import_module("shardline.core.layout")
    load = _first(("shardline.paramsfile", "shardline.core.config")).load  # an older tree's loader sat in core
    stage = _first(("shardline.data.clean.stage.run", "shardline.data.clean.stage"))  # before data/clean had rooms
    rules = _first(("shardline.data.clean.rules.registry", "shardline.data.clean.rules"))
    words = _first(("shardline.data.clean.kernels.words", "shardline.data.clean.words"))
    readers = importlib.import_module("shardline.data.readers")
    pq = importlib.import_module("pyarrow.parquet")
    params, layout = load(Path(root) / "params.yaml"), layout_mod.Layout.at(root)
    parts = stage.plan(params, layout)
    part = parts[1 if warm else 0]
    if warm:
        stage.clean_part(parts[0])
    spent: dict[str, float] = {}
    current = [None]  # the rule running now: the words it asks for first are taken out of its time

    def timed(name: str, fn):
        def call(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
        return call

    split_name = "analyse" if hasattr(words, "analyse") else "split"
    t0 = time.perf_counter()  # once per worker process: spaCy's special cases, the models, the compiled code
    warm = importlib.import_module("pydoc_data.topics").topics["assert"]  # English prose every Python has
    getattr(words, split_name)(warm)
    rules.apply(rules.build(params.clean_for(params.sources[0])), warm, {})
    start = time.perf_counter() - t0
    inner = getattr(words, split_name)

    def word_split(text, *a, **k):  # the first call per text is the split; a cached one costs nothing
        t0 = time.perf_counter()
        out = inner(text, *a, **k)
        took = time.perf_counter() - t0
        if current[0] is not None:
            spent[current[0]] = spent.get(current[0], 0.0) - took
        spent["words (spaCy's, per document)"] = spent.get("words (spaCy's, per document)", 0.0) + took
        return out

    setattr(words, split_name, word_split)  # the module every rule reaches it through
    build = rules.build

    def wrapped_build(*a, **k):
        def wrap(rule):
            name = getattr(rule, "name", getattr(rule, "__name__", type(rule).__name__))

            def call(text):
                current[0] = name
                t0 = time.perf_counter()
                try:
                    return rule(text)
                finally:
                    spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
                    current[0] = None
            call.name = name  # type: ignore[attr-defined]
            return call
        return [wrap(r) for r in build(*a, **k)]

    rules.build = wrapped_build
    read = readers.read

    def timed_read(*a, **k):
        it = read(*a, **k)
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                spent["read records (+JSON)"] = spent.get("read records (+JSON)", 0.0) + time.perf_counter() - t0
                return
            spent["read records (+JSON)"] = spent.get("read records (+JSON)", 0.0) + time.perf_counter() - t0
            yield item

    stage.readers.read = timed_read
    stage.pq.write_table = timed("parquet write", pq.write_table)
    t0 = time.perf_counter()
    _, stats = stage.clean_part(part)
    wall = time.perf_counter() - t0
    spent = {k: v for k, v in spent.items() if abs(v) > 1e-4}
    return {"wall": wall, "mb": stats["bytes_in"] / 1e6, "docs": stats["docs_in"], "spent": spent, "start": start}


def profile(tree: Path, corpus: Path, warm: bool = False, part_mb: float = 64) -> dict:
    from bench import data as bd

    root = bd.project(corpus, tree, part_mb=part_mb)
    p = bd.yaml.safe_load((root / "params.yaml").read_text())
    p["clean"].update(WEB)
    (root / "params.yaml").write_text(bd.yaml.safe_dump(p, sort_keys=False))
    bd.run_stage(root, "download", tree)
    try:
        with ProcessPoolExecutor(1) as ex:
            return ex.submit(_profile, str(tree), str(root), warm).result()
    finally:
        bd.shutil.rmtree(root, ignore_errors=True)


def table(name: str, r: dict) -> list[str]:
    out = [f"{name}: {r['mb']:.0f} MB, {r['docs']:,} documents in {r['wall']:.1f} s on one core "
           f"({r['mb'] / r['wall']:.2f} MB/s), after {r['start']:.1f} s of start-up (once per worker process)",
           "| where | s | share | us per document |", "|---|---|---|---|"]
    rest = r["wall"] - sum(r["spent"].values())
    for k, v in sorted({**r["spent"], "the rest (hashes, columns, samples, the loop)": rest}.items(),
                       key=lambda kv: -kv[1]):
        out.append(f"| {k} | {v:.2f} | {v / r['wall']:.1%} | {v / r['docs'] * 1e6:.0f} |")
    return out


def main(argv: list[str] | None = None) -> dict:
    from bench import data as bd

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=64)
    ap.add_argument("--baseline", default="881c38e", help="the engine commit to profile beside this tree ('' for none)")
    ap.add_argument("--warm", action="store_true", help="profile a worker's second part (its first untimed)")
    a = ap.parse_args(argv)
    corpus = bd.corpus(2 * a.mb / 1000 if a.warm else a.mb / 1000, 0)[0]
    found = {"this tree": profile(bd.REPO, corpus, a.warm, a.mb)}
    if a.baseline and (tree := bd.baseline(a.baseline)) is not None:
        found[f"engine {a.baseline}"] = profile(tree, corpus, a.warm, a.mb)
    for name, r in found.items():
        print("\n".join(table(name, r)) + "\n")
    return found


if __name__ == "__main__":
    print(json.dumps({k: {"wall": v["wall"]} for k, v in main().items()}))
