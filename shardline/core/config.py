"""params.yaml -> typed, frozen config objects.

Contract: `load(path)` returns a `Params` or raises `ConfigError` listing *every* problem at once,
each as `<dotted.path>: <what is wrong>` (unknown keys get a did-you-mean). The engine only ever
sees these frozen objects, never raw dicts. One model per params section; the docstring under
each field is its documentation (surfaced by `shardline params --help`-style tooling and here).
"""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from shardline.core.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Source(_Section):
    name: str
    """Folder name under data/raw, data/clean, data/tokens, data/shards; also the key in `mix`."""
    uri: str
    """Local path, glob or file:// URI; http(s):// URL; hf://<dataset>[/<config>]; or builtin://python-stdlib
    and builtin://pydoc-topics (text that ships with every Python, found at run time)."""
    format: Literal["txt", "jsonl", "parquet"]
    """How records are read: txt (see txt_unit), jsonl (one JSON object per line), parquet."""
    sha256: str | None = None
    """Expected sha256 of the single file the uri names; a mismatch fails and nothing is promoted."""
    text_field: str = "text"
    """The JSON field (jsonl) or column (parquet, hf://) holding the document text."""
    txt_unit: Literal["file", "blank_lines"] = "file"
    """txt only: one document per file, or one per block separated by one or more blank lines."""
    split: str = "train"
    """hf:// only: the dataset split to read."""

    @model_validator(mode="after")
    def _check(self) -> "Source":
        problems = []
        if not _NAME.match(self.name):
            problems.append(f"name: {self.name!r} must be letters, digits, '_', '-', '.' (it names folders)")
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            problems.append("sha256: must be 64 lowercase hex digits")
        if self.uri.startswith("hf://") and self.format != "parquet":
            problems.append("format: hf:// sources are stored as parquet; set format: parquet")
        if problems:
            raise ValueError("\n".join(problems))
        return self


class Download(_Section):
    attempts: int = Field(8, ge=1)
    """Tries per remote file before the stage fails (transient faults only: connection, 5xx, 429)."""
    backoff_s: float = Field(0.5, ge=0)
    """First retry delay; doubles each try, with +/-50% jitter."""
    max_backoff_s: float = Field(30.0, ge=0)
    """Cap on one retry delay."""
    timeout_s: float = Field(30.0, gt=0)
    """Connect and read timeout of one HTTP request."""


class Clean(_Section):
    """Rules run in this fixed order: normalize, strip_control, whitespace, min/max_chars,
    max_line_chars, max_repeated_line_fraction, min_alpha_fraction, max_replacement_fraction,
    dedup. Set a rule to null (or false) to switch it off."""

    normalize: Literal["NFC", "NFKC", "none"] = "NFC"
    """Unicode normalisation form applied first."""
    strip_control: bool = True
    """Remove control characters other than newline and tab."""
    whitespace: bool = True
    """CRLF -> LF, strip trailing spaces per line, at most two consecutive blank lines, strip ends."""
    min_chars: int | None = Field(64, ge=0)
    """Drop documents shorter than this (characters, after the transforms above)."""
    max_chars: int | None = Field(1_000_000, ge=1)
    """Drop documents longer than this (a guard against runaway records)."""
    max_line_chars: int | None = Field(2_000, ge=1)
    """Drop documents with any line longer than this (minified or binary-ish content)."""
    max_repeated_line_fraction: float | None = Field(0.3, ge=0, le=1)
    """Drop documents whose non-blank lines repeat more than this fraction (boilerplate)."""
    min_alpha_fraction: float | None = Field(0.25, ge=0, le=1)
    """Drop documents where letters are less than this fraction of non-whitespace characters."""
    max_replacement_fraction: float | None = Field(0.01, ge=0, le=1)
    """Drop documents where U+FFFD (undecodable bytes) exceeds this fraction of characters."""
    dedup: bool = True
    """Exact dedup by content hash within and across sources; the first in params order wins."""
    max_bad_fraction: float = Field(0.01, ge=0, le=1)
    """Fail the stage when unreadable records (malformed JSON, missing field) exceed this
    fraction of a source's records. Below it they are counted and sampled in stats.json."""
    part_mb: float = Field(4.0, gt=0)
    """Raw files are grouped into parts of about this many MB; a part is the unit of parallel
    work and of resume."""

    @model_validator(mode="after")
    def _check(self) -> "Clean":
        if self.min_chars is not None and self.max_chars is not None and self.min_chars > self.max_chars:
            raise ValueError(f"min_chars: {self.min_chars} must be <= max_chars ({self.max_chars})")
        return self


