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
from numba import types

from shardline.core.errors import ShardlineError

_MAGIC, _VERSION = 793712314, 12
_HS, _SUPERVISED = 1, 3  # fastText's loss_name::hs and model_name::sup
_EOS, _LABEL = b"</s>", b"__label__"
_LABEL_BYTES = np.frombuffer(_LABEL, np.uint8)  # an unknown token starting so is a label, not an input


# glibc's own, as fastText calls them (std::exp on a float, std::log on a double). The wheel binds
# the old symbol versions (expf@GLIBC_2.2.5, log@GLIBC_2.2.5), wrappers over the same functions as
# these: every 7th float32 of [-88, 88] (expf) and of (0, 1.5] (log) gave the same bits. As
# numba's external functions they are bound when the code is loaded, so it can be cached.
_expf = types.ExternalFunction("expf", types.float32(types.float32))
_log = types.ExternalFunction("log", types.float64(types.float64))


@numba.njit(cache=True)
def _fnv(data, start, end, h):
    """fastText's hash: FNV-1a over bytes read as signed chars (uint32)."""
    for i in range(start, end):
        b = np.uint32(data[i])
        if b >= 128:
            b |= np.uint32(0xFFFFFF00)
        h = np.uint32((h ^ b) * np.uint32(16777619))
    return h


@numba.njit(cache=True)
def _subwords(word, minn, maxn, bucket, prune, nwords, out, n_out):
    """Dictionary::computeSubwords over `word` (the token between '<' and '>'), each n-gram's
    bucket through the pruning map (pushHash), appended to out[n_out:]; returns the new length."""
    size = word.size
    for i in range(size):
        if (word[i] & 0xC0) == 0x80:
            continue
        h = np.uint32(2166136261)
        j, n = i, 1
        while j < size and n <= maxn:
            h = _fnv(word, j, j + 1, h)
            j += 1
            while j < size and (word[j] & 0xC0) == 0x80:
                h = _fnv(word, j, j + 1, h)
                j += 1
            if n >= minn and not (n == 1 and (i == 0 or j == size)):
                row = prune[np.int64(h % np.uint32(bucket))]
                if row >= 0:
                    out[n_out] = nwords + row
                    n_out += 1
            n += 1
    return n_out


@numba.njit(cache=True)
def _find(data, start, end, h, table, wbytes, wptr):
    """Dictionary::find + word2int_: the word's id, or -1."""
    size = table.size
    at = np.int64(h % np.uint32(size))
    while table[at] != -1:
        w = table[at]
        a, b = wptr[w], wptr[w + 1]
        if b - a == end - start:
            same = True
            for k in range(end - start):
                if wbytes[a + k] != data[start + k]:
                    same = False
                    break
            if same:
                return w
        at = (at + 1) % size
    return -1


@numba.njit(cache=True)
def _is_space(c):
    return c == 32 or c == 10 or c == 13 or c == 9 or c == 11 or c == 12 or c == 0


@numba.njit(cache=True)
def _cached(data, start, end, h, cache, keys, ids, state):
    """The token's row ids from the per-process token cache: (where in `ids`, how many), or (-1, 0)."""
    slots = cache.shape[0]
    at = np.int64(h) & (slots - 1)
    while cache[at, 0] != -1:
        if cache[at, 1] == end - start and np.uint32(cache[at, 4]) == h:
            k0 = cache[at, 0]
            same = True
            for k in range(end - start):
                if keys[k0 + k] != data[start + k]:
                    same = False
                    break
            if same:
                return cache[at, 2], cache[at, 3]
        at = (at + 1) & (slots - 1)
    return -1, at


@numba.njit(cache=True)
def _remember(data, start, end, h, at, found, n, cache, keys, ids, state):
    """Put a token's ids in the cache at free slot `at`; returns where they are, or -1 when the
    cache was full and was emptied (then nothing is kept: the caller uses `found`)."""
    if state[0] + end - start > keys.size or state[1] + n > ids.size or 2 * (state[2] + 1) > cache.shape[0]:
        cache[:, 0] = -1
        state[:] = 0
        return -1
    for k in range(end - start):
        keys[state[0] + k] = data[start + k]
    for k in range(n):
        ids[state[1] + k] = found[k]
    cache[at, 0], cache[at, 1], cache[at, 2], cache[at, 3], cache[at, 4] = state[0], end - start, state[1], n, h
    state[0] += end - start
    state[1] += n
    state[2] += 1
    return cache[at, 2]


