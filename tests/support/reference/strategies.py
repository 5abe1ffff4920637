"""Hypothesis strategies for syntax trees (any shape) and for well-typed programs with inputs."""
from __future__ import annotations

import math

from hypothesis import strategies as st

from sparsad.lang.functions import FUNCTIONS
from sparsad.lang.syntax import (Binary, Call, Const, EmptyDict, If, Let, LetTuple, Lookup, Neg,
                                 Not, Range, Singleton, SubArray, Sum, Unique, Var)

NAMES = st.sampled_from(["a", "b", "x", "y", "i", "j", "V", "M", "t1", "v'", "row", "_"])
USED_NAMES = NAMES.filter(lambda n: n != "_")

constants = st.one_of(
    st.integers(min_value=-1000, max_value=1000),
    st.floats(allow_nan=False, allow_infinity=False, width=64).filter(math.isfinite),
    st.booleans(),
).map(Const)

UNARY_FUNCS = sorted(n for n, b in FUNCTIONS.items() if b.arity == 1)


def trees(max_leaves: int = 25):
    """Arbitrary (not necessarily well-typed) trees, for the parse/print round trip."""
    leaves = st.one_of(constants, USED_NAMES.map(Var), st.just(EmptyDict()))

    def extend(sub):
        return st.one_of(
            st.builds(Sum, NAMES, NAMES, sub, sub),
            st.builds(Singleton, sub, sub),
            st.builds(Lookup, sub, sub),
            st.builds(Let, USED_NAMES, sub, sub),
            st.builds(lambda ns, vs, b: LetTuple(tuple(ns[:len(vs)]), tuple(vs[:len(ns)]), b),
                      st.lists(USED_NAMES, min_size=1, max_size=3),
                      st.lists(sub, min_size=1, max_size=3), sub),
            st.builds(If, sub, sub, st.none() | sub),
            st.builds(Not, sub),
            st.builds(Binary, st.sampled_from(["+", "-", "*", "/", "=", "<"]), sub, sub),
            st.builds(Neg, sub),
            st.builds(lambda f, a: Call(f, (a,)), st.sampled_from(UNARY_FUNCS), sub),
            st.builds(lambda a, c: Call("pow", (a, c)), sub, constants),
            st.builds(Unique, sub),
            st.builds(Range, sub, sub),
            st.builds(SubArray, sub, sub, sub),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves)
