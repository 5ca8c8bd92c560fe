"""params.yaml's data sections: sources (files by uri, or a dataset by name), download, tokenizer,
shard, eval (one frozen, validated model each; the docstring under a field is its documentation).
The clean section is assembled from its rules (shardline.data.clean.stage.settings); `Params` and
loading: shardline.core.config.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from shardline.core import stores
from shardline.core.section_base import _Section

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

_OWN_SCHEMES = ("builtin://", "http://", "https://", "hf://")  # read by the download stage itself, not fsspec


class DatasetSource(_Section):
    """A dataset read through Hugging Face `datasets` (streaming), record by record: the download
    stage writes its text as parquet files under data/raw/<source>/files/ (`shardline.data.hfdatasets`)."""

    name: str
    """A Hub dataset id (`org/name`), or a local folder (relative paths are the project root's): a
    dataset repository in the Hub's layout (data files, and a README.md whose `configs:` name
    them), or a folder `Dataset.save_to_disk` / `DatasetDict.save_to_disk` wrote. A folder of that
    name wins over a Hub id."""
    config: str | None = None
    """The dataset's configuration (`load_dataset`'s `name`, e.g. `sample-10BT`); None: its default."""
    split: str = "train"
    """The split to read (`train`, `validation`, ...)."""
    revision: str | None = None
    """Hub datasets: a branch, tag or commit (None: main). Resolved to a commit before anything is
    read; the manifest records the commit as `revision`, and a rerun at the same commit skips.
    A local folder has no revisions: its files' content hash identifies it instead."""


