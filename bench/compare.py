"""Did the change matter, how fast: `shardline diff` between the README's main run and its
experiment, and `shardline explain --step` at the first, middle and last step, on a fresh clone.

    python -m bench.compare [--repeats 3]

A fresh clone of this repository at HEAD (git clone, as a user's), then the README's commands: the
main run (`dvc repro`), its commit, the experiment (`dvc exp run -S mix.code=0.6 -S mix.prose=0.4`).
Then, timed as whole processes: `shardline diff HEAD <experiment>` once cold (its two runs' outputs
linked from DVC's cache for the first time) and --repeats times warm, and `shardline explain --step
N` --repeats times at each step. Targets (issue 49): diff under 10 s, explain under 1 s, at the worst
repeat. It also prints the diff itself, then records two replicates of the main run a seed apart
(train.seed, loader.seed) and prints the diff of the seeds and the first diff again, now with the
seeds' noise in its intervals: docs/evaluation.md's worked example is this output.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import med_range
from bench.verdict import Targets

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EXPERIMENT = ["-S", "mix.code=0.6", "-S", "mix.prose=0.4"]
SEEDS = [("seed7", "train.seed=7"), ("lseed7", "loader.seed=7")]


def sh(cmd: list[str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return dt, r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    dvc, sl = str(BIN / "dvc"), str(BIN / "shardline")
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        root = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(REPO), str(root)], check=True)
        dt, _ = sh([dvc, "repro"], root)
        print(f"main run (dvc repro): {dt:.0f} s", flush=True)
        sh(["git", "add", "-A"], root)
        sh(["git", "commit", "-qm", "trained"], root)
        dt, _ = sh([dvc, "exp", "run", "-n", "mix", *EXPERIMENT], root)
        print(f"experiment (dvc exp run {' '.join(EXPERIMENT)}): {dt:.0f} s", flush=True)
        cold, text = sh([sl, "diff", "HEAD", "mix"], root)
        warm = [sh([sl, "diff", "HEAD", "mix"], root)[0] for _ in range(args.repeats)]
        print("\n$ shardline diff HEAD mix\n" + text, flush=True)
        steps = {}
        for step in (1, 75, 150):
            steps[step] = [sh([sl, "explain", "--step", str(step)], root)[0] for _ in range(args.repeats)]
        print("$ shardline explain --step 150 (first rows)\n" + "\n".join(sh([sl, "explain", "--step", "150"], root)[1]
                                                                          .splitlines()[:4]) + "\n", flush=True)
        for name, setting in SEEDS:  # replicates of the main run: what a seed alone moves
            sh(["git", "checkout", "HEAD", "--", "params.yaml", "dvc.lock"], root)
            sh([dvc, "checkout", "-q"], root)
            dt, _ = sh([dvc, "exp", "run", "-n", name, "-S", setting], root)
            print(f"replicate (dvc exp run -n {name} -S {setting}): {dt:.0f} s", flush=True)
        print("$ shardline diff HEAD seed7\n" + sh([sl, "diff", "HEAD", "seed7"], root)[1], flush=True)
        seeded, text = sh([sl, "diff", "HEAD", "mix"], root)
        print(f"$ shardline diff HEAD mix (with the replicates recorded: {seeded:.2f} s)\n{text}", flush=True)
    print(f"shardline diff HEAD mix: cold {cold:.2f} s, warm {med_range(warm, '.2f', unit=' s')}")
    for step, xs in steps.items():
        print(f"shardline explain --step {step}: {med_range(xs, '.2f', unit=' s')}")
    t = Targets()
    t.check("diff of the README's main run and its experiment, cold", cold, "<=", 10, " s")
    t.check("diff, warm (worst)", max(warm), "<=", 10, " s", repeats=warm)
    worst = max(x for xs in steps.values() for x in xs)
    t.check("explain --step, any of 3 steps (worst)", worst, "<=", 1, " s", repeats=[max(xs) for xs in steps.values()])
    t.exit()


if __name__ == "__main__":
    main()
