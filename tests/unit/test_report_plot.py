"""train.png as a reader sees it (issue 50): tokens/s was drawn in tab:orange, the colour the
second source's val loss takes, and only its axis label said what it was. Now every line of the
loss panel is in one legend, and tokens/s's colour is far from every source's."""

from __future__ import annotations

import matplotlib.colors as mcolors
import numpy as np
import pytest

from shardline.results.report import _figure


def rows(sources: list[str]) -> list[dict]:
    out = []
    for step in range(1, 21):
        r = {"step": step, "loss": 9.0 - step * 0.2, "tokens_per_s": 2000.0 + step, "step_s": 1.0}
        if step % 10 == 0:
            r["eval"] = {"total": {"loss": 5.0, "bpb": 1.5},
                         "sources": {n: {"loss": 5.0 + i, "bpb": 1.5 + i} for i, n in enumerate(sources)}}
        out.append(r)
    return out


@pytest.mark.parametrize("sources", [["code", "prose"], [f"s{i}" for i in range(12)]])
def test_tokens_per_s_is_in_the_legend_in_a_colour_no_source_has(sources):
    import matplotlib.pyplot as plt

    fig = _figure(rows(sources))
    try:
        loss_ax, throughput_ax, bpb_ax = fig.axes[0], fig.axes[2], fig.axes[1]
        legend = loss_ax.get_legend()  # one legend, over both axes
        assert [t.get_text() for t in legend.get_texts()] == (
            ["train loss"] + [f"val loss {n}" for n in sources] + ["tokens/s (right axis)"])
        (tps,) = throughput_ax.get_lines()
        rgb = np.array(mcolors.to_rgb(tps.get_color()))
        for line in loss_ax.get_lines()[1:] + bpb_ax.get_lines():
            assert np.linalg.norm(rgb - mcolors.to_rgb(line.get_color())) > 0.3, line.get_label()
        # a source is one colour in both panels
        assert [ln.get_color() for ln in loss_ax.get_lines()[1:]] == [ln.get_color() for ln in bpb_ax.get_lines()]
    finally:
        plt.close(fig)
