"""Real-corpus inputs: compressed jsonl, Common Crawl WARC, decontamination, many small files.

    python -m bench.sources [--mb 200] [--repeats 3] [--keep]

Each figure is a same-run ratio on the same data, judged at the worst of --repeats repeats (the
spread printed beside it; two timed sides run in opposite orders each repeat):
- compressed: bench.data's corpus (its first --mb MB, as 8 jsonl files, like a Dolma shard set),
  plain, gzip (level 6) and zstd (level 3) copies; each through `shardline stage download` and
  `stage clean` in its own project (clean.part_mb 4, so files are cut into spans). Target: the
  clean stage on the compressed copies >= 0.8x its speed on the plain files, at the worst of the
  repeats; and the clean parts byte-identical.
- warc: a .warc.gz of real HTML pages (Debian's python3-doc when installed, else the pages pydoc
  renders for the stdlib's modules), one gzip member per record. Ours (fastwarc + resiliparse,
  format: warc) against datatrove's own WarcReader + Trafilatura extractor (FineWeb's pipeline,
  favour_precision) on the same file, one core each, in MB/s of WARC file.
- decontamination: an index of 10 MB of evaluation text (stdlib .py files) checked against the
  corpus's first 64 MB, one core. Target >= 20 MB/s.
- many files: the corpus's first 10,000 documents (~55 MB) as 10 files and as 10,000 files of
  one document, through download and clean; the peak memory of the process tree (PSS sampled at
  10 Hz). Target: 10,000 files <= 1.25x the peak of 10.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shutil
import sysconfig
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from bench import data as bd
from bench.verdict import Targets, in_order

FILES = 8


def _copies(mb: float) -> dict[str, Path]:
    """The corpus's first `mb` MB as FILES jsonl files, plain, .gz and .zst (cached)."""
    src, _ = bd.corpus(1.0, 0)
    base = bd.CACHE / f"sources-{mb:g}"
    dirs = {k: base / k for k in ("plain", "gzip", "zstd")}
    if all((d / ".done").exists() for d in dirs.values()):
        return dirs
    shutil.rmtree(base, ignore_errors=True)
    for d in dirs.values():
        d.mkdir(parents=True)
    per, n = int(mb * 1e6 / FILES), 0
    with open(src, "rb") as f:
        for i in range(FILES):
            chunk = f.read(per) + f.readline()
            name = f"shard-{i:04d}.jsonl"
            (dirs["plain"] / name).write_bytes(chunk)
            (dirs["gzip"] / (name + ".gz")).write_bytes(gzip.compress(chunk, 6))
            out = pa.BufferOutputStream()
            with pa.CompressedOutputStream(out, "zstd") as z:
                z.write(chunk)
            (dirs["zstd"] / (name + ".zst")).write_bytes(out.getvalue().to_pybytes())
            n += len(chunk)
    for d in dirs.values():
        (d / ".done").touch()
    return dirs


def _clean_parts(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((root / "data" / "clean" / "web").glob("part-*.parquet"))]


def compressed(mb: float, repeats: int, keep: bool, target) -> None:
    dirs = _copies(mb)
    size = {k: sum(p.stat().st_size for p in d.glob("shard-*")) for k, d in dirs.items()}
    walls: dict[str, list[float]] = {k: [] for k in dirs}
    parts = {}
    for i in range(repeats):
        for kind, d in dirs.items():
            root = bd.project(d, part_mb=4)
            dl = bd.run_stage(root, "download")
            cl = bd.run_stage(root, "clean")
            walls[kind].append(cl["wall"])
            parts[kind] = _clean_parts(root)
            print(f"  run {i + 1} {kind:5s} ({size[kind] / 1e6:6.1f} MB on disk): download {dl['wall']:5.1f} s, "
                  f"clean {cl['wall']:5.1f} s ({size['plain'] / cl['wall'] / 1e6:5.1f} MB/s of text), "
                  f"peak {cl['tree']:.0f} MiB", flush=True)
            if not keep:
                shutil.rmtree(root)
    same = parts["plain"] == parts["gzip"] == parts["zstd"] and len(parts["plain"]) > FILES
    print(f"  clean parts byte-identical across plain, gzip, zstd ({len(parts['plain'])} parts): {same}")
    target("clean parts of compressed copies identical to the plain files' (1 = yes)", float(same), ">=", 1)
    for kind in ("gzip", "zstd"):
        ratios = [p / c for p, c in zip(walls["plain"], walls[kind])]
        target(f"clean stage on {kind} jsonl / on plain jsonl, speed, lowest", min(ratios), ">=", 0.8, "x",
               repeats=ratios)


