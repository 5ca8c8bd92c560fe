"""Random damage to every raw format the readers take and to params.yaml (issue 44, point 1):
truncation, flipped bytes, inserted garbage. Each read gives a clean error (BadInput, ConfigError)
or the documented skip-and-count (`ReadStats`: every record read is a document or a bad one),
never a traceback. Seeded by hypothesis's database; kept small so the file runs in seconds."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline import paramsfile
from shardline.core.config import Source
from shardline.core.errors import BadInput, ShardlineError
from shardline.data import compressed, filespans, readers
from shardline.data.readstats import MAX_SAMPLES
from harness.projects import REPO

QUICK = settings(max_examples=25, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
TEXTS = [f"document {i}: " + " ".join(f"w{(i * 13 + j) % 97}" for j in range(40)) for i in range(60)]
JSONL = "".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(TEXTS)).encode()
TXT = "\n\n".join(TEXTS).encode() + b"\n"


def _zstd(data: bytes) -> bytes:
    out = pa.BufferOutputStream()
    with pa.CompressedOutputStream(out, "zstd") as f:
        f.write(data)
    return out.getvalue().to_pybytes()


PACK = {"plain": lambda b: b, "gzip": lambda b: gzip.compress(b, mtime=0), "zstd": _zstd, "bz2": bz2.compress,
        "xz": lzma.compress}
SUFFIX = {"plain": "", "gzip": ".gz", "zstd": ".zst", "bz2": ".bz2", "xz": ".xz"}


@st.composite
def damaged(draw, data: bytes) -> bytes:
    """`data` cut short, with bytes flipped, or with garbage inserted (one to three of these)."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["cut", "flip", "insert"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if how == "cut":
            del out[at:]
        elif how == "flip" and out:
            out[at] ^= draw(st.integers(1, 255))
        else:
            out[at:at] = draw(st.binary(min_size=1, max_size=64))
    return bytes(out)


def _read(path: Path, source: Source, part_bytes: float = 1 << 30) -> tuple[list, readers.ReadStats]:
    """Every document of the file's spans (cut small, so damage can fall in any), and the counts."""
    stats = readers.ReadStats()
    which = compressed.codec(path) if source.format != "warc" else None
    size = compressed.decoded_size(path, which)[0] if which else path.stat().st_size
    docs = []
    for span in filespans.spans(path, source, size, part_bytes, which):
        docs += list(readers.read(path, path.name, source, stats, span))
    compressed.release()
    return docs, stats


@pytest.mark.parametrize("codec", list(PACK))
@pytest.mark.parametrize("fmt", ["jsonl", "txt"])
@QUICK
@given(data=st.data())
def test_damaged_jsonl_and_txt_in_any_codec_are_read_and_counted_never_raised(tmp_path, fmt, codec, data):
    raw = data.draw(damaged(PACK[codec](JSONL if fmt == "jsonl" else TXT)))
    path = tmp_path / (f"d.{fmt}" + SUFFIX[codec])
    path.write_bytes(raw)
    source = Source(name="s", uri="x", format=fmt, txt_unit="blank_lines")
    docs, stats = _read(path, source, part_bytes=3000)
    assert len(docs) + stats.bad == stats.records and all(isinstance(t, str) for _, t in docs)
    assert len(stats.samples) == min(stats.bad, MAX_SAMPLES)  # each bad record said, the first few by file:line


@QUICK
@given(data=st.data())
def test_a_damaged_parquet_is_one_clean_error_or_read_and_counted(tmp_path, data):
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": TEXTS}), buf, row_group_size=20)
    path = tmp_path / "d.parquet"
    path.write_bytes(data.draw(damaged(buf.getvalue())))
    try:
        docs, stats = _read(path, Source(name="s", uri="x", format="parquet"), part_bytes=500)
    except BadInput as e:
        assert str(e).startswith("d.parquet: ") and "\n" not in str(e)
        return
    assert len(docs) + stats.bad == stats.records


@pytest.fixture(scope="module")
def warc() -> bytes:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    w = WARCWriter(out, gzip=True)
    for i in range(4):
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
        body = f"<html><body><h1>Page {i}</h1><p>{TEXTS[i]}</p><p>{TEXTS[i + 1]}</p></body></html>".encode()
        w.write_record(w.create_warc_record(f"https://example.org/{i}", "response", payload=io.BytesIO(body),
                                            http_headers=http))
    return out.getvalue()


@pytest.mark.parametrize("gzipped", [True, False])
@QUICK
@given(data=st.data())
def test_a_damaged_warc_keeps_what_precedes_the_damage_and_counts_it(tmp_path, warc, gzipped, data):
    path = tmp_path / ("d.warc.gz" if gzipped else "d.warc")
    path.write_bytes(data.draw(damaged(warc if gzipped else gzip.decompress(warc))))
    docs, stats = _read(path, Source(name="s", uri="x", format="warc"))
    assert len(docs) + stats.bad == stats.records and len(docs) <= 4


PARAMS = (REPO / "params.yaml").read_bytes()


@settings(max_examples=40, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_params_file_is_one_clean_error_or_valid_params(tmp_path, data):
    path = tmp_path / "params.yaml"
    path.write_bytes(data.draw(damaged(PARAMS)))
    try:
        paramsfile.load(path)
    except ShardlineError as e:
        assert str(e).startswith(f"{path}: "), str(e)
