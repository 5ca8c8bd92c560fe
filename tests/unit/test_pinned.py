"""Pinned formats: the keyed hash that decides held-out documents, the permutation and the mixing
table that order blocks, the byte order of ids, and the format version every index and manifest
carries.

A change to any of them would move held-out documents or change the resume order of data and
checkpoints that already exist while every property test still passed, so each is pinned to
literal values. None of the literals was copied from the code's output: the hashes and the
permutation come from the independent implementations below (a pure-Python BLAKE2b written from
RFC 7693 and checked against the RFC's own "abc" vector; a pure-integer Feistel network written
from permute.py's docstring), each also asserted equal to the literal, and the mixing tables are
worked out by hand in comments. A failure here means a format changed: if that is intended, bump
the format version (shardformat.FORMAT_VERSION, checkpoint.FORMAT_VERSION, split.KEY's /v2) and
say so in the release, do not just update the literals.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from shardline import __version__
from shardline.core import fsio, shardformat
from shardline.core.config import Eval
from shardline.core.errors import BadInput
from shardline.core.filenames import MANIFEST, index_of
from shardline.data import shard
from shardline.data.clean.stage import split
from shardline.stream import loader as stream_loader
from shardline.stream.mixing import Schedule
from shardline.stream.permute import Permutation, key_for
from shardline.stream.remote import Remote
from harness.projects import lineage_of
from shardline.training import checkpoint
from tests.conftest import make_project
from tests.unit.test_shard import fake_tokens

# ---- an independent BLAKE2b (RFC 7693), no hashlib

M64 = (1 << 64) - 1
IV = (0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
      0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179)
SIGMA = ((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), (14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3),
         (11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4), (7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8),
         (9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13), (2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9),
         (12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11), (13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10),
         (6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5), (10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0))


def _rotr(x: int, n: int) -> int:
    return ((x >> n) | (x << (64 - n))) & M64


def _compress(h: list[int], block: bytes, t: int, last: bool) -> list[int]:
    m = [int.from_bytes(block[8 * i:8 * i + 8], "little") for i in range(16)]
    v = list(h) + list(IV)
    v[12] ^= t & M64
    v[13] ^= t >> 64
    if last:
        v[14] ^= M64

    def g(a, b, c, d, x, y):
        v[a] = (v[a] + v[b] + x) & M64
        v[d] = _rotr(v[d] ^ v[a], 32)
        v[c] = (v[c] + v[d]) & M64
        v[b] = _rotr(v[b] ^ v[c], 24)
        v[a] = (v[a] + v[b] + y) & M64
        v[d] = _rotr(v[d] ^ v[a], 16)
        v[c] = (v[c] + v[d]) & M64
        v[b] = _rotr(v[b] ^ v[c], 63)

    for r in range(12):
        s = SIGMA[r % 10]
        for i, (a, b, c, d) in enumerate(((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                                          (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14))):
            g(a, b, c, d, m[s[2 * i]], m[s[2 * i + 1]])
    return [h[i] ^ v[i] ^ v[i + 8] for i in range(8)]


def blake2b(msg: bytes, key: bytes = b"", size: int = 64) -> bytes:
    h = list(IV)
    h[0] ^= 0x01010000 ^ (len(key) << 8) ^ size  # parameter block: fanout 1, depth 1, key and digest length
    data = (key.ljust(128, b"\0") if key else b"") + msg  # a key is a first block of its own
    blocks = [data[i:i + 128] for i in range(0, len(data), 128)] or [b""]
    for i, b in enumerate(blocks):
        last = i == len(blocks) - 1
        h = _compress(h, b.ljust(128, b"\0"), len(data) if last else 128 * (i + 1), last)
    return b"".join(x.to_bytes(8, "little") for x in h)[:size]


def test_the_independent_blake2b_gives_the_rfc_vector():
    # RFC 7693, Appendix A: BLAKE2b-512("abc")
    assert blake2b(b"abc").hex() == ("ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d1"
                                     "7d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923")


# ---- the held-out split

# the dropped samples' choice (and, before the clean stage's CODE_VERSION 5, the split's u): the 8-byte
# BLAKE2b of "<source> NUL <id>" keyed with b"shardline/heldout/v1", read little-endian
SPLIT = [("code", "email/__init__.py:0", 16306530054933741087),
         ("prose", "topics.jsonl:1", 3797114038901429976),
         ("web", "a.jsonl:41", 10712141426764087900),
         ("code", "", 1459000924029454436)]


@pytest.mark.parametrize("source,doc_id,u", SPLIT)
def test_split_hash_of_an_id_is_pinned(source, doc_id, u):
    assert int.from_bytes(blake2b(f"{source}\0{doc_id}".encode(), b"shardline/heldout/v1", 8), "little") == u
    assert split.hash_id(source, doc_id) == u


# u (the held-out split) = the 8-byte BLAKE2b of "<source> NUL <digest>" keyed with
# b"shardline/heldout/v2", digest = the unkeyed 16-byte BLAKE2b of the document's cleaned text (UTF-8)
DOCS = [("code", "def f():\n    return 1\n", 5791289222885237782),
        ("prose", "The cat sat on the mat.", 13531815294066778222),
        ("web", "caf\u00e9 \u2014 menu", 8724887286455511768),
        ("code", "", 4480746264710888192)]


@pytest.mark.parametrize("source,text,u", DOCS)
def test_split_hash_of_a_document_is_pinned(source, text, u):
    digest = blake2b(text.encode(), b"", 16)
    assert int.from_bytes(blake2b(source.encode() + b"\0" + digest, b"shardline/heldout/v2", 8), "little") == u
    assert split.hash_doc(source, digest) == u


def test_which_ids_are_held_out_at_a_fraction_is_pinned():
    # eval.fraction 0.25 cuts at 2**62 = 4611686018427387904: of the u above only prose's and the
    # empty id's are below it; no clamp binds with min_docs 0
    cfg = Eval(fraction=0.25, min_docs=0, max_docs=10)
    us = np.array([u for *_, u in SPLIT], dtype=np.uint64)
    t = split.threshold([us], cfg)
    assert (t.value, t.held, t.clamp) == (4611686018427387904, 2, None)
    assert t.mask(us).tolist() == [False, True, False, True]


# ---- the permutation

def _mix64(x: int) -> int:
    """splitmix64's finaliser, on Python ints."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def feistel(n: int, key: int, i: int) -> int:
    """permute.py's docstring, one index at a time: 4 rounds on the fewest bits (at least 2) that
    cover n, left half the smaller, round key r = mix(r * 0x9E3779B97F4A7C15 ^ key) for r = 1..4,
    (L, R) -> (R, L ^ (mix(R ^ k) mod 2**|L|)), walking the cycle until the value is below n."""
    bits = max(2, (n - 1).bit_length())
    keys = [_mix64(((r * 0x9E3779B97F4A7C15) & M64) ^ key) for r in range(1, 5)]

    def rounds(x: int) -> int:
        lw, rw = bits // 2, bits - bits // 2
        for k in keys:
            left, right = x >> rw, x & ((1 << rw) - 1)
            x = (right << lw) | (left ^ (_mix64(right ^ k) & ((1 << lw) - 1)))
            lw, rw = rw, lw
        return x

    x = rounds(i)
    while x >= n:
        x = rounds(x)
    return x


