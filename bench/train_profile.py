"""bench.train's explanations, printed when a target is missed (or with --profile): cProfiles of
the trainer and the bare loop side by side, own time per step in buckets (torch compute, fsync,
write, sha256, JSON, torch serialization, ...), and the slow side's top functions by own time.
"""

from __future__ import annotations

import pstats
import shutil

from bench.measure import profile, top
from bench.train_loop import ARCHS, bare_run, make_params
from shardline.context import RunContext
from shardline.training import train as T

BUCKETS = [  # (bucket, substrings of "file:function" matched in order) for cProfile own times
    ("fsync (file + dir)", ("posix.fsync",)),
    ("file write()", ("'write' of '_io",)),
    ("sha256", ("sha256",)),
    ("JSON encode (state, manifest+lineage)", ("json/", "_json")),
    ("torch serialize (pickle + records)", ("serialization.py", "write_record", "Pickler", "torch/_tensor.py",
                                            "torch/storage.py", "torch/__init__.py")),
    ("torch compute (kernels, autograd, optim)", ("torch", "run_backward")),
    ("numpy", ("numpy",)),
    ("subprocess (git in lineage)", ("subprocess", "posix.read", "waitpid", "_posixsubprocess")),
    ("shardline python", ("shardline/",)),
]


def buckets(st: pstats.Stats) -> dict[str, float]:
    out = {name: 0.0 for name, _ in BUCKETS} | {"other": 0.0}
    for (file, line, func), (_cc, _nc, tt, _ct, _callers) in st.stats.items():
        key = f"{file}:{func}"
        out[next((name for name, pats in BUCKETS if any(p in key for p in pats)), "other")] += tt
    return out


def side_by_side(cols: dict[str, pstats.Stats], per: int, label: str = "step") -> None:
    """Own time per bucket, divided by `per` (steps or calls), one column per profiled run."""
    bs = {k: buckets(v) for k, v in cols.items()}
    print(f"    {'own time per ' + label:42}" + "".join(f"{k:>26}" for k in cols))
    for name in next(iter(bs.values())):
        if any(b[name] > 0 for b in bs.values()):
            print(f"    {name:42}" + "".join(f"{b[name] / per * 1e3:22.1f} ms " for b in bs.values()))
    print(f"    {'total':42}" + "".join(f"{sum(b.values()) / per * 1e3:22.1f} ms " for b in bs.values()))


def why_slow(names: list[str], R: dict, layout, steps: int, target: float) -> None:
    """Section 1's cProfiles for the architectures `names` of section 1's results `R`."""
    k = min(steps, 8)
    for name in names:
        short = make_params(k, model=ARCHS[name])
        for d in (layout.data / "checkpoints", layout.data / "metrics"):
            shutil.rmtree(d, ignore_errors=True)
        pa = profile(lambda: T.run(short, layout, RunContext(log=lambda _: None)))
        pb = profile(lambda: bare_run(short, R[name]["gcfg"], R[name]["batches"][:k]))
        print(f"\n[{name}] why (a)/(b) < {target}: cProfile of train.run ({k} steps, setup and final checkpoint "
              f"included) and of the bare loop ({k} steps), own time by bucket per step:")
        side_by_side({"(a) trainer": pa, "(b) bare loop": pb}, k)
        print("  (a) top functions by own time:")
        print(top(pa))


def why_save(ckpt: dict, target: float) -> None:
    """Section 2's cProfile of 3 synchronous checkpoint.save calls (bench.train_checkpoint's `ckpt`)."""
    ps = profile(lambda: [ckpt["save"](100 + i) for i in range(3)])
    ckpt["clean_up"]()
    print(f"\nwhy save/bare > {target}: see 'where a save's time goes' above; cProfile of 3 x "
          f"checkpoint.save, top functions by own time (the profiler inflates the pure-Python JSON "
          f"encoder; the timers above do not):")
    print(top(ps))
