"""What the compiled kernels of the rules share (lines, textstats, wordtable, fasttext).

Contract: `same(x, i, y, j, n)` is x[i:i + n] == y[j:j + n] element by element, for numba code;
inlined where it is called, so a probe of a hash table costs what its loop written in place did.
"""

from __future__ import annotations

import numba


@numba.njit(cache=True, inline="always")
def same(x, i, y, j, n):
    for k in range(n):
        if x[i + k] != y[j + k]:
            return False
    return True
