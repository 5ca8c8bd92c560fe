"""A benchmark's targets, said one way: PASS only when the target holds at the low end of the
repeats (the caller passes the worst repeat's value, and may pass every repeat's value to show the
spread), FAIL with the distance otherwise; the misses are kept for the exit status.

    targets = Targets()
    targets.check("clean on gzip / plain, speed", worst, ">=", 0.8, "x", repeats=ratios)
    targets.exit()   # exit 1, listing the misses, when any target was missed
"""

from __future__ import annotations

import sys


class Targets:
    def __init__(self) -> None:
        self.missed: list[str] = []

    def check(self, what: str, v: float, op: str, lim: float, unit: str = "", ok: bool | None = None,
              repeats: list[float] | None = None) -> bool:
        ok = (v <= lim if op == "<=" else v >= lim) if ok is None else ok
        line = f"{what}: {v:.2f}{unit} (target {op} {lim:g}{unit})"
        if repeats and len(repeats) > 1:
            line += f" [worst of {len(repeats)}: {', '.join(f'{x:.2f}' for x in repeats)}]"
        print(f"{line}: PASS" if ok else f"{line}: FAIL by {abs(v - lim):.2f}{unit}", flush=True)
        if not ok:
            self.missed.append(f"{line}, off by {abs(v - lim):.2f}{unit}")
        return ok

    def exit(self, more: list[str] = ()) -> None:
        missed = self.missed + list(more)
        if missed:
            sys.exit(f"\n{len(missed)} target(s) missed:\n  " + "\n  ".join(missed))