# key_for: the 8-byte unkeyed BLAKE2b of "<seed> NUL <source> NUL <epoch>", read little-endian
KEYS = [(0, "code", 0, 3191391705286137301), (1337, "prose", 2, 1461922461392171066)]


@pytest.mark.parametrize("seed,source,epoch,key", KEYS)
def test_epoch_key_is_pinned(seed, source, epoch, key):
    assert int.from_bytes(blake2b(f"{seed}\0{source}\0{epoch}".encode(), size=8), "little") == key
    assert key_for(seed, source, epoch) == key


PERMUTATIONS = [(10, 12345, [8, 9, 6, 1, 2, 5, 0, 7, 4, 3]),
                (1000, 3191391705286137301, [266, 517, 824, 890, 290, 519, 234, 138, 865, 336, 158, 846]),
                (2, 0, [1, 0])]


@pytest.mark.parametrize("n,key,first", PERMUTATIONS)
def test_permutation_first_entries_are_pinned(n, key, first):
    assert [feistel(n, key, i) for i in range(len(first))] == first
    assert Permutation(n, key)(np.arange(len(first))).tolist() == first


def test_the_independent_feistel_is_the_whole_permutation():
    n, key = 77, 2**63 + 5  # odd bit count (7: halves 3 and 4) and a key with the top bit set
    got = Permutation(n, key)(np.arange(n)).tolist()
    assert got == [feistel(n, key, i) for i in range(n)] and sorted(got) == list(range(n))


