"""shardline.data.warc: WARC/WET records in, (url, date, main text) out, damage reported, never raised.

The WARC files are written here with warcio's WARCWriter (an independent implementation from the
fastwarc reader under test), one gzip member per record as Common Crawl writes them. The HTML is
real and present on every machine that runs the tests: pages that the standard library's pydoc
renders for a few stdlib modules (`pydoc.html.page(...)`, what `pydoc -w` writes), each with a
heading table of links around the module's documentation. Nothing comes from the network.
"""

from __future__ import annotations

import gzip
import json
import importlib
import io
import pydoc
import random
import re

import pytest
from resiliparse.extract.html2text import extract_plain_text
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from shardline.data.readers import ReadStats
from shardline.data.warc import WarcCounts, is_warc, records

MODULES = ("json", "csv", "textwrap", "shlex", "fnmatch", "colorsys")
DATE = "2024-03-01T12:34:56Z"


def _page(name: str) -> str:
    mod = importlib.import_module(name)
    return pydoc.html.page(pydoc.describe(mod), pydoc.html.document(mod, name))


def _url(name: str) -> str:
    return f"https://docs.example.org/{name}.html"


def _expected(name: str) -> str:
    return extract_plain_text(_page(name), main_content=True)


def _response(w: WARCWriter, url: str, body: bytes, content_type: str = "text/html; charset=utf-8",
              warc_headers: dict | None = None) -> None:
    http = StatusAndHeaders("200 OK", [("Content-Type", content_type)], protocol="HTTP/1.1")
    w.write_record(w.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http,
                                        warc_headers_dict={"WARC-Date": DATE, **(warc_headers or {})}))


def _request(w: WARCWriter, url: str) -> None:
    http = StatusAndHeaders("GET / HTTP/1.1", [("Host", "docs.example.org")], is_http_request=True)
    w.write_record(w.create_warc_record(url, "request", payload=io.BytesIO(b""), http_headers=http))


def _crawl(path, names=MODULES) -> list[int]:
    """A gzip'd WARC like Common Crawl's: warcinfo, then request + response per page.
    Returns each response record's byte offset (its gzip member's start)."""
    offsets = []
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        w.write_record(w.create_warcinfo_record(path.name, {"software": "test_warc"}))
        for name in names:
            _request(w, _url(name))
            offsets.append(f.tell())
            _response(w, _url(name), _page(name).encode())
    return offsets


def _read(path, rel="crawl.warc.gz"):
    stats, counts = ReadStats(), WarcCounts()
    return list(records(path, stats, rel, counts)), stats, counts


def test_responses_give_the_extractors_main_text(tmp_path):
    path = tmp_path / "crawl.warc.gz"
    _crawl(path)
    out, stats, counts = _read(path)
    assert out == [(_url(n), DATE, _expected(n)) for n in MODULES]
    assert all(len(text) > 500 for _, _, text in out)  # real pages, real text
    assert (stats.records, stats.bad, stats.invalid_utf8, counts.skipped, counts.empty) == (len(MODULES), 0, 0, 0, 0)


def test_declared_charset_decodes_a_non_utf8_page(tmp_path):
    html = _page("colorsys").replace("<body>", "<body><p>Caf\u00e9 cr\u00e8me \u2013 d\u00e9j\u00e0 vu</p>", 1)
    meta_only, n = re.subn(r"charset=([\"']?)utf-8", r"charset=\1windows-1252", html, count=1, flags=re.I)
    assert n == 1  # declared in <meta> only
    path = tmp_path / "latin.warc.gz"
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        _response(w, "https://a/", html.encode("cp1252"), "text/html; charset=windows-1252")
        _response(w, "https://b/", meta_only.encode("cp1252"), "text/html")
    out, stats, _ = _read(path)
    assert [text for _, _, text in out] == [extract_plain_text(html, main_content=True)] * 2
    assert "Caf\u00e9 cr\u00e8me" in out[0][2] and stats.invalid_utf8 == 0


def test_wet_conversion_record_is_its_text(tmp_path):
    text = "Na\u00efve caf\u00e9 \u2014 \u6771\u4eac\n\nA second paragraph, as WET files keep them.\n"
    path = tmp_path / "crawl.warc.wet.gz"
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        w.write_record(w.create_warcinfo_record(path.name, {"software": "test_warc"}))
        for url, payload in (("https://a/", text.encode()), ("https://b/", b"bad \xff byte")):
            w.write_record(w.create_warc_record(url, "conversion", payload=io.BytesIO(payload),
                                                warc_content_type="text/plain", warc_headers_dict={"WARC-Date": DATE}))
    out, stats, _ = _read(path, "crawl.warc.wet.gz")
    assert out == [("https://a/", DATE, text), ("https://b/", DATE, "bad \ufffd byte")]
    assert (stats.records, stats.bad, stats.invalid_utf8) == (2, 0, 1)


