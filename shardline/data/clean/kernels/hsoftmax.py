"""fastText's hierarchical softmax, compiled: a hidden vector to its labels, for lid.py.

Contract: `tree` is HierarchicalSoftmaxLoss::predict (fastText 0.9.2) with k = all and threshold
0, then the probabilities, in fastText's float32 arithmetic and its order: the tree walked depth
first, left child first, a node below std_log(threshold) cut, the leaves sorted as libstdc++'s
heap sorts them (so equal scores come out as fastText puts them). `judge` answers what the
language rule reads of `tree`'s answer (the top label, whether another ties it, the wanted
labels' best probability) walking only the part of the tree that can hold the top.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types

# glibc's own, as fastText calls them (std::exp on a float, std::log on a double). The wheel binds
# the old symbol versions (expf@GLIBC_2.2.5, log@GLIBC_2.2.5), wrappers over the same functions as
# these: every 7th float32 of [-88, 88] (expf) and of (0, 1.5] (log) gave the same bits. As
# numba's external functions they are bound when the code is loaded, so it can be cached.
_expf = types.ExternalFunction("expf", types.float32(types.float32))
_log = types.ExternalFunction("log", types.float64(types.float64))


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
def std_log(x):
    return np.float32(_log(np.float64(x) + 1e-5))


@numba.njit(cache=True)
def tree(hidden, out_rows, left, right, osz):
    """HierarchicalSoftmaxLoss::predict with k = all and threshold 0, then the probabilities: the
    labels (as leaf numbers) and probabilities, in fastText's order."""
    floor = std_log(np.float32(0.0))  # std_log(threshold 0)
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
        stack_node[sp], stack_score[sp] = right[node], score + std_log(f)
        stack_node[sp + 1], stack_score[sp + 1] = left[node], score + std_log(
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
def _f(hidden, out_rows, node, osz):
    """A node's sigmoid, as dfs computes it."""
    f = np.float32(0.0)
    r = node - osz
    for d in range(hidden.size):
        f += out_rows[r, d] * hidden[d]
    return np.float32(1.0 / np.float64(np.float32(1.0) + _expf(-f)))


_SLACK = np.float32(2e-5)  # the most a level can add to a score: std_log(1) = log(1 + 1e-5), plus rounding


@numba.njit(cache=True)
def judge(hidden, out_rows, left, right, parent, height, osz, wanted):
    """What the language rule reads of _tree's answer, without walking the whole tree: (the leaf
    of the highest score, its probability, whether another leaf ties it, the highest probability
    of the `wanted` leaves present). The leaf is -1 when no leaf passes the threshold. The highest
    is found depth first with branch and bound: a subtree whose score plus what its levels can add
    (`height`, _SLACK a level) stays below the best leaf found holds no leaf as high; every score
    is computed as _tree computes it, so the leaf and its probability are _tree's first. Ties are
    said: _tree's order among equal scores is its heap's (the caller asks _tree then). A wanted
    leaf's score is its path's, root first, as dfs sums it; it is present when no node on its path
    (itself included) falls below the threshold."""
    floor = std_log(np.float32(0.0))
    stack_node = np.empty(2 * osz, np.int32)
    stack_score = np.empty(2 * osz, np.float32)
    stack_node[0], stack_score[0] = 2 * osz - 2, np.float32(0.0)
    sp, best, best_leaf, ties = 1, np.float32(-np.inf), -1, 0
    while sp:
        sp -= 1
        node, score = stack_node[sp], stack_score[sp]
        if score < floor or score + _SLACK * np.float32(height[node]) + np.float32(1e-4) < best:
            continue
        if left[node] == -1 and right[node] == -1:
            if score > best:
                best, best_leaf, ties = score, node, 0
            elif score == best:
                ties += 1
            continue
        f = _f(hidden, out_rows, node, osz)
        stack_node[sp], stack_score[sp] = right[node], score + std_log(f)
        stack_node[sp + 1], stack_score[sp + 1] = left[node], score + std_log(np.float32(1.0 - np.float64(f)))
        sp += 2
    top = _expf(best) if best_leaf >= 0 else np.float32(0.0)
    most = np.float32(0.0)
    path = np.empty(2 * osz, np.int32)
    for leaf in wanted:
        n = 0
        node = leaf
        while node != -1:  # leaf to root
            path[n] = node
            n += 1
            node = parent[node]
        score, present = np.float32(0.0), True
        for k in range(n - 1, 0, -1):  # root first
            node, child = path[k], path[k - 1]
            if score < floor:
                present = False
                break
            f = _f(hidden, out_rows, node, osz)
            score = score + (std_log(f) if child == right[node] else std_log(np.float32(1.0 - np.float64(f))))
        if present and score >= floor:
            most = max(most, _expf(score))
    return best_leaf, top, ties > 0, most
