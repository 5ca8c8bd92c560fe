"""fastText's language identification (the lid.176 model), computed as fastText computes it.

Contract: `load(path).predict(line)` returns exactly what fasttext's
`load_model(path).predict(line, k=-1)` returns for a line without newlines: every label whose
probability passes fastText's threshold of 0, most likely first, with the same float32
probabilities, bit for bit. It follows fastText 0.9.2's code path step by step (the one
fasttext-predict builds): tokens split on ASCII whitespace, up to fastText's end-of-sentence
token, in-vocabulary words by their id and stored subwords, others by their character 2- to
4-grams hashed into the pruned buckets (FNV-1a over UTF-8 bytes, sign-extended as fastText
hashes them); the hidden vector summed row by row in float32 from the quantized input matrix;
the hierarchical softmax walked depth first with its float32 scores, its `std_log` and the
sort of libstdc++'s heap, so that even equal scores come out in fastText's order. The
transcendental functions are glibc's own `expf` and `log`, as fastText calls them, so every
rounding is the one fastText makes. Supervised
models with a hierarchical softmax, quantized input and a dense output (the shipped lid.176.ftz);
anything else is refused by name.

Why not fasttext-predict itself: its tokenizer reads a stringstream a byte at a time, builds a
std::string per n-gram and looks each pruned bucket up in an unordered_map: 1.8 ms for a 5 KB
document here, most of the clean stage's budget. The same steps compiled by numba over the
document's bytes, with no allocation per token, take ~40 us (bench.curation measures both;
tests/unit/test_lid.py compares every label and probability with fasttext-predict's).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np

from shardline.core.errors import ShardlineError
from shardline.data.clean.kernels import fasttext as ft, ftdict as fd, hsoftmax as hs

_MAGIC, _VERSION = 793712314, 12
_HS, _SUPERVISED = 1, 3  # fastText's loss_name::hs and model_name::sup
_EOS, _LABEL = b"</s>", b"__label__"


@numba.njit(cache=True)
def _predict(data, inputs, outputs, cache):
    return hs.tree(ft.hidden(data, *inputs, *cache), *outputs[:3], outputs[5])


@numba.njit(cache=True)
def _predict_spans(cps, spans, slots, payload, used, inputs, outputs):
    return hs.tree(ft.hidden_spans(cps, spans, slots, payload, used, *inputs), *outputs[:3], outputs[5])


@numba.njit(cache=True)
def _judge(data, inputs, outputs, cache, wanted):
    return hs.judge(ft.hidden(data, *inputs, *cache), *outputs, wanted)


@numba.njit(cache=True)
def _judge_spans(cps, spans, slots, payload, used, inputs, outputs, wanted):
    return hs.judge(ft.hidden_spans(cps, spans, slots, payload, used, *inputs), *outputs, wanted)


@dataclass(frozen=True)
class Model:
    """A loaded .ftz/.bin supervised model, as arrays: `inputs` (the dictionary, its subwords,
    the pruned buckets, the input rows), `outputs` (the output rows, the tree: left, right,
    parent, height, and the number of labels)."""

    labels: tuple[str, ...]
    inputs: tuple
    outputs: tuple
    # the token cache: (slots: key start, key length, ids start, ids count, hash), key bytes, ids,
    # and (key bytes used, ids used, tokens); emptied when full. 2**18 slots, at most half full.
    cache: tuple = ()

    def __post_init__(self):
        slots = np.full((1 << 18, 5), -1, np.int64)
        object.__setattr__(self, "cache", (slots, np.empty(1 << 22, np.uint8), np.empty(1 << 22, np.int32),
                                           np.zeros(3, np.int64)))

    def predict(self, line: str) -> tuple[list[str], np.ndarray]:
        """fastText's predict(line, k=-1): (labels, float32 probabilities), most likely first."""
        leaves, probs = self.leaves(line)
        return [self.labels[i] for i in leaves.tolist()], probs

    def leaves(self, line: str) -> tuple[np.ndarray, np.ndarray]:
        """predict's answer with the labels as their numbers in `labels`."""
        return _predict(self._bytes(line), self.inputs, self.outputs, self.cache)

    def leaves_of_spans(self, cps: np.ndarray, spans: np.ndarray, table) -> tuple[np.ndarray, np.ndarray]:
        """leaves(text with newlines as spaces) for a text whose str.split spans, found in the
        wordsplit.Table `table` as wordsplit.split gives them, are fastText's tokens too (no odd
        whitespace, no surrogate): each span's rows are looked up in the table with its words."""
        table.attach(self)
        return _predict_spans(cps, spans, table.slots, table.payload, table.payload_used, self.inputs, self.outputs)

    def judge(self, line: str, wanted: np.ndarray) -> tuple[int, float, float]:
        """(the top label's number, its probability, the highest probability among the `wanted`
        labels' numbers): leaves()'s first and the best of `wanted` in it; (-1, 0, 0) for none."""
        top, prob, tied, best = _judge(self._bytes(line), self.inputs, self.outputs, self.cache, wanted)
        return self._untie(top, prob, tied, best, lambda: self.leaves(line), wanted)

    def judge_spans(self, cps: np.ndarray, spans: np.ndarray, table, wanted: np.ndarray) -> tuple[int, float, float]:
        """judge() from a text's spans in the word table, as leaves_of_spans."""
        table.attach(self)
        top, prob, tied, best = _judge_spans(cps, spans, table.slots, table.payload, table.payload_used,
                                             self.inputs, self.outputs, wanted)
        return self._untie(top, prob, tied, best, lambda: self.leaves_of_spans(cps, spans, table), wanted)

    @staticmethod
    def _untie(top, prob, tied, best, leaves, wanted) -> tuple[int, float, float]:
        if tied:  # two labels share the top score: fastText's heap orders them, so ask the whole tree
            ids, probs = leaves()
            top, prob = (int(ids[0]), probs[0]) if ids.size else (-1, 0.0)
        return int(top), float(prob), float(best)

    @staticmethod
    def _bytes(line: str) -> np.ndarray:
        if "\n" in line:
            raise ValueError("predict processes one line at a time (remove '\\n')")
        return np.frombuffer(line.encode(), np.uint8)


