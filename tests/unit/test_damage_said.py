"""Damage said out loud (issue 44, point 3): when the clean stage keeps going past damage it logs
one `warning:` line per damaged raw file through its `log` (the terminal, or the Prefect flow
run's log), naming the file, the byte or line, and what was kept and skipped; stats.json keeps the
lines per source and the evidence card counts them. A WARC cut inside a record, a truncated
.jsonl.gz, and malformed JSON lines under clean.max_bad_fraction, each on real files."""

from __future__ import annotations

import gzip
import json
import re

import pyarrow.parquet as pq
import pytest

from shardline.data import download
from shardline.core.errors import BadInput
from shardline.data.clean.stage import explain, run as clean
from shardline.results import report
from tests.conftest import make_project
from tests.unit.test_warc import MODULES, _crawl, _url

NO_SPLIT = {"fraction": 0, "min_docs": 0, "every": 0}
KEEP_ALL = {"min_alpha_fraction": None, "max_repeated_line_fraction": None, "max_line_chars": None}


def _clean(params, layout) -> tuple[dict, list[str]]:
    logs: list[str] = []
    stats = clean.run(params, layout, log=logs.append)
    return stats, [ln for ln in logs if ln.startswith("warning: ")]


def test_a_warc_cut_inside_a_record_is_one_warning_naming_byte_kept_and_skipped(tmp_path):
    (tmp_path / "in").mkdir()
    full = tmp_path / "full.warc.gz"
    offsets = _crawl(full)
    data = full.read_bytes()
    cut = data[: (offsets[4] + offsets[5]) // 2]  # inside the 5th page's record, ~80% of the file
    (tmp_path / "in" / "crawl.warc.gz").write_bytes(cut)
    params, layout = make_project(tmp_path, [{"name": "web", "uri": str(tmp_path / "in"), "format": "warc"}],
                                  eval=NO_SPLIT, clean={**KEEP_ALL, "max_bad_fraction": 0.5})
    download.run(params, layout, log=lambda _: None)
    stats, warnings = _clean(params, layout)
    assert len(warnings) == 1, warnings
    line = warnings[0].removeprefix("warning: ")  # the block's length is the page's, which pydoc's version decides
    got, expected = map(int, re.search(r"record cut off \((\d+) of (\d+) bytes\)", line).groups())
    assert line == (f"data/raw/web/files/crawl.warc.gz: byte {offsets[4]}: record cut off ({got} of {expected} bytes); "
                    f"kept the 4 record(s) before it, skipped the rest of the file ({len(cut) - offsets[4]} bytes)")
    assert 0 < got < expected
    assert stats["sources"]["web"]["damaged"] == [line]
    assert json.loads(layout.clean_stats.read_text())["sources"]["web"]["damaged"] == [line]
    assert pq.read_table(layout.clean_part("web/part-00000")).num_rows == 4  # what it says it kept
    card = report.damaged_files(stats["sources"]["web"])
    assert card == ["  - 1 damaged file(s) read past, what preceded the damage kept:", f"    - {line}"]
    assert _clean(params, layout)[1] == warnings  # a rerun (every part done) says it again: the damage is there
    assert explain.explain(params, layout, _url(MODULES[3]))["verdict"] == "kept"  # explain reads the same file
    with pytest.raises(BadInput) as e:  # the page the cut took: not in the file as it is
        explain.explain(params, layout, _url(MODULES[4]))
    assert str(e.value) == f"'{_url(MODULES[4])}': no WARC source has a record with this URL"


def test_a_truncated_gzip_is_one_warning_and_an_intact_file_none(tmp_path):
    texts = [f"document {i}: " + " ".join(f"w{(i * 7 + j) % 501}" for j in range(60)) for i in range(2000)]
    data = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    packed = gzip.compress(data, mtime=0)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "t.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    (tmp_path / "in" / "u.jsonl").write_bytes(data[:5000].rsplit(b"\n", 1)[0] + b"\n")  # intact: no line
    params, layout = make_project(tmp_path, [{"name": "s", "uri": str(tmp_path / "in"), "format": "jsonl"}],
                                  eval=NO_SPLIT, clean={**KEEP_ALL, "max_bad_fraction": 0.01, "part_mb": 64})
    download.run(params, layout, log=lambda _: None)
    stats, warnings = _clean(params, layout)
    kept = stats["sources"]["s"]["records"] - 1 - data[:5000].count(b"\n")  # the records of t.jsonl.gz it kept
    assert 0 < kept < 2000 and len(warnings) == 1, warnings
    head, tail = warnings[0].split(": gzip data damaged at byte ", 1)
    at = int(head.rsplit("byte ", 1)[1])
    assert head == f"warning: data/raw/s/files/t.jsonl.gz: byte {at}" and 0 < at <= len(packed) // 2
    assert tail.endswith(f"; kept the {kept} record(s) before it, skipped the rest of the file "
                         f"({len(packed) // 2 - at} bytes)"), tail
    assert stats["sources"]["s"]["damaged"] == [warnings[0].removeprefix("warning: ")]


def test_malformed_json_lines_under_the_limit_are_one_warning_per_file_across_its_parts(tmp_path):
    good = [json.dumps({"text": f"line {i}: " + "ordinary words in a sentence " * 8}) for i in range(400)]
    lines = good[:9] + ['{"text": broken'] + good[9:390] + ["[1, 2]"] + good[390:]  # lines 10 and 392
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n")  # ~100 kB: two parts of 50 kB
    params, layout = make_project(tmp_path, [{"name": "s", "uri": str(tmp_path / "in"), "format": "jsonl"}],
                                  eval=NO_SPLIT, clean={**KEEP_ALL, "max_bad_fraction": 0.01})
    download.run(params, layout, log=lambda _: None)
    stats, warnings = _clean(params, layout)
    assert stats["sources"]["s"]["parts"] >= 2
    assert warnings == ["warning: data/raw/s/files/a.jsonl: skipped 2 unreadable record(s) of 402 (the first: "
                        "a.jsonl:10: invalid JSON (Expecting value at column 10)); kept the other 400"]
