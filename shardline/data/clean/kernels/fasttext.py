"""fastText's input side, compiled: a line's tokens to the hidden vector, for lid.py.

Contract: each function does what the fastText 0.9.2 function it names does (fasttext-predict
builds that code), in the same order and the same float32 arithmetic, over the dictionary of
ftdict.py: `hidden` is Dictionary::getLine then Model::computeHidden (with a cache of tokens'
input rows, emptied when full).
`hidden_spans` takes a text as its str.split spans in the word table (wordsplit.split's), where
they are fastText's tokens too, and keeps each span's rows in the table's payload, so that a
document's spans are looked up once for its words and its language.
"""

from __future__ import annotations

import numba
import numpy as np

from shardline.data.clean.kernels.compiled import same
from shardline.data.clean.kernels.ftdict import find, fnv, is_label, is_space, subwords

@numba.njit(cache=True)
def _cached(data, start, end, h, cache, keys, ids, state):
    """The token's row ids from the per-process token cache: (where in `ids`, how many), or (-1, 0)."""
    slots = cache.shape[0]
    at = np.int64(h) & (slots - 1)
    while cache[at, 0] != -1:
        if cache[at, 1] == end - start and np.uint32(cache[at, 4]) == h and same(keys, cache[at, 0], data, start,
                                                                                   end - start):
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
def hidden(data, table, wbytes, wptr, wtype, sub_ptr, sub_ids, minn, maxn, bucket, prune, nwords, rows,
            cache, keys, ids, state):
    """Dictionary::getLine for `data` + "\n", then Model::computeHidden: the mean input row."""
    dim = rows.shape[1]
    hidden = np.zeros(dim, np.float32)
    i, size = 0, data.size
    word = np.empty(size + 2, np.uint8)
    scratch = np.empty(3 * (size + 2) + 8, np.int32)  # a token of L bytes has < 3(L + 2) n-grams
    count = 0
    eos = False
    while not eos:
        while i < size and is_space(data[i]):
            i += 1
        if i >= size:  # the "\n" fastText's wrapper appends: the end-of-sentence token
            eos = True
            src, first, n = sub_ids, sub_ptr[0], sub_ptr[1] - sub_ptr[0]  # "</s>" is word 0
        else:
            start = i
            while i < size and not is_space(data[i]):
                i += 1
            end = i
            h = fnv(data, start, end, np.uint32(2166136261))
            wid = find(data, start, end, h, table, wbytes, wptr)
            if wid >= 0:
                if wtype[wid] != 0:  # a label: not an input
                    continue
                eos = wid == 0  # a literal "</s>" ends the line too
                src, first, n = sub_ids, sub_ptr[wid], sub_ptr[wid + 1] - sub_ptr[wid]
            else:
                if is_label(data, start, end):  # an unknown "__label__..." is a label too
                    continue
                first, at = _cached(data, start, end, h, cache, keys, ids, state)
                if first >= 0:
                    src, n = ids, at
                else:
                    word[0] = 60  # '<'
                    for k in range(end - start):
                        word[k + 1] = data[start + k]
                    word[end - start + 1] = 62  # '>'
                    n = subwords(word[:end - start + 2], minn, maxn, bucket, prune, nwords, scratch, 0)
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
def _token_rows(data, size, word, table, wbytes, wptr, wtype, sub_ptr, sub_ids, minn, maxn, bucket, prune, nwords,
                out):
    """fastText's input rows for the token data[:size] into `out`: (how many, whether it ends the
    line: "</s>")."""
    h = fnv(data, 0, size, np.uint32(2166136261))
    wid = find(data, 0, size, h, table, wbytes, wptr)
    if wid >= 0:
        if wtype[wid] != 0:  # a label: not an input
            return 0, False
        n = sub_ptr[wid + 1] - sub_ptr[wid]
        out[:n] = sub_ids[sub_ptr[wid]:sub_ptr[wid + 1]]
        return n, wid == 0
    if is_label(data, 0, size):  # an unknown "__label__..." is a label too
        return 0, False
    word[0] = 60  # '<'
    word[1:size + 1] = data[:size]
    word[size + 1] = 62  # '>'
    return subwords(word[:size + 2], minn, maxn, bucket, prune, nwords, out, 0), False


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
def hidden_spans(cps, spans, slots, payload, used, table, wbytes, wptr, wtype, sub_ptr, sub_ids, minn, maxn, bucket,
                 prune, nwords, rows):
    """hidden() of a text given as its str.split spans (wordsplit.split's, where they are fastText's
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
    return hidden