class Tokenizer(_Section):
    vocab_size: int = Field(8192, ge=300, le=1_000_000)
    """BPE vocabulary size including the 256 byte tokens and the special tokens. <= 65535 stores
    shards as uint16, else uint32."""
    special_tokens: tuple[str, ...] = ("<|endoftext|>",)
    """Special tokens, given the lowest ids in this order."""
    eos_token: str = "<|endoftext|>"
    """Appended after every document, so documents never run into each other."""
    min_frequency: int = Field(2, ge=1)
    """A pair must occur this often to be merged."""
    path: str | None = None
    """Use this tokenizer.json instead of training one (it is copied to data/tokenizer)."""
    train_max_mb: float = Field(32.0, gt=0)
    """Train on at most this many MB of cleaned training text: an equal share from the start of
    every clean part (sources round-robin, in params order), so the sample spans the corpus, is
    the same in every run, and its cost does not grow with the corpus. 32 MB trains an 8k
    vocabulary in a few seconds; bench.data measures what a bigger sample would buy."""
    backend: Literal["auto", "tiktoken", "hf"] = "auto"
    """Encoding engine. auto: tiktoken when it is proven id-identical to the HF tokenizer on a
    probe of the data, else HF encode_batch_fast."""

    @model_validator(mode="after")
    def _check(self) -> "Tokenizer":
        if self.path is None and self.eos_token not in self.special_tokens:
            raise ValueError(f"eos_token: {self.eos_token!r} must be one of special_tokens")
        return self


class Shard(_Section):
    seq_len: int = Field(256, ge=1)
    """Tokens per training sample; blocks hold seq_len + 1 ids (inputs plus shifted targets)."""
    target_mb: float = Field(64.0, gt=0)
    """Approximate shard size; a source's blocks are spread over shards of equal count (+/-1)."""


class Eval(_Section):
    """The held-out split (decided in the clean stage) and evaluation during training."""

    fraction: float = Field(0.02, ge=0, lt=1)
    """Share of each source's documents held out. A document is held out when the keyed hash of
    its source and stable id falls below this share (within the clamps below), so it stays on the
    same side in every run and data version, and a document added later never moves one across."""
    min_docs: int = Field(4, ge=0)
    """Hold out at least this many documents per source (the lowest hashes), so a small source still
    has a held-out set. Never the last training document of a source."""
    max_docs: int = Field(10_000, ge=1)
    """Hold out at most this many documents per source (the lowest hashes): a huge source keeps a
    held-out set of useful size, not fraction x terabytes."""
    every: int = Field(50, ge=0)
    """Evaluate every this many optimizer steps, at every checkpoint and at the last step
    (0: no evaluation during training; `shardline eval` still works)."""
    blocks: int = Field(64, ge=1)
    """Budget: held-out blocks evaluated per source, spread evenly over its held-out shards (the
    same blocks every time). 64 blocks of 257 ids ~ 16k tokens per source."""
    drift_tolerance: float = Field(0.02, ge=0)
    """The evidence card flags 'metric drift' when a source's val loss rises by more than this
    fraction between two consecutive evals."""

    @model_validator(mode="after")
    def _check(self) -> "Eval":
        if self.min_docs > self.max_docs:
            raise ValueError(f"min_docs: {self.min_docs} must be <= max_docs ({self.max_docs})")
        if self.every and self.fraction == 0 and self.min_docs == 0:
            raise ValueError("every: evaluation needs held-out documents, but fraction and min_docs are 0; "
                             "set eval.fraction or eval.min_docs, or eval.every: 0")
        return self

    def split(self) -> dict:
        """The settings that decide the split (the clean stage's); cadence and budget are not."""
        return {"fraction": self.fraction, "min_docs": self.min_docs, "max_docs": self.max_docs}


