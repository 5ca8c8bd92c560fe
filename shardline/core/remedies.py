"""What rebuilds or restores a file the line wrote: the remedy every reader of such a file quotes
when the file is damaged (shardline.core.fsio.read_record's `remedy`). A file under one of data/'s
outputs is rebuilt by the stage that writes it, forced again, or restored from DVC's copy of that
output; anything else names the stage to force.
"""

from __future__ import annotations

from pathlib import Path

from shardline.core.layout import Layout

REBUILD = "rebuild it with the stage that writes it ('dvc repro -f -s STAGE')"  # a file outside data/'s outputs


def remedy(layout: Layout, p: str | Path) -> str:
    """What rebuilds or restores a file the line wrote: its stage forced again, or DVC's copy of
    the output that holds it (a folder; data/metrics' and data/reports' files one by one)."""
    p = Path(p).resolve()
    if p == layout.train_log:  # its lines up to the last checkpoint are the only record of those steps
        return f"restore it with 'dvc checkout {layout.rel(p)}' (training rewrites only what follows its checkpoint)"
    for folder, stage in ((layout.raw, "download"), (layout.clean, "clean"), (layout.tokenizer, "tokenize"),
                          (layout.tokens, "tokenize"), (layout.shards, "shard"), (layout.checkpoints, "train"),
                          (layout.metrics, "train"), (layout.reports, "report")):
        if p.is_relative_to(folder):
            out = p if folder in (layout.metrics, layout.reports) else folder
            return f"rebuild it with 'dvc repro -f -s {stage}', or restore it with 'dvc checkout {layout.rel(out)}'"
    return REBUILD


def project_of(path: str | Path) -> Layout | None:
    """The project a file under its data/ belongs to (the nearest root whose data/ holds it)."""
    p = Path(path).resolve()
    return next((layout for layout in map(Layout, p.parents) if p.is_relative_to(layout.data)), None)


def remedy_for(path: str | Path) -> str:
    """`remedy` of the project that holds `path`."""
    layout = project_of(path)
    return remedy(layout, path) if layout else REBUILD
