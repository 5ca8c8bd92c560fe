"""A data stage's progress: units done of all, MB/s, ETA.

Contract: on a terminal (stderr is a tty) a bar redrawn in place, at most 10 times a second;
anywhere else (CI, `dvc repro`, a log file) one log line each time another ~10% is done, and
one at the end. A stage's own lines go through `say` while a bar is up: it clears the bar, says
the line, and draws the bar again below it (a line written over a half-drawn bar was glued onto
it). `total_bytes` 0 means unknown (a file whose size only its download tells): the line then
shows the bytes done, never a total they could run past. The orchestrator may add a `Sink`,
called with (stage, fraction 0..1, line) on every update: the Prefect flows turn it into a
progress artifact. Units already done before the run (skipped) count as done at once and are
left out of the rate, so the ETA is the remaining bytes at the rate of this run's own work. Thread-safe: parts finish on any thread.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO

Sink = Callable[[str, float, str], None]


def _clock(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f}" if n >= 1e8 else f"{n / 1e6:.1f}"


class Progress:
    def __init__(self, stage: str, units: int, total_bytes: int, log: Callable[[str], None], *,
                 what: str = "parts", sink: Sink | None = None, stream: TextIO | None = None):
        self.stage, self.units, self.total, self.what = stage, units, max(total_bytes, 0), what
        self._log, self._sink = log, sink
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._drawn = 0.0
        self.done = self.skipped = 0
        self._bytes = self._work_bytes = 0
        self._tenth = 0  # the last ~10% step logged

    def advance(self, size: int, skipped: bool = False) -> None:
        """One unit done now (or found done: `skipped`, which reports nothing by itself, so a stage
        with nothing to do stays quiet)."""
        with self._lock:
            self.done += 1
            self._bytes += size
            if skipped:
                self.skipped += 1
                self._tenth = int(self.fraction() * 10 + 1e-9)
                return
            self._work_bytes += size
            self._report(final=self.done >= self.units)

    def say(self, msg: str) -> None:
        """A line of the stage's own, said on a line of its own (the bar cleared, then redrawn)."""
        with self._lock:
            drawn = self._tty and self._drawn and self.done < self.units
            if drawn:
                self._stream.write("\r\033[K")
                self._stream.flush()
            self._log(msg)
            if drawn:
                self._draw(self.fraction(), self.line(), final=False)

    def line(self) -> str:
        elapsed = time.monotonic() - self._t0
        rate = self._work_bytes / elapsed if elapsed > 0 else 0.0
        worked = self.done - self.skipped
        if self.total:  # the rest at this run's byte rate; else at its rate of units
            left = max(self.total - self._bytes, 0) / rate if rate > 0 else None
        else:
            left = (self.units - self.done) * elapsed / worked if worked else None
        eta = "0:00" if self.done >= self.units else (_clock(left) if left is not None else "?")
        skipped = f" ({self.skipped} already done)" if self.skipped else ""
        of = f"/{_mb(self.total)}" if self.total else ""
        return (f"{self.stage}: {self.done}/{self.units} {self.what}{skipped}, {_mb(self._bytes)}{of} MB, "
                f"{rate / 1e6:.1f} MB/s, ETA {eta}")

    def fraction(self) -> float:
        if self.done >= self.units:
            return 1.0
        if self.total:
            return min(1.0, self._bytes / self.total)
        return self.done / self.units

    def _report(self, final: bool) -> None:
        frac, text = self.fraction(), self.line()
        if self._sink is not None:
            self._sink(self.stage, frac, text)
        if self._tty:
            now = time.monotonic()
            if final or now - self._drawn >= 0.1:
                self._drawn = now
                self._draw(frac, text, final)
            return
        tenth = int(frac * 10 + 1e-9)
        if final or tenth > self._tenth:
            self._tenth = tenth
            self._log(text)

    def _draw(self, frac: float, text: str, final: bool) -> None:
        bar = "#" * int(frac * 20)
        self._stream.write(f"\r[{bar:<20}] {text}\033[K" + ("\n" if final else ""))
        self._stream.flush()
