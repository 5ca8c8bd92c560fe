"""bench/measure.py, the helpers every benchmark measures with, on a real child process: what
bench.data's stage table and bench.curation's peak-RSS targets read is what the child did."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.measure import med_range, status_kb
from tests.conftest import REPO


def test_run_timed_reads_a_real_childs_exit_peak_rss_and_time(tmp_path):
    # 256 MiB touched (bytes of "x", not a lazy zero page), then exit 3, a line on each stream
    code = "import sys; b = b'x' * (256 * 2**20); print('out'); print('err', file=sys.stderr); sys.exit(3)"
    # timed from a fresh small process, as a benchmark times its stages: until exec the child is its
    # parent, whose resident pages count in the child's peak (a pytest worker past 1.7 GB: CI, stop 47)
    timer = ("import json, sys; from pathlib import Path; from bench.measure import run_timed; "
             "print(json.dumps(run_timed(json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[2]) / 'child.log')))")
    got = subprocess.run([sys.executable, "-c", timer, json.dumps([sys.executable, "-c", code]), str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True, check=True)
    r = json.loads(got.stdout)
    assert r["returncode"] == 3
    assert 256 <= r["rss"] < 1024, r  # MiB: the child's own peak, not this process's
    assert r["wall"] > 0 and r["cpu"] > 0
    assert sorted((tmp_path / "child.log").read_text().split()) == ["err", "out"]  # both streams, either order


def test_status_kb_reads_this_process():
    assert 0 < status_kb("VmRSS") <= status_kb("VmHWM")


def test_med_range_shows_the_median_then_min_and_max():
    assert med_range([3.25, 1.5, 2.0], ".2f", unit=" s", width=7, gap="   ") == "   2.00 s   (1.50 - 3.25)"
    assert med_range([1.2345, 2.0, 1.0], ",.1f", 1e3, " ms", width=10, gap="  ") == \
        "   1,234.5 ms  (1,000.0 - 2,000.0)"
