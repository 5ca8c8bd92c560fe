"""push-shards skips a shard only when this machine put those very bytes there and the store
still describes the object as it did after that put (stream/remote.upload_shards' receipts)."""

from __future__ import annotations

import numpy as np

from shardline.core import fsio, shardformat
from shardline.stream.remote import upload_shards
from tests.unit.test_loader import make_shards

SIZES = {"a": [3, 2], "b": [4]}
QUIET = dict(log=lambda _: None)


def rebuilt(root) -> None:
    """The same shards' sizes with other bytes: fixed-size shards of data that changed."""
    for name in SIZES:
        index = fsio.read_json(root / name / "index.json")
        for entry in index["shards"]:
            arr = np.fromfile(root / name / entry["file"], dtype="<u2")
            arr[3:] = 9  # the token bytes change, the size does not
            fsio.write_bytes(root / name / entry["file"], arr.tobytes())
            entry["sha256"] = fsio.sha256_bytes(arr.tobytes())
        fsio.write_json(root / name / "index.json", index)


def test_a_rebuilt_shard_of_the_same_size_is_sent_again_and_the_store_holds_its_bytes(tmp_path):
    local, store, receipts = make_shards(tmp_path / "local", SIZES), tmp_path / "store", tmp_path / "pushed.json"
    assert upload_shards(local, str(store), list(SIZES), receipts=receipts, **QUIET) == 3 + 2
    rebuilt(local)
    # every shard again (their bytes changed; their sizes did not), then the two indexes
    assert upload_shards(local, str(store), list(SIZES), receipts=receipts, **QUIET) == 3 + 2
    for name in SIZES:
        shardformat.verify(store / name)  # the store's index vouches for the store's bytes
        for f in (local / name).iterdir():
            assert (store / name / f.name).read_bytes() == f.read_bytes()


def test_an_unchanged_push_sends_the_indexes_only_and_a_shard_changed_in_the_store_again(tmp_path):
    local, store, receipts = make_shards(tmp_path / "local", SIZES), tmp_path / "store", tmp_path / "pushed.json"
    assert upload_shards(local, str(store), list(SIZES), receipts=receipts, **QUIET) == 5
    assert upload_shards(local, str(store), list(SIZES), receipts=receipts, **QUIET) == 2
    shard = store / "a" / "shard-00001.bin"
    shard.write_bytes(bytes(len(shard.read_bytes())))  # someone else's bytes of the same size
    assert upload_shards(local, str(store), list(SIZES), receipts=receipts, **QUIET) == 1 + 2
    assert shard.read_bytes() == (local / "a" / "shard-00001.bin").read_bytes()
    # no receipts (another machine's push, or a lost .shardline/): every shard is sent
    assert upload_shards(local, str(store), list(SIZES), **QUIET) == 5
    receipts.write_text("{not json")  # a damaged record only costs the saving
    assert upload_shards(local, str(store), list(SIZES), receipts=receipts, **QUIET) == 5
    assert upload_shards(local, str(store), list(SIZES), receipts=receipts, **QUIET) == 2
