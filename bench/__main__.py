"""Every benchmark in one run, written to bench/REPORT.md.

    python -m bench [--quick]

Runs bench.tokenize, bench.loader, bench.train (which includes the checkpoint benchmark),
bench.loss (the chunked cross-entropy at a 128k vocabulary: peak memory and speed),
bench.trackers (a default run with TensorBoard, W&B and MLflow on, against none),
bench.pipeline (no-op and full `dvc repro` vs the Prefect pipeline flow, on the default line
with 10 training steps), bench.scale (the clean stage with FineWeb's rules on 2 Dask workers vs 1, and
the local pool; the loader streaming
from a local S3 server vs local disk), bench.sharded (sharded vs full checkpoints under FSDP:
peak memory and save time per rank) and bench.data (the data stages as processes on a generated
1 GB and 4 GB JSONL corpus; two interleaved runs per size, ~17 minutes here), bench.curation (the clean
stage with FineWeb's rule sets, and near-dedup, on the 1 GB corpus; ~10 minutes here; its 4 GB run is
`python -m bench.curation`), bench.compare (`shardline diff` of the README's main run and its experiment,
and `explain --step`, on a fresh clone), bench.soak (50,000 steps with eval, checkpoints, retention and every
tracker: memory, open files, step time and disk watched, a kill near the end resumed exactly; ~25 minutes
here), bench.cleanprofile (where a clean part's seconds go, this tree and the
engine before the rules were compiled) and bench.gpu (the CUDA
paths: at most 8 minutes on one GPU; says it has not run where there is none) and bench.chaos (40 SIGKILLs
on each of two seeds: every kill point fired, nothing differing) one after another, each in its own
process, and writes their full output plus the headline lines to bench/REPORT.md. Every figure
there is judged at the low end of its interleaved repeats, with their spread, and is a same-run
ratio against its baseline (raw HF/tiktoken, raw memmap, a bare torch loop, a bare torch.save,
dvc repro). LitData's loader is not compared: installing it here would replace the CPU torch build.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [("tokenize", []), ("loader", []), ("train", []), ("loss", []), ("trackers", []), ("pipeline", []), ("scale", []),
           ("sharded", []), ("mixsearch", []), ("compare", []), ("soak", []),
           ("data", ["--no-sources"]), ("sources", []), ("curation", ["--no-scale"]),
           ("cleanprofile", []), ("gpu", []),
           # the chaos suite on two seeds: each a different plan of 40 kills (name@seed: one section each)
           ("chaos@1", ["--kills", "40", "--seed", "1"]), ("chaos@2", ["--kills", "40", "--seed", "2"])]
HEADLINE = re.compile(r"^\s*ratio |\(target|\((full|no-op)\)|identical: |^summary: |parts phase: |^\s+[1-9]\. .*\(info\)$"
                      r"|^chaos: |^named points never fired|^\s*workers \(c\)/\(a\)|^fixed cost per proxy")


def _kept(report: Path) -> dict[str, str]:
    """The sections of an existing report, by bench name (for --only)."""
    if not report.exists():
        return {}
    text = report.read_text()
    old = re.search(r"Generated (\d{4}-\d\d-\d\d \d\d:\d\d UTC)", text)  # a report from before dated sections
    out = {}
    for s in text.split("\n## bench.")[1:]:
        head, rest = s.split("\n", 1)
        if old and "UTC)" not in head:
            head = head[:-1] + f", {old.group(1)})"
        out[head.split(" ", 1)[0]] = f"## bench.{head}\n{rest.rstrip()}\n"
    return out


def cpu() -> str:
    """The CPU's model and cores: sessions run on machines of one size but not always one model
    (an AVX-512/AMX Xeon ran the clean stage's rule sets ~2x faster than the machine before it), so each
    section says which it ran on."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    field = lambda name: next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith(name)), "")
    model, flags = field("model name") or platform.processor() or platform.machine(), field("flags").split()
    isa = "AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    return f"{model}{f' ({isa})' if isa else ''}, {os.cpu_count()} cores"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 repeats everywhere (the default is already 3-5)")
    ap.add_argument("--only", help="comma-separated benches to re-run (e.g. data,tokenize); the other sections "
                    "of bench/REPORT.md are kept as they are, each with its own date")
    args = ap.parse_args()
    names = [n for n, _ in BENCHES]
    only = args.only.split(",") if args.only else names
    if unknown := sorted(set(only) - set(names)):
        ap.error(f"--only: unknown bench(es) {', '.join(unknown)}; choose from {', '.join(names)}")
    report_path = HERE / "REPORT.md"
    sections = _kept(report_path) if args.only else {}
    for name, extra in BENCHES:
        if name not in only:
            continue
        module = name.split("@")[0]
        quick = ["--repeats", "3"] if args.quick and module not in ("data", "gpu", "chaos") else []  # data: its own 2
        cmd = [sys.executable, "-m", f"bench.{module}", *extra, *quick]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=HERE.parent, capture_output=True, text=True)
        took = time.perf_counter() - t0
        out = (r.stdout + (f"\n[stderr]\n{r.stderr[-3000:]}" if r.returncode else "")).rstrip()
        status = "ok" if r.returncode == 0 else f"FAILED (exit {r.returncode})"
        print(f"bench.{name}: {status} in {took:.0f}s", flush=True)
        when = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
        sections[name] = (f"## bench.{name} ({status}, {took:.0f} s, {when})\n\n`{' '.join(cmd[1:])}` on {cpu()}\n\n"
                          f"```\n{out}\n```\n")
    heads = [f"- **{name}**: {ln.strip()}" for name in names if name in sections
             for ln in sections[name].split("```")[1].splitlines() if HEADLINE.search(ln) and ln.strip()]
    report = ["# Shardline benchmark report\n",
              f"Generated by `python -m bench` on {platform.node() or 'this machine'} "
              f"({platform.processor() or platform.machine()}, Python {platform.python_version()}); each section "
              "gives when it ran. A small shared machine: read medians and same-run ratios, not absolute times.\n",
              "## Headlines\n", *heads, "", *(sections[n] for n in names if n in sections)]
    report_path.write_text("\n".join(report))
    print(f"wrote {report_path}")


if __name__ == "__main__":
    main()
