"""The loader's promises as properties: exact epochs, disjoint ranks, elastic exact resume,
exact mixing at every prefix, and no block ever read from a corrupt shard."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline.core import fsio
from shardline.core.errors import BadInput, ShardCorrupt
from shardline.stream.loader import Loader, StateMismatch
from shardline.stream.mixing import Schedule

SEQ = 7  # blocks of 8 ids: (source, block hi, block lo, 5 x filler)
FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def make_shards(root, sizes: dict[str, list[int]]):
    """Shards whose blocks spell their own identity: block b of source s starts [s, b >> 16, b & 0xffff]."""
    for s, (name, counts) in enumerate(sizes.items()):
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        shards, first = [], 0
        for i, n in enumerate(counts):
            b = np.arange(first, first + n)
            arr = np.zeros((n, SEQ + 1), dtype="<u2")
            arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3:] = s, b >> 16, b & 0xFFFF, 7
            fsio.write_bytes(d / f"shard-{i:05d}.bin", arr.tobytes())
            shards.append({"file": f"shard-{i:05d}.bin", "blocks": n, "bytes": arr.nbytes,
                           "sha256": fsio.sha256_bytes(arr.tobytes())})
            first += n
        fsio.write_json(d / "index.json", {"source": name, "dtype": "uint16", "seq_len": SEQ, "shards": shards,
                                           "tokenizer_sha256": "t" * 64, "total_blocks": first})
    return root


def ids(x) -> np.ndarray:
    """(source, global block index within source) of every row of a batch."""
    x = x.numpy()
    return np.stack([x[:, 0], (x[:, 1] << 16) | x[:, 2]], axis=1)


def loader(root, sizes, mix, *, seed=0, g=8, rank=0, world=1, workers=0, **kw):
    return Loader(root, sources=list(sizes), mix=mix, seed=seed, global_batch=g, rank=rank, world=world,
                  num_workers=workers, **kw)


def global_steps(root, sizes, mix, steps, *, seed, g, world=1, workers=0, state=None):
    """Run every rank for `steps` steps; return per-step global batches (rank slices joined) and final states."""
    per_rank, states = [], []
    for r in range(world):
        ld = loader(root, sizes, mix, seed=seed, g=g, rank=r, world=world, workers=workers)
        if state:
            ld.load_state_dict(state)
        got = [ids(x) for x, _ in itertools.islice(ld, steps)]
        per_rank.append(got)
        states.append(ld.state_dict())
    assert all(s == states[0] for s in states)
    return [np.concatenate([per_rank[r][t] for r in range(world)]) for t in range(steps)], states[0]


sizes_st = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]),
                           st.lists(st.integers(1, 37), min_size=1, max_size=4), min_size=1, max_size=3)


@FAST
@given(sizes=sizes_st, seed=st.integers(0, 2**31), g=st.integers(1, 16), data=st.data())
def test_each_epoch_of_each_source_is_a_permutation(tmp_path_factory, sizes, seed, g, data):
    root = make_shards(tmp_path_factory.mktemp("s"), sizes)
    mix = {k: data.draw(st.integers(1, 5)) for k in sizes}
    total = sum(map(sum, sizes.values()))
    steps = -(-3 * total // g)  # three epochs of the whole data at least
    batches, _ = global_steps(root, sizes, mix, steps, seed=seed, g=g)
    seq = np.concatenate(batches)
    for s, name in enumerate(sizes):
        mine = seq[seq[:, 0] == s][:, 1]
        n = sum(sizes[name])
        for e in range(len(mine) // n):  # every complete epoch holds each block exactly once
            assert sorted(mine[e * n:(e + 1) * n].tolist()) == list(range(n))
        if len(mine) >= 2 * n and n > 3:
            assert mine[:n].tolist() != mine[n:2 * n].tolist()  # a fresh permutation each epoch


@FAST
@given(sizes=sizes_st, seed=st.integers(0, 2**31), per=st.integers(1, 4), world=st.integers(1, 8),
       world2=st.integers(1, 8), k=st.integers(0, 40), k2=st.integers(0, 20))
def test_resume_with_other_world_continues_the_same_sequence(tmp_path_factory, sizes, seed, per, world, world2, k, k2):
    root = make_shards(tmp_path_factory.mktemp("s"), sizes)
    g = per * world * world2  # divisible by both world sizes
    mix = {name: i + 1 for i, name in enumerate(sizes)}
    total = k + k2 + 5
    straight, _ = global_steps(root, sizes, mix, total, seed=seed, g=g)
    head, state = global_steps(root, sizes, mix, k, seed=seed, g=g, world=world)
    mid, state2 = global_steps(root, sizes, mix, k2, seed=seed, g=g, world=world2, state=state)
    tail, _ = global_steps(root, sizes, mix, 5, seed=seed, g=g, world=world, state=state2)
    resumed = head + mid + tail
    assert len(resumed) == len(straight)
    # equal to the one-rank sequence: the ranks' slices are disjoint and together the whole batch
    for a, b in zip(resumed, straight):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("workers,world", [(2, 1), (3, 2), (4, 1)])
def test_dataloader_workers_give_the_same_sequence(tmp_path, workers, world):
    sizes = {"a": [13, 11], "b": [5]}
    root = make_shards(tmp_path, sizes)
    mix = {"a": 0.75, "b": 0.25}
    ref, _ = global_steps(root, sizes, mix, 9, seed=3, g=4)
    head, state = global_steps(root, sizes, mix, 4, seed=3, g=4, world=world, workers=workers)
    tail, _ = global_steps(root, sizes, mix, 5, seed=3, g=4, world=1, workers=workers, state=state)
    for a, b in zip(head + tail, ref):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("group", [1, 3])
def test_worker_runs_reuse_their_shared_slots_without_overwriting_a_step(tmp_path, monkeypatch, group):
    """Runs of `group` steps: 25 steps on 2 workers wrap each worker's ring of 3 slots several times."""
    import shardline.stream.loader as loader_module

    monkeypatch.setattr(loader_module, "group_for", lambda *_: group)
    sizes = {"a": [13, 11], "b": [5]}
    root = make_shards(tmp_path, sizes)
    mix = {"a": 0.75, "b": 0.25}
    ref, _ = global_steps(root, sizes, mix, 25, seed=3, g=4)
    got, _ = global_steps(root, sizes, mix, 25, seed=3, g=4, workers=2)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(a, b)


