import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardline.data import readers
from shardline.core.config import Source
from shardline.core.errors import BadInput


def read(path, **src):
    stats = readers.ReadStats()
    docs = list(readers.read(path, path.name, Source(name="s", uri="x", **src), stats))
    return docs, stats


def test_jsonl_bad_records_are_counted_with_file_line(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"text": "one"}\n{"text": \n\n[1, 2]\n{"body": "x"}\n{"text": 5}\n{"text": "two"}\n')
    docs, st = read(p, format="jsonl")
    assert docs == [("a.jsonl:1", "one"), ("a.jsonl:7", "two")]
    assert (st.records, st.bad) == (6, 4)
    assert st.samples[0].startswith("a.jsonl:2: invalid JSON")
    assert st.samples[1:] == ["a.jsonl:4: not a JSON object", "a.jsonl:5: no field 'text'",
                              "a.jsonl:6: field 'text' is int, not a string"]


def test_a_record_with_an_integer_python_will_not_read_is_one_bad_record(tmp_path):
    """JSON allows any integer; Python's json refuses one of more than 4300 digits with a ValueError that
    is no JSONDecodeError (a traceback, found by test_damage_properties' hypothesis on a bz2 jsonl)."""
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"text": "one"}\n{"text": "big", "n": ' + b"7" * 4400 + b'}\n{"text": "two"}\n')
    docs, st = read(p, format="jsonl")
    assert docs == [("a.jsonl:1", "one"), ("a.jsonl:3", "two")]
    assert st.bad == 1 and st.samples == ["a.jsonl:2: invalid JSON (Exceeds the limit (4300 digits) for integer string "
                                          "conversion: value has 4400 digits)"]


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"text": "caf\xe9 ok"}\n')
    docs, st = read(p, format="jsonl")
    assert docs == [("a.jsonl:1", "caf\ufffd ok")] and st.invalid_utf8 == 1 and st.bad == 0
    t = tmp_path / "b.txt"
    t.write_bytes(b"\xff\xfebinary\x00garbage")
    docs, st = read(t, format="txt")
    assert st.invalid_utf8 == 1 and "\ufffd" in docs[0][1]


def test_txt_units(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("first para\nline two\n\n  \n\nsecond\n\n\nthird\n")
    assert read(p, format="txt")[0] == [("t.txt:1", p.read_text())]
    docs, st = read(p, format="txt", txt_unit="blank_lines")
    assert docs == [("t.txt:1", "first para\nline two"), ("t.txt:6", "second"), ("t.txt:9", "third")]
    empty = tmp_path / "e.txt"
    empty.write_text("")
    assert read(empty, format="txt", txt_unit="blank_lines")[0] == []


def test_parquet_column_and_damage(tmp_path):
    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({"body": ["a", None, "c"]}), p)
    docs, st = read(p, format="parquet", text_field="body")
    assert docs == [("d.parquet:1", "a"), ("d.parquet:3", "c")] and st.bad == 1
    with pytest.raises(BadInput, match=r"d.parquet: no column 'text' \(columns: \['body'\]\)"):
        read(p, format="parquet")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(BadInput, match="d.parquet: not a readable parquet file.*re-download"):
        read(p, format="parquet", text_field="body")


def test_lone_surrogate_escapes_are_replaced_and_counted(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text('{"text": "bad \\ud800 half"}\n')
    docs, st = read(p, format="jsonl")
    assert docs == [("s.jsonl:1", "bad \ufffd half")] and st.invalid_utf8 == 1
    docs[0][1].encode("utf-8")  # storable as parquet/arrow text


def test_nul_bytes_in_jsonl(tmp_path):
    """A raw NUL inside a JSON string is not JSON: quarantined with its file and line. An escaped
    one (\\u0000) is text: kept here, for clean.strip_control to remove."""
    p = tmp_path / "n.jsonl"
    p.write_bytes(b'{"text": "a\x00b"}\n{"text": "c\\u0000d"}\n\x00\x00\x00\n{"text": "ok"}\n')
    docs, st = read(p, format="jsonl")
    assert docs == [("n.jsonl:2", "c\x00d"), ("n.jsonl:4", "ok")] and (st.records, st.bad) == (4, 2)
    assert st.samples == ["n.jsonl:1: invalid JSON (Invalid control character at at column 12)",
                          "n.jsonl:3: invalid JSON (Expecting value at column 1)"]
