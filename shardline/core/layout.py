"""Where every stage reads and writes. These folder names are a public contract."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    root: Path

    @classmethod
    def at(cls, root: str | Path = ".") -> "Layout":
        return cls(Path(root).resolve())

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def raw(self) -> Path:
        return self.data / "raw"

    @property
    def clean(self) -> Path:
        return self.data / "clean"

    @property
    def tokenizer(self) -> Path:
        return self.data / "tokenizer"

    @property
    def tokens(self) -> Path:
        return self.data / "tokens"

    @property
    def shards(self) -> Path:
        return self.data / "shards"

    @property
    def checkpoints(self) -> Path:
        return self.data / "checkpoints"

    @property
    def kept(self) -> Path:
        """Hard links of checkpoints nothing records yet (outside data/: a checkout cannot touch it)."""
        return self.root / ".shardline" / "kept"

    def rel(self, p: Path) -> str:
        """A path as users see it in messages: relative to the project root."""
        try:
            return str(Path(p).resolve().relative_to(self.root))
        except ValueError:
            return str(p)