@numba.njit(cache=True)
def _add_rows(hidden, rows, src, first, n):
    """hidden[d] += rows[r, d] for each r of src[first:first + n], in order, in float32 (as
    fastText's addRow). For 16 dimensions (lid.176's) the sums stay in registers (~25% faster than
    the loop over d, which must store each one: numba's LLVM may not assume `hidden` and `rows` apart)."""
    if rows.shape[1] == 16:
        h0 = hidden[0]
        h1 = hidden[1]
        h2 = hidden[2]
        h3 = hidden[3]
        h4 = hidden[4]
        h5 = hidden[5]
        h6 = hidden[6]
        h7 = hidden[7]
        h8 = hidden[8]
        h9 = hidden[9]
        h10 = hidden[10]
        h11 = hidden[11]
        h12 = hidden[12]
        h13 = hidden[13]
        h14 = hidden[14]
        h15 = hidden[15]
        for k in range(first, first + n):
            r = src[k]
            h0 += rows[r, 0]
            h1 += rows[r, 1]
            h2 += rows[r, 2]
            h3 += rows[r, 3]
            h4 += rows[r, 4]
            h5 += rows[r, 5]
            h6 += rows[r, 6]
            h7 += rows[r, 7]
            h8 += rows[r, 8]
            h9 += rows[r, 9]
            h10 += rows[r, 10]
            h11 += rows[r, 11]
            h12 += rows[r, 12]
            h13 += rows[r, 13]
            h14 += rows[r, 14]
            h15 += rows[r, 15]
        hidden[0] = h0
        hidden[1] = h1
        hidden[2] = h2
        hidden[3] = h3
        hidden[4] = h4
        hidden[5] = h5
        hidden[6] = h6
        hidden[7] = h7
        hidden[8] = h8
        hidden[9] = h9
        hidden[10] = h10
        hidden[11] = h11
        hidden[12] = h12
        hidden[13] = h13
        hidden[14] = h14
        hidden[15] = h15
    else:
        for k in range(first, first + n):
            r = src[k]
            for d in range(rows.shape[1]):
                hidden[d] += rows[r, d]


@numba.njit(cache=True)
def _hidden(data, table, wbytes, wptr, wtype, sub_ptr, sub_ids, minn, maxn, bucket, prune, nwords, rows,
            cache, keys, ids, state):
    """Dictionary::getLine for `data` + "\n", then Model::computeHidden: the mean input row."""
    dim = rows.shape[1]
    hidden = np.zeros(dim, np.float32)
    longest = 0
    i, size = 0, data.size
    word = np.empty(size + 2, np.uint8)
    scratch = np.empty(3 * (size + 2) + 8, np.int32)  # a token of L bytes has < 3(L + 2) n-grams
    count = 0
    eos = False
    while not eos:
        while i < size and _is_space(data[i]):
            i += 1
        if i >= size:  # the "\n" fastText's wrapper appends: the end-of-sentence token
            eos = True
            src, first, n = sub_ids, sub_ptr[0], sub_ptr[1] - sub_ptr[0]  # "</s>" is word 0
        else:
            start = i
            while i < size and not _is_space(data[i]):
                i += 1
            end = i
            h = _fnv(data, start, end, np.uint32(2166136261))
            wid = _find(data, start, end, h, table, wbytes, wptr)
            if wid >= 0:
                if wtype[wid] != 0:  # a label: not an input
                    continue
                eos = wid == 0  # a literal "</s>" ends the line too
                src, first, n = sub_ids, sub_ptr[wid], sub_ptr[wid + 1] - sub_ptr[wid]
            else:
                if end - start >= 9:  # an unknown "__label__..." is a label too
                    label = True
                    for k in range(9):
                        if data[start + k] != _LABEL_BYTES[k]:
                            label = False
                            break
                    if label:
                        continue
                first, at = _cached(data, start, end, h, cache, keys, ids, state)
                if first >= 0:
                    src, n = ids, at
                else:
                    word[0] = 60  # '<'
                    for k in range(end - start):
                        word[k + 1] = data[start + k]
                    word[end - start + 1] = 62  # '>'
                    n = _subwords(word[:end - start + 2], minn, maxn, bucket, prune, nwords, scratch, 0)
                    first = _remember(data, start, end, h, at, scratch, n, cache, keys, ids, state)
                    src = ids
                    if first < 0:
                        src, first = scratch, 0
        _add_rows(hidden, rows, src, first, n)
        count += n
    scale = np.float32(1.0 / count)
    for d in range(dim):
        hidden[d] *= scale
    return hidden


@numba.njit(cache=True)
def _before(a_score, b_score):
    return a_score > b_score  # comparePairs: the heap's "less" is the higher score


