"""A finished clean part read back: its done-marker, its selection, one side's documents.

Contract: `part_meta(part)` is the part's done-marker (None when missing or unreadable);
`read_selection(part)` its selection (`part-N.split.json`), refused in one line naming the remedy
when it is damaged or does not belong to the part and the finished stage (a clean stage killed
halfway through its selections); `documents(part, side)` streams one side's rows ("train": kept and
not held out or dropped; "val": held out) in row order, a column at a time; `side_key` is what one
side holds, as a hash. What reads clean parts goes through here (the tokenize stage, views,
explain, provenance), and nothing here imports the rules: reading needs none of their imports.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardline.core import fsio
from shardline.core.errors import BadInput
from shardline.core.filenames import clean_marker_of, clean_split_of, selection_of
from shardline.core.remedies import remedy_for


def part_meta(path: str | Path) -> dict | None:
    """A clean part's done-marker (key, files, tallies), or None when it is missing or unreadable."""
    try:
        meta = fsio.read_json(clean_marker_of(path))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and isinstance(meta.get("key"), str) else None


def read_selection(part: str | Path) -> dict:
    path = selection_of(part)
    try:
        sel = fsio.read_record(path, remedy_for(path), keys={"key": str, "heldout": list, "dropped": list})
    except FileNotFoundError:
        raise BadInput(f"{path}: missing (the clean stage did not finish); re-run 'dvc repro clean'") from None
    meta = part_meta(part)
    if meta is None and clean_marker_of(part).exists():
        raise BadInput(f"{clean_marker_of(part)}: not a clean part's done-marker (truncated or damaged); "
                       f"{remedy_for(part)}")
    marker = clean_split_of(part)
    done = fsio.read_record(marker, remedy_for(marker), keys={"ctx": str})["ctx"] if marker.exists() else None
    if meta is None or sel["key"] != meta["key"] or sel.get("ctx") != done:
        raise BadInput(f"{path}: does not belong to {Path(part).name} and the finished clean stage (it was "
                       "interrupted); re-run 'dvc repro clean'")
    return sel


def side_key(part: str | Path, side: str) -> str:
    """What one side of a clean part holds, as a hash: the part key and the rows selected."""
    sel = read_selection(part)
    return fsio.stable_hash([sel["key"], side, sel["heldout"], sel["dropped"]])


def documents(part: str | Path, side: str = "train", batch_size: int = 1024, column: str = "text") -> Iterator[list]:
    """Stream one side ("train" or "val") of a clean part, in batches, in row order: its texts, or
    another column (`id`)."""
    sel = read_selection(part)
    with _readable(part):
        pf = pq.ParquetFile(part)
        mask = np.zeros(pf.metadata.num_rows, dtype=bool)
        mask[sel["heldout"]] = True
        if side == "train":
            mask = ~mask
            mask[sel["dropped"]] = False
        batches = pf.iter_batches(columns=[column], batch_size=batch_size)
    start = 0
    while True:
        with _readable(part):
            batch = next(batches, None)
        if batch is None:
            return
        texts = batch.column(0).to_pylist()
        keep = mask[start:start + len(texts)]
        start += len(texts)
        if keep.all():
            yield texts
        elif keep.any():
            yield [t for t, k in zip(texts, keep) if k]


@contextlib.contextmanager
def _readable(part: str | Path):
    """Arrow's errors on a damaged clean part (no footer, a page that does not decode, rows its
    selection does not have) as one line naming it and what rebuilds it."""
    try:
        yield
    except (pa.ArrowException, OSError, IndexError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise BadInput(f"{part}: not a readable clean part ({str(e).splitlines()[0]}); {remedy_for(part)}") from None
