"""Text from the data put on a page as text, never as markup: what the evidence card, the Prefect
artifact and the mix-search report quote of documents, file names, URLs and source names.

Those pages are markdown that a renderer turns into HTML (the Prefect UI's two versions, GitHub,
an editor's preview), and some renderers pass raw HTML through: a file named `<img src=...>` would
load an image, a document id holding `![x](http://...)` would fetch one, `__init__` would turn
bold, a `|` would split a table cell. So every string that comes from the data goes through one of:

- `text(s)`: inline text. `&`, `<`, `>` become entities (no tag, no autolink); the characters that
  open an inline construct are backslash-escaped (`\\`, backticks, `*`, `_` but between two letters,
  `~`, `[`, `]`, `|`, `#`, `@`, the `:` of `://` and the `.` of `www.`: no emphasis, code span,
  link, image or autolink forms, and a table cell never splits); a list marker at its start is
  escaped too, and a line break is a space (it would end a table row or a list item).
- `code(s, cell=False)`: a code span, shown literally in monospace (file names, ids, URLs): fenced by
  more backticks than any run inside it; `cell=True` escapes `|` as GFM tables want, even inside a
  code span (outside a table that escape would show).
- `block(s)`: a fenced code block whose fence is longer than any backtick run in `s`.

tests/unit/test_markup.py checks what each makes; tests/integration/test_prefect_ui.py opens a card
that quotes hostile names in both Prefect UIs and finds them shown as text.
"""

from __future__ import annotations

import re

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_INLINE = set("\\`*_~[]|#@")  # each opens (or escapes) an inline construct, or splits a table cell
_LEADING = re.compile(r"\s*(?:[-+]|\d{1,9}[.)])(?=\s|$)")  # at a line's start: a list item
_BREAKS = re.compile(r"\r\n|[\r\n\t\v\f\x85\u2028\u2029]")


def _one_line(s: object) -> str:
    return _BREAKS.sub(" ", str(s))


def _inside_word(s: str, i: int) -> bool:
    """Whether s[i] stands between two letters or digits: an `_` there never opens or closes
    emphasis (CommonMark), so `max_chars` stays as it is written."""
    return 0 < i < len(s) - 1 and s[i - 1].isalnum() and s[i + 1].isalnum()


def _autolink(s: str, i: int) -> bool:
    """Whether s[i] is the `:` of `scheme://` or the `.` of `www.`: GFM's bare autolinks."""
    return (s[i] == ":" and s.startswith("//", i + 1)) or (s[i] == "." and s[max(0, i - 3):i].lower() == "www")


def text(s: object) -> str:
    """`s` as inline text: nothing in it is markup."""
    s = _one_line(s)
    out = []
    for i, c in enumerate(s):
        if c in _ENTITIES:
            out.append(_ENTITIES[c])
        elif c in _INLINE and not (c == "_" and _inside_word(s, i)) or _autolink(s, i):
            out.append("\\" + c)
        else:
            out.append(c)
    line = "".join(out)
    m = _LEADING.match(line)
    return line[:m.end() - 1] + "\\" + line[m.end() - 1:] if m else line


def code(s: object, cell: bool = False) -> str:
    """`s` as a code span, literal whatever it holds; `cell`: it stands in a table cell."""
    s = _one_line(s)
    if not s:
        return ""
    if cell:
        s = s.replace("|", "\\|")
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s[0] == "`" or s[-1] == "`" or (s[0] == " " and s[-1] == " " and s.strip()) else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def block(s: str, info: str = "") -> list[str]:
    """`s` as the lines of a fenced code block (a fence longer than any backtick run in it)."""
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    return [fence + info, *s.splitlines(), fence]
