"""Every benchmark in one run, written to bench/REPORT.md.

    python -m bench [--quick]

Runs bench.tokenize, bench.loader, bench.train (which includes the checkpoint benchmark),
bench.pipeline (no-op and full `dvc repro` vs the Prefect pipeline flow, on the default line
with 10 training steps), bench.scale (tokenize on 2 Dask workers vs 1; the loader streaming
from a local S3 server vs local disk) and bench.data (the data stages as processes on a generated
1 GB and 4 GB JSONL corpus; ~15 minutes, one run per size) one after another, each in its own
process, and writes their full output plus the headline lines to bench/REPORT.md. Every figure
there but bench.data's is a median of >= 3 interleaved repeats with min-max, and a same-run
ratio against its baseline (raw HF/tiktoken, raw memmap, a bare torch loop, a bare torch.save,
dvc repro). LitData's loader is not compared: installing it here would replace the CPU torch build.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [("tokenize", []), ("loader", []), ("train", []), ("pipeline", []), ("scale", []), ("data", [])]
HEADLINE = re.compile(r"^\s*ratio |\(target|\((full|no-op)\)|identical: |^summary: |parts phase: ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 repeats everywhere (the default is already 3-5)")
    args = ap.parse_args()
    sections, heads = [], []
    for name, extra in BENCHES:
        quick = ["--repeats", "3"] if args.quick and name != "data" else []  # data: 1 run per size already
        cmd = [sys.executable, "-m", f"bench.{name}", *extra, *quick]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=HERE.parent, capture_output=True, text=True)
        took = time.perf_counter() - t0
        out = (r.stdout + (f"\n[stderr]\n{r.stderr[-3000:]}" if r.returncode else "")).rstrip()
        status = "ok" if r.returncode == 0 else f"FAILED (exit {r.returncode})"
        print(f"bench.{name}: {status} in {took:.0f}s", flush=True)
        heads += [f"- **{name}**: {ln.strip()}" for ln in out.splitlines() if HEADLINE.search(ln) and ln.strip()]
        sections.append(f"## bench.{name} ({status}, {took:.0f} s)\n\n`{' '.join(cmd[1:])}`\n\n```\n{out}\n```\n")
    report = ["# Shardline benchmark report\n",
              f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `python -m bench` on "
              f"{platform.node() or 'this machine'} ({platform.processor() or platform.machine()}, "
              f"Python {platform.python_version()}). A small shared machine: read medians and same-run ratios, "
              "not absolute times.\n", "## Headlines\n", *heads, "", *sections]
    (HERE / "REPORT.md").write_text("\n".join(report))
    print(f"wrote {HERE / 'REPORT.md'}")


if __name__ == "__main__":
    main()