class _Reader:
    def __init__(self, data: bytes, path: Path):
        self.data, self.at, self.path = data, 0, path

    def take(self, fmt: str):
        out = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return out if len(out) > 1 else out[0]

    def array(self, dtype, count: int) -> np.ndarray:
        out = np.frombuffer(self.data, dtype, count, self.at)
        self.at += out.nbytes
        return out

    def cstring(self) -> bytes:
        end = self.data.index(b"\0", self.at)
        out, self.at = self.data[self.at:end], end + 1
        return out

    def quantizer(self) -> tuple[int, int, int, np.ndarray]:
        dim, nsubq, dsub, lastdsub = self.take("4i")
        return nsubq, dsub, lastdsub, self.array("<f4", dim * 256)

    def refuse(self, what: str) -> ShardlineError:
        return ShardlineError(f"{self.path}: {what}; the language rule reads fastText's supervised, quantized "
                              "hierarchical-softmax models (lid.176.ftz)")


def _decode(codes: np.ndarray, nsubq: int, dsub: int, lastdsub: int, centroids: np.ndarray) -> np.ndarray:
    """ProductQuantizer's vectors for every row: row i, sub-quantizer m -> get_centroids(m, code)."""
    parts = []
    for m in range(nsubq):
        d = lastdsub if m == nsubq - 1 else dsub
        base = m * 256 * dsub
        idx = base + codes[:, m].astype(np.int64)[:, None] * d + np.arange(d)
        parts.append(centroids[idx])
    return np.concatenate(parts, axis=1)


