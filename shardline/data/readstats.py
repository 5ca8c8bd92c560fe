"""What a reader could not use, counted: `ReadStats` (records read, bad records with `file:line`
samples, invalid UTF-8, and where damage ended a file: `cut`) and `decode`, UTF-8 that never
fails. Shared by every reader of raw files (`shardline.data.readers`, `shardline.data.warc`); the
clean stage keeps one per file, so it can say which file it read past damage in
(`shardline.data.clean.stage.damage`), and `add`s them into the part's."""

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
    cut: tuple[int, str] | None = None  # (byte, what): damage ended the file there, the records before it kept

    def reject(self, where: str, why: str) -> None:
        self.bad += 1
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(f"{where}: {why}")

    def damage(self, where: str, offset: int, what: str) -> None:
        """Damage at byte `offset` of the file ends it: one bad record; what came before is kept."""
        self.records += 1  # a broken record is a record (max_bad_fraction's denominator)
        self.cut = (offset, what)
        self.reject(where, f"{what}; the records before it are kept; re-download or replace the file")

    def add(self, other: "ReadStats") -> None:
        """Count `other` (one file's) in: the samples as if both had been read into one."""
        self.records += other.records
        self.bad += other.bad
        self.invalid_utf8 += other.invalid_utf8
        self.skipped += other.skipped
        self.samples += other.samples[: MAX_SAMPLES - len(self.samples)]


def decode(raw: bytes, stats: ReadStats) -> str:
    """UTF-8, or with U+FFFD for what is not, counted in stats.invalid_utf8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.invalid_utf8 += 1
        return raw.decode("utf-8", errors="replace")
