"""The language rule (clean.language, per source) on real English and non-English text.

Non-English text: Article 1 of the Universal Declaration of Human Rights in its official
translations (public, freely reproducible), and the translated messages that the `humanize`
package (a Prefect dependency, so always installed) ships in its .po catalogues.
"""

import inspect
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from shardline.data.clean.rules import language
from shardline.data.clean.rules.language import Language as Settings
from shardline.data.clean.verdict import Drop
from shardline.data.document import Document
from tests.conftest import make_project

UDHR_1 = {
    "en": "All human beings are born free and equal in dignity and rights. They are endowed with reason and "
          "conscience and should act towards one another in a spirit of brotherhood.",
    "de": "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und Gewissen "
          "begabt und sollen einander im Geist der Brüderlichkeit begegnen.",
    "fr": "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de raison et de "
          "conscience et doivent agir les uns envers les autres dans un esprit de fraternité.",
    "es": "Todos los seres humanos nacen libres e iguales en dignidad y derechos y, dotados como están de razón y "
          "conciencia, deben comportarse fraternalmente los unos con los otros.",
    "it": "Tutti gli esseri umani nascono liberi ed eguali in dignità e diritti. Essi sono dotati di ragione e di "
          "coscienza e devono agire gli uni verso gli altri in spirito di fratellanza.",
}


def humanize_messages(lang: str) -> str:
    import humanize

    po = Path(humanize.__file__).parent / "locale" / lang / "LC_MESSAGES" / "humanize.po"
    out = [line.split('"', 1)[1][:-1] for line in po.read_text(encoding="utf-8").splitlines()
           if (line.startswith('msgstr "') or line.startswith('msgstr[')) and len(line) > 12]
    return "\n".join(out)


def test_each_language_is_identified_with_its_probability():
    for lang, text in UDHR_1.items():
        (found, score), *_ = language.identify(text, 1000)
        assert found == lang and score > 0.9, (lang, found, score)


def test_english_is_kept_and_other_languages_are_dropped_with_what_was_measured():
    rule = language.LanguageRule(Settings(languages=("en",), min_score=0.65))
    doc = Document(UDHR_1["en"], "udhr.jsonl:1")
    assert rule(doc) is UDHR_1["en"]  # kept: its text, what it found in the document's metadata
    assert doc.metadata["language"] == "en" and doc.metadata["language_score"] > 0.9
    for lang in ("de", "fr", "es", "it"):
        drop = rule(Document(UDHR_1[lang]))
        assert isinstance(drop, Drop) and drop.rule == "language" and drop.limit == 0.65
        assert drop.value < 0.05 and drop.detail.startswith(f"detected {lang} (")
    italian = humanize_messages("it_IT")
    assert len(italian) > 100 and rule(Document(italian)).detail.startswith("detected it (")
    both = language.LanguageRule(Settings(languages=("en", "it"), min_score=0.65))
    assert both(doc := Document(italian)) is italian and doc.metadata["language"] == "it"


def test_only_the_first_max_chars_are_read():
    rule = language.LanguageRule(Settings(max_chars=len(UDHR_1["en"])))
    assert isinstance(rule(Document(UDHR_1["en"] + " " + UDHR_1["de"] * 5)), str)
    assert isinstance(language.LanguageRule(Settings())(Document(UDHR_1["en"] + " " + UDHR_1["de"] * 5)), Drop)


@pytest.mark.timeout(120)
def test_per_source_languages_and_the_lang_columns(tmp_path):
    """One source filtered to English, the other (code) not filtered at all: its columns are null."""
    from shardline.data import download
    from shardline.data.clean.stage import run as clean

    d = tmp_path / "in"
    d.mkdir()
    (d / "web.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in UDHR_1.values()))
    (d / "code.jsonl").write_text(json.dumps({"text": inspect.getsource(json.dumps)}) + "\n")
    sources = [{"name": "web", "uri": str(d / "web.jsonl"), "format": "jsonl",
                "clean": {"language": {"languages": ["en", "fr"]}}},
               {"name": "code", "uri": str(d / "code.jsonl"), "format": "jsonl"}]
    params, layout = make_project(tmp_path / "p", sources, eval={"fraction": 0, "min_docs": 0, "every": 0})
    download.run(params, layout, log=lambda _: None)
    stats = clean.run(params, layout, log=lambda _: None)
    web = pq.read_table(layout.clean / "web" / "part-00000.parquet").to_pylist()
    assert [(r["id"], r["lang"]) for r in web] == [("web.jsonl:1", "en"), ("web.jsonl:3", "fr")]
    assert all(r["lang_score"] > 0.9 for r in web)
    assert stats["sources"]["web"]["rules"]["language"]["docs"] == 3
    assert "language" not in stats["rules_order"]["code"]
    code = pq.read_table(layout.clean / "code" / "part-00000.parquet").to_pylist()
    assert [(r["lang"], r["lang_score"]) for r in code] == [(None, None)]
    sample = [json.loads(x) for x in (layout.clean / "web" / "dropped" / "language.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in sample) == ["web.jsonl:2", "web.jsonl:4", "web.jsonl:5"]
    assert {r["detail"].split()[1] for r in sample} == {"de", "es", "it"}