@numba.njit(cache=True)
def _push_heap(scores, ids, hole, top, score, ident):
    parent = (hole - 1) // 2
    while hole > top and _before(scores[parent], score):
        scores[hole], ids[hole] = scores[parent], ids[parent]
        hole = parent
        parent = (hole - 1) // 2
    scores[hole], ids[hole] = score, ident


@numba.njit(cache=True)
def _adjust_heap(scores, ids, hole, length, score, ident):
    top = hole
    second = hole
    while second < (length - 1) // 2:
        second = 2 * (second + 1)
        if _before(scores[second], scores[second - 1]):
            second -= 1
        scores[hole], ids[hole] = scores[second], ids[second]
        hole = second
    if (length & 1) == 0 and second == (length - 2) // 2:
        second = 2 * (second + 1)
        scores[hole], ids[hole] = scores[second - 1], ids[second - 1]
        hole = second - 1
    _push_heap(scores, ids, hole, top, score, ident)


@numba.njit(cache=True)
def _std_log(x):
    return np.float32(_log(np.float64(x) + 1e-5))


@numba.njit(cache=True)
def _tree(hidden, out_rows, left, right, osz):
    """HierarchicalSoftmaxLoss::predict with k = all and threshold 0, then the probabilities: the
    labels (as leaf numbers) and probabilities, in fastText's order."""
    floor = _std_log(np.float32(0.0))  # std_log(threshold 0)
    scores = np.empty(osz, np.float32)
    ids = np.empty(osz, np.int32)
    n = 0
    stack_node = np.empty(2 * osz, np.int32)
    stack_score = np.empty(2 * osz, np.float32)
    sp = 0
    stack_node[0], stack_score[0] = 2 * osz - 2, np.float32(0.0)
    sp = 1
    while sp:  # HierarchicalSoftmaxLoss::dfs, left child first
        sp -= 1
        node, score = stack_node[sp], stack_score[sp]
        if score < floor:
            continue
        if n == osz and score < scores[0]:
            continue
        if left[node] == -1 and right[node] == -1:
            _push_heap(scores, ids, n, 0, score, node)
            n += 1
            continue
        f = np.float32(0.0)
        r = node - osz
        for d in range(hidden.size):
            f += out_rows[r, d] * hidden[d]
        f = np.float32(1.0 / np.float64(np.float32(1.0) + _expf(-f)))
        # pushed right first, so the left subtree is walked first
        stack_node[sp], stack_score[sp] = right[node], score + _std_log(f)
        stack_node[sp + 1], stack_score[sp + 1] = left[node], score + _std_log(
            np.float32(1.0 - np.float64(f)))
        sp += 2
    last = n
    while last > 1:  # std::sort_heap
        last -= 1
        s, i = scores[last], ids[last]
        scores[last], ids[last] = scores[0], ids[0]
        _adjust_heap(scores, ids, 0, last, s, i)
    probs = np.empty(n, np.float32)
    for k in range(n):
        probs[k] = _expf(scores[k])
    return ids[:n], probs


@numba.njit(cache=True)
def _predict(data, table, wbytes, wptr, wtype, sub_ptr, sub_ids, minn, maxn, bucket, prune, nwords, rows,
             out_rows, left, right, osz, cache, keys, ids, state):
    hidden = _hidden(data, table, wbytes, wptr, wtype, sub_ptr, sub_ids, minn, maxn, bucket, prune, nwords, rows,
                     cache, keys, ids, state)
    return _tree(hidden, out_rows, left, right, osz)


@numba.njit(cache=True)
def _token_rows(data, size, word, table, wbytes, wptr, wtype, sub_ptr, sub_ids, minn, maxn, bucket, prune, nwords,
                out):
    """fastText's input rows for the token data[:size] into `out`: (how many, whether it ends the
    line: "</s>")."""
    h = _fnv(data, 0, size, np.uint32(2166136261))
    wid = _find(data, 0, size, h, table, wbytes, wptr)
    if wid >= 0:
        if wtype[wid] != 0:  # a label: not an input
            return 0, False
        n = sub_ptr[wid + 1] - sub_ptr[wid]
        out[:n] = sub_ids[sub_ptr[wid]:sub_ptr[wid + 1]]
        return n, wid == 0
    if size >= 9:  # an unknown "__label__..." is a label too
        label = True
        for k in range(9):
            if data[k] != _LABEL_BYTES[k]:
                label = False
                break
        if label:
            return 0, False
    word[0] = 60  # '<'
    word[1:size + 1] = data[:size]
    word[size + 1] = 62  # '>'
    return _subwords(word[:size + 2], minn, maxn, bucket, prune, nwords, out, 0), False


