"""Compressed sources (gzip, zstd, bz2, xz): the same shards as the plain files, damage counted
as one bad record whose sample names the file and byte offset."""

import bz2
import gzip
import json
import lzma
import random
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from shardline.core.errors import BadInput
from shardline.data import compressed, download, filespans, frame, readers, shard, tokenize
from shardline.data.clean.stage import explain, run as clean
from tests.conftest import make_project, stdlib_files

QUIET = dict(log=lambda _: None)
NO_SPLIT = {"fraction": 0, "min_docs": 0, "every": 0}


def squeeze(data: bytes, codec: str) -> bytes:
    if codec == "gzip":
        return gzip.compress(data[: len(data) // 2]) + gzip.compress(data[len(data) // 2:])  # two members
    if codec == "bz2":
        return bz2.compress(data)
    if codec == "xz":
        return lzma.compress(data)
    out = pa.BufferOutputStream()
    with pa.CompressedOutputStream(out, "zstd") as f:
        f.write(data)
    return out.getvalue().to_pybytes()


def corpus() -> dict[str, bytes]:
    """Real text: the stdlib's email package as jsonl (one file per codec) and blank-line txt."""
    texts = [p.read_text() for p in stdlib_files(40)]
    jsonl = [("".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(texts[k::4]))).encode()
             for k in range(4)]
    return {"a.jsonl": jsonl[0], "b.jsonl": jsonl[1], "c.jsonl": jsonl[2], "d.jsonl": jsonl[3]}


SUFFIX = {"gzip": ".gz", "zstd": ".zst", "bz2": ".bz2", "xz": ".xz"}


def build_shards(root: Path, files: dict[str, bytes], **clean_cfg):
    d = root / "in"
    d.mkdir(parents=True)
    for name, data in files.items():
        (d / name).write_bytes(data)
    params, layout = make_project(root, [{"name": "s", "uri": str(d), "format": "jsonl"}],
                                  eval={"fraction": 0.1, "min_docs": 2, "every": 0}, clean=clean_cfg)
    for stage in (download, clean, tokenize, shard):
        stage.run(params, layout, **QUIET)
    return params, layout


def test_shards_from_compressed_copies_are_byte_identical(tmp_path):
    plain = corpus()
    packed = {name + SUFFIX[c]: squeeze(data, c) for (name, data), c in zip(plain.items(), SUFFIX)}
    # part_mb small enough that every file is cut into several spans: decoded offsets must match
    _, a = build_shards(tmp_path / "plain", plain, part_mb=0.05)
    params, b = build_shards(tmp_path / "packed", packed, part_mb=0.05)
    assert explain.explain(params, b, "c.jsonl:3")["verdict"] == "kept"  # ids name the file as if plain
    manifest = download.read_manifest(b, "s")
    assert [(f["compression"], f["decoded_bytes"]) for f in manifest["files"]] == \
        [(c, len(d)) for c, d in zip(SUFFIX, plain.values())]
    assert len(list((a.clean / "s").glob("part-*.parquet"))) > len(plain)  # spans, not whole files
    for side in ("", "val/"):
        got = sorted(p.relative_to(a.shards) for p in (a.shards / "s" / side).glob("*") if p.is_file())
        assert got and got == sorted(p.relative_to(b.shards) for p in (b.shards / "s" / side).glob("*") if p.is_file())
        for rel in got:
            assert (a.shards / rel).read_bytes() == (b.shards / rel).read_bytes(), rel


def test_codecs_are_known_by_their_magic_bytes_not_names(tmp_path):
    data = corpus()["a.jsonl"]
    (tmp_path / "liar.gz").write_bytes(data)  # plain, whatever its name says
    (tmp_path / "quiet.jsonl").write_bytes(squeeze(data, "zstd"))
    assert compressed.codec(tmp_path / "liar.gz") is None and compressed.codec(tmp_path / "quiet.jsonl") == "zstd"
    src = make_project(tmp_path / "p", [{"name": "s", "uri": "x", "format": "jsonl"}])[0].sources[0]
    read = lambda name: list(readers.read(tmp_path / name, name, src, readers.ReadStats()))  # noqa: E731
    assert [t for _, t in read("liar.gz")] == [t for _, t in read("quiet.jsonl")] and len(read("liar.gz")) == 10
    assert read("quiet.jsonl")[0][0] == "quiet.jsonl:1" and compressed.id_name("x.jsonl.zst", "zstd") == "x.jsonl"


@pytest.mark.parametrize("codec", list(SUFFIX))
def test_a_truncated_file_keeps_what_precedes_the_damage_as_one_bad_record(tmp_path, codec):
    rng = random.Random(0)  # varied words: bz2 decodes in blocks of 900 kB of text, so the cut must pass a few
    vocab = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(20000)]
    texts = [f"document {i}: " + " ".join(rng.choices(vocab, k=200)) for i in range(3000)]
    data = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    packed = squeeze(data, codec)
    cut = len(packed) * 2 // 3
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / ("t.jsonl" + SUFFIX[codec])).write_bytes(packed[:cut])
    params, layout = make_project(tmp_path, [{"name": "s", "uri": str(tmp_path / "in"), "format": "jsonl"}],
                                  eval=NO_SPLIT, clean={"max_bad_fraction": 0, "part_mb": 64})
    logs: list[str] = []
    download.run(params, layout, log=logs.append)
    assert any(f"t.jsonl{SUFFIX[codec]}: {codec} data damaged at byte" in line for line in logs)
    with pytest.raises(BadInput) as e:
        clean.run(params, layout, **QUIET)
    lines = str(e.value).splitlines()
    assert "1 of " in lines[0] and "clean.max_bad_fraction" in lines[0]
    sample = lines[1].strip()
    assert sample.startswith(f"t.jsonl{SUFFIX[codec]}: byte ") and f"{codec} data damaged at byte" in sample
    # the same damage under a looser limit: every record before it is kept, in order
    params, layout = make_project(tmp_path, [{"name": "s", "uri": str(tmp_path / "in"), "format": "jsonl"}],
                                  eval=NO_SPLIT, clean={"max_bad_fraction": 0.01, "part_mb": 64})
    stats = clean.run(params, layout, **QUIET)["sources"]["s"]
    kept = [t for p in sorted((layout.clean / "s").glob("part-*.parquet")) for b in clean.documents(p) for t in b]
    assert stats["bad"] == 1 and stats["records"] == len(kept) + 1 and 1000 < len(kept) < 3000
    assert kept == [t.rstrip() for t in texts[: len(kept)]]  # the whitespace rule strips the end


