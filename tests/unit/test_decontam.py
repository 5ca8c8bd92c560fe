"""Decontamination: the n-gram hash against a plain-Python statement of it, matches found through
case and punctuation (at the right word), near misses not found, eval sets in both formats, bad
eval files named with their line, the index's file round trip and digest, and the rule's Drop."""

import json
import pickle
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardline.core.errors import BadInput
from shardline.data.clean.kernels import ngrams
from shardline.data.clean.kernels.ngrams import ngram_hashes, words
from shardline.data.clean.rules.decontam import DecontaminateRule, Index
from shardline.data.clean.verdict import Drop
from shardline.data.document import Document as D
from tests.conftest import STDLIB

M64 = (1 << 64) - 1
EVAL = ("Photosynthesis is the process by which green plants and some other organisms use sunlight "
        "to synthesize foods from carbon dioxide and water, generating oxygen as a by-product.")
FILLER = "Our bakery opens at nine and closes when the bread runs out"  # 12 words


def reference(text: str, n: int) -> list[int]:
    """The hash as the module docstring states it, one Python int at a time."""
    def fmix(x):
        x ^= x >> 33
        x = x * 0xFF51AFD7ED558CCD & M64
        x ^= x >> 33
        x = x * 0xC4CEB9FE1A85EC53 & M64
        return x ^ (x >> 33)

    w = [fmix(sum(ord(c) * pow(ngrams._P, j, 1 << 64) for j, c in enumerate(word)) & M64) for word in words(text)]
    return [sum(w[k + i] * pow(ngrams._Q, n - 1 - i, 1 << 64) for i in range(n)) & M64 for k in range(len(w) - n + 1)]


def write_jsonl(path, texts, field="text"):
    path.write_text("".join(json.dumps({"id": i, field: t}) + "\n" for i, t in enumerate(texts)))
    return path


def test_words_ignore_case_and_punctuation():
    assert words("The QUICK—brown, fox's x_y 3.14 Straße") == ["the", "quick", "brown", "fox", "s", "x_y", "3", "14",
                                                                 "straße"]
    assert ngram_hashes("The QUICK—brown, fox!", 2).tolist() == ngram_hashes("the quick brown fox", 2).tolist()


def test_known_answer():
    # pinned: an index on disk is only as good as this function staying the same
    assert ngram_hashes("The quick brown fox jumps over the lazy dog", 3)[:3].tolist() == \
        [10068823549454963682, 9620405308454633166, 15563783083226972812]


def test_hash_is_the_stated_polynomial_on_real_and_unicode_text():
    texts = [p.read_text(encoding="utf-8", errors="replace")[:3000] for p in sorted(STDLIB.glob("*.py"))[:20]]
    rng = random.Random(0)
    alphabet = "aZ9_ é日本ǅİßΣ\u0301\u00a0\u2028-,.\n😀\ud800"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200))) for _ in range(50)]
    texts += ["İstanbul ǅemal Straße ﬁne Ⅻ x² ١٢٣ 日本語 emoji😀word"]
    for text in texts:
        for n in (1, 3, 13):
            assert ngram_hashes(text, n).tolist() == reference(text, n), text[:80]


def test_long_text_hashed_in_batches_gives_the_same_hashes(monkeypatch):
    text = " ".join([EVAL, "x" * 500, FILLER] * 20)
    whole = ngram_hashes(text, 13)
    monkeypatch.setattr(ngrams, "_BATCH", 64)  # many batches, and words longer than a batch
    assert np.array_equal(ngram_hashes(text, 13), whole)


def test_short_texts_have_no_ngrams(tmp_path):
    assert len(ngram_hashes("", 13)) == 0 and len(ngram_hashes("twelve " * 12, 13)) == 0
    assert len(ngram_hashes("thirteen " * 13, 13)) == 1
    index = Index.build([write_jsonl(tmp_path / "e.jsonl", ["too short to count", ""])], 13)
    assert len(index) == 0 and index.first_hit(EVAL) is None


