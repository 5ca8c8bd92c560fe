"""A benchmark's targets, said one way: PASS only when the target holds at the low end of the
repeats (the caller passes the worst repeat's value, and may pass every repeat's value to show the
spread), FAIL with the distance otherwise; the misses are kept for the exit status.

    targets = Targets()
    targets.check("clean on gzip / plain, speed", worst, ">=", 0.8, "x", repeats=ratios)
    targets.exit()   # exit 1, listing the misses, when any target was missed
"""

from __future__ import annotations

import math
import sys
from typing import Iterable, TypeVar

T = TypeVar("T")


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


def in_order(sides: Iterable[T], repeat: int) -> list[T]:
    """The sides to time in repeat number `repeat`: as given on even repeats, reversed on odd ones
    (interleaved ABBA: noise and the second run's head start fall on both sides alike)."""
    sides = list(sides)
    return sides if repeat % 2 == 0 else sides[::-1]


def abba(ratios: list[float]) -> list[float]:
    """Same-repeat ratios of two sides timed back to back, the order reversed each repeat (a then
    b, b then a, ...), paired: the geometric mean of each pair of opposite orders. On this class
    of machine the run second in a repeat is faster whichever side it is (by 10-15%), so a single
    repeat's ratio carries that bias one way or the other; a pair cancels it. Verdicts then take
    the worst pair."""
    return [math.sqrt(ratios[i] * ratios[i + 1]) for i in range(0, len(ratios) - 1, 2)]
