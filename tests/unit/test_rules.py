import unicodedata

from shardline.data.clean.rules import basic
from shardline.data.clean.kernels import lines
from shardline.data.clean.rules import registry as rules
from shardline.data.clean.stage.settings import Clean
from shardline.data.clean.verdict import Drop
from shardline.data.document import Document as D


def run_rules(text, **cfg):
    counts = {}
    return rules.apply(rules.build(Clean(**cfg)), text, counts), counts


def test_order_is_the_documented_one():
    assert rules.names(Clean()) == ["normalize", "strip_control", "whitespace", "min_chars", "max_chars",
                                    "max_line_chars", "max_repeated_line_fraction", "min_alpha_fraction",
                                    "max_replacement_fraction"]
    assert "normalize" not in rules.names(Clean(normalize="none"))
    assert "min_chars" not in rules.names(Clean(min_chars=None))


def test_transforms():
    assert basic.Normalize("NFC")(D("e\u0301")) == "\u00e9"
    assert basic.Normalize("NFKC")(D("\ufb01")) == "fi"
    assert basic.strip_control(D("a\x00b\x1bc\td\ne\x85")) == "ab" + "c\td\ne"
    assert basic.whitespace(D("\n\nx  \r\ny\t\n\n\n\n\n\nz  \n")) == "x\ny\n\n\nz"
    assert basic.whitespace(D("    indented\n")) == "    indented"


def test_filters_drop_with_what_they_measured():
    assert basic.MinChars(3)(D("ab")) == Drop("min_chars", 2, 3) and basic.MinChars(2)(D("ab")) == "ab"
    assert basic.MaxChars(2)(D("abc")) == Drop("max_chars", 3, 2)
    assert basic.MaxLineChars(5)(D("abc\n" + "x" * 6)) == Drop("max_line_chars", 6, 5)
    assert basic.RepeatedLines(0.3)(D("a\nb\na\na\n")) == Drop("max_repeated_line_fraction", 0.5, 0.3)  # 2 of 4 lines repeat
    assert basic.RepeatedLines(0.3)(D("a\nb\nc\na\n\n\n")) == "a\nb\nc\na\n\n\n"  # 1 of 4
    assert basic.AlphaFraction(0.5)(D("1234 5678 ab")) == Drop("min_alpha_fraction", 0.2, 0.5)  # 2 letters of 10
    assert basic.AlphaFraction(0.5)(D("abcd 12")) == "abcd 12"
    assert basic.ReplacementFraction(0.1)(D("ab\ufffd")) == Drop("max_replacement_fraction", 0.3333, 0.1)


def test_apply_counts_docs_and_bytes_per_rule():
    out, counts = run_rules("  hello   \r\nworld\x00", min_chars=1)
    assert out == "  hello\nworld"
    assert counts["whitespace"] == [0, 4]  # three trailing spaces and the CR
    assert counts["strip_control"] == [0, 1]
    out, counts = run_rules("tiny", min_chars=10)
    assert out == Drop("min_chars", 4, 10) and counts["min_chars"] == [1, 4]
    assert "max_chars" not in counts  # rules after a drop never see the document


def _reference(text: str) -> tuple[str, str, int, int]:
    """The rules as plain regular expressions (how they were first written): the fast paths must
    give exactly these strings and counts."""
    import re

    control = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", "", text)
    ws = text.replace("\r\n", "\n").replace("\r", "\n")
    ws = re.sub(r"\n{4,}", "\n\n\n", re.sub(r"[ \t]+(?=\n)", "", ws)).rstrip().lstrip("\n")
    return control, ws, len(re.findall(basic.LETTER, text)), len(re.findall(basic.SPACE, text))


def test_fast_rules_equal_the_regular_expressions_on_real_and_odd_text():
    from pydoc_data import topics

    from tests.conftest import stdlib_files

    odd = ["x²y Ⅻ ½ ٣ ५ _ ß ǅ \u00a0\u2003\u3000 \x1c\x1d\x1e\x1f\x85 é e\u0301 中文 😀 \ud800 \U0001d400",
           "a \t\r\n b\r c\t\n\n\n\n\n d \x00\x07\x9f", "", " ", "\n\n\n\n", "\t\n"]
    texts = odd + list(topics.topics.values()) + [p.read_text() for p in stdlib_files(60)]
    texts += ["a" * 9 + "\n" + "b" * 10, "b" * 10 + "\n" + "a" * 9, "ab\n" * 7 + "c" * 11, "x" * 21]
    for text in texts:
        letters, spaces = lines.line_stats(text)[3:5]
        assert (basic.strip_control(D(text)), basic.whitespace(D(text)), letters, spaces) == _reference(text)
        split = text.split("\n")
        for n in (1, 9, 10, 11, 80, 2000):
            longest = max(map(len, split))
            assert basic.MaxLineChars(n)(D(text)) == (text if longest <= n else Drop("max_line_chars", longest, n))
        for form in ("NFC", "NFKC"):
            assert basic.Normalize(form)(D(text)) == unicodedata.normalize(form, text)
    assert lines.line_stats(odd[0])[3:5] == (12, 23)  # x y ² Ⅻ ½ ß ǅ é e 中 文 𝐀: re keeps ², Ⅻ, ½ (not \d)


def test_a_rule_sees_the_whole_document_and_the_url_blocklist_is_a_rule_like_any(tmp_path):
    """One decision per rule: the URL comes with the document, so the blocklist is judged by
    rules.apply (as the clean stage and `shardline explain` both call it), counted like any check."""
    from shardline.data.clean.stage import inputs

    listed = tmp_path / "block.txt"
    listed.write_text("spam.example\n")
    cfg = Clean(url_blocklist=str(listed), min_chars=1)
    chain = rules.build(cfg, inputs.Inputs((str(listed), "sha"), None))
    assert rules.names(cfg)[0] == "url_blocklist" == chain[0].name  # judged before the text is read
    text, url = "a page of plain prose", "https://ads.spam.example/x"
    counts = {}
    assert rules.apply(chain, D(text, url, url), counts) == Drop("url_blocklist", "ads.spam.example", "spam.example")
    assert counts["url_blocklist"] == [1, len(text)] and "min_chars" not in counts
    assert rules.apply(chain, D(text, "a.jsonl:1"), {}) == text  # no URL (not a WARC record): not judged
    kept = D("kept  \r\n", "https://fine.example/", "https://fine.example/")
    assert rules.apply(chain, kept, {}) == "kept" == kept.text  # a transform's text is the document's
    assert rules.build(cfg) == rules.build(Clean(min_chars=1))  # no list given: no blocklist rule
