"""bench.loader's data: real shards built once through the engine's stages (`build_shards`), and
the raw baselines the loader's throughput is set beside: random blocks read straight from the
shards' memmaps, per shard file (b) and from one file of them all (b1) (bench/loader.py's
docstring says how they are measured and judged; `python -m bench.loader` runs it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bench.measure import data_stages
from shardline.stream.loader import Source

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
OPTIONAL = [  # (name, file, format, extra source keys)
    ("shakespeare", "tinyshakespeare.txt", "txt", {"txt_unit": "blank_lines"}),
    ("wiki", "wikitext2-valid.jsonl", "jsonl", {"text_field": "text"}),
]
BATCH, SEQ_LEN, SEED = 64, 256, 1234


def build_shards(root: Path) -> tuple[Path, list[str], dict[str, float]]:
    """Run the engine's stages into `root`; return shards dir, source names and the mix."""
    from shardline import paramsfile
    from shardline.core.layout import Layout

    sources = [{"name": "code", "uri": "builtin://python-stdlib", "format": "txt", "txt_unit": "file"}]
    for name, file, fmt, extra in OPTIONAL:
        if (CORPORA / file).is_file():
            sources.append({"name": name, "uri": str(CORPORA / file), "format": fmt, **extra})
        else:
            print(f"(skipping {name}: {CORPORA / file} absent)")
    others = [s["name"] for s in sources[1:]]
    mix = {"code": 0.7 if others else 1.0, **{n: round(0.3 / len(others), 6) for n in others}}
    params = paramsfile.parse({
        "sources": sources,
        "clean": {"max_repeated_line_fraction": 0.5, "part_mb": 2},
        "tokenizer": {"vocab_size": 8192},
        "shard": {"seq_len": SEQ_LEN, "target_mb": 1},
        "mix": mix,
        "loader": {"seed": SEED, "global_batch": BATCH},
    })
    layout = Layout.at(root)
    data_stages(params, layout)
    return layout.shards, [s["name"] for s in sources], mix


def shard_maps(sources: list[Source]) -> tuple[list[np.memmap], np.ndarray]:
    maps = [np.memmap(s.dir / e["file"], dtype="<u2", mode="r").reshape(-1, SEQ_LEN + 1)
            for s in sources for e in s.index["shards"]]
    return maps, np.concatenate([[0], np.cumsum([len(m) for m in maps])])


class RawPerShard:
    """(b): uniformly random blocks over all shard files, fancy-indexed per file."""

    def __init__(self, sources: list[Source]):
        self.maps, self.starts = shard_maps(sources)
        self.total = int(self.starts[-1])
        self.rng = np.random.default_rng(SEED)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        idx = np.sort(self.rng.integers(0, self.total, BATCH))
        shard = np.searchsorted(self.starts, idx, side="right") - 1
        out = np.empty((BATCH, SEQ_LEN + 1), dtype=np.int64)
        cuts = np.flatnonzero(np.diff(shard)) + 1
        for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [BATCH]])):
            s = shard[lo]
            out[lo:hi] = self.maps[s][idx[lo:hi] - self.starts[s]]
        arr = torch.from_numpy(out)
        return arr[:, :-1], arr[:, 1:]


class RawOneMap:
    """(b1): all shards concatenated into one file; one memmap, one fancy index per batch."""

    def __init__(self, sources: list[Source], path: Path):
        with open(path, "wb") as f:
            f.writelines((s.dir / e["file"]).read_bytes() for s in sources for e in s.index["shards"])
        self.mm = np.memmap(path, dtype="<u2", mode="r").reshape(-1, SEQ_LEN + 1)
        self.rng = np.random.default_rng(SEED)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        idx = np.sort(self.rng.integers(0, len(self.mm), BATCH))
        arr = torch.from_numpy(self.mm[idx].astype(np.int64))
        return arr[:, :-1], arr[:, 1:]
