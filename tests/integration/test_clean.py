import json

import pyarrow.parquet as pq
import pytest

from shardline.data import download
from shardline.data.clean.stage import run as clean
from shardline.core.errors import BadInput
from tests.conftest import make_project

QUIET = dict(log=lambda _: None)


NO_SPLIT = {"fraction": 0, "min_docs": 0, "every": 0}  # every document on the training side


def build(root, sources, **sections):
    params, layout = make_project(root, sources, **{"eval": NO_SPLIT, **sections})
    download.run(params, layout, **QUIET)
    return params, layout, clean.run(params, layout, **QUIET)


def rows(layout, name, side="train"):
    out = []
    for p in sorted((layout.clean / name).glob("part-*.parquet")):
        ids = [i for b in clean.documents(p, side, column="id") for i in b]
        texts = [t for b in clean.documents(p, side) for t in b]
        out += [{"id": i, "text": t} for i, t in zip(ids, texts)]
    return out


def test_ids_are_stable_and_outputs_identical(tmp_path, code_dir):
    src = [{"name": "code", "uri": str(code_dir), "format": "txt"}]
    _, a, _ = build(tmp_path / "a", src)
    _, b, _ = build(tmp_path / "b", src)
    ra = rows(a, "code")
    assert ra == rows(b, "code") and len(ra) > 30
    assert ra[0]["id"].endswith(".py:1")
    files = lambda layout: sorted(p for p in (layout.clean / "code").rglob("*") if p.is_file())  # noqa: E731
    assert [p.relative_to(a.clean) for p in files(a)] == [p.relative_to(b.clean) for p in files(b)]
    for pa_, pb in zip(files(a), files(b)):
        assert pa_.read_bytes() == pb.read_bytes()


def test_dedup_within_and_across_sources_first_wins(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    doc = "A paragraph of ordinary English prose that is long enough to pass every filter."
    (d / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in [doc, "Another fine document " * 4, doc]))
    (d / "b.txt").write_text(f"{doc}\n\nSomething else entirely, a unique block of text here.\n")
    _, layout, stats = build(tmp_path / "p", [{"name": "j", "uri": str(d / "a.jsonl"), "format": "jsonl"},
                                              {"name": "t", "uri": str(d / "b.txt"), "format": "txt",
                                               "txt_unit": "blank_lines"}])
    assert [r["id"] for r in rows(layout, "j")] == ["a.jsonl:1", "a.jsonl:2"]
    assert [r["id"] for r in rows(layout, "t")] == ["b.txt:3"]
    assert stats["sources"]["j"]["dedup"]["docs"] == 1 and stats["sources"]["t"]["dedup"]["docs"] == 1
    assert stats["sources"]["t"]["dedup"]["bytes"] == len(doc)
    on_disk = json.loads((layout.clean / "stats.json").read_text())
    assert on_disk == json.loads(json.dumps(stats))