class Pipeline(_Section):
    retries: int = Field(3, ge=0)
    """Retries of a Prefect task after a transient fault (network, EIO, busy lock). Deterministic
    errors (bad params, corrupt input) are never retried."""
    retry_delay_s: float = Field(2.0, ge=0)
    """First retry delay; doubles each retry, with +/-50% jitter."""
    stage_timeout_s: float = Field(24 * 3600, gt=0)
    """A stage flow (flows.stages: the parted stages on a Dask/Ray/process runner) running longer
    than this fails; enforced on the flow, in the main thread, where Prefect can interrupt it. The
    pipeline flow's stage-<name> tasks run the engine in-process and are not bounded by it."""


class Engine(_Section):
    runner: Literal["threads", "processes", "dask", "ray"] = "threads"
    """Where the per-part work of clean, tokenize and shard runs: threads (in-process, the
    default), processes (a local process pool), dask or ray (a cluster; the project and its
    data/ folder must be reachable at the same path on every worker). Outputs are byte-identical
    whichever runs them."""
    address: str | None = None
    """Scheduler of an existing cluster: `tcp://host:8786` (dask) or `ray://host:10001` / `auto`
    (ray). Unset: a temporary local cluster of `workers` processes for the stage."""
    workers: int = Field(0, ge=0)
    """Workers of the temporary local cluster / pool size (0: one per CPU core)."""
    connect_timeout_s: float = Field(60.0, gt=0)
    """How long to wait for the cluster, and for every worker to import the project, before the
    stage fails with a message naming the worker (instead of hanging)."""


class Loader(_Section):
    seed: int = 1234
    """Seeds the shuffle: each (source, epoch) gets its own keyed permutation of the blocks."""
    global_batch: int = Field(32, ge=1)
    """Blocks per loader step across all ranks (must divide by the world size); each rank
    takes global_batch / world consecutive blocks of every step."""
    num_workers: int = Field(0, ge=0)
    """DataLoader worker processes per rank; 0 reads in-process (fastest on small machines).
    The sequence is the same for any value."""
    verify: Literal["full", "size"] = "full"
    """Check each shard before its first use: full = sha256 (safe), size = file size only
    (fast start-up on huge data)."""
    debug_batch_hashes: bool = False
    """Log a hash of every global batch's block ids, so two runs can be diffed for duplicates
    or gaps."""
    shards_uri: str | None = None
    """Read the shards from this fsspec location (`s3://bucket/prefix/shards`, `gs://...`,
    `file://...`) instead of data/shards: each shard is fetched into `cache_dir`, its sha256
    checked on arrival, with the next shards prefetched. Credentials and endpoint come from the
    environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, ...)."""
    cache_dir: str = ".shardline/cache"
    """Local cache of streamed shards (relative to the project root)."""
    cache_mb: float = Field(4096.0, gt=0)
    """Cache limit: past it, shards already read are evicted (they are re-fetched if needed
    again); shards about to be read are never evicted."""
    prefetch: int = Field(2, ge=0)
    """Shards fetched ahead of the reader, in the order the coming steps need them."""


class Model(_Section):
    n_layer: int = Field(2, ge=1)
    """Transformer blocks."""
    n_head: int = Field(4, ge=1)
    """Attention heads per block; must divide d_model."""
    d_model: int = Field(128, ge=8)
    """Width of the residual stream (embedding size)."""
    dropout: float = Field(0.1, ge=0, lt=1)
    """Dropout on attention, MLP and embeddings while training."""
    bias: bool = False
    """Biases in linear layers and LayerNorms."""

    @model_validator(mode="after")
    def _check(self) -> "Model":
        if self.d_model % self.n_head:
            raise ValueError(f"n_head: {self.n_head} must divide d_model ({self.d_model})")
        return self


