"""data/clean/stats.json read back: what the clean stage summed (clean.stage._summarise writes it),
checked as it is read. Its readers (the evidence card, the lineage of a checkpoint) get a dict
holding `sources`, each source's tallies of the kinds below, or one line naming the file, what is
wrong and what rebuilds or restores it (`fsio.read_record`); a missing file stays FileNotFoundError."""

from __future__ import annotations

from shardline.core import fsio
from shardline.core.layout import Layout
from shardline.core.remedies import remedy

SOURCE = {"docs_in": int, "docs_out": int, "bytes_in": int, "bytes_out": int, "bad": int, "invalid_utf8": int,
          "samples": list, "rules": dict, "heldout": dict}


def read(layout: Layout) -> dict:
    path, shown = layout.clean_stats, layout.rel(layout.clean_stats)
    stats = fsio.read_record(path, remedy(layout, path), keys={"sources": dict}, shown=shown)
    for name, source in stats["sources"].items():
        fsio.check_fields(source, SOURCE, shown, remedy(layout, path), f"sources.{name}")
    return stats
