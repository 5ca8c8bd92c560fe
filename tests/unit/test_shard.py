import numpy as np
import pytest

from shardline.core import fsio, shardformat
from shardline.data import shard
from shardline.core.errors import BadInput, ShardCorrupt
from tests.conftest import make_project


def fake_tokens(layout, name, sizes, dtype="uint16", seed=0, val=(40,)):
    """Token parts as the tokenize stage writes them (ids drawn from a seeded rng), both sides;
    returns the training stream."""
    rng = np.random.default_rng(seed)
    streams = {}
    for side, sz, d in (("train", sizes, layout.tokens / name), ("val", val, layout.tokens / name / "val")):
        d.mkdir(parents=True, exist_ok=True)
        parts, chunks = [], [np.zeros(0, dtype=shardformat.DTYPES[dtype])]
        for i, n in enumerate(sz):
            arr = rng.integers(0, 60000 if dtype == "uint16" else 100000, n).astype(shardformat.DTYPES[dtype])
            (d / f"part-{i:05d}.bin").write_bytes(arr.tobytes())
            parts.append({"file": f"part-{i:05d}.bin", "tokens": n, "docs": 1, "bytes": arr.nbytes,
                          "sha256": fsio.sha256_bytes(arr.tobytes())})
            chunks.append(arr)
        fsio.write_json(d / "index.json", {"source": name, "side": side, "dtype": dtype, "parts": parts,
                                           "tokenizer_sha256": "t" * 64, "eos_id": 0, "docs": len(sz),
                                           "tokens": sum(sz)})
        streams[side] = np.concatenate(chunks)
    return streams["train"]


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_blocks_are_the_token_stream_cut_in_order(tmp_path, dtype):
    params, layout = make_project(tmp_path, [{"name": "s", "uri": "x", "format": "txt"}],
                                  shard={"seq_len": 15, "target_mb": 0.001})
    stream = fake_tokens(layout, "s", [1000, 7, 0, 2345], dtype, val=(30, 3))
    index = shard.run(params, layout, log=lambda _: None)["s"]
    assert index["val"]["total_blocks"] == 2 and index["val"]["tail_tokens_dropped"] == 1
    assert shardformat.verify(layout.shards / "s" / "val")["shards"] == index["val"]["shards"]
    blocks = index["total_blocks"]
    assert blocks == len(stream) // 16 and index["tail_tokens_dropped"] == len(stream) % 16
    counts = [s["blocks"] for s in index["shards"]]
    assert max(counts) - min(counts) <= 1 and sum(counts) == blocks and len(counts) > 1
    got = np.concatenate([np.fromfile(layout.shards / "s" / s["file"], dtype=shardformat.DTYPES[dtype])
                          for s in index["shards"]])
    np.testing.assert_array_equal(got, stream[: blocks * 16])
    # block i of a shard is at byte i * (seq_len + 1) * itemsize: no index needed to seek
    first = np.fromfile(layout.shards / "s" / "shard-00001.bin", dtype=shardformat.DTYPES[dtype])
    np.testing.assert_array_equal(first[16:32], stream[(counts[0] + 1) * 16:(counts[0] + 2) * 16])
    assert shardformat.verify(layout.shards / "s")["total_blocks"] == blocks


def test_rerun_is_byte_identical_and_rewrites_only_damaged(tmp_path):
    params, layout = make_project(tmp_path, [{"name": "s", "uri": "x", "format": "txt"}],
                                  shard={"seq_len": 31, "target_mb": 0.002})
    fake_tokens(layout, "s", [5000, 3000], val=(500,))
    shard.run(params, layout, log=lambda _: None)
    files = sorted(p for p in (layout.shards / "s").rglob("*") if p.is_file())
    shards = [p for p in files if p.name.startswith("shard-")]
    before = {p: p.read_bytes() for p in files}
    victim = layout.shards / "s" / "shard-00001.bin"
    victim.write_bytes(victim.read_bytes()[:-3])
    with pytest.raises(ShardCorrupt, match="shard-00001.bin: size .* re-run 'dvc repro shard'"):
        shardformat.verify(layout.shards / "s")
    logs = []
    shard.run(params, layout, log=logs.append)
    assert f"(1 written, {len(shards) - 1} already in place)" in logs[-1]
    assert {p: p.read_bytes() for p in sorted(p for p in (layout.shards / "s").rglob("*") if p.is_file())} == before


def test_too_few_tokens_is_a_clear_error(tmp_path):
    params, layout = make_project(tmp_path, [{"name": "s", "uri": "x", "format": "txt"}], shard={"seq_len": 100})
    fake_tokens(layout, "s", [50])
    with pytest.raises(BadInput, match="'s' has 50 tokens, fewer than one block.*shard.seq_len"):
        shard.run(params, layout, log=lambda _: None)


def test_verify_detects_one_flipped_byte(tmp_path):
    params, layout = make_project(tmp_path, [{"name": "s", "uri": "x", "format": "txt"}], shard={"seq_len": 7})
    fake_tokens(layout, "s", [4096])
    shard.run(params, layout, log=lambda _: None)
    p = layout.shards / "s" / "shard-00000.bin"
    data = bytearray(p.read_bytes())
    data[100] ^= 1
    p.write_bytes(bytes(data))
    shardformat.verify(layout.shards / "s", mode="size")
    with pytest.raises(ShardCorrupt, match="sha256 mismatch"):
        shardformat.verify(layout.shards / "s")


def test_shard_counts_are_balanced():
    for blocks in (1, 2, 7, 1000, 12345):
        for target in (0.001, 0.01, 1.0):
            c = shard.shard_counts(blocks, 514, target)
            assert sum(c) == blocks and max(c) - min(c) <= 1 and min(c) >= 1