class Train(_Section):
    steps: int = Field(200, ge=1)
    """Optimizer steps per data version: from 0 for the first, from the parent checkpoint when
    training continues on new data. Raising it later continues from the latest checkpoint."""
    grad_accum: int = Field(1, ge=1)
    """Loader steps (global batches) per optimizer step."""
    lr: float = Field(3e-3, gt=0)
    """Peak learning rate, reached after warmup."""
    min_lr: float = Field(3e-4, ge=0)
    """Learning rate at the end of the cosine decay."""
    warmup_steps: int = Field(20, ge=0)
    """Linear warmup from 0 to lr; the LR is a function of the step, never stored."""
    schedule: Literal["cosine", "wsd"] = "cosine"
    """LR after warmup: cosine from lr down to min_lr at the last step; or wsd (warmup-stable-decay):
    lr held, then a linear decay to min_lr over the last decay_fraction of train.steps. WSD's
    stable phase makes continuing on a new data version a matter of more stable steps + a decay."""
    decay_fraction: float = Field(0.2, gt=0, le=1)
    """wsd: the share of the steps after warmup spent decaying linearly to min_lr."""
    weight_decay: float = Field(0.1, ge=0)
    """AdamW weight decay on matrices (not on biases and norms)."""
    beta1: float = Field(0.9, gt=0, lt=1)
    """AdamW beta1."""
    beta2: float = Field(0.95, gt=0, lt=1)
    """AdamW beta2."""
    grad_clip: float | None = Field(1.0, gt=0)
    """Clip the global gradient norm to this (null: no clipping)."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Autocast dtype: bf16 on CPU or CUDA; fp16 only on CUDA (with a GradScaler)."""
    compile: bool = False
    """Wrap the model in torch.compile."""
    deterministic: bool = True
    """torch.use_deterministic_algorithms: bit-identical runs and resumes (on CPU)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available, else CPU."""
    seed: int = 1337
    """Seeds model init; dropout is re-seeded from (seed, step, rank) every step."""
    threads: int = Field(0, ge=0)
    """torch intra-op threads (0: torch's default). Keep it fixed across resumes for bit-exactness."""
    nproc_per_node: int = Field(1, ge=1)
    """> 1: `shardline stage train` relaunches itself under torchrun with this many processes."""
    checkpoint_every: int = Field(50, ge=1)
    """Save a checkpoint every this many optimizer steps (and at the last step)."""
    keep_last: int = Field(2, ge=1)
    """Retention: keep this many newest valid checkpoints..."""
    keep_every: int = Field(0, ge=0)
    """...plus every checkpoint whose step is a multiple of this (0: none)."""
    allow_data_change: bool = False
    """Resume even though data, mix or batch geometry changed since the checkpoint; the change
    is written into the new checkpoints' lineage."""
    fresh_on_data_change: bool = False
    """When the data (or mix) changed since the newest checkpoint, move the old checkpoints to
    data/checkpoints/archive/ and train from scratch instead of continuing."""
    slow_step_factor: float = Field(3.0, gt=1)
    """A step slower than this times the rolling median is logged with its cause."""
    spike_factor: float = Field(2.0, gt=1)
    """A step whose loss is above this times the rolling median of recent good steps is a spike."""
    spike_patience: int = Field(3, ge=1)
    """This many spikes in one run of flagged steps (a run: spikes and skipped steps with no good
    step between) roll training back to the newest checkpoint before the run's first step, and
    skip the run's batches."""
    spike_window: int = Field(50, ge=1)
    """The rolling median covers this many recent good steps; spikes are judged once it is full."""
    max_skipped: int = Field(5, ge=1)
    """This many skipped (non-finite: no update) steps in one run of flagged steps also roll back."""
    max_rollbacks: int = Field(3, ge=0)
    """Rollbacks allowed per run; the next trouble stops training with the steps and batches named."""
    strategy: Literal["ddp", "fsdp"] = "ddp"
    """Multi-process training: ddp replicates the model on every rank; fsdp shards parameters,
    gradients and optimizer state over the ranks (for models that do not fit one device).
    Checkpoints hold the full state either way, so they resume at any world size and strategy."""
    dist_timeout_s: float = Field(60.0, gt=0)
    """Process-group timeout: a dead rank fails the job after this, not after 30 minutes."""


class Retrain(_Section):
    cron: str = "0 3 * * *"
    """Schedule of the retraining deployment (cron, the runner's local time zone)."""
    git_commit: bool = False
    """After a retrain on new data, commit dvc.lock to git (so the data version can be checked out)."""
    dvc_push: bool = False
    """After a retrain on new data, `dvc push` to the configured DVC remote."""

    @model_validator(mode="after")
    def _check(self) -> "Retrain":
        if len(self.cron.split()) != 5:
            raise ValueError(f"cron: {self.cron!r} must have 5 fields (minute hour day month weekday)")
        return self


