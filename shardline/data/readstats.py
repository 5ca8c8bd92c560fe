"""What a reader could not use, counted: `ReadStats` (records read, bad records with `file:line`
samples, invalid UTF-8) and `decode`, UTF-8 that never fails. Shared by every reader of raw
files (`shardline.data.readers`, `shardline.data.warc`)."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_SAMPLES = 5


@dataclass
class ReadStats:
    records: int = 0
    bad: int = 0
    invalid_utf8: int = 0
    skipped: int = 0  # records that hold no document and are no fault: a WARC's non-HTML responses, blank pages
    samples: list[str] = field(default_factory=list)

    def reject(self, where: str, why: str) -> None:
        self.bad += 1
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(f"{where}: {why}")


def decode(raw: bytes, stats: ReadStats) -> str:
    """UTF-8, or with U+FFFD for what is not, counted in stats.invalid_utf8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.invalid_utf8 += 1
        return raw.decode("utf-8", errors="replace")