def test_non_documents_are_skipped_not_bad(tmp_path):
    path = tmp_path / "mixed.warc.gz"
    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=True)
        w.write_record(w.create_warcinfo_record(path.name, {"software": "test_warc"}))
        _request(w, "https://img/")
        _response(w, "https://img/", b"\x89PNG\r\n\x1a\n" + bytes(200), "image/png")
        # the server says HTML, Common Crawl's detection says PDF: the detection wins
        _response(w, "https://pdf/", b"%PDF-1.4 " + bytes(200),
                  warc_headers={"WARC-Identified-Payload-Type": "application/pdf"})
        w.write_record(w.create_warc_record("https://pdf/", "metadata", payload=io.BytesIO(b"fetchTimeMs: 12\r\n"),
                                            warc_content_type="application/warc-fields"))
        _response(w, "https://empty/", b"<html><head><title>t</title></head><body></body></html>")
        _response(w, "https://shlex/", _page("shlex").encode())
    out, stats, counts = _read(path)
    assert out == [("https://shlex/", DATE, _expected("shlex"))]
    assert (stats.records, stats.bad, stats.skipped, counts.skipped, counts.empty) == (1, 0, 3, 2, 1)


def test_a_response_without_http_is_one_bad_record(tmp_path):
    path = tmp_path / "broken.warc.gz"
    with open(path, "wb") as f:
        block = b"not an HTTP response at all"  # warcio refuses to write this, so by hand
        head = (f"WARC/1.1\r\nWARC-Type: response\r\nWARC-Target-URI: https://broken/\r\nWARC-Date: {DATE}\r\n"
                f"Content-Type: application/http; msgtype=response\r\nContent-Length: {len(block)}\r\n\r\n")
        f.write(gzip.compress(head.encode() + block + b"\r\n\r\n"))
        _response(WARCWriter(f, gzip=True), _url("fnmatch"), _page("fnmatch").encode())
    out, stats, _ = _read(path)
    assert out == [(_url("fnmatch"), DATE, _expected("fnmatch"))]
    assert stats.bad == 1 and stats.samples[0].startswith("crawl.warc.gz:https://broken/: ")


@pytest.mark.parametrize("cut", ["in the body", "in the WARC header", "corrupt", "plain, in the body",
                                 "plain, in the WARC header"])
