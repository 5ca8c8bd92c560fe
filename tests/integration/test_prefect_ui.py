"""The evidence card in the Prefect UI, as a person sees it: a real Prefect server serving its UI
on 127.0.0.1, the card published by the function the pipeline flow publishes it with, and the
artifact's page opened in a headless browser (harness/browser.py) in both of the UI's versions
(v2, the default, at /v2; v1 at /). The plot must have loaded: a link the UI cannot reach shows
a broken image, which the browser reports as naturalWidth 0. And nothing from the data reaches the
page as markup: a real line on files named with HTML and a markdown image link shows their names
as text (issue 52, point 4). About 60 s."""

from __future__ import annotations

import shutil
import struct
import sys

import pytest

from shardline.orchestration.flows.server import local_server
from harness import browser
from shardline.core.layout import Layout
from tests.conftest import BIN, REPO, make_project, run, stdlib_files

pytestmark = pytest.mark.slow
ALT = "train and val loss, tokens/s, val bits per byte"  # the report stage's alt text of its plot
PUBLISH = "import sys; from pathlib import Path; from shardline.orchestration.flows.pipeline import publish_card; print(publish_card(Path(sys.argv[1])))"


@pytest.fixture
def card(tmp_path) -> Layout:
    """A project's card as the report stage leaves it: evidence.md linking train.png beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layout = Layout.at(tmp_path / "project")
    layout.reports.mkdir(parents=True)
    fig, ax = plt.subplots(figsize=(9, 3), dpi=100)
    ax.plot([3.1, 2.4, 2.0, 1.9], label="train loss")
    fig.savefig(layout.plot, format="png")
    plt.close(fig)
    layout.evidence.write_text(f"# Shardline evidence card\n\n## Training\n\n![{ALT}]({layout.plot.name})\n")
    return layout


def png_size(path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    return struct.unpack(">II", path.read_bytes()[16:24])


@pytest.mark.timeout(120)
def test_the_evidence_cards_plot_loads_in_the_prefect_ui(card, tmp_path):
    if why := browser.missing():
        pytest.skip(why)
    on_disk = card.evidence.read_text()
    with local_server(tmp_path / "prefect-home", ui=True) as env:
        artifact = run([sys.executable, "-c", PUBLISH, str(card.evidence)], REPO, env=env).stdout.split()[-1]
        base = env["PREFECT_API_URL"].removesuffix("/api")
        for ui in ("/v2", ""):
            shot = tmp_path / f"artifact{ui.replace('/', '-') or '-v1'}.png"  # what a person sees, kept for a failure
            page = browser.images(f"{base}{ui}/artifacts/artifact/{artifact}", f'img[alt="{ALT}"]', screenshot=shot)
            assert page["ready"], f"UI {ui or '/'}: no plot on the artifact's page ({shot}):\n{page['text'][:800]}"
            [img] = page["images"]
            assert (img["naturalWidth"], img["naturalHeight"]) == png_size(card.plot), \
                f"UI {ui or '/'}: the plot did not load: {img} ({shot})"
    assert card.evidence.read_text() == on_disk  # the card on disk keeps its link: a small, diffable file


# file names a person could give their data: HTML, a script's effect, a markdown image and link, emphasis
HOSTILE = ['<b id="pwn">bold<b>', '<img src="x" onerror="document.body.dataset.pwned=1">',
           "![x](train.png) [click](y)", "__init__ *star* a|b"]
MARKUP = ("#pwn", "body[data-pwned]", "img[alt='x']", "a[href='y']", "strong", "em")  # what they would have made


@pytest.fixture
def hostile_card(tmp_path) -> tuple[Layout, list[str]]:
    """A real line (download to report) on txt files named HOSTILE, beside a jsonl source with an
    unreadable record: the card quotes the names (the highest-loss step's documents, the quarantined
    record), and so the artifact does."""
    code, notes = tmp_path / "in" / "code", tmp_path / "in" / "notes"
    code.mkdir(parents=True)
    notes.mkdir()
    for name, f in zip(HOSTILE, stdlib_files(len(HOSTILE))):
        shutil.copy(f, code / f"{name}.py")
    bad = f"{HOSTILE[1]}.jsonl"
    kept = "".join(f'{{"text": "note {i}: {"plain words of a note " * (20 + i)}"}}\n' for i in range(40))
    (notes / bad).write_text(kept + '{"text": <script>\n')  # the last record: unreadable, quarantined
    params, layout = make_project(tmp_path / "project", [{"name": "code", "uri": str(code), "format": "txt"},
                                                         {"name": "notes", "uri": str(notes), "format": "jsonl"}],
                                  clean={"part_mb": 0.05, "min_chars": 16, "max_bad_fraction": 0.9},
                                  train={"steps": 24, "checkpoint_every": 24, "warmup_steps": 1, "threads": 1},
                                  eval={"every": 0})
    for stage in ("download", "clean", "tokenize", "shard", "train", "report"):
        run([str(BIN / "shardline"), "stage", stage], layout.root)
    return layout, [f"{n}.py" for n in HOSTILE] + [bad]


@pytest.mark.timeout(300)
def test_names_from_the_data_show_as_text_on_the_card_in_the_prefect_ui(hostile_card, tmp_path):
    if why := browser.missing():
        pytest.skip(why)
    layout, names = hostile_card
    with local_server(tmp_path / "prefect-home", ui=True) as env:
        artifact = run([sys.executable, "-c", PUBLISH, str(layout.evidence)], REPO, env=env).stdout.split()[-1]
        base = env["PREFECT_API_URL"].removesuffix("/api")
        for ui in ("/v2", ""):
            shot = tmp_path / f"hostile{ui.replace('/', '-') or '-v1'}.png"
            page = browser.images(f"{base}{ui}/artifacts/artifact/{artifact}", f'img[alt="{ALT}"]', screenshot=shot,
                                  count=MARKUP)
            assert page["ready"], f"UI {ui or '/'}: no plot on the artifact's page ({shot}):\n{page['text'][:800]}"
            assert page["counts"] == dict.fromkeys(MARKUP, 0), f"UI {ui or '/'}: markup from the data ({shot})"
            shown = [n for n in names if n in page["text"]]
            assert names[-1] in shown and len(shown) >= 2, f"UI {ui or '/'}: {shown} of {names} shown ({shot})"
