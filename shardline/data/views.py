"""The stages' outputs as `datasets.Dataset`s, to look at from Python (a notebook, a probe, a
custom loader); one call each, documented in docs/data.md:

- `clean_dataset(root, source, side="train")`: the documents one side of a source's clean parts
  holds (train: kept, neither held out nor a duplicate; val: held out), in the order the tokenize
  stage reads them (`shardline.data.clean.stage.parts.documents`), with every column of the parts (id,
  text, hash, bytes, u, lang, lang_score; url and date for WARC). `Dataset.from_parquet` converts
  the parts once to Arrow in the `datasets` cache (`cache_dir`, default HF_DATASETS_CACHE; a part
  rewritten is converted again) and memory-maps it from there; the side is a selection of rows
  (an indices mapping), not a copy.
- `blocks_dataset(root, source=None, side="train")`: the token blocks of the shards (of every
  source, by name, when `source` is None), each shard verified against its index.json first.
  Columns input_ids (seq_len + 1 ids in the shard's dtype), source, shard, block. The ids stay in
  the memory-mapped shard files: nothing is copied or cached.

Both read what the stages wrote and write nothing under data/. `datasets` is the hf extra's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shardline.core import extras, fsio, shardformat
from shardline.core.errors import BadInput
from shardline.core.layout import Layout
from shardline.core.filenames import CLEAN_PARTS, SIDES
from shardline.data.clean.stage.parts import read_selection


def _datasets():
    return extras.need("datasets", "a stage's output as a datasets.Dataset")


def _side(side: str) -> str:
    if side not in SIDES:
        raise BadInput(f"side: {side!r}; give one of {', '.join(SIDES)}")
    return side


def _rows(part: Path, side: str) -> tuple[np.ndarray, int]:
    """The rows of `part` that `side` holds, in order, as `stage.documents` selects them; its row count."""
    import pyarrow.parquet as pq

    sel = read_selection(part)
    mask = np.zeros(pq.ParquetFile(part).metadata.num_rows, dtype=bool)
    mask[sel["heldout"]] = True
    if side == "train":
        mask = ~mask
        mask[sel["dropped"]] = False
    return np.flatnonzero(mask), len(mask)


def clean_dataset(root: str | Path, source: str, side: str = "train", cache_dir: str | None = None):
    """A source's clean documents on one side, as a memory-mapped `datasets.Dataset`."""
    datasets, layout = _datasets(), Layout.at(root)
    parts = sorted((layout.clean / source).glob(CLEAN_PARTS))
    if not parts:
        raise BadInput(f"{layout.rel(layout.clean / source)}: no clean parts; run 'dvc repro clean' first")
    _side(side)
    rows, start = [], 0
    for part in parts:
        mine, n = _rows(part, side)
        rows.append(mine + start)
        start += n
    ds = datasets.Dataset.from_parquet([str(p) for p in parts], cache_dir=cache_dir)
    return ds.select(np.concatenate(rows))


def _blocks(layout: Layout, name: str, side: str) -> tuple[list, dict]:
    """One source's blocks on one side, as Arrow tables over its memory-mapped shards; its index."""
    import pyarrow as pa

    folder = layout.shards_of(name, side)
    shardformat.read_index(folder, "; run 'dvc repro shard' first", layout.rel)
    index = shardformat.verify(folder)
    geo = shardformat.Geometry.of(index)
    tables = []
    for entry in index["shards"]:
        ids = shardformat.blocks(folder / entry["file"], geo.np_dtype, geo.width).reshape(-1)
        flat = pa.Array.from_buffers(pa.from_numpy_dtype(geo.np_dtype), len(ids), [None, pa.py_buffer(ids)])
        n = entry["blocks"]  # the mapped pages themselves above: no copy
        tables.append(pa.table({"input_ids": pa.FixedSizeListArray.from_arrays(flat, geo.width),
                                "source": pa.array([name] * n, pa.string()),
                                "shard": pa.array([entry["file"]] * n, pa.string()),
                                "block": pa.array(np.arange(n, dtype=np.int64))}))
    return tables, index


def blocks_dataset(root: str | Path, source: str | None = None, side: str = "train"):
    """The token blocks of one source's shards, or of every source's (by name), as a `datasets.Dataset`."""
    import pyarrow as pa

    datasets, layout = _datasets(), Layout.at(root)
    _side(side)
    names = [source] if source else sorted(p.name for p in layout.shards.glob("*") if p.is_dir())
    if not names:
        raise BadInput(f"{layout.rel(layout.shards)}: no shards; run 'dvc repro shard' first")
    tables, indexes = [], []
    for name in names:
        found, index = _blocks(layout, name, side)
        tables += found
        indexes.append(index)
    geo = shardformat.geometry(indexes, layout.rel(layout.shards), "the sources' shards",
                               "rebuild them with one tokenizer and seq_len ('dvc repro shard')")
    schema = pa.schema([("input_ids", pa.list_(pa.from_numpy_dtype(geo.np_dtype), geo.width)),
                        ("source", pa.string()), ("shard", pa.string()), ("block", pa.int64())])
    # the shards' hashes name the content: datasets would otherwise hash every id to fingerprint it
    content = [[n, [e["sha256"] for e in ix["shards"]]] for n, ix in zip(names, indexes)]
    return datasets.Dataset(pa.concat_tables(tables) if tables else schema.empty_table(),
                            fingerprint=fsio.stable_hash([side, content])[:16])
