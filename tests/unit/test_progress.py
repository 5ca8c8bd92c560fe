"""A data stage's progress line as a terminal shows it (issue 50): the download's ran past its
total (`12.6/12.1 MB`: builtin://pydoc-topics' bytes were not in it) and a source's line was
written onto the half-drawn bar."""

from __future__ import annotations

import io
import re
import sys

from shardline.core.progress import Progress
from shardline.data import download
from harness.projects import stdlib_dir
from tests.conftest import make_project


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def screen(out: str) -> list[str]:
    """What a terminal keeps of `out`: per line, the text after its last carriage return and
    clear-to-end (a bar redrawn in place leaves only its last drawing)."""
    return [re.split(r"\r(?:\x1b\[K)?", ln)[-1].replace("\x1b[K", "") for ln in out.split("\n")]


def test_the_download_line_never_runs_past_its_total_and_a_sources_line_is_a_line_of_its_own(tmp_path, monkeypatch):
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)  # as the `shardline` command's log: stderr, where the bar is
    say = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
    code = stdlib_dir(tmp_path / "code", 6)
    params, layout = make_project(tmp_path / "proj", [
        {"name": "code", "uri": str(code), "format": "txt"},
        {"name": "prose", "uri": "builtin://pydoc-topics", "format": "jsonl", "text_field": "text"}])
    download.run(params, layout, say, mapper=lambda fn, xs: [fn(x) for x in xs])  # code first, then prose
    out = tty.getvalue()
    shown = [(float(a), float(b)) for a, b in re.findall(r"(\d+\.\d)/(\d+\.\d) MB", out)]
    total = sum(f.stat().st_size for f in (layout.raw / "code" / "files").rglob("*") if f.is_file()) \
        + (layout.raw / "prose" / "files" / "topics.jsonl").stat().st_size
    assert shown and all(done <= of == round(total / 1e6, 1) for done, of in shown), shown
    lines = screen(out)
    said = [ln for ln in lines if "download: code:" in ln or "download: prose:" in ln]
    # each a line of its own: not glued after the bar drawn before it
    assert [ln.split(" file(s)")[0] for ln in said] == ["download: code: 6", "download: prose: 1"], said
    assert lines[-3].startswith("[" + "#" * 20 + "] download: 7/7 files") and lines[-2] == said[-1]


def test_say_clears_a_drawn_bar_and_draws_it_again_below_its_line():
    tty = Tty()
    p = Progress("clean", 4, 4 * 10**6, lambda m: tty.write(m + "\n"), stream=tty)
    p.advance(10**6)
    p.say("warning: a damaged file")
    assert screen(tty.getvalue()) == ["warning: a damaged file", screen(tty.getvalue())[1]]
    assert screen(tty.getvalue())[1].startswith("[#####               ] clean: 1/4 parts, 1.0/4.0 MB")
