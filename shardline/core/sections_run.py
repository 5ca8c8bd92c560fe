"""params.yaml's run sections: pipeline, parts, store, loader, train, retrain (one frozen, validated
model each; the docstring under a field is its documentation; the model section: sections_model.py).
`Params`: shardline.core.config.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from shardline.core import stores
from shardline.core.addresses import scheduler_address
from shardline.core.section_base import _Section
from shardline.core.sections_data import Retries
from shardline.core.sections_watch import Profile


class Pipeline(_Section):
    retries: int = Field(3, ge=0)
    """Retries of a Prefect task after a transient fault (network, EIO, busy lock). Deterministic
    errors (bad params, corrupt input) are never retried."""
    retry_delay_s: float = Field(2.0, ge=0)
    """First retry delay; doubles each retry, with +/-50% jitter."""
    stage_timeout_s: float = Field(24 * 3600, gt=0)
    """The parts of a stage on a cluster still running after this many seconds fail it, named:
    on Dask, the parts phase (cancelled on the cluster); on Ray, the whole stage flow (enforced by
    Prefect in the main thread). Stages in this process (threads, processes) are not bounded."""


class Parts(_Section):
    runner: Literal["threads", "processes", "dask", "ray"] = "threads"
    """Where the per-part work of clean, tokenize and shard runs: threads (in-process, the
    default), processes (a local process pool), dask or ray (a cluster; the project and its
    data/ folder must be reachable at the same path on every worker). Outputs are byte-identical
    whichever runs them."""
    address: str | None = None
    """Scheduler of an existing cluster: `tcp://host:8786` (dask; `host:8786` is read so too) or
    `ray://host:10001` / `auto` (ray). Not the dashboard's page (`http://host:8787/status`): its
    Info tab, or `dask scheduler`'s "Scheduler at:" line, gives the scheduler's. Unset: a temporary
    local cluster of `workers` processes for the stage."""
    workers: int = Field(0, ge=0)
    """Workers of the temporary local cluster / pool size (0: one per CPU core)."""
    connect_timeout_s: float = Field(60.0, gt=0)
    """How long to wait for the cluster, and for every worker to import the project, before the
    stage fails with a message naming the worker (instead of hanging)."""
    store: str | None = None
    """An object store the workers share instead of a filesystem (any fsspec URL: s3://bucket/data):
    a part's inputs are fetched from it into the worker's own scratch folder (in its working
    directory), its outputs put there, its done-marker last; the driver puts the inputs there and
    takes the outputs back into its data/. Unset: workers read and write data/ at the driver's
    path (a shared filesystem). Credentials and endpoint from each process's environment (AWS_*)."""

    @field_validator("address")
    @classmethod
    def _scheduler(cls, v: str | None, info) -> str | None:
        """The address in the form its runner's client takes, or a ValueError naming the form wanted."""
        return v if v is None else scheduler_address(v, info.data.get("runner", "threads"))

    @model_validator(mode="after")
    def _check(self) -> "Parts":
        uri = self.store  # refused here by the field's name, not by fsspec at the first part
        if uri is not None and "://" not in uri:
            raise ValueError(f"store: {uri!r} is not a URL; give s3://bucket/prefix (or gs://, file://...), or leave it "
                             "unset for workers that share data/ on a filesystem")
        if uri is not None and (problem := stores.uri_problem(uri, local=False)):
            raise ValueError(f"store: {problem}")
        return self


class Store(Retries):
    """Retries and timeouts of the object stores the line reads and writes as it runs: streamed
    shards (loader.shards_uri, training's and `shardline eval`'s), checkpoints
    (train.checkpoint_uri), `shardline push-shards`, and parts.store's staged parts."""


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

    @model_validator(mode="after")
    def _check(self) -> "Loader":
        # a scheme fsspec does not know, or whose package is missing, is refused here by the field's
        # name, not as fsspec's ValueError or ImportError when the first shard is fetched
        problem = stores.uri_problem(self.shards_uri) if self.shards_uri else None
        if problem:
            raise ValueError(f"shards_uri: {problem}")
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
    """torch.compile each transformer block (the embedding, the loss and the attention mask stay
    eager), as torchtitan does; on CUDA, FlexAttention is compiled in any case."""
    attention: Literal["causal", "document"] = "causal"
    """causal: every token attends to all earlier tokens of its block, across the documents packed
    into it. document: block-causal, no token attends across a document boundary and positions
    restart at each document (Llama 3's document mask); boundaries are read from the EOS (and BOS)
    ids already in each block, so shards do not change. Held-out eval uses the same attention."""
    activation_checkpointing: Literal["none", "full", "selective"] = "none"
    """Recompute activations in the backward pass instead of keeping them: full keeps only each
    block's input (least memory, ~one more forward); selective keeps the matmul and attention
    outputs and recomputes the cheap elementwise ops (norms, activations, RoPE). Losses are
    bit-identical to none on CPU; bench.train measures what each saves and costs."""
    init_from: str | None = None
    """A local Hugging Face transformers directory (config.json, model.safetensors or a sharded
    index, tokenizer.json; relative to the project root) to continue pretraining from: its weights
    start the run (a fresh start only; resumes read the checkpoint), its architecture replaces
    model's (fields you set there must agree), and its tokenizer becomes the line's (tokenize
    stage). Llama, Mistral, Qwen3 and GPT-2 checkpoints. The lineage records the directory and the
    sha256 of its weights, which are part of the run's identity. docs/model.md."""
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
    Checkpoints of either format resume at any world size and strategy."""
    checkpoint_format: Literal["full", "sharded"] | None = None
    """full: rank 0 gathers model and optimizer and writes them as one process would (a gather of
    everything into one host's memory); sharded: every rank writes its own shards through
    torch.distributed.checkpoint, and any world size reads them back resharded. Unset: sharded
    under fsdp with more than one process, else full. Resume reads either."""
    checkpoint_uri: str | None = None
    """Write and resume checkpoints under this fsspec URL (`s3://bucket/run/checkpoints`, `gs://...`)
    instead of data/checkpoints, so nodes need share nothing but the store (with loader.shards_uri):
    every object of step-N/ first, its manifest.json last (no rename on a store: a prefix without a
    manifest that verifies is no checkpoint). Credentials and endpoint from the environment (AWS_*)."""
    dist_timeout_s: float = Field(60.0, gt=0)
    """Process-group timeout: a dead rank fails the job after this, not after 30 minutes."""
    profile: Profile | None = None
    """`{start_step, steps}`: a torch.profiler trace of those steps (Chrome trace format) under
    data/reports/profile/, linked from the evidence card. Unset: nothing profiled."""

    @model_validator(mode="after")
    def _check(self) -> "Train":
        uri = self.checkpoint_uri  # refused here by the field's name, not by fsspec at the first save
        if uri is not None and "://" not in uri:
            raise ValueError(f"checkpoint_uri: {uri!r} is not a URL; give s3://bucket/prefix (or gs://, file://...), "
                             "or leave it unset for data/checkpoints (on a filesystem every node shares)")
        problem = stores.uri_problem(uri, local=False) if uri else None
        if problem:
            raise ValueError(f"checkpoint_uri: {problem}")
        return self


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
