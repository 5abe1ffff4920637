"""Review: a compiled program returns the shape the interpreter returns. When one extent of the
result depends on a value (a range to `k`), the compiler drops the whole type shape and sizes
every axis by its keys' bounds, so an axis keyed by a sub-array of an input (`S(1:4)`, extent
S's 5 by type) came out 4 wide compiled and 5 wide interpreted (fixed: the kernel takes the type's
extents where known, and sizes a mode whose extent is a value by its keys written)."""
from __future__ import annotations

import numpy as np

import sparsad

TEXT = "sum(<j, _> in (0:k)) { j -> sum(<i, r> in S(1:4)) { i -> u(i) } }"


def test_compiled_and_interpreted_results_have_one_shape():
    rng = np.random.default_rng(0)
    S, u = rng.standard_normal((5, 5)), rng.standard_normal(5)
    compiled, interpreted = sparsad.compile(TEXT)(S=S, u=u, k=4), sparsad.program(TEXT)(S=S, u=u, k=4)
    assert np.shape(compiled) == np.shape(interpreted) == (4, 5)
    expected = np.zeros((4, 5))
    expected[:, 1:4] = u[1:4]
    assert np.array_equal(np.asarray(compiled), expected)