@numba.njit(cache=True)
def _utf8(cps, a, b, out):
    """cps[a:b] (no surrogates) in UTF-8, into `out`; its length."""
    n = 0
    for i in range(a, b):
        c = cps[i]
        if c < 0x80:
            out[n] = c
            n += 1
        elif c < 0x800:
            out[n], out[n + 1] = 0xC0 | (c >> 6), 0x80 | (c & 0x3F)
            n += 2
        elif c < 0x10000:
            out[n], out[n + 1], out[n + 2] = 0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)
            n += 3
        else:
            out[n], out[n + 1] = 0xF0 | (c >> 18), 0x80 | ((c >> 12) & 0x3F)
            out[n + 2], out[n + 3] = 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)
            n += 4
    return n


@numba.njit(cache=True)
def _predict_spans(cps, spans, slots, payload, used, table, wbytes, wptr, wtype, sub_ptr, sub_ids, minn, maxn, bucket,
                   prune, nwords, rows, out_rows, left, right, osz):
    """_predict on a text given as its str.split spans (wordtable.split's, where they are fastText's
    tokens too) and their slots, whose payloads keep each span's rows: start << 21 | count << 1 |
    ends-the-line, in `payload` (filled as spans are first met, while it has room)."""
    dim = rows.shape[1]
    hidden = np.zeros(dim, np.float32)
    longest = 1
    for s in range(spans.shape[0] - 1):
        longest = max(longest, spans[s, 1] - spans[s, 0])
    data = np.empty(4 * longest, np.uint8)
    word = np.empty(4 * longest + 2, np.uint8)
    scratch = np.empty(12 * longest + 8, np.int32)
    count = 0
    stop = False
    for s in range(spans.shape[0] - 1):
        e = spans[s, 2]
        held = slots[e, 3]
        if held >= 0:
            src, first, n, stop = payload, held >> 21, (held >> 1) & 0xF_FFFF, (held & 1) == 1
        else:
            size = _utf8(cps, spans[s, 0], spans[s, 1], data)
            n, stop = _token_rows(data, size, word, table, wbytes, wptr, wtype, sub_ptr, sub_ids, minn, maxn, bucket,
                                  prune, nwords, scratch)
            src, first = scratch, 0
            if used[0] + n <= payload.size and n < 1 << 20:
                payload[used[0]:used[0] + n] = scratch[:n]
                slots[e, 3] = used[0] << 21 | n << 1 | (1 if stop else 0)
                used[0] += n
        _add_rows(hidden, rows, src, first, n)
        count += n
        if stop:
            break
    if not stop:  # the "\n" fastText's wrapper appends: the end-of-sentence token, word 0
        for k in range(sub_ptr[0], sub_ptr[1]):
            for d in range(dim):
                hidden[d] += rows[sub_ids[k], d]
        count += sub_ptr[1] - sub_ptr[0]
    scale = np.float32(1.0 / count)
    for d in range(dim):
        hidden[d] *= scale
    return _tree(hidden, out_rows, left, right, osz)


@dataclass(frozen=True)
class Model:
    """A loaded .ftz/.bin supervised model, as arrays."""

    labels: tuple[str, ...]
    arrays: tuple
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
        if "\n" in line:
            raise ValueError("predict processes one line at a time (remove '\\n')")
        return _predict(np.frombuffer(line.encode(), np.uint8), *self.arrays, *self.cache)

    def leaves_of_spans(self, cps: np.ndarray, spans: np.ndarray, table) -> tuple[np.ndarray, np.ndarray]:
        """leaves(text with newlines as spaces) for a text whose str.split spans, found in the
        wordtable.Table `table` as wordtable.split gives them, are fastText's tokens too (no odd
        whitespace, no surrogate): each span's rows are looked up in the table with its words."""
        table.attach(self)
        return _predict_spans(cps, spans, table.slots, table.payload, table.payload_used, *self.arrays)


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
        at = int(_fnv(np.frombuffer(w, np.uint8), 0, len(w), np.uint32(2166136261))) % table.size
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
            k = _subwords(word, minn, maxn, bucket, prune, nwords, buf, 0)
            ids += buf[:k].tolist()
        subs += ids
        sub_ptr.append(len(subs))
    left, right = _huffman([c for c, t in zip(counts, types) if t == 1], nlabels)
    labels = tuple(w.decode() for w, t in zip(words, types) if t == 1)
    return Model(labels, (table, wbytes, wptr, np.array(types, np.int8), np.array(sub_ptr, np.int64),
                          np.array(subs, np.int32), minn, maxn, bucket, prune, nwords, rows, out_rows,
                          left, right, nlabels))


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
