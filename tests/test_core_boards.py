"""Board sets of the compiled replay (emu.engine.boards): words, bits and their Python faces."""

import numpy as np
import pytest
from numba import njit

from emu import bits
from emu.engine import boards as B


@pytest.mark.parametrize("boards,words", [(1, 1), (64, 1), (65, 2), (128, 2), (129, 3), (4096, 64)])
def test_a_set_has_a_word_per_64_boards(boards, words):
    assert B.words(boards) == words


@njit
def _build(members, w):
    M = np.zeros((2, 1 + 3 * w), np.int64)  # a leading column: sets start at any column
    for d in members:
        B.add(M, 1, 1, d)
    B.copy_without(M, 1, 1 + w, M, 1, 1, w, members[0])
    B.copy(M, 1, 1 + 2 * w, M, 1, 1, w)
    return M, B.has(M, 1, 1, members[0]), B.beyond(M, 1, 1, w, members[0]), B.same(M, 1, 1, 1 + 2 * w, w)


@pytest.mark.parametrize("members", [[0], [63], [64], [5, 63, 64, 127], [127, 3]])
def test_compiled_sets_and_python_read_the_same_boards(members):
    w = 2
    M, has, beyond, same = _build(np.array(members, np.int64), w)
    assert B.members(M[1, 1:1 + w]) == sorted(members)
    assert B.members(M[1, 1 + w:1 + 2 * w]) == sorted(members[1:])
    assert has == 1 and same
    assert beyond == (len(members) > 1)
    packed = B.pack(np.zeros(len(members), np.int64), members, 1, w)
    np.testing.assert_array_equal(packed.view(np.int64)[0], M[1, 1:1 + w])
    assert B.count(packed).tolist() == [len(members)]
    assert M[0].tolist() == [0] * (1 + 3 * w)  # no other row touched


@njit
def _lowest_all(x):
    out = np.empty(64, np.int64)
    n = 0
    while x != 0:
        out[n] = bits.lowest(x)
        n += 1
        x &= x - 1
    return out[:n]


@pytest.mark.parametrize("bits", [[0], [1], [31], [32], [33], [62], [63], [0, 63], [5, 17, 40, 63],
                                  list(range(64)), list(range(0, 64, 3))])
def test_lowest_names_each_set_bit_in_ascending_order(bits):
    # The word's bits as the compiled replay walks a destination set: bit 63 is the sign bit.
    x = np.array([sum(1 << b for b in bits)], np.uint64).view(np.int64)[0]
    assert _lowest_all(np.int64(x)).tolist() == sorted(bits)


@njit
def _larger_smaller(a, b):
    return bits.larger(a, b), bits.smaller(a, b)


@pytest.mark.parametrize("a,b", [(3, 5), (5, 3), (4, 4), (-7, 2), (2, -7), (-1, -2), (0, 2**62), (-2**63, 2**63 - 1)])
def test_larger_and_smaller_are_max_and_min(a, b):
    # What the frame kernel takes for max and min (the later of two times, the frames kept)
    assert _larger_smaller(np.int64(a), np.int64(b)) == (max(a, b), min(a, b))
