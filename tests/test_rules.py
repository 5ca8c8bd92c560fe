from shardline.data import rules
from shardline.core.config import Clean


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
    assert rules.Normalize("NFC")("e\u0301") == "\u00e9"
    assert rules.Normalize("NFKC")("\ufb01") == "fi"
    assert rules.strip_control("a\x00b\x1bc\td\ne\x85") == "ab" + "c\td\ne"
    assert rules.whitespace("\n\nx  \r\ny\t\n\n\n\n\n\nz  \n") == "x\ny\n\n\nz"
    assert rules.whitespace("    indented\n") == "    indented"


def test_filters():
    assert rules.MinChars(3)("ab") is None and rules.MinChars(2)("ab") == "ab"
    assert rules.MaxChars(2)("abc") is None
    assert rules.MaxLineChars(5)("abc\n" + "x" * 6) is None
    assert rules.RepeatedLines(0.3)("a\nb\na\na\n") is None        # 2 of 4 lines repeat
    assert rules.RepeatedLines(0.3)("a\nb\nc\na\n\n\n") == "a\nb\nc\na\n\n\n"  # 1 of 4
    assert rules.AlphaFraction(0.5)("1234 5678 ab") is None
    assert rules.AlphaFraction(0.5)("abcd 12") is not None
    assert rules.ReplacementFraction(0.1)("ab\ufffd") is None


def test_apply_counts_docs_and_bytes_per_rule():
    out, counts = run_rules("  hello   \r\nworld\x00", min_chars=1)
    assert out == "  hello\nworld"
    assert counts["whitespace"] == [0, 4]  # three trailing spaces and the CR
    assert counts["strip_control"] == [0, 1]
    out, counts = run_rules("tiny", min_chars=10)
    assert out is None and counts["min_chars"] == [1, 4]
    assert "max_chars" not in counts  # rules after a drop never see the document