@FAST
@given(weights=st.lists(st.integers(1, 20), min_size=1, max_size=5), start=st.integers(0, 10**12),
       n=st.integers(1, 3000))
def test_mixing_bound_holds_at_every_prefix_anywhere(weights, start, n):
    names = [f"s{i}" for i in range(len(weights))]
    sched = Schedule(dict(zip(names, weights)), names)
    w = np.array([float(x) for x in sched.weights.values()])
    src, within = sched.assign(start, n)
    counts = sched.counts_before(start) + np.stack([np.cumsum(src == j) for j in range(len(w))], axis=1)
    ideal = np.outer(start + np.arange(1, n + 1), w)
    assert np.abs(counts - ideal).max() < 1
    for j in range(len(w)):  # positions within a source are consecutive: nothing skipped, nothing twice
        assert (np.diff(within[src == j]) == 1).all()


def test_decimal_weights_are_exact():
    sched = Schedule({"a": 0.9, "b": 0.1}, ["a", "b"])
    assert sched.period == 10 and sched.counts_before(10**15).tolist() == [9 * 10**14, 10**14]


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_shard_is_refused_and_never_read(tmp_path, damage):
    sizes = {"a": [6, 6, 6]}
    root = make_shards(tmp_path, sizes)
    bad = root / "a" / "shard-00001.bin"
    data = bytearray(bad.read_bytes())
    if damage == "flip":
        data[5] ^= 1
    else:
        data = data[:-3]
    bad.write_bytes(bytes(data))
    seen = []
    with pytest.raises(ShardCorrupt) as e:
        for x, _ in loader(root, sizes, {"a": 1}, g=2):
            seen += ids(x)[:, 1].tolist()
    assert "shard-00001.bin" in str(e.value) and "dvc repro shard" in str(e.value)
    assert not any(6 <= b < 12 for b in seen)
    if damage == "flip":
        assert "expected" in str(e.value)
        with pytest.raises(ShardCorrupt):  # a size check alone cannot see a flipped byte...
            list(itertools.islice(loader(root, {"a": [6, 6, 6]}, {"a": 1}, g=18), 1))
        ld = loader(root, sizes, {"a": 1}, g=18, verify="size")
        assert len(next(iter(ld))[0]) == 18  # ...which is the trade verify="size" makes


def test_state_mismatch_names_field_and_override(tmp_path):
    sizes = {"a": [10], "b": [10]}
    root = make_shards(tmp_path, sizes)
    ld = loader(root, sizes, {"a": 1, "b": 1})
    next(iter(ld))
    state = ld.state_dict()
    other = loader(root, sizes, {"a": 3, "b": 1})
    with pytest.raises(StateMismatch, match=r"(?s)mix: saved .* now .*train.allow_data_change"):
        other.load_state_dict(state)
    assert other.load_state_dict(state, allow_change=True)[0].startswith("mix:")
    assert other.state_dict()["blocks_consumed"] == 8
    with pytest.raises(StateMismatch, match="global_batch"):
        loader(root, sizes, {"a": 1, "b": 1}, g=4).load_state_dict(state)


def test_loader_rejects_bad_geometry(tmp_path):
    root = make_shards(tmp_path, {"a": [4]})
    with pytest.raises(BadInput, match="divisible by the world size"):
        loader(root, {"a": [4]}, {"a": 1}, g=3, world=2)


def test_batch_hash_log_is_identical_across_world_sizes(tmp_path):
    sizes = {"a": [9, 8], "b": [3]}
    root = make_shards(tmp_path, sizes)
    logs = {1: [], 2: []}
    for world in (1, 2):
        ld = loader(root, sizes, {"a": 2, "b": 1}, g=4, world=world, log=logs[world].append)
        list(itertools.islice(ld, 6))
    assert logs[1] == logs[2] and len(logs[1]) == 6 and "batch" in logs[1][0]


def test_building_a_loader_draws_no_global_randomness(tmp_path):
    import random

    import torch

    sizes = {"a": [5]}
    root = make_shards(tmp_path, sizes)
    states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone())
    ld = loader(root, sizes, {"a": 1})
    list(itertools.islice(ld, 3))
    assert random.getstate() == states[0]
    assert (np.random.get_state()[1] == states[1]).all() and torch.equal(torch.get_rng_state(), states[2])