def _pages() -> list[tuple[str, bytes]]:
    docs = sorted(Path("/usr/share/doc").glob("python3*/html/library/*.html"))
    if len(docs) > 100:
        return [(f"https://docs.python.org/3/library/{p.name}", p.read_bytes()) for p in docs]
    import importlib
    import pkgutil
    import pydoc

    out = []
    for m in sorted(m.name for m in pkgutil.iter_modules() if not m.name.startswith(("_", "test", "idle", "tkinter"))):
        try:
            mod = importlib.import_module(m)
            out.append((f"https://docs.example.org/{m}.html",
                        pydoc.html.page(pydoc.describe(mod), pydoc.html.document(mod, m)).encode()))
        except Exception:  # noqa: BLE001 - modules that do not import here are not pages
            continue
        if len(out) >= 150:
            break
    return out


def warc(target, repeats: int, mb: float = 10) -> None:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    from shardline.data import readers, warc as ours

    pages, html = _pages(), 0
    d = Path(tempfile.mkdtemp(prefix="shardline-bench-warc-"))
    path = d / "crawl.warc.gz"
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        i = 0
        while html < mb * 1e6:
            url, body = pages[i % len(pages)]
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
            w.write_record(w.create_warc_record(f"{url}?copy={i // len(pages)}", "response", payload=io.BytesIO(body),
                                                http_headers=http))
            html, i = html + len(body), i + 1
    size = path.stat().st_size
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.readers import WarcReader

    def run_ours() -> int:
        return sum(1 for _ in ours.records(path, readers.ReadStats(), path.name))

    try:
        reader, ext = WarcReader(str(d), glob_pattern="*.warc.gz"), Trafilatura(favour_precision=True, timeout=10)
    except ImportError as e:  # datatrove checks its optional dependencies when a step is made
        target(f"WARC comparison needs datatrove's WARC dependencies ({e}; pip install -e '.[bench]')", 0, ">=", 1)
        return

    def run_datatrove() -> int:
        return sum(1 for _ in ext.run(reader.run(None, 0, 1), 0, 1))

    times: dict[str, list[float]] = {"ours": [], "datatrove": []}
    sides = [("ours", run_ours), ("datatrove", run_datatrove)]
    for k in range(repeats):
        for side, run in in_order(sides, k):
            t0 = time.perf_counter()
            n = run()
            times[side].append(time.perf_counter() - t0)
            print(f"  warc, repeat {k + 1}: {side} {times[side][-1]:.1f} s, {n} documents", flush=True)
    t_ours = min(times["ours"])
    print(f"  warc: {i} pages, {html / 1e6:.1f} MB of HTML, {size / 1e6:.1f} MB .warc.gz; ours at best "
          f"{size / t_ours / 1e6:.2f} MB/s of WARC ({html / t_ours / 1e6:.1f} MB/s of HTML); datatrove WarcReader + "
          f"Trafilatura at best {size / min(times['datatrove']) / 1e6:.2f} MB/s")
    ratios = [t / o for o, t in zip(times["ours"], times["datatrove"])]
    target("WARC extraction, ours / datatrove's WarcReader + Trafilatura, speed, lowest", min(ratios), ">=", 1, "x",
           repeats=ratios)
    shutil.rmtree(d)