def test_corrupt_bytes_mid_file_are_reported_at_their_offset(tmp_path):
    data = "".join(json.dumps({"text": f"doc {i} " + "words " * 30}) + "\n" for i in range(20000)).encode()
    packed = bytearray(gzip.compress(data))
    at = len(packed) // 2
    packed[at:at + 64] = bytes(64)
    (tmp_path / "x.jsonl.gz").write_bytes(bytes(packed))
    src = make_project(tmp_path / "p", [{"name": "s", "uri": "x", "format": "jsonl"}])[0].sources[0]
    stats = readers.ReadStats()
    docs = list(readers.read(tmp_path / "x.jsonl.gz", "x.jsonl.gz", src, stats))
    offset = int(stats.samples[0].split("byte ")[1].split(":")[0])
    assert stats.bad == 1 and at <= offset <= at + (1 << 20) and 0 < len(docs) < 20000
    # deflate has no checksum until a member's end: what zlib decodes from the damaged bytes before it
    # notices is garbage, and may even parse; every record decoded from the bytes before them is intact
    intact = zlib.decompressobj(wbits=31).decompress(bytes(packed[:at])).count(b"\n")
    texts = [d for _, d in docs]
    assert intact > 5000 and texts[:intact] == [json.loads(x)["text"] for x in data.splitlines()[:intact]]


def test_the_spans_of_one_compressed_file_run_in_order_as_one_task(tmp_path):
    data = corpus()["a.jsonl"]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl.gz").write_bytes(gzip.compress(data))
    (tmp_path / "in" / "b.jsonl").write_bytes(data)
    params, layout = make_project(tmp_path, [{"name": "s", "uri": str(tmp_path / "in"), "format": "jsonl"}],
                                  eval=NO_SPLIT, clean={"part_mb": 0.02})
    download.run(params, layout, **QUIET)
    parts = clean.plan(params, layout)
    tasks: list[list[str]] = []

    def mapper(fn, items, on_done=None):
        tasks.extend([p.name for p in item.parts] for item in items)
        return [fn(item) for item in items]

    frame.run("clean", parts, clean.clean_part, mapper, lambda _: None)
    gz = [p.name for p in parts if p.group == "s/a.jsonl.gz"]
    assert len(gz) > 2 and tasks[0] == gz and all(len(t) == 1 for t in tasks[1:])
    assert len(tasks) == len(parts) - len(gz) + 1


def test_threads_reading_spans_of_two_compressed_files_keep_their_own_streams(tmp_path):
    """Parts run on threads under Prefect's and Dask's runners: each thread continues its own stream."""
    from concurrent.futures import ThreadPoolExecutor

    src = make_project(tmp_path / "p", [{"name": "s", "uri": "x", "format": "jsonl"}])[0].sources[0]
    files = {}
    for name, data in list(corpus().items())[:2]:
        (tmp_path / (name + ".gz")).write_bytes(gzip.compress(data))
        (tmp_path / name).write_bytes(data)
        files[name] = len(data)

    def docs(name: str, packed: bool) -> list:
        path = tmp_path / (name + (".gz" if packed else ""))
        cut = filespans.spans(path, src, files[name], 20_000, "gzip" if packed else None)
        return [d for span in cut for d in readers.read(path, path.name, src, readers.ReadStats(), span)]

    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda n: docs(n, True), list(files) * 3))
    assert got == [docs(n, False) for n in list(files) * 3] and len(got[0]) == 10


def test_a_rerun_plans_from_the_spans_found_before_without_decoding_again(tmp_path, monkeypatch):
    data = corpus()["a.jsonl"]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl.zst").write_bytes(squeeze(data, "zstd"))
    params, layout = make_project(tmp_path, [{"name": "s", "uri": str(tmp_path / "in"), "format": "jsonl"}],
                                  eval=NO_SPLIT, clean={"part_mb": 0.02})
    download.run(params, layout, **QUIET)
    clean.run(params, layout, **QUIET)
    keys = [p.key for p in clean.plan(params, layout)]
    assert len(keys) > 2 and len(json.loads((layout.clean / "spans.json").read_text())) == 1
    monkeypatch.setattr(compressed, "decoded_spans", lambda *a: pytest.fail("decoded again"))
    assert [p.key for p in clean.plan(params, layout)] == keys
    clean.run(params, layout, **QUIET)