@functools.cache
def load(path: str | Path) -> Model:
    path = Path(path)
    r = _Reader(path.read_bytes(), path)
    if r.take("2i") != (_MAGIC, _VERSION):
        raise r.refuse("not a fastText model of format version 12")
    dim, _ws, _epoch, _min_count, _neg, word_ngrams, loss, model, bucket, minn, maxn, _lr = r.take("12i")
    r.take("d")
    if model != _SUPERVISED or loss != _HS or word_ngrams != 1:
        raise r.refuse(f"model {model}, loss {loss}, wordNgrams {word_ngrams}")
    size, nwords, nlabels = r.take("3i")
    _ntokens, prune_size = r.take("2q")
    words, counts, types = [], [], []
    for _ in range(size):
        words.append(r.cstring())
        counts.append(r.take("q"))
        types.append(r.take("b"))
    pairs = r.array("<i4", 2 * max(prune_size, 0)).reshape(-1, 2)
    if not r.take("?"):
        raise r.refuse("its input matrix is not quantized")
    qnorm = r.take("?")
    m, n = r.take("2q")
    codes = r.array(np.uint8, r.take("i")).reshape(m, -1)
    nsubq, dsub, lastdsub, centroids = r.quantizer()
    norms = np.ones(m, np.float32)
    if qnorm:
        norm_codes = r.array(np.uint8, m)
        norms = r.quantizer()[3][norm_codes.astype(np.int64)]  # npq: one sub-quantizer of dimension 1
    # addcode: x[j] += norm * c[j], the product rounded to float32 before the sum, as here
    rows = np.ascontiguousarray(_decode(codes, nsubq, dsub, lastdsub, centroids) * norms[:, None], np.float32)
    if r.take("?"):
        raise r.refuse("its output matrix is quantized")
    om, on = r.take("2q")
    out_rows = r.array("<f4", om * on).reshape(om, on).copy()
    if n != dim or on != dim or om != nlabels:
        raise r.refuse(f"matrices of {m}x{n} and {om}x{on} for dim {dim} and {nlabels} labels")

    prune = np.full(bucket, -1, np.int32)
    prune[pairs[:, 0]] = pairs[:, 1]
    if prune_size < 0:  # not pruned: every bucket is its own row
        prune = np.arange(bucket, dtype=np.int32)
    wptr = np.zeros(size + 1, np.int64)
    wptr[1:] = np.cumsum([len(w) for w in words])
    wbytes = np.frombuffer(b"".join(words), np.uint8)
    table = np.full(int(np.ceil(size / 0.7)), -1, np.int32)
    for i, w in enumerate(words):  # Dictionary::load's word2int_
        at = int(fd.fnv(np.frombuffer(w, np.uint8), 0, len(w), np.uint32(2166136261))) % table.size
        while table[at] != -1:
            at = (at + 1) % table.size
        table[at] = i
    subs, sub_ptr = [], [0]
    scratch = np.empty(4 * 64 + 64, np.int32)
    for i, w in enumerate(words):  # Dictionary::initNgrams
        ids = [i]
        if w != _EOS:
            word = np.frombuffer(b"<" + w + b">", np.uint8)
            buf = scratch if 4 * word.size + 8 <= scratch.size else np.empty(4 * word.size + 8, np.int32)
            k = fd.subwords(word, minn, maxn, bucket, prune, nwords, buf, 0)
            ids += buf[:k].tolist()
        subs += ids
        sub_ptr.append(len(subs))
    left, right = _huffman([c for c, t in zip(counts, types) if t == 1], nlabels)
    parent, height = _shape(left, right)
    labels = tuple(w.decode() for w, t in zip(words, types) if t == 1)
    return Model(labels, (table, wbytes, wptr, np.array(types, np.int8), np.array(sub_ptr, np.int64),
                          np.array(subs, np.int32), minn, maxn, bucket, prune, nwords, rows),
                 (out_rows, left, right, parent, height, nlabels))


def _shape(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each node's parent (-1 at the root) and the most levels below it to a leaf."""
    parent, height = np.full(left.size, -1, np.int32), np.zeros(left.size, np.int32)
    for node in range(left.size):  # children come before their parents (buildTree)
        if left[node] != -1:
            parent[left[node]] = parent[right[node]] = node
            height[node] = 1 + max(height[left[node]], height[right[node]])
    return parent, height


def _huffman(counts: list[int], osz: int) -> tuple[np.ndarray, np.ndarray]:
    """HierarchicalSoftmaxLoss::buildTree: a Huffman tree over the labels' counts."""
    count = [*counts, *[10**15] * (osz - 1)]
    left, right = np.full(2 * osz - 1, -1, np.int32), np.full(2 * osz - 1, -1, np.int32)
    leaf, node = osz - 1, osz
    for i in range(osz, 2 * osz - 1):
        mini = [0, 0]
        for j in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                mini[j], leaf = leaf, leaf - 1
            else:
                mini[j], node = node, node + 1
        left[i], right[i] = mini
        count[i] = count[mini[0]] + count[mini[1]]
    return left, right