def test_damaged_file_keeps_records_before_it_and_rejects_once(tmp_path, cut):
    full = tmp_path / "full.warc.gz"
    offsets = _crawl(full)
    data, k = full.read_bytes(), 3  # damage the 4th response's record
    if cut == "in the body":
        data = data[: (offsets[k] + offsets[k + 1]) // 2]
    elif cut == "in the WARC header":
        data = data[: offsets[k] + 20]
    elif cut == "corrupt":
        data = data[: offsets[k] + 200] + b"\x00" * 300 + data[offsets[k] + 500:]
    else:
        offsets[k] = len(gzip.decompress(data[: offsets[k]]))  # the plain file's offset
        data = gzip.decompress(data)[: offsets[k] + (2000 if cut.endswith("body") else 30)]
    path = tmp_path / ("cut.warc" if cut.startswith("plain") else "cut.warc.gz")
    path.write_bytes(data)
    out, stats, _ = _read(path)
    assert out == [(_url(n), DATE, _expected(n)) for n in MODULES[:k]]
    assert stats.bad == 1 and len(stats.samples) == 1
    assert stats.samples[0].startswith(f"crawl.warc.gz: byte {offsets[k]}: ") and "re-download" in stats.samples[0]


def test_a_file_gzipped_whole_reads_like_one_gzipped_per_record(tmp_path):
    per_record = tmp_path / "crawl.warc.gz"
    _crawl(per_record)
    with open(per_record, "ab") as f:  # a last record bigger than fastwarc's 64 kB read buffer
        _response(WARCWriter(f, gzip=True), "https://img/", random.Random(0).randbytes(200_000), "image/png")
    whole = tmp_path / "whole.warc.gz"  # `gzip crawl.warc`: one member, no record starts at a member
    whole.write_bytes(gzip.compress(gzip.decompress(per_record.read_bytes())))
    out, stats, counts = _read(whole)
    assert (out, stats, counts) == _read(per_record) and stats.bad == 0 and counts.skipped == 1


def test_is_warc():
    assert is_warc(b"WARC/1.0\r\nWARC-Type: warcinfo\r\n") and is_warc(b"WARC/1.1\r\n")
    for head in (b"", b"\x1f\x8b\x08\x00", b"<!DOCTYPE html>", b'{"text": "WARC/1.0"}', b" WARC/1.0"):
        assert not is_warc(head)


def test_a_warc_source_cleans_to_pages_by_url_with_date_and_the_blocklist_counted(tmp_path):
    """format: warc through download and clean: URL ids, url/date columns, a domain blocklist as a rule,
    `shardline explain` by URL."""
    import pyarrow.parquet as pq

    from shardline.data import download
    from shardline.data.clean.stage import explain, run as clean
    from tests.conftest import make_project

    (tmp_path / "in").mkdir()
    _crawl(tmp_path / "in" / "CC-MAIN-1.warc.gz")
    with open(tmp_path / "in" / "CC-MAIN-2.warc.gz", "wb") as f:
        w = WARCWriter(f, gzip=True)
        _response(w, "https://ads.spam.example/json.html", _page("json").encode())
        _response(w, "https://ads.spam.example/json.html", _page("shlex").encode())  # one URL, crawled twice
        _response(w, "https://notspam.example/csv.html", _page("csv").encode())
        _response(w, "https://notspam.example/logo.png", b"\x89PNG\r\n\x1a\n", "image/png")  # no document
    (tmp_path / "block.txt").write_text("# domains\nspam.example\n")
    params, layout = make_project(tmp_path, [{"name": "web", "uri": str(tmp_path / "in"), "format": "warc"}],
                                  eval={"fraction": 0, "min_docs": 0, "every": 0},
                                  clean={"url_blocklist": "block.txt", "min_alpha_fraction": None,
                                         "max_repeated_line_fraction": None, "max_line_chars": None})
    download.run(params, layout, log=lambda _: None)
    stats = clean.run(params, layout, log=lambda _: None)["sources"]["web"]
    table = pq.read_table(layout.clean / "web" / "part-00000.parquet")
    assert table.column("id").to_pylist() == [_url(n) for n in MODULES] + ["https://notspam.example/csv.html"]
    assert table.column("url").to_pylist() == table.column("id").to_pylist() and set(table.column("date").to_pylist()) == {DATE}
    from shardline.data.clean.rules import registry as rules

    assert table.column("text").to_pylist()[0] == rules.apply(rules.build(params.clean), _expected(MODULES[0]), {})
    assert stats["rules"]["url_blocklist"]["docs"] == 2 and stats["records"] == len(MODULES) + 3
    assert stats["skipped"] == 1
    sample = [json.loads(x) for x in (layout.clean / "web" / "dropped" / "url_blocklist.jsonl").read_text().splitlines()]
    assert [(s["id"], s["value"], s["limit"]) for s in sample] == [("https://ads.spam.example/json.html",
                                                                    "ads.spam.example", "spam.example")] * 2
    got = explain.explain(params, layout, _url("csv"))
    assert got["verdict"] == "kept" and got["side"] == "train"
    got = explain.explain(params, layout, "https://ads.spam.example/json.html")  # dropped: found in the raw WARC
    assert (got["verdict"], got["rule"], got["limit"]) == ("dropped", "url_blocklist", "spam.example")


def test_the_blocklist_matches_domains_and_their_subdomains_and_addresses_whole(tmp_path):
    from shardline.data.clean.rules import urls

    path = tmp_path / "block.txt"
    path.write_text("# ad networks\n*.Ads.Example\n3.4\n10.0.0.1  # a crawler trap\n.tracker.test\n")
    verdict = {u: (d.limit if (d := urls.blocked(u, str(path), "k")) else None) for u in [
        "https://ads.example/x", "https://cdn.ads.example/x", "https://ads.example.org/", "https://notads.example/",
        "http://1.2.3.4/", "http://10.0.0.1:8080/a", "https://a.b.tracker.test/", "not a url", "http://[::1]/"]}
    assert verdict == {"https://ads.example/x": "ads.example", "https://cdn.ads.example/x": "ads.example",
                       "https://ads.example.org/": None, "https://notads.example/": None, "http://1.2.3.4/": None,
                       "http://10.0.0.1:8080/a": "10.0.0.1", "https://a.b.tracker.test/": "tracker.test",
                       "not a url": None, "http://[::1]/": None}
