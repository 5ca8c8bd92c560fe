"""The evidence card in the Prefect UI, as a person sees it: a real Prefect server serving its UI
on 127.0.0.1, the card published by the function the pipeline flow publishes it with, and the
artifact's page opened in a headless browser (harness/browser.py) in both of the UI's versions
(v2, the default, at /v2; v1 at /). The plot must have loaded: a link the UI cannot reach shows
a broken image, which the browser reports as naturalWidth 0. About 25 s."""

from __future__ import annotations

import struct
import sys

import pytest

from shardline.orchestration.flows.server import local_server
from harness import browser
from shardline.core.layout import Layout
from tests.conftest import REPO, run

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
