"""Sets of boards in the compiled replay: ``W`` 64-bit words in a table row, board d at bit
d % 64 of word d // 64.

An op's destinations (OW), and a transfer's destinations, the boards it was delivered at
and the boards that never answered (TR) are such sets. ``W`` is ceil(boards / 64)
(``words``, kept in RS[RS_MASKW]), so any board count runs on the compiled loop; up to 64
boards a set is one word, the header's dst_set (emu.codec.layer).

The compiled helpers take the table, the row and the set's first column; the numpy
helpers build and read the same words from Python.
"""

from __future__ import annotations

import numpy as np

from .state import compiled_inline


def words(boards: int) -> int:
    """Words of a board set for ``boards`` boards."""
    return max(1, -(-int(boards) // 64))


@compiled_inline
def has(M, row, col, d):
    return (M[row, col + (d >> 6)] >> (d & 63)) & 1


@compiled_inline
def add(M, row, col, d):
    M[row, col + (d >> 6)] |= 1 << (d & 63)


@compiled_inline
def clear(M, row, col, w):
    for i in range(w):
        M[row, col + i] = 0


@compiled_inline
def copy(M, row, col, S, srow, scol, w):
    for i in range(w):
        M[row, col + i] = S[srow, scol + i]


@compiled_inline
def beyond(M, row, col, w, d):
    """1 when the set holds a board other than ``d``."""
    for i in range(w):
        x = M[row, col + i]
        if i == d >> 6:
            x &= ~(1 << (d & 63))
        if x != 0:
            return 1
    return 0


@compiled_inline
def size_without(M, row, col, w, d):
    """How many boards other than ``d`` the set holds."""
    n = 0
    for i in range(w):
        x = M[row, col + i]
        if i == d >> 6:
            x &= ~(1 << (d & 63))
        while x != 0:
            x &= x - 1  # the lowest board left goes
            n += 1
    return n


@compiled_inline
def copy_without(M, row, col, S, srow, scol, w, d):
    """Row ``row`` of M takes ``S``'s set without board ``d``."""
    for i in range(w):
        x = S[srow, scol + i]
        if i == d >> 6:
            x &= ~(1 << (d & 63))
        M[row, col + i] = x


@compiled_inline
def same(M, row, a, b, w):
    for i in range(w):
        if M[row, a + i] != M[row, b + i]:
            return False
    return True


def pack(rows: np.ndarray, boards: np.ndarray, n: int, w: int) -> np.ndarray:
    """(n, w) uint64 words: board ``boards[i]`` in the set of row ``rows[i]``."""
    out = np.zeros((n, w), np.uint64)
    boards = np.asarray(boards, np.int64)
    np.bitwise_or.at(out, (np.asarray(rows, np.int64), boards >> 6),
                     np.left_shift(np.uint64(1), (boards & 63).astype(np.uint64)))
    return out


def count(sets: np.ndarray) -> np.ndarray:
    """Boards in each row's set ((n, w) words)."""
    return np.bitwise_count(sets.view(np.uint64)).sum(axis=1).astype(np.int64)


def members(row_words) -> list[int]:
    """The boards of one set (its words as a sequence), in ascending order."""
    out = []
    for i, x in enumerate(int(v) & (2**64 - 1) for v in row_words):
        while x:
            low = x & -x
            out.append(64 * i + low.bit_length() - 1)
            x ^= low
    return out
