"""The programs of the ∇SD paper, with NumPy/SciPy references: used by the demo, tests and benchmarks.

Each entry gives the program text, what it computes, and a reference that computes the same
thing with NumPy/SciPy from dense or scipy.sparse inputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


def _dense(x: Any) -> Any:
    if hasattr(x, "toarray"):
        return x.toarray()
    return x


@dataclass(frozen=True)
class PaperProgram:
    name: str
    text: str
    description: str
    reference: Callable[..., Any]
    kinds: dict  # input name -> "scalar" | "vector" | "matrix" | "square"


PAPER_PROGRAMS: dict[str, PaperProgram] = {}


def _add(name: str, text: str, description: str, reference: Callable[..., Any], **kinds: str) -> None:
    PAPER_PROGRAMS[name] = PaperProgram(name, text.strip(), description, reference, kinds)


_add("dot", "sum(<i, a> in V1) a * V2(i)",
     "Example 1 / VVD: dot product V1 . V2, iterating over V1",
     lambda V1, V2: float(np.dot(_dense(V1), _dense(V2))), V1="vector", V2="vector")
_add("dot_v2", "sum(<i, a> in V2) V1(i) * a",
     "Example 1: dot product, iterating over V2",
     lambda V1, V2: float(np.dot(_dense(V1), _dense(V2))), V1="vector", V2="vector")
_add("dot_unrolled", """
let t1 = x1 * y1 in
let t2 = x2 * y2 in
let t3 = t1 + t2 in
t3""", "Example 1: the unrolled two-element dot product in ANF",
     lambda x1, y1, x2, y2: x1 * y1 + x2 * y2, x1="scalar", y1="scalar", x2="scalar", y2="scalar")
_add("dot_unrolled_forward", """
let <t1, t1'> = <x1 * y1, x1 * y1' + x1' * y1> in
let <t2, t2'> = <x2 * y2, x2 * y2' + x2' * y2> in
let <t3, t3'> = <t1 + t2, t1' + t2'> in
t3'""", "Example 1 (§4.1): the forward-mode derivative of the unrolled dot product",
     lambda x1, y1, x2, y2, **t: (x1 * t["y1'"] + t["x1'"] * y1 + x2 * t["y2'"] + t["x2'"] * y2),
     **{"x1": "scalar", "y1": "scalar", "x2": "scalar", "y2": "scalar",
        "x1'": "scalar", "y1'": "scalar", "x2'": "scalar", "y2'": "scalar"})
_add("scalar_vector", "s * V", "Example 2: scalar-vector product s V",
     lambda s, V: s * _dense(V), s="scalar", V="vector")
_add("trace", "sum(<i, r> in M) r(i)", "Example 3: trace of M",
     lambda M: float(np.trace(_dense(M))), M="square")
_add("matmul", """
sum(<i, row> in M1) { i ->
  sum(<j, v1> in row)
    sum(<k, v2> in M2(j)) { k -> v1 * v2 } }""", "§3: matrix-matrix product M1 M2",
     lambda M1, M2: _dense(M1) @ _dense(M2), M1="square", M2="square")
_add("map", "sum(<k, v> in V) { k -> exp(v) }", "§3: map of exp over the values of V",
     lambda V: np.exp(_dense(V)), V="vector")
_add("batax", """
sum(<i, r> in A)
  sum(<j, v1> in r)
    sum(<k, v2> in r)
      { j -> ((beta * v1) * v2) * (x(k)) }""", "Example 5 / BATAx: beta A^T A x",
     lambda beta, A, x: beta * (_dense(A).T @ (_dense(A) @ _dense(x))),
     beta="scalar", A="matrix", x="vector")
_add("smmm", "sum(<i, r> in A) sum(<k, a> in r) sum(<j, b> in B(k)) a * b",
     "SMMM: sum of the entries of A B", lambda A, B: float((_dense(A) @ _dense(B)).sum()),
     A="square", B="square")
_add("smvm", "sum(<i, r> in A) sum(<j, a> in r) a * X(j)",
     "SMVM: sum of the entries of A X", lambda A, X: float((_dense(A) @ _dense(X)).sum()),
     A="matrix", X="vector")
_add("vva", "V1 + V2", "VVA: vector addition V1 + V2",
     lambda V1, V2: _dense(V1) + _dense(V2), V1="vector", V2="vector")
_add("vvd", "sum(<i, a> in V1) a * V2(i)", "VVD: vector dot product V1 . V2",
     lambda V1, V2: float(np.dot(_dense(V1), _dense(V2))), V1="vector", V2="vector")
_add("vsm", "V * s * s", "VSM: vector-scalar product V s s",
     lambda V, s: _dense(V) * s * s, V="vector", s="scalar")


def random_inputs(entry: PaperProgram, rng: np.random.Generator, n: int = 6,
                  density: float = 0.4, sparse_matrices: bool = True) -> dict[str, Any]:
    """Random inputs of the right kinds; matrices are scipy CSR when sparse_matrices is set."""
    import scipy.sparse as sp

    rows = n + 2
    inputs: dict[str, Any] = {}
    for name, kind in entry.kinds.items():
        if kind == "scalar":
            inputs[name] = float(rng.standard_normal())
        elif kind == "vector":
            length = rows if name in ("x",) and "A" in entry.kinds else n
            inputs[name] = rng.standard_normal(length)
        else:
            shape = (n, n) if kind == "square" else (rows, n)
            if sparse_matrices:
                inputs[name] = sp.random(*shape, density=density, format="csr", random_state=rng,
                                         data_rvs=rng.standard_normal)
            else:
                inputs[name] = rng.standard_normal(shape)
    if "A" in entry.kinds and "X" in entry.kinds:
        inputs["X"] = rng.standard_normal(inputs["A"].shape[1])
    if "A" in entry.kinds and "x" in entry.kinds:
        inputs["x"] = rng.standard_normal(inputs["A"].shape[1])
    return inputs
