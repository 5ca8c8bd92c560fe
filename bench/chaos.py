"""Chaos suite: the whole line under SIGKILLs in every stage ends identical to an unkilled run.

    python -m bench.chaos [--seed N] [--kills 40] [--corpus stdlib|shared]

Builds a reference project with one uninterrupted `dvc repro`, then runs a second project from
scratch through a seeded plan of kills that follows the line through every stage, at the named
kill points of shardline.core.chaos (a real SIGKILL of the process that holds the work, at an exact
moment): inside writes (an HTTP body into its .part while the loopback server also cuts bodies
short, a clean part's parquet, a token part's ids, a shard's bytes), after units of work (a file,
a part, a selection, a shard, a step, a held-out batch, a checkpoint's files, a retention), and
in the orchestrators (`dvc repro` killed with its stage done but not recorded; the pipeline flow
between DVC's cache write and dvc.lock; the flow, and under `shardline serve` the runner, between
two stage task runs), plus SIGKILLs of the whole process group at random times. Every kill is
followed by a resume through an entry point a user types, in turn `dvc repro`, `shardline
pipeline` and the Prefect deployment (`shardline serve` + `prefect deployment run`; the runner
gets the kill spec in its environment, which its flow runs inherit).

Pass (harness/chaoscheck.py): every file under data/ identical to the reference's (bytes or, for
JSON holding timings, all but the VARYING fields; the evidence card but its timing lines; not
the loss plot, which draws tokens/s), the same retained checkpoints, no temp, .part or .next
file left, no file under data/ that git would offer to commit, per-step losses, consumed global-batch hashes and final weights equal (CPU), `dvc status`
clean, and no resume redid finished work: no file, part, shard or checkpoint made twice, and
training went on from the newest checkpoint each time. Prints a table of kills per point; the
same --seed replays the same plan (without one, a random seed is drawn and printed). It fails
unless every named point fired at least once (it prints those that never did) and --kills kills
landed at named points (timed kills come on top).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from harness import chaoscheck as check
from harness.chaos import POINTS, REPO, plan, run_chaos, small_params

WIKI = "wikitext2-valid.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=None, help="the plan's seed (default: a random one, printed)")
    ap.add_argument("--kills", type=int, default=40)
    ap.add_argument("--corpus", choices=["stdlib", "shared"], default="shared")
    args = ap.parse_args()
    from flows.server import local_server
    from harness.servers import FlakyServer

    t0 = time.perf_counter()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(10**6)
    corpus = REPO.parent / "shared" / "corpora" / WIKI
    http = args.corpus == "shared" and corpus.exists()
    points = tuple(p for p in POINTS if http or p != "download.body")  # an HTTP body needs the HTTP source
    # half the responses are cut short by the server, at a random byte (seeded by the plan's seed)
    server = FlakyServer({"/" + WIKI: corpus.read_bytes()} if http else {}, seed=args.seed, p_drop=0.5)
    with tempfile.TemporaryDirectory() as tmp, local_server(Path(tmp) / "prefect") as penv, server:
        print(f"chaos: seed {args.seed}, plan of {len(plan(args.seed, args.kills, points))} kill specs, "
              f"corpus {args.corpus}{', wiki over HTTP from a server that cuts bodies' if http else ''}")
        params = small_params(args.corpus, server.url("/" + WIKI) if http else None)
        res = run_chaos(Path(tmp), params, seed=args.seed, kills=args.kills, prefect_env=penv, points=points)
        http_summary = (f"HTTP: {len(server.ranges)} requests for {WIKI} (both projects): the first of each, "
                        f"{sum(r is not None for r in server.ranges)} that continued a .part (Range), "
                        f"{sum(r is None for r in server.ranges) - 2} that started over; the server cut "
                        f"{len(server.cuts)} bodies short (after {', '.join(map(str, server.cuts))} bytes)")
    print(f"\n{'stage':14} {'kill point':18} {'outcome':10} count")
    for (stage, where, outcome), n in sorted(res.pop("table").items()):
        print(f"{stage:14} {where:18} {outcome:10} {n}")
    never, detail, redone = res.pop("never fired"), res.pop("detail"), res.pop("steps redone")
    ok = res["kills"] >= args.kills and not never and all(v for k, v in res.items() if k != "kills")
    for k, v in res.items():
        print(f"{k}: {v}")
    if http:
        print(http_summary)
    print(f"training steps redone after kills: {redone} (each kill redoes the steps since the newest checkpoint)")
    print(f"named points never fired: {', '.join(never) if never else 'none'} (of {', '.join(points)})")
    print(f"compared all but these fields (they differ by design): {', '.join(sorted(check.VARYING))}; the evidence "
          f"card but lines matching {check.CARD_VARYING.pattern!r}; not the loss plot")
    for k, v in detail.items():
        if v:
            print(f"{k}: {v[:20]}")
    print(f"\nchaos: {'PASS' if ok else 'FAIL'} ({res['kills']} kills, {time.perf_counter() - t0:.0f}s)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