def test_thirteen_shared_words_found_at_their_position_twelve_not(tmp_path):
    index = Index.build([write_jsonl(tmp_path / "eval.jsonl", [EVAL, "another question entirely"])], 13)
    copied = "PROCESS by which GREEN plants -- and some other organisms -- use SunLight, to synthesize"  # 13 words
    found = f"{FILLER}.\n\n{copied}!! {FILLER}"
    assert index.first_hit(found) == 12  # the copy starts after FILLER's 12 words
    near = "by which green plants and some other organisms use sunlight to synthesize"  # 12 words
    assert index.first_hit(f"{FILLER} {near} {FILLER}") is None
    assert index.first_hit(FILLER) is None and index.first_hit("") is None


def test_jsonl_and_parquet_eval_sets_agree(tmp_path):
    texts = [EVAL, FILLER + " " + EVAL[::-1]]
    pq.write_table(pa.table({"question": texts, "n": [1, 2]}), tmp_path / "eval.parquet")
    a = Index.build([tmp_path / "eval.parquet"], 5, text_field="question")
    b = Index.build([write_jsonl(tmp_path / "eval.jsonl", texts, field="question")], 5, text_field="question")
    assert len(a) > 0 and a.digest == b.digest
    assert np.all(np.diff(a.hashes.astype(object)) > 0)  # sorted, distinct


def test_bad_eval_files_are_named_with_their_line(tmp_path):
    bad = tmp_path / "eval.jsonl"
    bad.write_text('{"text": "fine"}\n\n{"text": "also fine"}\n{"text": broken\n')
    with pytest.raises(BadInput, match=r"eval.jsonl:4: not valid JSON"):
        Index.build([bad], 13)
    bad.write_text('{"text": "fine"}\n{"question": "where is the text"}\n')
    with pytest.raises(BadInput, match=r"eval.jsonl:2: no text field 'text' \(found: \['question'\]\)"):
        Index.build([bad], 13)
    bad.write_text('{"text": null}\n')
    with pytest.raises(BadInput, match=r"eval.jsonl:1: 'text' is None, not text"):
        Index.build([bad], 13)
    pq.write_table(pa.table({"text": ["fine", None]}), tmp_path / "nulls.parquet")
    with pytest.raises(BadInput, match=r"nulls.parquet: row 2: 'text' is None, not text"):
        Index.build([tmp_path / "nulls.parquet"], 13)
    with pytest.raises(BadInput, match=r"missing.jsonl: evaluation set not found"):
        Index.build([tmp_path / "missing.jsonl"], 13)
    pq.write_table(pa.table({"question": ["q"]}), tmp_path / "eval.parquet")
    with pytest.raises(BadInput, match=r"eval.parquet: no column 'text' \(columns: \['question'\]\)"):
        Index.build([tmp_path / "eval.parquet"], 13)
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(BadInput, match=r"junk.parquet: not a readable parquet file"):
        Index.build([tmp_path / "junk.parquet"], 13)
    (tmp_path / "eval.csv").write_text("text\nq\n")
    with pytest.raises(BadInput, match=r"eval.csv: an evaluation set must be .jsonl or .parquet"):
        Index.build([tmp_path / "eval.csv"], 13)


def test_save_load_round_trip(tmp_path):
    index = Index.build([write_jsonl(tmp_path / "eval.jsonl", [EVAL, FILLER * 3])], 8)
    index.save(tmp_path / "index.npy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.jsonl", "index.npy", "index.npy.json"]  # no temps
    loaded = Index.load(tmp_path / "index.npy")
    assert loaded.n == 8 and loaded.digest == index.digest and np.array_equal(loaded.hashes, index.hashes)
    assert isinstance(loaded.hashes.base, np.memmap) or isinstance(loaded.hashes, np.memmap)  # mapped, not read
    assert loaded.first_hit("x " + EVAL) == index.first_hit("x " + EVAL) == 1
    np.save(tmp_path / "index.npy", index.hashes[1:])  # the array changed under its metadata
    with pytest.raises(BadInput, match="does not match index.npy.json"):
        Index.load(tmp_path / "index.npy")
    (tmp_path / "index.npy.json").unlink()
    with pytest.raises(BadInput, match="no index.npy.json beside it"):
        Index.load(tmp_path / "index.npy")


def test_digest_follows_content_not_order(tmp_path):
    texts = [EVAL, FILLER + " and more words to make it long enough"]
    digest = Index.build([write_jsonl(tmp_path / "a.jsonl", texts)], 5).digest
    assert Index.build([write_jsonl(tmp_path / "b.jsonl", texts[::-1])], 5).digest == digest
    assert Index.build([write_jsonl(tmp_path / "c.jsonl", [texts[0]])], 5).digest != digest
    assert Index.build([tmp_path / "a.jsonl"], 6).digest != digest