# ---- the mixing table

def test_mix_table_is_pinned_for_five_three_two():
    # Weights 0.5/0.3/0.2: period D = 10, quotas a 5, b 3, c 2. The t-th block of s is released at
    # floor((t-1)·D/q)+1, due at ceil(t·D/q); earliest deadline first, ties to the lower source id:
    # m1 a(due 2) b(4) c(5): a | m2 b(4) c(5): b | m3 a(4) c(5): a | m4 c(5) b(7): c | m5 a(6) b(7): a
    # m6 b(7) c(10): b | m7 a(8) b(10) c(10): a | m8 b(10) c(10): b | m9 a(10) c(10): a | m10 c
    s = Schedule({"a": 0.5, "b": 0.3, "c": 0.2}, ["a", "b", "c"])
    assert s.period == 10 and s.table.tolist() == [0, 1, 0, 2, 0, 1, 0, 1, 0, 2]
    # 23 positions: two periods (10, 6, 4) and the first 3 entries (a, b, a)
    assert s.counts_before(23).tolist() == [12, 7, 4]
    src, within = s.assign(21, 4)  # positions 21..24 are table[1..4]: b a c a
    assert src.tolist() == [1, 0, 2, 0] and within.tolist() == [6, 11, 4, 12]


def test_mix_table_is_pinned_for_nine_to_one():
    # 0.9/0.1: D = 10; b's one block is due at 10 and a's 9th also at 10 (released at 9): a wins the tie
    s = Schedule({"a": 0.9, "b": 0.1}, ["a", "b"])
    assert s.table.tolist() == [0] * 9 + [1]


