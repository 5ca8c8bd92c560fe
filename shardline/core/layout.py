"""Where every stage reads and writes: the one place that spells a path of the project.

These names are a public contract (docs/architecture.md, "Data contracts"): dvc.yaml declares
the same folders, users and tools read them, and `loader.shards_uri` mirrors `shards/` on object
storage. Every other module asks the Layout; none spells a file or folder name of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

INDEX = "index.json"    # a token or shard folder's index: written last, it vouches for the folder
MANIFEST = "manifest.json"  # a raw source's file list, and a checkpoint's (each written last)
VAL = "val"             # the held-out side's sub-folder of a source's tokens and shards
SIDES = ("train", "val")
SPLIT = "split.json"


@dataclass(frozen=True)
class Layout:
    root: Path

    @classmethod
    def at(cls, root: str | Path = ".") -> "Layout":
        return cls(Path(root).resolve())

    def under_root(self, path: str | Path) -> Path:
        """A path from params.yaml (tokenizer.path, loader.cache_dir): relative to the project root."""
        p = Path(path)
        return p if p.is_absolute() else self.root / p

    @property
    def data(self) -> Path:
        return self.root / "data"

    # download
    @property
    def raw(self) -> Path:
        return self.data / "raw"

    def raw_files(self, source: str) -> Path:
        return self.raw / source / "files"

    def manifest(self, source: str) -> Path:
        return self.raw / source / MANIFEST

    # clean
    @property
    def clean(self) -> Path:
        return self.data / "clean"

    @property
    def clean_stats(self) -> Path:
        return self.clean / "stats.json"

    @property
    def clean_split(self) -> Path:
        """The finished clean stage's held-out thresholds and the ctx its selections carry."""
        return self.clean / SPLIT

    # tokenize
    @property
    def tokenizer(self) -> Path:
        return self.data / "tokenizer"

    @property
    def tokenizer_json(self) -> Path:
        return self.tokenizer / "tokenizer.json"

    @property
    def tokenizer_meta(self) -> Path:
        return self.tokenizer / "meta.json"

    @property
    def tokens(self) -> Path:
        return self.data / "tokens"

    def tokens_of(self, source: str, side: str = "train") -> Path:
        return side_dir(self.tokens / source, side)

    # shard
    @property
    def shards(self) -> Path:
        return self.data / "shards"

    def shards_of(self, source: str, side: str = "train") -> Path:
        return side_dir(self.shards / source, side)

    # train
    @property
    def checkpoints(self) -> Path:
        return self.data / "checkpoints"

    @property
    def kept(self) -> Path:
        """Hard links of checkpoints nothing records yet (outside data/: a checkout cannot touch it)."""
        return self.root / ".shardline" / "kept"

    @property
    def metrics(self) -> Path:
        return self.data / "metrics"

    @property
    def train_log(self) -> Path:
        """One JSON line per step and eval; a resumed run truncates it to its checkpoint."""
        return self.metrics / "train.jsonl"

    @property
    def train_summary(self) -> Path:
        return self.metrics / "train.json"

    # report
    @property
    def reports(self) -> Path:
        return self.data / "reports"

    @property
    def evidence(self) -> Path:
        return self.reports / "evidence.md"

    @property
    def plot(self) -> Path:
        return self.reports / "train.png"

    @property
    def prefect_home(self) -> Path:
        """`shardline serve`'s Prefect server state."""
        return self.root / ".prefect"

    def rel(self, p: Path) -> str:
        """A path as users see it in messages: relative to the project root."""
        try:
            return str(Path(p).resolve().relative_to(self.root))
        except ValueError:
            return str(p)


def side_dir(source_dir: str | Path, side: str) -> Path:
    """A source's folder for one side: itself for training, its `val/` for the held-out side."""
    return Path(source_dir) if side == "train" else Path(source_dir) / VAL


def index_of(folder: str | Path) -> Path:
    return Path(folder) / INDEX


def shard_name(i: int) -> str:
    """The file name of a side's i-th shard (data/shards/<source>/[val/]): shard-00000.bin, ..."""
    return f"shard-{i:05d}.bin"


def staged_of(shard: str | Path) -> Path:
    """Where the shard stage stages a shard's new bytes, durable, until every shard switches at once."""
    return Path(shard).with_name(Path(shard).name + ".next")


def cached_shard(cache_dir: str | Path, sha256: str) -> Path:
    """A streamed shard in loader.cache_dir, named by its content: <sha256>.bin."""
    return Path(cache_dir) / f"{sha256}.bin"


def clean_split_of(part: str | Path) -> Path:
    """The clean stage's split.json for one of its parts (data/clean/<source>/part-N.parquet): a
    reader that holds only a part's path finds the finished stage's marker this way."""
    return Path(part).parents[1] / SPLIT
