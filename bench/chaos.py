"""Chaos suite: the whole line under SIGKILLs in every stage ends identical to an unkilled run.

    python -m bench.chaos [--seed N] [--kills 40] [--corpus stdlib|shared] [--storms-only | --no-storms]

The full suite over the driver in harness/chaos_driver.py (what it kills, where, and what passing means
are said there; tests/integration/test_chaos.py is the CI version): every named kill point, 40
kills by default, the wiki corpus over a loopback HTTP server that also cuts bodies short. Prints
a table of kills per point; the same --seed replays the same plan (without one, a random seed is
drawn and printed). It fails unless every named point fired at least once and --kills kills
landed at named points (timed kills come on top).

Then the storms on the same seed (harness/storms.py: push-shards, training on streamed shards,
training to a checkpoint bucket, the staged clean, each SIGKILLed at a seeded random request while
30% of its requests fail, run again until it exits 0): a table of each path's kill point,
requests, faults by kind and re-runs; it fails unless every path ends identical to its
fault-free run. `--storms-only` runs just those (about two minutes).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from harness import chaoscheck as check
from harness.chaos_driver import POINTS, REPO, plan, run_chaos, small_params

WIKI = "wikitext2-valid.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=None,
                    help="the plan's and the storms' seed (default: a random one, printed)")
    ap.add_argument("--kills", type=int, default=40)
    ap.add_argument("--corpus", choices=["stdlib", "shared"], default="shared")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--storms-only", action="store_true", help="only the kills in fault storms on object stores")
    which.add_argument("--no-storms", action="store_true", help="only the line's kills")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(10**6)
    ok = args.storms_only or line(args)
    if not args.no_storms:
        ok = storms(args.seed) and ok
    sys.exit(0 if ok else 1)


def storms(seed: int) -> bool:
    from harness.s3 import moto_s3
    from harness.storms import PATHS, RATE, run_storms, table

    t0 = time.perf_counter()
    print(f"\nchaos storms: seed {seed}, {', '.join(PATHS)}: each SIGKILLed at a random request while p = {RATE} "
          "of the requests fail, run again until it exits 0, against its fault-free run", flush=True)
    with tempfile.TemporaryDirectory() as tmp, moto_s3() as env:
        rows = run_storms(Path(tmp), seed, env)
    print(table(rows))
    for r in rows:
        print(("" if r.ok else "FAIL ") + r.summary())
    ok = all(r.ok for r in rows)
    print(f"\nchaos: storms {'PASS' if ok else 'FAIL'} ({sum(r.ok for r in rows)} of {len(rows)} paths identical, "
          f"seed {seed}, {time.perf_counter() - t0:.0f}s)")
    return ok


def line(args) -> bool:
    from shardline.orchestration.flows.server import local_server
    from harness.servers import FlakyServer

    t0 = time.perf_counter()
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
    return ok


if __name__ == "__main__":
    main()
