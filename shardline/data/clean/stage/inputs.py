"""The files cleaning rules read besides the raw data: the URL blocklist and the evaluation sets
of benchmark decontamination.

Contract: `resolve(cfg, layout)` finds them (relative paths are the project's), and gives the
keys that stand for them in a clean part's key: their content's hashes, never their paths, so an
edited list or evaluation set is a new data version and a moved one is not. `build_index` makes
the decontamination index once per distinct set of evaluation files, under
data/clean/decontam/<key>.npy (`decontam.py`). A missing file is a BadInput naming
the field.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import index_meta_of
from shardline.data.clean.kernels import ngrams
from shardline.data.clean.rules import decontam
from shardline.data.clean.stage.settings import Clean


@dataclass(frozen=True)
class Inputs:
    blocklist: tuple[str, str] | None = None  # (absolute path, sha256)
    index: str | None = None                  # the decontamination index's path
    keys: dict = field(default_factory=dict)  # what goes in the part key and the lineage


def _file(p: str, root: Path, what: str) -> Path:
    f = Path(p) if Path(p).is_absolute() else root / p
    if not f.is_file():
        raise BadInput(f"clean.{what}: {f} is not a file; " + (
            "give a text file of domains, one per line" if what == "url_blocklist"
            else "list local .jsonl or .parquet evaluation sets"))
    return f


def resolve(cfg: Clean, layout: Layout) -> Inputs:
    keys: dict = {}
    blocklist = index = None
    if cfg.url_blocklist:
        f = _file(cfg.url_blocklist, layout.root, "url_blocklist")
        blocklist = (str(f), fsio.sha256_file(f))
        keys["url_blocklist"] = blocklist[1]
    if (d := cfg.decontaminate) is not None:
        shas = [fsio.sha256_file(_file(p, layout.root, "decontaminate.paths")) for p in d.paths]
        keys["decontaminate"] = fsio.stable_hash({"sets": shas, "ngram": d.ngram, "text_field": d.text_field,
                                                   "hash": ngrams.HASH_VERSION,
                                                   "unicode": unicodedata.unidata_version})  # \w and lower()
        index = str(layout.decontam_index(keys['decontaminate'][:24]))
    return Inputs(blocklist, index, keys)


def build_index(cfg: Clean, layout: Layout, log: Callable[[str], None]) -> Path | None:
    """The index cfg.decontaminate names, built unless it is there (its .json written last)."""
    given = resolve(cfg, layout)
    if given.index is None or cfg.decontaminate is None:
        return None
    path, d = Path(given.index), cfg.decontaminate
    if not index_meta_of(path).exists():
        idx = decontam.Index.build([_file(p, layout.root, "decontaminate.paths") for p in d.paths], d.ngram,
                                   d.text_field)
        idx.save(path)
        log(f"clean: decontamination index of {len(d.paths)} evaluation set(s): {len(idx):,} distinct "
            f"{d.ngram}-grams ({path.stat().st_size / 2**20:.1f} MiB)")
    return path