def test_bad_records_counted_then_fail_over_threshold(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    good = [json.dumps({"text": f"Good document number {i} with plenty of letters in it."}) for i in range(60)]
    (d / "x.jsonl").write_text("\n".join(good[:30] + ['{"text": broken', '{"other": 1}'] + good[30:]) + "\n")
    _, layout, stats = build(tmp_path / "ok", [{"name": "x", "uri": str(d / "x.jsonl"), "format": "jsonl"}],
                             clean={"max_bad_fraction": 0.05})
    s = stats["sources"]["x"]
    assert (s["bad"], s["records"], s["docs_out"]) == (2, 62, 60)
    assert s["samples"][0].startswith("x.jsonl:31: invalid JSON") and s["samples"][1] == "x.jsonl:32: no field 'text'"
    with pytest.raises(BadInput) as e:
        build(tmp_path / "strict", [{"name": "x", "uri": str(d / "x.jsonl"), "format": "jsonl"}],
              clean={"max_bad_fraction": 0.01})
    msg = str(e.value)
    assert "2 of 62 records unreadable" in msg and "x.jsonl:31" in msg and "clean.max_bad_fraction" in msg


def test_huge_single_line_and_empty_files_are_dropped_not_fatal(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "huge.txt").write_text("x" * 50_000_000)
    (d / "empty.txt").write_text("")
    (d / "fine.txt").write_text("A small but perfectly valid document about nothing much.\n")
    _, layout, stats = build(tmp_path / "p", [{"name": "t", "uri": str(d), "format": "txt"}],
                             clean={"max_chars": 100_000})
    s = stats["sources"]["t"]
    assert [r["id"] for r in rows(layout, "t")] == ["fine.txt:1"]
    assert s["rules"]["max_chars"] == {"docs": 1, "bytes": 50_000_000}
    assert s["rules"]["min_chars"]["docs"] == 1  # the empty file


def test_one_huge_jsonl_line_is_dropped_by_max_chars_and_the_next_record_kept(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    ok = "A small but perfectly valid document about nothing much, long enough."
    (d / "a.jsonl").write_text(json.dumps({"text": "y" * 30_000_000}) + "\n" + json.dumps({"text": ok}) + "\n")
    _, layout, stats = build(tmp_path / "p", [{"name": "t", "uri": str(d), "format": "jsonl"}],
                             clean={"max_chars": 100_000})
    assert [(r["id"], r["text"]) for r in rows(layout, "t")] == [("a.jsonl:2", ok)]
    assert stats["sources"]["t"]["rules"]["max_chars"] == {"docs": 1, "bytes": 30_000_000}


def test_rerun_skips_parts_and_rebuilds_after_rule_change(tmp_path, code_dir):
    src = [{"name": "code", "uri": str(code_dir), "format": "txt"}]
    params, layout, _ = build(tmp_path / "p", src)
    logs = []
    clean.run(params, layout, log=logs.append)
    n = len(list((layout.clean / "code").glob("part-*.parquet")))
    assert f"clean: {n} part(s), {n} already done, 0 cleaned" in logs[0]  # nothing to do: no progress lines
    params2, _ = make_project(tmp_path / "p", src, clean={"min_chars": 2000})
    logs = []
    clean.run(params2, layout, log=logs.append)
    assert [ln.rsplit(" in ", 1)[0] for ln in logs if "cleaned" in ln] == [f"clean: {n} part(s), 0 already done, {n} cleaned"]
    assert logs[0].startswith(f"clean: 1/{n} parts, ") and f"clean: {n}/{n} parts, " in logs[n - 1]  # ~10% steps
    assert all(len(r["text"]) >= 2000 for r in rows(layout, "code"))


def test_dedup_context_change_rebuilds_later_parts(tmp_path):
    """A part deduped against other earlier parts must not be trusted after those change."""
    d = tmp_path / "in"
    d.mkdir()
    shared = "Shared paragraph that appears in both sources, long enough for every rule."
    (d / "first.txt").write_text(shared)
    (d / "second.txt").write_text(shared)
    a = {"name": "a", "uri": str(d / "first.txt"), "format": "txt"}
    b = {"name": "b", "uri": str(d / "second.txt"), "format": "txt"}
    params, layout, _ = build(tmp_path / "p", [a, b])
    assert rows(layout, "b") == []
    (d / "first.txt").write_text("Now the first source says something different, also long enough.")
    download.run(params, layout, **QUIET)
    clean.run(params, layout, **QUIET)
    assert [r["text"] for r in rows(layout, "b")] == [shared]


@pytest.mark.parametrize("fmt", ["jsonl", "txt", "parquet"])
def test_big_file_is_split_into_parts_with_the_same_ids(tmp_path, fmt):
    import pyarrow as pa

    d = tmp_path / "in"
    d.mkdir()
    texts = [f"Record {i}: " + "some words of honest text " * (1 + i % 7) for i in range(3000)]
    if fmt == "jsonl":
        lines = [json.dumps({"text": t}) for t in texts]
        lines[1234] = "{broken"
        (d / "big.jsonl").write_text("\n".join(lines) + "\n")
        src = {"name": "b", "uri": str(d / "big.jsonl"), "format": "jsonl"}
    elif fmt == "txt":
        (d / "big.txt").write_text("\n\n".join(t.replace(": ", ":\n") for t in texts) + "\n")
        src = {"name": "b", "uri": str(d / "big.txt"), "format": "txt", "txt_unit": "blank_lines"}
    else:
        pq.write_table(pa.table({"text": texts}), d / "big.parquet", row_group_size=100)
        src = {"name": "b", "uri": str(d / "big.parquet"), "format": "parquet"}
    _, whole, s1 = build(tmp_path / "whole", [src], clean={"part_mb": 64})
    _, split, s2 = build(tmp_path / "split", [src], clean={"part_mb": 0.02})
    assert s1["sources"]["b"]["parts"] == 1 and s2["sources"]["b"]["parts"] > 5
    assert rows(whole, "b") == rows(split, "b") and len(rows(split, "b")) >= 2999
    assert s1["sources"]["b"]["samples"] == s2["sources"]["b"]["samples"]


def test_a_clean_stage_killed_among_its_selections_is_never_read_half_done(tmp_path, code_dir):
    """The selections are rewritten one by one; until split.json (written last) carries their ctx,
    the tokenize stage refuses them, naming the remedy."""
    import signal

    from tests.conftest import BIN, env_for, run, write_params, small_params

    src = [{"name": "code", "uri": str(code_dir), "format": "txt"}]
    write_params(tmp_path, small_params(src, eval={"fraction": 0.05, "min_docs": 1}))
    for stage in ("download", "clean", "tokenize"):
        run([str(BIN / "shardline"), "stage", stage], tmp_path)
    write_params(tmp_path, small_params(src, eval={"fraction": 0.3, "min_docs": 1}))  # every selection changes
    r = run([str(BIN / "shardline"), "stage", "clean"], tmp_path, check=False,
            env=env_for(SHARDLINE_CHAOS="clean.dedup#2"))
    assert r.returncode == -signal.SIGKILL
    r = run([str(BIN / "shardline"), "stage", "tokenize"], tmp_path, check=False)
    assert r.returncode == 2 and "interrupted); re-run 'dvc repro clean'" in r.stderr and "Traceback" not in r.stderr
    run([str(BIN / "shardline"), "stage", "clean"], tmp_path)
    run([str(BIN / "shardline"), "stage", "tokenize"], tmp_path)


def test_a_part_built_batch_by_batch_is_the_same_file(tmp_path, code_dir, monkeypatch):
    """clean hands rows to Arrow every clean._BATCH documents (memory); the parquet bytes must be
    those of one table built at once."""
    src = [{"name": "code", "uri": str(code_dir), "format": "txt"}]
    monkeypatch.setattr(clean, "_BATCH", 10**9)
    _, whole, _ = build(tmp_path / "whole", src, clean={"part_mb": 1})  # ~40 documents a part
    monkeypatch.setattr(clean, "_BATCH", 7)
    _, batched, _ = build(tmp_path / "batched", src, clean={"part_mb": 1})
    parts = sorted(p.name for p in (whole.clean / "code").glob("part-*.parquet"))
    assert sum(pq.ParquetFile(whole.clean / "code" / p).metadata.num_rows > 14 for p in parts) >= 1  # 3+ batches
    assert all((whole.clean / "code" / p).read_bytes() == (batched.clean / "code" / p).read_bytes() for p in parts)


def test_parts_made_with_the_quality_rules_are_keyed_by_their_reference(tmp_path, code_dir, monkeypatch):
    """A new reference (datatrove release, word tokenizer) rebuilds the parts its rules made, once;
    parts cleaned without those rules keep their keys."""
    from shardline.data.clean.rules import ruleset

    src = [{"name": "code", "uri": str(code_dir), "format": "txt"}]
    plain, _ = make_project(tmp_path / "a", src)
    ruled, layout = make_project(tmp_path / "b", src, clean={"fineweb": {}})
    download.run(plain, layout, **QUIET)
    keys = lambda p: [part.key for part in clean.plan(p, layout)]  # noqa: E731
    before_plain, before_ruled = keys(plain), keys(ruled)
    monkeypatch.setattr(ruleset, "REFERENCE", "datatrove 9.9, other words")
    assert keys(plain) == before_plain
    assert not set(keys(ruled)) & set(before_ruled) and len(before_ruled) == len(keys(ruled))
