"""Raw sources in an object store: S3 through a real moto_server on 127.0.0.1 (harness/s3.py)."""

import gzip
import hashlib
import json

import pytest

from shardline.core import fsio
from shardline.core.errors import BadInput, ConfigError, DownloadError
from shardline.data import download, objects
from tests.conftest import make_project
from harness.s3 import BUCKET, aws, client, free_port, s3_env  # noqa: F401 (fixtures)

QUIET = dict(log=lambda _: None)


def jsonl(n: int, tag: str) -> bytes:
    return "".join(json.dumps({"text": f"{tag} document {i}: " + "words of text " * 20}) + "\n"
                   for i in range(n)).encode()


def put(env, key: str, data: bytes) -> None:
    client(env).put_object(Bucket=BUCKET, Key=key, Body=data)


def test_an_s3_glob_is_fetched_pinned_by_etag_and_a_changed_object_is_a_new_version(aws, tmp_path, monkeypatch):
    put(aws, "dolma/v1/a.json.gz", gzip.compress(jsonl(50, "a")))
    put(aws, "dolma/v1/b.json.gz", gzip.compress(jsonl(40, "b")))
    put(aws, "dolma/v1/notes.txt", b"not a shard")
    params, layout = make_project(tmp_path, [{"name": "web", "uri": f"s3://{BUCKET}/dolma/*/*.json.gz",
                                              "format": "jsonl"}])
    m = download.run(params, layout, **QUIET)["web"]
    assert [f["path"] for f in m["files"]] == ["v1/a.json.gz", "v1/b.json.gz"]
    for f in m["files"]:
        body = client(aws).get_object(Bucket=BUCKET, Key=f"dolma/{f['path']}")
        assert f["etag"] == body["ETag"].strip('"') and f["sha256"] == hashlib.sha256(body["Body"].read()).hexdigest()
        assert f["origin"] == f"s3://{BUCKET}/dolma/{f['path']}" and f["compression"] == "gzip"
    fetched = []
    real = objects.fetch_object
    monkeypatch.setattr(objects, "fetch_object", lambda url, *a, **k: fetched.append(url) or real(url, *a, **k))
    assert download.run(params, layout, **QUIET)["web"] == m and fetched == []  # same etags: nothing fetched
    put(aws, "dolma/v1/b.json.gz", gzip.compress(jsonl(41, "b")))
    again = download.run(params, layout, **QUIET)["web"]
    assert fetched == [f"s3://{BUCKET}/dolma/v1/b.json.gz"]
    assert again["files"][0] == m["files"][0] and again["files"][1]["sha256"] != m["files"][1]["sha256"]
    assert again["files"][1]["decoded_bytes"] == len(jsonl(41, "b"))


def test_a_part_continues_only_when_it_belongs_to_the_same_object(aws, tmp_path):
    body = jsonl(400, "r")
    put(aws, "resume/r.jsonl", body)
    [obj] = objects.list_objects(f"s3://{BUCKET}/resume/r.jsonl")
    for note, says in [(obj.meta, "resuming at byte 1000"), ({**obj.meta, "etag": "older"}, None)]:
        dest = tmp_path / "r.jsonl"
        dest.unlink(missing_ok=True)
        dest.with_name("r.jsonl.part").write_bytes(body[:1000] if says else b"x" * 1000)  # the old object's bytes
        fsio.write_json(dest.with_name("r.jsonl.part.json"), note)
        logs: list[str] = []
        assert objects.fetch_object(obj.url, dest, obj.meta, log=logs.append) == hashlib.sha256(body).hexdigest()
        assert dest.read_bytes() == body and not dest.with_name("r.jsonl.part.json").exists()
        assert (says in logs[0]) if says else logs == []