def test_rule_drops_with_the_shared_words(tmp_path):
    Index.build([write_jsonl(tmp_path / "eval.jsonl", [EVAL])], 13).save(tmp_path / "index.npy")
    rule = DecontaminateRule(str(tmp_path / "index.npy"), 13)
    rule = pickle.loads(pickle.dumps(rule))  # it runs in worker processes
    clean = f"{FILLER}. {FILLER}."
    assert rule(D(clean)) is clean
    assert rule(D("Quoted: " + EVAL.upper())) == Drop(
        "decontaminate", "photosynthesis is the process by which green plants and some other organisms use",
        13, "at word 1")
    with pytest.raises(BadInput, match="built for 13-grams, the rule asks for 8-grams"):
        DecontaminateRule(str(tmp_path / "index.npy"), 8)(D(clean))


def test_the_clean_stage_drops_samples_and_explains_contaminated_documents(tmp_path):
    """clean.decontaminate end to end: the index built once from the evaluation sets, the rule counted,
    sampled and explained like any other, the sets' content (not path) in the part keys and the stats."""
    from shardline.data import download
    from shardline.data.clean.stage import explain, run as clean
    from tests.conftest import make_project

    question = ("Which of the following best describes the primary function of mitochondria in eukaryotic "
                "cells according to the standard textbook account")
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "mmlu.jsonl").write_text(json.dumps({"question": question}) + "\n")
    docs = [f"Honest document {i} about gardening, soil and the seasons of planting vegetables." * 2 for i in range(6)]
    docs[3] = "Quiz time! " + question.upper().replace(" ", " -- ") + "? Answer below."
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "web.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    cfg = {"decontaminate": {"paths": ["evals/mmlu.jsonl"], "text_field": "question"}, "pii": {}}
    params, layout = make_project(tmp_path, [{"name": "web", "uri": str(tmp_path / "in"), "format": "jsonl"}],
                                  eval={"fraction": 0, "min_docs": 0, "every": 0}, clean=cfg)
    download.run(params, layout, log=lambda _: None)
    stats = clean.run(params, layout, log=lambda _: None)
    assert stats["sources"]["web"]["rules"]["decontaminate"]["docs"] == 1 and stats["totals"]["docs_out"] == 5
    [sample] = [json.loads(x) for x in (layout.clean / "web" / "dropped" / "decontaminate.jsonl").read_text().splitlines()]
    assert sample["id"] == "web.jsonl:4" and sample["value"] == " ".join(question.lower().split()[:13])
    got = explain.explain(params, layout, "web.jsonl:4")
    assert (got["verdict"], got["rule"]) == ("dropped", "decontaminate")
    key = stats["rule_inputs"]["web"]["decontaminate"]
    keys = [p.key for p in clean.plan(params, layout)]
    (tmp_path / "evals" / "mmlu.jsonl").write_text(json.dumps({"question": question + " today"}) + "\n")
    assert [p.key for p in clean.plan(params, layout)] != keys  # a changed evaluation set: a new data version
    (tmp_path / "evals" / "mmlu.jsonl").write_text(json.dumps({"question": question}) + "\n")
    assert [p.key for p in clean.plan(params, layout)] == keys and len(key) == 64


@pytest.mark.parametrize("clean_cfg, says", [
    ({"decontaminate": {"paths": ["evals/missing.jsonl"]}}, "clean.decontaminate.paths: "),
    ({"url_blocklist": "nope.txt"}, "clean.url_blocklist: "),
])
def test_a_missing_rule_file_is_one_line_naming_the_field(tmp_path, clean_cfg, says):
    from shardline.core.errors import BadInput
    from shardline.data import download
    from shardline.data.clean.stage import run as clean
    from tests.conftest import make_project

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(json.dumps({"text": "some text " * 10}) + "\n")
    params, layout = make_project(tmp_path, [{"name": "s", "uri": str(tmp_path / "in"), "format": "jsonl"}], clean=clean_cfg)
    download.run(params, layout, log=lambda _: None)
    with pytest.raises(BadInput) as e:
        clean.run(params, layout, log=lambda _: None)
    assert str(e.value).startswith(says) and "is not a file" in str(e.value) and "\n" not in str(e.value)