def test_loader_order_is_the_table_then_the_permutation():
    # positions of a 0.5/0.3/0.2 mix over sources of 10, 1000 and 2 blocks, seed 0: source from the
    # table above, the k-th block of a source is feistel(N, key_for(0, name, k // N), k % N)
    names, sizes = ["a", "b", "c"], {"a": 10, "b": 1000, "c": 2}
    sources = [stream_loader.Source(n, None, {"shards": [{"blocks": sizes[n]}]}) for n in names]  # type: ignore[arg-type]
    order = stream_loader.Order(sources, {"a": 0.5, "b": 0.3, "c": 0.2}, seed=0)
    table, seen, want = [0, 1, 0, 2, 0, 1, 0, 1, 0, 2], {n: 0 for n in names}, []
    for pos in range(25):
        name = names[table[pos % 10]]
        k, n = seen[name], sizes[name]
        seen[name] += 1
        want.append([names.index(name), 0, feistel(n, key_for(0, name, k // n), k % n)])
    assert order.blocks(0, 25).tolist() == want


# ---- byte order and the format version

def test_ids_are_little_endian():
    assert shardformat.DTYPES["uint16"].type(0x0102).tobytes() == b"\x02\x01"
    assert shardformat.DTYPES["uint32"].type(0x01020304).tobytes() == b"\x04\x03\x02\x01"
    assert shardformat.DTYPES["uint16"].str == "<u2" and shardformat.DTYPES["uint32"].str == "<u4"


def _shards(tmp_path):
    params, layout = make_project(tmp_path, [{"name": "s", "uri": "x", "format": "txt"}],
                                  shard={"seq_len": 15, "target_mb": 0.001})
    fake_tokens(layout, "s", [500, 300], val=(40,))  # token indexes without the field: version 1
    shard.run(params, layout, log=lambda _: None)
    return params, layout


def _set_version(path, version):
    data = json.loads(path.read_text())
    data["format_version"] = version
    path.write_text(json.dumps(data))


def test_indexes_carry_format_version_one_and_read_without_it(tmp_path):
    params, layout = _shards(tmp_path)
    for side in ("", "val"):
        assert fsio.read_json(index_of(layout.shards / "s" / side))["format_version"] == 1
    data = json.loads(index_of(layout.shards / "s").read_text())
    del data["format_version"]  # as written before the field existed
    index_of(layout.shards / "s").write_text(json.dumps(data))
    assert stream_loader.open_sources(layout.shards, ["s"])[0].blocks == data["total_blocks"]


@pytest.mark.parametrize("version", [2, 0, "1"])
def test_a_shard_index_of_another_version_is_one_line_naming_the_rebuild(tmp_path, version):
    params, layout = _shards(tmp_path)
    path = index_of(layout.shards / "s")
    _set_version(path, version)
    want = (f"{path}: format_version {version!r}, but this shardline ({__version__}) reads format 1; rebuild it "
            "with this release ('dvc repro -f -s shard'), or read it with the shardline release that wrote it")
    for read in (lambda: stream_loader.open_sources(layout.shards, ["s"]), lambda: shardformat.verify(path.parent)):
        with pytest.raises(BadInput) as e:
            read()
        assert str(e.value) == want
    with pytest.raises(BadInput) as e:  # from object storage: the URL named, not a fetch error
        stream_loader.open_sources(layout.shards, ["s"], Remote(f"file://{layout.shards}", str(tmp_path / "cache")))
    assert str(e.value) == want.replace(str(path), f"file://{path}")


def test_a_token_index_of_another_version_stops_the_shard_stage(tmp_path):
    params, layout = _shards(tmp_path)
    _set_version(index_of(layout.tokens / "s"), 2)
    with pytest.raises(BadInput, match=r"^data/tokens/s/index.json: format_version 2, .*'dvc repro -f -s tokenize'"):
        shard.run(params, layout, log=lambda _: None)


def _checkpoint(tmp_path):
    root = tmp_path / "checkpoints"
    return root, checkpoint.save(root, 7, {"model.pt": {"w": torch.arange(3.0)}}, {"step": 7}, lineage_of(tmp_path))


def test_checkpoint_manifest_carries_format_version_one_and_reads_without_it(tmp_path):
    root, path = _checkpoint(tmp_path)
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["format_version"] == 1
    del manifest["format_version"]
    (path / MANIFEST).write_text(json.dumps(manifest))
    assert checkpoint.verify(path) == (True, "ok")
    assert checkpoint.load(path)[0]["model.pt"]["w"].tolist() == [0.0, 1.0, 2.0]


def test_a_checkpoint_of_another_version_is_one_line_and_never_removed(tmp_path):
    root, path = _checkpoint(tmp_path)
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["format_version"], manifest["versions"]["shardline"] = 2, "9.9.0"
    (path / MANIFEST).write_text(json.dumps(manifest))
    want = (f"{path / MANIFEST}: format_version 2, but this shardline ({__version__}) reads format 1; it was "
            f"written by shardline 9.9.0: use that release for it, or move {path.name} out of {root} to resume "
            "from an older checkpoint")
    for read in (lambda: checkpoint.verify(path), lambda: checkpoint.latest_valid(root, log=lambda _: None),
                 lambda: checkpoint.load(path), lambda: checkpoint.retain(root, 0, 0, log=lambda _: None)):
        with pytest.raises(BadInput) as e:
            read()
        assert str(e.value) == want
    assert (path / MANIFEST).exists()  # retention refused: a newer release's checkpoint is not ours to remove