def test_store_errors_are_one_line_and_say_what_to_do(aws, tmp_path, monkeypatch, request):
    params, layout = make_project(tmp_path / "p", [{"name": "s", "uri": f"s3://{BUCKET}/nothing/*.jsonl",
                                                    "format": "jsonl"}])
    with pytest.raises(BadInput, match="matched no objects; fix the URL") as e:
        download.run(params, layout, **QUIET)
    assert "\n" not in str(e.value)
    # a scheme whose package is missing is refused as params.yaml is read, by its field, before any download
    with pytest.raises(ConfigError, match=r"sources\[0\]\.uri: 'gs://bucket/x/\*\.jsonl': gs:// needs a package "
                                          r"that is not installed here; pip install gcsfs"):
        make_project(tmp_path / "g", [{"name": "s", "uri": "gs://bucket/x/*.jsonl", "format": "jsonl"}])
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # fsspec reuses a filesystem per process: the new endpoint needs a new one
    request.addfinalizer(s3fs.S3FileSystem.clear_instance_cache)  # and later tests need theirs back
    params, layout = make_project(tmp_path / "q", [{"name": "s", "uri": f"s3://{BUCKET}/x.jsonl", "format": "jsonl"}],
                                  download={"attempts": 2, "backoff_s": 0})  # the listing is retried too
    with pytest.raises(DownloadError) as e:
        download.run(params, layout, **QUIET)
    assert e.value.transient and f"s3://{BUCKET}/x.jsonl" in str(e.value) and "\n" not in str(e.value)


def test_a_dolma_zstd_a_parquet_glob_an_s3_and_a_warc_source_build_shards_together(aws, tmp_path):
    """The issue's acceptance: the four kinds of real-corpus source in one params.yaml, through the data half."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    from shardline.data import shard, tokenize
    from shardline.data.clean.stage import run as clean
    from tests.conftest import stdlib_files
    from tests.unit.test_warc import _page

    texts = [p.read_text() for p in stdlib_files(24)]
    (tmp_path / "dolma").mkdir()
    out = pa.BufferOutputStream()
    with pa.CompressedOutputStream(out, "zstd") as z:
        z.write("".join(json.dumps({"id": i, "text": t, "source": "stdlib"}) + "\n" for i, t in enumerate(texts[:8])).encode())
    (tmp_path / "dolma" / "v1-0000.json.zst").write_bytes(out.getvalue().to_pybytes())
    (tmp_path / "fw").mkdir()
    for k in range(2):
        pq.write_table(pa.table({"text": texts[8 + 4 * k:12 + 4 * k]}), tmp_path / "fw" / f"train-{k:05d}.parquet")
    put(aws, "pile/00.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts[16:]).encode())
    (tmp_path / "cc").mkdir()
    with open(tmp_path / "cc" / "CC-MAIN-0.warc.gz", "wb") as f:
        w = WARCWriter(f, gzip=True)
        for name in ("json", "csv", "textwrap", "shlex"):
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            w.write_record(w.create_warc_record(f"https://docs.example.org/{name}.html", "response",
                                                payload=io.BytesIO(_page(name).encode()), http_headers=http))
    sources = [{"name": "dolma", "uri": str(tmp_path / "dolma" / "*.json.zst"), "format": "jsonl"},
               {"name": "fineweb", "uri": str(tmp_path / "fw" / "train-*.parquet"), "format": "parquet"},
               {"name": "pile", "uri": f"s3://{BUCKET}/pile/*.jsonl", "format": "jsonl"},
               {"name": "cc", "uri": str(tmp_path / "cc"), "format": "warc",
                "clean": {"min_alpha_fraction": None, "max_repeated_line_fraction": None}}]
    params, layout = make_project(tmp_path / "p", sources, eval={"fraction": 0.1, "min_docs": 1, "every": 0})
    for stage in (download, clean, tokenize, shard):
        stage.run(params, layout, **QUIET)
    for s in sources:
        index = json.loads((layout.shards / s["name"] / "index.json").read_text())
        assert index["total_blocks"] > 0, s["name"]
    stats = json.loads(layout.clean_stats.read_text())["sources"]
    assert [stats[s["name"]]["docs_in"] for s in sources] == [8, 8, 8, 4]
