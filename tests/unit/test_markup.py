"""Text from the data on a page shows as text (shardline/core/markup.py, issue 52 point 4): rendered
by a real CommonMark renderer with GFM tables and raw HTML on (markdown-it-py, which rich brings),
a hostile name makes no element, and the page's text is the name, character for character.
tests/integration/test_prefect_ui.py opens such a card in both Prefect UIs."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

from shardline.core.markup import block, code, text
from shardline.results import mixreport

HOSTILE = ['<script>document.body.dataset.pwned=1</script>', '<img src="http://127.0.0.1:9/x.png" onerror="alert(1)">',
           '<b id="pwn">bold</b>', "![x](http://127.0.0.1:9/evil.png)", "[click](http://127.0.0.1:9/l)",
           "xmlrpc/__init__.py:1", "*star* _under_ ~~gone~~", "a|b `tick` ``two``", "&amp; &lt;b&gt; &#60;",
           "# heading", "- item", "1. first", "back\\slash \\* \\[", "<http://127.0.0.1:9/auto>", "line\nbreak\r\nhere",
           "`", "``lead", "trail`", " spaced ", "x@y.example", "www.example.com"]
TAGS = re.compile(r"<(?!/?(?:p|ul|li|table|thead|tbody|tr|th|td|code|pre)>)[^>]*>")  # any element but the frame's


def render(markdown: str) -> str:
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(markdown)


def shown(rendered: str) -> str:
    """The page's text: the frame's tags dropped, entities decoded."""
    return html.unescape(re.sub(r"</?[a-z]+>", "", rendered)).strip()


@pytest.mark.parametrize("s", HOSTILE)
def test_text_and_code_make_no_markup_and_show_the_string_itself(s):
    one_line = re.sub(r"\r\n|\n", " ", s)  # a line break would end a list item or a table row
    out = render(f"before {text(s)} after")
    assert not TAGS.search(out) and shown(out) == f"before {one_line} after", out
    out = render(f"before {code(s)} after")
    assert not TAGS.search(out) and html.unescape(re.search(r"<code>(.*)</code>", out).group(1)) == one_line, out
    row = render(f"| a | b |\n|---|---|\n| {text(s)} | {code(s, cell=True)} |\n")
    cells = re.findall(r"<td>(.*?)</td>", row)
    assert not TAGS.search(row) and len(cells) == 2, row  # one row, two cells: no `|` split one
    assert html.unescape(cells[0]) == one_line.strip()  # a cell is trimmed
    assert html.unescape(re.fullmatch(r"<code>(.*)</code>", cells[1]).group(1)) == one_line


def test_a_list_item_or_heading_at_the_start_stays_text_and_intraword_underscores_stay_as_written():
    for s in ("- item", "+ plus", "3. third", "4) fourth", "# heading"):
        out = render(f"- {text(s)}\n")
        assert out.count("<li>") == 1 and "<h1>" not in out and shown(out) == s, out
    assert text("max_line_chars") == "max_line_chars" and text("__init__") == r"\_\_init\_\_"
    assert text("1.5 MB") == "1.5 MB" and text("http://x") == r"http\://x"


def test_a_block_is_fenced_past_any_backticks_inside_it():
    body = "files\n```\n<b>x</b> ````\n"
    out = render("\n".join(block(body)) + "\n")
    assert out == f"<pre><code>{html.escape(body, quote=False)}</code></pre>\n"


def test_the_mix_search_report_quotes_source_names_as_text():
    names = ["_web_", "code"]
    r = {"current_mix": {n: 0.5 for n in names}, "target_weights": {n: 0.5 for n in names}, "target": "sources",
         "metric": "loss", "headline": "recommended mix _web_ 0.5000, code 0.5000", "proxies": [], "rounds": None,
         "recommended": {"mix": {n: 0.5 for n in names}, "source": "proxy", "name": "mix0-ab-1"},
         "region": "the proxies' convex hull", "optimum": {"mix": {n: 0.5 for n in names},
                                                           "predicted_target": [1, 0.9, 1.1],
                                                           "predicted": {n: [1, 0.9, 1.1] for n in names}},
         "gain": 0.0, "error": 0.1, "beyond_error": False,
         "best_proxy": {"name": "mix0-ab-1", "mix": {n: 0.5 for n in names}, "measured_target": 1.0,
                        "measured": {n: 1.0 for n in names}, "predicted_target": [1, 0.9, 1.1],
                        "predicted": {n: [1, 0.9, 1.1] for n in names}},
         "current": {"predicted_target": [1, 0.9, 1.1], "predicted": {n: [1, 0.9, 1.1] for n in names}},
         "validation": None, "fit": {"law": "regmix", "params": {n: {"a": 1.0} for n in names}, "interval": "x",
                                     "laws": {"regmix": {"form": "f", "loo_target_rmse": 0.1, "loo_target_mape": 0.01,
                                                         "loo_rmse": [0.1, 0.1]}}}}
    out = render(mixreport.markdown(r, "mix_search.png"))
    assert "<em>" not in out and "_web_" in shown(out)
