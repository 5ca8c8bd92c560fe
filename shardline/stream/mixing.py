"""Exact source mixing: which source the n-th block of the global sequence comes from.

Contract: for weights w_s (normalised, exact rationals from the values typed in params.yaml),
every prefix of n positions holds c_s(n) blocks of source s with |c_s(n) - w_s·n| < 1, for
every n, and both `source_at(n)` and `counts_before(n)` cost O(1) (a table lookup plus a scan
of at most CHECKPOINT entries), whatever n is. Nothing grows with the data.

How: with common denominator D, the weights are q_s / D with integer quotas q_s. One period of
D positions is scheduled once (earliest-deadline-first over unit jobs: the t-th block of s may
go no earlier than floor((t-1)·D/q_s)+1 and no later than ceil(t·D/q_s), which is exactly the
strict bound; EDF is optimal for unit jobs, and Tijdeman's chairman theorem says a schedule
exists). At the end of a period every source has exactly q_s blocks, so the period repeats
and the bound holds for all n. The table is uint8 (<= 255 sources) of D entries plus counts
every CHECKPOINT positions; D is capped at MAX_PERIOD (weights typed with a few decimals
give small D: 0.9/0.1 -> 10, 3/1 -> 4).
"""

from __future__ import annotations

import heapq
import math
from fractions import Fraction
from typing import Mapping, Sequence

import numpy as np

from shardline.core.errors import ConfigError

CHECKPOINT = 64
MAX_PERIOD = 1 << 22


def exact_weights(mix: Mapping[str, float], sources: Sequence[str]) -> dict[str, Fraction]:
    """Normalised weights as exact fractions; errors name the mix key."""
    problems = [f"mix.{k}: unknown source (sources: {list(sources)})" for k in mix if k not in sources]
    problems += [f"mix: missing source {s!r}; give every source a weight" for s in sources if s not in mix]
    problems += [f"mix.{k}: must be > 0, got {w}" for k, w in mix.items() if not w > 0]
    if problems:
        raise ConfigError("\n".join(problems))
    raw = {s: Fraction(str(mix[s])) for s in sources}  # str(): 0.1 is 1/10, not a binary float
    total = sum(raw.values())
    return {s: w / total for s, w in raw.items()}


class Schedule:
    """The mixing schedule for `sources` in this order (their ids are their positions)."""

    def __init__(self, mix: Mapping[str, float], sources: Sequence[str]):
        self.sources = list(sources)
        self.weights = exact_weights(mix, self.sources)
        self.period = math.lcm(*(w.denominator for w in self.weights.values()))
        if self.period > MAX_PERIOD:
            raise ConfigError(f"mix: weights need a period of {self.period} positions (> {MAX_PERIOD}); "
                              "round them to fewer significant digits")
        if len(self.sources) > 255:
            raise ConfigError("mix: at most 255 sources")
        self.quota = np.array([int(w * self.period) for w in self.weights.values()], dtype=np.int64)
        self.table = self._schedule()
        marks = np.arange(0, self.period + 1, CHECKPOINT)
        self.checkpoints = np.stack([np.concatenate([[0], np.cumsum(self.table == s)])[marks]
                                     for s in range(len(self.sources))], axis=1).astype(np.int64)

    def _schedule(self) -> np.ndarray:
        d, table = self.period, np.empty(self.period, dtype=np.uint8)
        count = [0] * len(self.sources)
        released: list[tuple[int, int]] = []  # (deadline, source) of each source's next block
        waiting: list[tuple[int, int]] = []   # (release, source)
        for s, q in enumerate(self.quota):
            if q:
                waiting.append((1, s))
        heapq.heapify(waiting)
        for m in range(1, d + 1):
            while waiting and waiting[0][0] <= m:
                _, s = heapq.heappop(waiting)
                q = int(self.quota[s])
                heapq.heappush(released, (-(-(count[s] + 1) * d // q), s))  # ceil(t*D/q)
            deadline, s = heapq.heappop(released)
            assert deadline >= m, "mixing schedule infeasible (cannot happen for exact quotas)"
            table[m - 1] = s
            count[s] += 1
            q = int(self.quota[s])
            if count[s] < q:
                heapq.heappush(waiting, (count[s] * d // q + 1, s))
        return table

    def counts_before(self, n: int) -> np.ndarray:
        """Blocks of each source among positions [0, n)."""
        full, r = divmod(n, self.period)
        base = (r // CHECKPOINT) * CHECKPOINT
        tail = np.bincount(self.table[base:r], minlength=len(self.sources))
        return full * self.quota + self.checkpoints[r // CHECKPOINT] + tail

    def assign(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """For positions [start, start+count): source ids and each block's index within its
        source's own sequence (how many blocks of that source came before it)."""
        src = self.table[(start + np.arange(count, dtype=np.int64)) % self.period].astype(np.int64)
        within = np.empty(count, dtype=np.int64)
        before = self.counts_before(start)
        for s in np.unique(src):
            mask = src == s
            within[mask] = before[s] + np.arange(int(mask.sum()), dtype=np.int64)
        return src, within