class Source(_Section):
    name: str
    """Folder name under data/raw, data/clean, data/tokens, data/shards; also the key in `mix`."""
    uri: str | tuple[str, ...] | None = None
    """Local path, glob, directory or file:// URI; http(s):// URL; object store URL (s3://, gs://:
    an object, a prefix or a glob; credentials from the environment);
    hf://datasets/<org>/<name>@<revision>/<glob> (files of a Hub dataset at a pinned revision);
    builtin://python-stdlib and builtin://pydoc-topics (text that ships with every Python); or a
    list of these, read in order. Give a uri or a `dataset`, not both."""
    dataset: DatasetSource | None = None
    """A dataset by name, config, split and revision, read through `datasets` (`pip install
    'shardline[hf]'`) instead of files by uri. Its format is parquet (leave format out)."""
    format: Literal["txt", "jsonl", "parquet", "warc"]
    """How records are read: txt (see txt_unit), jsonl (one JSON object per line), parquet, warc
    (Common Crawl WARC or WET, gzip'd or not: a page's main text, its URL the document id; URL and
    date become columns of the clean parts). txt and jsonl files may be compressed (gzip, zstd,
    bz2, xz: known by their first bytes, e.g. Dolma's .json.gz); they give the documents, ids and
    shards of the plain files. A `dataset` source is parquet, and says so itself."""
    sha256: str | None = None
    """Expected sha256 of the single file the uri names; a mismatch fails and nothing is promoted."""
    text_field: str = "text"
    """The JSON field (jsonl) or column (parquet, hf://, dataset) holding the document text."""
    txt_unit: Literal["file", "blank_lines"] = "file"
    """txt only: one document per file, or one per block separated by one or more blank lines."""
    clean: dict[str, Any] | None = None
    """This source's own cleaning rules: any rule of the `clean` section (not dedup, near_dedup,
    part_mb, max_bad_fraction, drop_samples, which are stage-wide), replacing the section's value
    for this source only. Code is not prose: e.g. `{gopher_quality: null, language: null}`."""

    @model_validator(mode="before")
    @classmethod
    def _dataset_is_parquet(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("dataset") is not None and "format" not in data:
            return {**data, "format": "parquet"}  # what the download stage writes it as
        return data

    @model_validator(mode="after")
    def _check(self) -> "Source":
        problems = []
        if not _NAME.match(self.name):
            problems.append(f"name: {self.name!r} must be letters, digits, '_', '-', '.' (it names folders)")
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            problems.append("sha256: must be 64 lowercase hex digits")
        if (self.uri is None) == (self.dataset is None):
            problems.append("uri: give a uri (files) or a dataset (read through `datasets`), not both" if self.uri
                            else "uri: missing; give a uri (files) or a dataset (a Hub dataset by name, or a folder)")
        if self.dataset is not None and self.format != "parquet":
            problems.append("format: a dataset source is written as parquet files; leave format out")
        if self.dataset is not None and self.sha256 is not None:
            problems.append("sha256: a dataset source is pinned by its revision (the manifest records each file's "
                            "sha256); leave sha256 out")
        for uri in (self.uri,) if isinstance(self.uri, str) else self.uri or ():
            if uri.startswith("hf://") and not uri.startswith("hf://datasets/"):
                problems.append(f"uri: {uri!r}: write hf://datasets/<org>/<name>@<revision>/<glob> (files as files, "
                                "the revision pinned), or a dataset by name, config and split as `dataset:`")
            elif "://" in uri and not uri.startswith(_OWN_SCHEMES) and (problem := stores.uri_problem(uri)):
                problems.append(f"uri: {problem}")  # an unknown scheme or a missing extra, now, not mid-download
        if problems:
            raise ValueError("\n".join(problems))
        return self


class Retries(_Section):
    """How long a remote file is tried (shardline.core.retry; docs/data.md, Retries)."""

    attempts: int = Field(8, ge=1)
    """Tries in a row without progress before a remote file fails (transient faults only: connection
    resets and timeouts, a body cut short, 5xx, 429 and S3's SlowDown); a try that adds bytes starts
    the count afresh."""
    backoff_s: float = Field(0.5, ge=0)
    """First retry delay; doubles each try, with +/-50% jitter (seeded by the file's name)."""
    max_backoff_s: float = Field(30.0, ge=0)
    """Cap on one retry delay."""
    timeout_s: float = Field(30.0, gt=0)
    """Connect and read timeout of one request: a server or store silent this long mid-answer is a
    failed try."""
    budget_s: float = Field(900.0, gt=0)
    """Seconds a remote file may go without progress (failed tries and the waits between them)
    before it fails, whatever `attempts` allows."""


class Download(Retries):
    """Retries and timeouts of the download stage's remote sources (HTTP, object stores)."""


class Tokenizer(_Section):
    vocab_size: int = Field(8192, ge=300, le=1_000_000)
    """BPE vocabulary size including the 256 byte tokens and the special tokens. <= 65535 stores
    shards as uint16, else uint32."""
    special_tokens: tuple[str, ...] = ("<|endoftext|>",)
    """Special tokens, given the lowest ids in this order."""
    eos_token: str = "<|endoftext|>"
    """Appended after every document, so documents never run into each other."""
    bos_token: str | None = None
    """Put before every document when set (Llama's `<s>`, Llama 3's `<|begin_of_text|>`): the
    model then sees where each document starts, and train.attention document restarts there too."""
    min_frequency: int = Field(2, ge=1)
    """A pair must occur this often to be merged."""
    path: str | None = None
    """Use this tokenizer.json instead of training one (it is copied to data/tokenizer)."""
    train_max_mb: float = Field(32.0, gt=0)
    """Train on about this many MB of cleaned training text: the documents whose keyed content
    hash falls in that share of the hash space, so the sample spans the corpus, is the same in
    every run and however the corpus is packaged, and its training cost does not grow with the
    corpus. 32 MB trains an 8k
    vocabulary in a few seconds; bench.data measures what a bigger sample would buy."""
    backend: Literal["auto", "fastokens", "tiktoken", "hf"] = "auto"
    """Encoding engine; the ids never depend on it. auto: the fastest of fastokens, tiktoken
    and HF's encode_batch_fast that gives the HF tokenizer's ids on a probe of the data (the
    stage log and index.json say which, and why a faster one was passed over)."""

    @model_validator(mode="after")
    def _check(self) -> "Tokenizer":
        if self.bos_token is not None and self.bos_token == self.eos_token:
            raise ValueError(f"bos_token: {self.bos_token!r} is also eos_token; a document boundary needs two "
                             "different ids, or leave bos_token unset")
        return self

    def problems(self, given: str | None) -> list[str]:
        """What is wrong with this section when the tokenizer is trained (`given` None): the EOS
        and BOS it appends must be among the special tokens it creates. A given tokenizer.json
        (tokenizer.path, train.init_from) is checked when the tokenize stage reads it."""
        if given is not None:
            return []
        return [f"tokenizer.{k}: {v!r} must be one of special_tokens {list(self.special_tokens)}"
                for k, v in (("eos_token", self.eos_token), ("bos_token", self.bos_token))
                if v is not None and v not in self.special_tokens]


class Shard(_Section):
    seq_len: int = Field(256, ge=1)
    """Tokens per training sample; blocks hold seq_len + 1 ids (inputs plus shifted targets)."""
    target_mb: float = Field(64.0, gt=0)
    """Approximate shard size; a source's blocks are spread over shards of equal count (+/-1)."""


class Eval(_Section):
    """The held-out split (decided in the clean stage) and evaluation during training."""

    fraction: float = Field(0.02, ge=0, lt=1)
    """Share of each source's documents held out. A document is held out when the keyed hash of
    its source and content falls below this share (within the clamps below), so it stays on the
    same side in every run and data version, and a document added later never moves one across."""
    min_docs: int = Field(4, ge=0)
    """Hold out at least this many documents per source (the lowest hashes), so a small source still
    has a held-out set. Never the last training document of a source."""
    max_docs: int = Field(10_000, ge=1)
    """Hold out at most this many documents per source (the lowest hashes): a huge source keeps a
    held-out set of useful size, not fraction x terabytes."""
    doc_bytes: int | None = Field(4096, ge=64)
    """Each held-out document is scored on at most its first this-many UTF-8 bytes (cut at a
    character boundary; the tokenize stage writes the held-out tokens so). Without a cap a few long
    documents are most of a source's held-out tokens (in the standard library, four codec tables
    were 72% of them, predicted 2 nats/token better than the rest), and the loss judges them, not
    the source. None: whole documents."""
    resolution: float = Field(0.05, gt=0)
    """The half-width (nats per token) of the 95% interval a source's held-out loss should have.
    `shardline eval` and the evidence card flag a source whose interval is wider, or that has fewer
    than 10 documents, with about how many documents would give this half-width."""
    every: int = Field(50, ge=0)
    """Evaluate every this many optimizer steps, at every checkpoint and at the last step
    (0: no evaluation during training; `shardline eval` still works)."""
    blocks: int = Field(64, ge=1)
    """Budget: held-out blocks evaluated per source, spread evenly over its held-out shards (the
    same blocks every time). 64 blocks of 257 ids ~ 16k tokens per source."""
    drift_tolerance: float = Field(0.02, ge=0)
    """The evidence card flags 'metric drift' when a source's val loss rises by more than this
    fraction between two consecutive evals."""
    tasks: tuple[str, ...] = ()
    """Downstream tasks run by lm-evaluation-harness on the model's Hugging Face export at
    checkpoints during training (`pip install 'shardline[tasks]'`): lm-eval task names
    (`hellaswag`, offline: their data must be in the Hugging Face cache) or paths to task YAML
    files (relative to the project root). Their results join the held-out eval of that step, so
    they need eval.every > 0. Empty: none (`shardline eval CKPT --tasks` still works)."""
    tasks_every: int = Field(1, ge=1)
    """Run eval.tasks at every this-many-th checkpoint (1: at each; the checkpoint at
    train.checkpoint_every x tasks_every steps, ...), and always at the last step."""
    tasks_limit: int | None = Field(None, ge=1)
    """At most this many examples per task, the first ones (lm-eval's --limit, for speed; its
    results are then not comparable with a full run's). None: every example."""
    tasks_batch_size: int = Field(1, ge=1)
    """lm-eval's batch size. 1, lm-eval's own default, scores each example alone: its numbers are
    those of lm-eval's command run with its defaults on the exported directory."""

    @model_validator(mode="after")
    def _check(self) -> "Eval":
        if self.min_docs > self.max_docs:
            raise ValueError(f"min_docs: {self.min_docs} must be <= max_docs ({self.max_docs})")
        for i, task in enumerate(self.tasks):
            if not task.strip():
                raise ValueError(f"tasks[{i}]: empty; give an lm-eval task name or a task YAML path")
            if task in self.tasks[:i]:
                raise ValueError(f"tasks[{i}]: {task!r} is listed twice")
        if self.tasks and not self.every:
            raise ValueError("tasks: task results join the held-out eval at checkpoints, which eval.every: 0 turns "
                             "off; set eval.every > 0, or tasks: []")
        if self.every and self.fraction == 0 and self.min_docs == 0:
            raise ValueError("every: evaluation needs held-out documents, but fraction and min_docs are 0; "
                             "set eval.fraction or eval.min_docs, or eval.every: 0")
        return self

    def split(self) -> dict:
        """The settings that decide the split (the clean stage's); cadence and budget are not."""
        return {"fraction": self.fraction, "min_docs": self.min_docs, "max_docs": self.max_docs}
