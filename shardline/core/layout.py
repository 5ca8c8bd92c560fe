"""Where every stage reads and writes in a project: the `Layout`, the one place that says where a
file of the line lives (which folder of data/, of .shardline/, of the project root).

These places are a public contract (docs/architecture.md, "Data contracts"): dvc.yaml declares
the same folders, users and tools read them, and `loader.shards_uri` mirrors `shards/` on object
storage. The names of files, and of the files beside one another (a part's marker, a shard's
name, a step's folder), are filenames.py's; every other module asks these two and spells no file
or folder name of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shardline.core.filenames import (DECONTAM, DROPPED, FILES, HF_TOKENIZER, JSONL, MANIFEST, PARQUET, SPANS, SPLIT,
                                      STREAM_NOTE, TASKS_JSON, side_dir)
# The store modules (objects, remote, shardcache, bucket, bucketio, checkpoint, storage), rewritten
# beside the change that moved these names to filenames.py, still import them from here, for now.
from shardline.core.filenames import (ARCHIVE, DCP, INDEX, STEP_DIRS, TENSORS, TRAIN_STATE, cached_shard,  # noqa: F401
                                      index_of, partial_note_of, partial_of, step_dir, step_dirs, step_of)


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
        return self.raw / source / FILES

    def manifest(self, source: str) -> Path:
        return self.raw / source / MANIFEST

    def stream_note(self, source: str) -> Path:
        return self.raw / source / STREAM_NOTE

    def plugins_used(self, stage: str) -> Path:
        """The plug-ins `stage` uses with their releases (the plugins stage's output, a dep of `stage` in dvc.yaml)."""
        return self.data / "plugins" / f"{stage}.json"

    # clean
    @property
    def clean(self) -> Path:
        return self.data / "clean"

    @property
    def clean_stats(self) -> Path:
        return self.clean / "stats.json"

    def clean_part(self, name: str) -> Path:
        """A clean part by its name (`clean_part_name`)."""
        return self.clean / f"{name}{PARQUET}"

    def dropped(self, source: str) -> Path:
        return self.clean / source / DROPPED

    def dropped_rule(self, source: str, rule: str) -> Path:
        return self.dropped(source) / f"{rule}{JSONL}"

    @property
    def spans(self) -> Path:
        return self.clean / SPANS

    def decontam_index(self, key: str) -> Path:
        return self.clean / DECONTAM / f"{key}.npy"

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
        return self.tokenizer / HF_TOKENIZER

    @property
    def tokenizer_meta(self) -> Path:
        return self.tokenizer / "meta.json"

    @property
    def staged_record(self) -> Path:
        """What an object store (parts.store) holds of the driver's data/ files (shardline.data.staging)."""
        return self.root / ".shardline" / "staged.json"

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
    def fetched(self) -> Path:
        """Verified local copies of checkpoints read from train.checkpoint_uri (a command's CHECKPOINT)."""
        return self.root / ".shardline" / "fetched"

    @property
    def views(self) -> Path:
        """A revision's outputs linked from DVC's cache, one folder per commit (shardline diff)."""
        return self.root / ".shardline" / "views"

    @property
    def judged(self) -> Path:
        """Runs judged on another run's held-out documents, kept by what decides them (shardline diff)."""
        return self.root / ".shardline" / "judged"

    def judged_result(self, key: str) -> Path:
        return self.judged / f"{key}.json"

    @property
    def trackers(self) -> Path:
        """Per run identity, what each tracker holds (outside data/: a checkout cannot rewind it)."""
        return self.root / ".shardline" / "trackers"

    def tracker_state(self, tag: str) -> Path:
        return self.trackers / f"{tag}.json"

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

    @property
    def push_receipts(self) -> Path:
        """`shardline push-shards`' record of the shards this machine put in a store, by URL: their
        sha256 and how the store described each right after (what lets a push skip a shard)."""
        return self.root / ".shardline" / "pushed.json"

    @property
    def torchrun_log(self) -> Path:
        """train.nproc_per_node's torchrun, as it ran: every rank's lines and its agent's (the last launch)."""
        return self.root / ".shardline" / "logs" / "torchrun.log"

    @property
    def torchrun_dir(self) -> Path:
        """torchrun's --log-dir: each rank's stdout, stderr and error file (the last launch)."""
        return self.root / ".shardline" / "logs" / "torchrun"

    def torchrun_errors(self, local_rank: int) -> list[Path]:
        """The error files a rank left under torchrun_dir (torchrun's layout: <run>/attempt_<n>/<local rank>/)."""
        return sorted(self.torchrun_dir.glob(f"*/attempt_*/{local_rank}/error.json"))

    def rank_log(self, rank: int) -> Path:
        """A rank's traceback of a failed collective, which its one line names."""
        return self.root / ".shardline" / "logs" / f"rank-{rank}.log"

    @property
    def scratch(self) -> Path:
        """The line's temporary directories (downstream tasks' exports): in the project, not /tmp, as an
        export is the model's size again."""
        return self.root / ".shardline" / "tmp"

    @property
    def tasks_record(self) -> Path:
        """`shardline eval --tasks` results per checkpoint, merged into eval.json while they are this run's."""
        return self.metrics / TASKS_JSON

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
    def profiles(self) -> Path:
        """train.profile's traces: trace-<first>-<last>.json (+ a CUDA memory snapshot)."""
        return self.reports / "profile"

    @property
    def profiles_keep(self) -> Path:
        """The one file the train stage always writes in `profiles`, a DVC output: an empty folder made
        DVC warn "'data/reports/profile' is empty." four times in every run without train.profile."""
        return self.profiles / ".keep"

    @property
    def mix_search_report(self) -> Path:
        """`shardline mix-search`'s evidence: the proxies, the fit, the recommended mix."""
        return self.reports / "mix_search.md"

    @property
    def mix_search_plot(self) -> Path:
        return self.reports / "mix_search.png"

    @property
    def mix_search_result(self) -> Path:
        """The same as JSON: what a resumed search must reproduce, and what tools read."""
        return self.reports / "mix_search.json"

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