def decontamination(target, repeats: int) -> None:
    from shardline.data.clean.rules import decontam

    lib = Path(sysconfig.get_paths()["stdlib"])
    d = Path(tempfile.mkdtemp(prefix="shardline-bench-decontam-"))
    size = 0
    with open(d / "eval.jsonl", "w") as f:
        for p in sorted(lib.rglob("*.py")):
            if size >= 10e6:
                break
            text = p.read_text(errors="replace")
            f.write(json.dumps({"text": text}) + "\n")
            size += len(text.encode())
    idx = decontam.Index.build([d / "eval.jsonl"], 13)
    idx.save(d / "index.npy")
    rule = decontam.DecontaminateRule(str(d / "index.npy"), 13)
    src, _ = bd.corpus(1.0, 0)
    with open(src, "rb") as f:
        texts = [json.loads(line)["text"] for line in f.read(64 * 10**6).splitlines()[:-1]]
    rule(texts[0])  # the index loaded and its filter built: once per process, not per document
    n, rates = sum(len(t.encode()) for t in texts), []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dropped = sum(1 for t in texts if not isinstance(rule(t), str))
        rates.append(n / (time.perf_counter() - t0) / 1e6)
    print(f"  decontamination: index of {size / 1e6:.1f} MB ({len(idx):,} 13-grams, "
          f"{(d / 'index.npy').stat().st_size / 2**20:.1f} MiB); {n / 1e6:.0f} MB of documents, {dropped} dropped")
    target("decontamination against a 10 MB evaluation set, one core, slowest", min(rates), ">=", 20, " MB/s",
           repeats=rates)
    shutil.rmtree(d)


def many_files(target, keep: bool, repeats: int) -> None:
    src, _ = bd.corpus(1.0, 0)
    peaks: dict[int, list[float]] = {10: [], 10_000: []}
    with open(src, "rb") as f:
        lines = [f.readline() for _ in range(10_000)]
    for count in (10, 10_000) * repeats:  # the same 10,000 documents: 1,000 to a file, or one each
        d = Path(tempfile.mkdtemp(prefix=f"shardline-bench-files-{count}-"))
        per = len(lines) // count
        for i in range(count):
            (d / f"{i // 1000:02d}").mkdir(exist_ok=True)
            (d / f"{i // 1000:02d}" / f"doc-{i:05d}.jsonl").write_bytes(b"".join(lines[i * per:(i + 1) * per]))
        root = bd.project(d, part_mb=4)
        dl, cl = bd.run_stage(root, "download"), bd.run_stage(root, "clean")
        peaks[count].append(max(dl["pss"], cl["pss"]))  # sampled PSS: wait4's peak RSS starts at this process's size
        print(f"  {count:,} files: download {dl['wall']:.1f} s (peak PSS {dl['pss']:.0f} MiB), clean {cl['wall']:.1f} s "
              f"(peak PSS {cl['pss']:.0f} MiB, {len(list((root / 'data' / 'clean' / 'web').glob('part-*.parquet')))} "
              "parts)", flush=True)
        for p in (d, *(() if keep else (root,))):
            shutil.rmtree(p)
    ratios = [m / f for f, m in zip(peaks[10], peaks[10_000])]
    target("peak memory, the same documents in 10,000 files / in 10 files, highest", max(ratios), "<=", 1.25, "x",
           repeats=ratios)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=200, help="corpus for the compressed comparison, MB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args(argv)
    targets = Targets()
    target = targets.check

    print(f"compressed jsonl, {a.mb:g} MB in {FILES} files, {a.repeats} repeat(s):", flush=True)
    compressed(a.mb, a.repeats, a.keep, target)
    print("Common Crawl WARC:", flush=True)
    warc(target, a.repeats)
    print("benchmark decontamination:", flush=True)
    decontamination(target, a.repeats)
    print("many small files:", flush=True)
    many_files(target, a.keep, a.repeats)
    targets.exit()


if __name__ == "__main__":
    os.environ.setdefault("DO_NOT_TRACK", "1")
    main()