class Params(_Section):
    sources: tuple[Source, ...]
    """Where the raw text comes from; one entry per source."""
    download: Download = Download()
    """Retries and timeouts of remote sources (download stage)."""
    clean: Clean = Clean()
    """Cleaning rules, in their fixed order (clean stage)."""
    tokenizer: Tokenizer = Tokenizer()
    """Tokenizer training and encoding (tokenize stage)."""
    shard: Shard = Shard()
    """Block length and shard size (shard stage)."""
    eval: Eval = Eval()
    """The held-out split per source (clean stage) and evaluation during training (train stage)."""
    pipeline: Pipeline = Pipeline()
    """Prefect retries and timeouts."""
    engine: Engine = Engine()
    """Where the data stages' per-part work runs: threads, processes, a Dask or a Ray cluster."""
    retrain: Retrain = Retrain()
    """The scheduled retraining deployment: when, and what to do after new data trained."""
    loader: Loader = Loader()
    """The streaming loader: shuffle seed, batch geometry, workers, verification."""
    mix: dict[str, float] | None = None
    """Sampling weight per source at load time (normalised; every source needs one). Changing
    it needs no re-shard. Exact: every prefix of n blocks holds w_s*n blocks of s, within 1."""
    model: Model = Model()
    """The GPT: layers, heads, width, dropout (vocab comes from the tokenizer)."""
    train: Train = Train()
    """The training loop, checkpoints and their retention."""

    @field_validator("sources")
    @classmethod
    def _some_sources(cls, v: tuple) -> tuple:
        if not v:
            raise ValueError("must list at least one source")
        return v

    @model_validator(mode="after")
    def _check(self) -> "Params":
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        problems = [f"sources: duplicate name {d!r}" for d in dupes]
        if self.mix is not None:
            problems += [f"mix: missing source {n!r}; give every source a weight" for n in names if n not in self.mix]
        for k, w in (self.mix or {}).items():
            if k not in names:
                problems.append(f"mix.{k}: unknown source{_did_you_mean(k, names)}")
            elif not (math.isfinite(w) and w > 0):  # inf would pass > 0, and NaN-normalise every weight
                problems.append(f"mix.{k}: must be a finite number > 0, got {w}")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def section(self, name: str) -> Any:
        """A section as plain JSON-able data (for hashing and lineage)."""
        v = getattr(self, name)
        if isinstance(v, tuple):
            return [x.model_dump(mode="json") for x in v]
        return v.model_dump(mode="json") if isinstance(v, BaseModel) else v


def _did_you_mean(key: str, options) -> str:
    close = difflib.get_close_matches(key, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The model class that owns the container at `loc` (for did-you-mean on unknown keys)."""
    model: Any = Params
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        ann = field.annotation
        args = getattr(ann, "__args__", ()) or (ann,)
        nxt = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if nxt is None:
            return None
        model = nxt
    return model


def _format(err: dict) -> str:
    loc = tuple(err["loc"])
    path = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
    kind, ctx, got = err["type"], err.get("ctx", {}), err.get("input")
    if kind == "extra_forbidden":
        owner = _model_at(loc[:-1])
        hint = _did_you_mean(str(loc[-1]), owner.model_fields) if owner else ""
        return f"{path}: unknown key{hint}"
    if kind == "missing":
        return f"{path}: required"
    ops = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in ops:
        bound = next(iter(ctx.values()))
        return f"{path}: must be {ops[kind]} {bound}, got {got!r}"
    if kind == "literal_error":
        return f"{path}: must be one of {ctx.get('expected')}, got {got!r}"
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        # model validators name their own fields ("sha256: ..."); field validators do not.
        named = (re.match(r"[\w\[\].]+: ", m) for m in msg.split("\n"))
        return "\n".join(m if not path else f"{path}.{m}" if hit else f"{path}: {m}"
                          for m, hit in zip(msg.split("\n"), named))
    return f"{path}: {err['msg'].lower()}, got {got!r}"


def parse(raw: Any, origin: str = "params.yaml") -> Params:
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: must be a mapping of sections, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as e:
        lines = [ln for err in e.errors() for ln in _format(err).split("\n")]
        raise ConfigError(f"{origin}: {len(lines)} problem(s):\n  " + "\n  ".join(lines)) from None


def load(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found; run from the project root or pass --params") from None
    except UnicodeDecodeError as e:
        line = path.read_bytes()[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                          "save the file as UTF-8") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    return parse(raw, str(path))
