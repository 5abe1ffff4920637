"""A corpus of realistic programs in sparsad's language, each with hand-written references.

The programs are written as a user would write them after reading the README and
docs/language.md: SpMV/SpMM losses, SDDMM, Hadamard products, row softmax and log-sum-exp,
GCN layers, MTTKRP/TTV/TTM on 3-D and 4-D tensors (COO and CSF), sparse attention, Laplacian
forms, least squares, logistic and softmax regression, matrix factorisation, sub-arrays and
range sums, norms, traces and bilinear forms. They were not adapted to what the compiler
handles today.

Every `Entry` carries the program text, the storage format of each input, an input generator
(`make(rng, real)`: small inputs for tests, real matrices from ../shared/data for the
benchmark), the inputs to differentiate, NumPy/SciPy closed forms of the value and of the
gradient (scalar programs) or vector-Jacobian product (other programs), optionally a
hand-written jvp, and the program written densely in jax.numpy (the independent reference
for every derivative, taken by JAX's own autodiff).

Conventions of the closed forms (sparsad's masked convention): the derivative with respect to
a sparse input lives on that input's stored pattern; a cotangent of a sparse-matrix output is
a CSR matrix on the output's pattern, of a dense output an ndarray; tangents have the shape
and pattern of the input they perturb.

>>> entry = ENTRIES["spmv"]
>>> inputs = entry.make(np.random.default_rng(0), False)
>>> np.allclose(entry.value(inputs), inputs["A"] @ inputs["x"])
True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

# -- data -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SparseTensor:
    """An n-d sparse tensor by coordinates: coords (order, nnz) sorted lexicographically, unique."""

    coords: np.ndarray
    values: np.ndarray
    shape: tuple

    @property
    def order(self) -> int:
        return len(self.shape)

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape)
        out[tuple(self.coords)] = self.values
        return out

    def mask(self) -> np.ndarray:
        out = np.zeros(self.shape)
        out[tuple(self.coords)] = 1.0
        return out

    def with_values(self, values: np.ndarray) -> "SparseTensor":
        return SparseTensor(self.coords, np.asarray(values, dtype=float), self.shape)


def canonical(matrix) -> sp.csr_matrix:
    out = sp.csr_matrix(matrix, dtype=np.float64)
    out.sum_duplicates()
    out.sort_indices()
    return out


def _fill_empty_rows(A: sp.csr_matrix, rng) -> sp.csr_matrix:
    """One entry in every empty row (least squares, softmax and GCN rows are never empty in practice)."""
    empty = np.flatnonzero(np.diff(A.indptr) == 0)
    if empty.size == 0:
        return A
    extra = sp.csr_matrix((rng.standard_normal(empty.size), (empty, rng.integers(0, A.shape[1], empty.size))),
                          shape=A.shape)
    return canonical(A + extra)


REAL_SQUARE = "DIMACS10/fe_4elt2"  # 11,143 x 11,143, 65,636 entries (a mesh graph)
REAL_STIFF = "HB/bcsstk13"  # 2,003 x 2,003, 83,883 entries
REAL_DESIGN = "LPnetlib/lp_ship04l"  # 402 x 2,166 (used transposed as a 2,166 x 402 design matrix)


def matrix(rng, real: bool, shape=(7, 6), density=0.4, name: str = REAL_SQUARE, transpose=False,
           values: str = "normal") -> sp.csr_matrix:
    """A canonical CSR matrix without empty rows: random at small size, a SuiteSparse pattern at
    real size (values rescaled to [-1, 1]; a synthetic matrix of that size if the data is absent).

    values: "normal", "positive" (in [0.5, 1.5]) or "sign" (+-1)."""
    A = None
    if real:
        from sparsad._data import load_suitesparse

        A = load_suitesparse(name)
        if A is not None:
            A = canonical(A.T if transpose else A)
            A.data = A.data / max(np.abs(A.data).max(), 1e-300)
        else:
            A = canonical(sp.random(20_000, 20_000, density=3e-4, random_state=rng))
    if A is None:
        A = canonical(sp.random(*shape, density=density, random_state=rng, data_rvs=rng.standard_normal))
    A = _fill_empty_rows(A, rng)
    if values == "positive":
        A.data = rng.uniform(0.5, 1.5, A.nnz)
    elif values == "sign":
        A.data = rng.choice([-1.0, 1.0], A.nnz)
    elif real:
        A.data = np.where(A.data == 0, 0.5, A.data)  # explicit zeros stay stored, with a value
    return A


def vec(rng, n: int, scale: float = 1.0) -> np.ndarray:
    return scale * rng.standard_normal(n)


def den(rng, *shape, scale: float = 1.0) -> np.ndarray:
    return scale * rng.standard_normal(shape)


def sparse_vector(rng, n: int, nnz: int) -> SparseTensor:
    idx = np.sort(rng.choice(n, size=nnz, replace=False))
    return SparseTensor(idx[None, :].astype(np.int64), rng.standard_normal(nnz), (n,))


def tensor(rng, real: bool, order: int = 3, shape=None, density: float = 0.3) -> SparseTensor:
    """A sparse tensor: random at small size; at real size, a sample of the entries of a real
    tensor of ../shared/data/tensors (COVID19 438x6x11 for order 3, Kinetic 64x12x10x60 for order 4)."""
    dense = None
    if real:
        from sparsad._data import real_tensors

        wanted = {3: "tensorly_COVID19_data", 4: "tensorly_Kinetic"}[order]
        for name, array in real_tensors(limit_mb=64):
            if name == wanted and array.ndim == order:
                dense = array / np.abs(array).max()
                density = 0.3 if order == 3 else 0.1
    if dense is None:
        shape = shape or ((5, 4, 6) if order == 3 else (3, 4, 2, 5))
        if real:
            shape = (400, 40, 30) if order == 3 else (60, 12, 10, 60)
        dense = rng.standard_normal(shape)
    keep = rng.random(dense.shape) < density
    keep.reshape(dense.shape[0], -1)[:, 0] = True  # every slice i holds an entry
    coords = np.array(np.nonzero(keep), dtype=np.int64)
    values = dense[keep]
    values = np.where(values == 0, 0.5, values)
    return SparseTensor(coords, values.astype(float), tuple(dense.shape))


# -- helpers of the closed forms -----------------------------------------------------------------------

def rows(A: sp.csr_matrix) -> np.ndarray:
    return np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))


def on(A: sp.csr_matrix, values) -> sp.csr_matrix:
    """A CSR matrix with A's pattern and the given values (entry order of A.data); the index
    arrays are copied, so that changing the result in place leaves A alone."""
    return sp.csr_matrix((np.asarray(values, dtype=float), A.indices.copy(), A.indptr.copy()), shape=A.shape)


def rowsum(A: sp.csr_matrix, values) -> np.ndarray:
    return np.bincount(rows(A), weights=values, minlength=A.shape[0])


def colsum(A: sp.csr_matrix, values) -> np.ndarray:
    return np.bincount(A.indices, weights=values, minlength=A.shape[1])


def at(B, A: sp.csr_matrix) -> np.ndarray:
    """The values of B (sparse or dense) at A's stored positions, 0 where B stores nothing."""
    r, c = rows(A), A.indices
    if not sp.issparse(B):
        return np.asarray(B)[r, c]
    B = canonical(B)
    m = A.shape[1]
    keys_b = rows(B).astype(np.int64) * m + B.indices
    keys_a = r.astype(np.int64) * m + c
    pos = np.searchsorted(keys_b, keys_a)
    pos = np.minimum(pos, max(keys_b.size - 1, 0))
    found = keys_b.size > 0
    return np.where(found & (keys_b[pos] == keys_a), B.data[pos] if found else 0.0, 0.0)


def row_softmax(A: sp.csr_matrix, values=None) -> np.ndarray:
    """Per-entry softmax of `values` (default A.data) within each row of A's pattern."""
    v = A.data if values is None else values
    e = np.exp(v)
    return e / rowsum(A, e)[rows(A)]


def sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def softplus(z):
    return np.logaddexp(0.0, z)


def tensor_dense_values(T: SparseTensor, values) -> np.ndarray:
    out = np.zeros(T.shape)
    np.add.at(out, tuple(T.coords), values)
    return out


# -- the entry type -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    name: str
    category: str
    text: str
    formats: dict  # input -> "csr" | "csc" | "coo" | "csf" | "dense" | "scalar" | "int"
    wrt: tuple
    make: Callable[[Any, bool], dict]
    value: Callable[[dict], Any]
    dense: Callable[..., Any]  # (jax.numpy, dense inputs, masks of sparse inputs) -> jnp value
    grad: Callable[[dict, str], Any] | None = None  # scalar programs
    vjp: Callable[[dict, str, Any], Any] | None = None  # other programs
    jvp: Callable[[dict, str, Any], Any] | None = None  # optional, hand-written
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def scalar(self) -> bool:
        return self.grad is not None


ENTRIES: dict[str, Entry] = {}


def add(name, category, text, formats, wrt, make, value, dense, **kw) -> None:
    if name in ENTRIES:
        raise ValueError(f"duplicate corpus entry {name}")
    if (kw.get("grad") is None) == (kw.get("vjp") is None):
        raise ValueError(f"{name}: give grad (scalar programs) or vjp (other programs)")
    ENTRIES[name] = Entry(name, category, text.strip(), formats, tuple(wrt), make, value, dense, **kw)


# =========================================================================================================
# SpMV / SpMM
# =========================================================================================================

def _A_x_y(rng, real, name=REAL_SQUARE, transpose=False, shape=(7, 6)):
    A = matrix(rng, real, shape=shape, name=name, transpose=transpose)
    return dict(A=A, x=vec(rng, A.shape[1]), y=vec(rng, A.shape[0]))


SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"


def _spmv_vjp(I, w, ct):
    A, x = I["A"], I["x"]
    return A.T @ ct if w == "x" else on(A, ct[rows(A)] * x[A.indices])


def _spmv_jvp(I, w, t):
    return I["A"] @ t if w == "x" else t @ I["x"]


for _name, _fmt in (("spmv", "csr"), ("spmv_csc", "csc"), ("spmv_coo", "coo")):
    add(_name, "spmv", SPMV, {"A": _fmt}, ("x", "A"), _A_x_y,
        value=lambda I: I["A"] @ I["x"],
        dense=lambda j, d, m: d["A"] @ d["x"],
        vjp=_spmv_vjp, jvp=_spmv_jvp)

add("spmtv", "spmv", "sum(<i, r> in A) sum(<j, a> in r) { j -> a * y(i) }", {"A": "csr"}, ("y", "A"), _A_x_y,
    value=lambda I: I["A"].T @ I["y"],
    dense=lambda j, d, m: d["A"].T @ d["y"],
    vjp=lambda I, w, ct: I["A"] @ ct if w == "y" else on(I["A"], I["y"][rows(I["A"])] * ct[I["A"].indices]),
    jvp=lambda I, w, t: I["A"].T @ t if w == "y" else t.T @ I["y"])


def _lsq_res(I):
    return I["A"] @ I["x"] - I["y"]


add("lsq", "least-squares",
    "sum(<i, r> in A) let z = (sum(<j, a> in r) a * x(j)) - y(i) in z * z",
    {"A": "csr"}, ("x", "A", "y"), _A_x_y,
    value=lambda I: float(np.sum(_lsq_res(I) ** 2)),
    dense=lambda j, d, m: j.sum((d["A"] @ d["x"] - d["y"]) ** 2),
    grad=lambda I, w: {"x": lambda: 2 * I["A"].T @ _lsq_res(I),
                       "A": lambda: on(I["A"], 2 * _lsq_res(I)[rows(I["A"])] * I["x"][I["A"].indices]),
                       "y": lambda: -2 * _lsq_res(I)}[w]())

add("lsq_csc", "least-squares",
    "sum(<i, r> in A) let z = (sum(<j, a> in r) a * x(j)) - y(i) in z * z",
    {"A": "csc"}, ("x", "A"), lambda rng, real: _A_x_y(rng, real, REAL_DESIGN, transpose=True, shape=(9, 5)),
    value=lambda I: float(np.sum(_lsq_res(I) ** 2)),
    dense=lambda j, d, m: j.sum((d["A"] @ d["x"] - d["y"]) ** 2),
    grad=lambda I, w: {"x": lambda: 2 * I["A"].T @ _lsq_res(I),
                       "A": lambda: on(I["A"], 2 * _lsq_res(I)[rows(I["A"])] * I["x"][I["A"].indices])}[w]())

add("lad", "least-squares", "sum(<i, r> in A) abs((sum(<j, a> in r) a * x(j)) - y(i))",
    {"A": "csr"}, ("x", "A"), _A_x_y,
    value=lambda I: float(np.abs(_lsq_res(I)).sum()),
    dense=lambda j, d, m: j.sum(j.abs(d["A"] @ d["x"] - d["y"])),
    grad=lambda I, w: (I["A"].T @ np.sign(_lsq_res(I)) if w == "x"
                       else on(I["A"], np.sign(_lsq_res(I))[rows(I["A"])] * I["x"][I["A"].indices])))


def _ridge_make(rng, real):
    I = _A_x_y(rng, real, REAL_DESIGN, transpose=True, shape=(9, 5))
    I["lam"] = 0.3
    return I


add("ridge", "least-squares",
    """(sum(<i, r> in A) let z = (sum(<j, a> in r) a * x(j)) - y(i) in z * z)
       + lam * (sum(<j, v> in x) v * v)""",
    {"A": "csr", "lam": "scalar"}, ("x", "lam", "A"), _ridge_make,
    value=lambda I: float(np.sum(_lsq_res(I) ** 2) + I["lam"] * I["x"] @ I["x"]),
    dense=lambda j, d, m: j.sum((d["A"] @ d["x"] - d["y"]) ** 2) + d["lam"] * j.sum(d["x"] ** 2),
    grad=lambda I, w: {"x": lambda: 2 * I["A"].T @ _lsq_res(I) + 2 * I["lam"] * I["x"],
                       "lam": lambda: float(I["x"] @ I["x"]),
                       "A": lambda: on(I["A"], 2 * _lsq_res(I)[rows(I["A"])] * I["x"][I["A"].indices])}[w]())


def _wlsq_make(rng, real):
    I = _A_x_y(rng, real)
    I["c"] = rng.uniform(0.5, 2.0, I["A"].shape[0])
    return I


add("weighted_lsq", "least-squares",
    "sum(<i, r> in A) c(i) * pow((sum(<j, a> in r) a * x(j)) - y(i), 2.0)",
    {"A": "csr"}, ("x", "c"), _wlsq_make,
    value=lambda I: float(I["c"] @ _lsq_res(I) ** 2),
    dense=lambda j, d, m: j.sum(d["c"] * (d["A"] @ d["x"] - d["y"]) ** 2),
    grad=lambda I, w: 2 * I["A"].T @ (I["c"] * _lsq_res(I)) if w == "x" else _lsq_res(I) ** 2)


def _enet_make(rng, real):
    I = _A_x_y(rng, real, REAL_DESIGN, transpose=True, shape=(9, 5))
    I.update(l1=0.2, l2=0.1)
    return I


add("elastic_net", "least-squares",
    """let fit = sum(<i, r> in A) let z = (sum(<j, a> in r) a * x(j)) - y(i) in 0.5 * z * z in
       let pen = sum(<j, v> in x) l1 * abs(v) + l2 * v * v in
       fit + pen""",
    {"A": "csr", "l1": "scalar", "l2": "scalar"}, ("x",), _enet_make,
    value=lambda I: float(0.5 * np.sum(_lsq_res(I) ** 2) + I["l1"] * np.abs(I["x"]).sum()
                          + I["l2"] * I["x"] @ I["x"]),
    dense=lambda j, d, m: (0.5 * j.sum((d["A"] @ d["x"] - d["y"]) ** 2) + d["l1"] * j.sum(j.abs(d["x"]))
                           + d["l2"] * j.sum(d["x"] ** 2)),
    grad=lambda I, w: I["A"].T @ _lsq_res(I) + I["l1"] * np.sign(I["x"]) + 2 * I["l2"] * I["x"])

add("quadform", "bilinear", "sum(<i, r> in A) sum(<j, a> in r) x(i) * a * x(j)",
    {"A": "csr"}, ("x", "A"), lambda rng, real: _A_x_y(rng, real, REAL_STIFF, shape=(7, 7)),
    value=lambda I: float(I["x"] @ (I["A"] @ I["x"])),
    dense=lambda j, d, m: d["x"] @ d["A"] @ d["x"],
    grad=lambda I, w: ((I["A"] + I["A"].T) @ I["x"] if w == "x"
                       else on(I["A"], I["x"][rows(I["A"])] * I["x"][I["A"].indices])))


def _bilinear_make(rng, real):
    A = matrix(rng, real, shape=(7, 5), name=REAL_DESIGN)
    return dict(A=A, u=vec(rng, A.shape[0]), v=vec(rng, A.shape[1]))


add("bilinear", "bilinear", "sum(<i, r> in A) u(i) * (sum(<j, a> in r) a * v(j))",
    {"A": "csr"}, ("u", "v", "A"), _bilinear_make,
    value=lambda I: float(I["u"] @ (I["A"] @ I["v"])),
    dense=lambda j, d, m: d["u"] @ d["A"] @ d["v"],
    grad=lambda I, w: {"u": lambda: I["A"] @ I["v"], "v": lambda: I["A"].T @ I["u"],
                       "A": lambda: on(I["A"], I["u"][rows(I["A"])] * I["v"][I["A"].indices])}[w]())


def _bilinear_dense_make(rng, real):
    n, m = (300, 200) if real else (5, 4)
    return dict(M=den(rng, n, m), u=vec(rng, n), v=vec(rng, m))


add("bilinear_dense", "bilinear", "sum(<i, r> in M) sum(<j, m> in r) u(i) * m * v(j)",
    {}, ("M", "u"), _bilinear_dense_make,
    value=lambda I: float(I["u"] @ I["M"] @ I["v"]),
    dense=lambda j, d, m: d["u"] @ d["M"] @ d["v"],
    grad=lambda I, w: np.outer(I["u"], I["v"]) if w == "M" else I["M"] @ I["v"])


def _spmm_make(rng, real, positive=False):
    A = matrix(rng, real, shape=(7, 6), values="positive" if positive else "normal")
    k = 16 if real else 3
    return dict(A=A, B=den(rng, A.shape[1], k), C=den(rng, A.shape[0], k), W=den(rng, A.shape[0], k))


add("spmm", "spmm", "sum(<i, r> in A) { i -> sum(<k, a> in r) a * B(k) }", {"A": "csr"}, ("B", "A"),
    _spmm_make,
    value=lambda I: I["A"] @ I["B"],
    dense=lambda j, d, m: d["A"] @ d["B"],
    vjp=lambda I, w, ct: I["A"].T @ ct if w == "B" else on(I["A"], np.einsum(
        "ek,ek->e", ct[rows(I["A"])], I["B"][I["A"].indices])),
    jvp=lambda I, w, t: I["A"] @ t if w == "B" else t @ I["B"])


def _spmm_res(I):
    return I["A"] @ I["B"] - I["C"]


add("spmm_fro_loss", "spmm",
    "sum(<i, r> in A) let h = (sum(<k, a> in r) a * B(k)) - C(i) in sum(<j, e> in h) e * e",
    {"A": "csr"}, ("B", "A"), _spmm_make,
    value=lambda I: float(np.sum(_spmm_res(I) ** 2)),
    dense=lambda j, d, m: j.sum((d["A"] @ d["B"] - d["C"]) ** 2),
    grad=lambda I, w: 2 * I["A"].T @ _spmm_res(I) if w == "B" else on(I["A"], 2 * np.einsum(
        "ek,ek->e", _spmm_res(I)[rows(I["A"])], I["B"][I["A"].indices])))

add("spmm_weighted_sum", "spmm", "sum(<i, r> in A) sum(<k, a> in r) sum(<j, b> in B(k)) a * b * W(i)(j)",
    {"A": "csr"}, ("B", "A", "W"), _spmm_make,
    value=lambda I: float(np.sum((I["A"] @ I["B"]) * I["W"])),
    dense=lambda j, d, m: j.sum((d["A"] @ d["B"]) * d["W"]),
    grad=lambda I, w: {"B": lambda: I["A"].T @ I["W"], "W": lambda: I["A"] @ I["B"],
                       "A": lambda: on(I["A"], np.einsum("ek,ek->e", I["W"][rows(I["A"])],
                                                         I["B"][I["A"].indices]))}[w]())


def _spgemm_make(rng, real):
    A = matrix(rng, real, shape=(6, 6), density=0.3, name=REAL_STIFF)
    B = matrix(rng, real, shape=(6, 6), density=0.3, name=REAL_STIFF)
    if real:
        B = canonical(B.T)
    return dict(A=A, B=B)


add("spgemm", "spmm", "sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<j, b> in B(k)) { j -> a * b } }",
    {"A": "csr", "B": "csr"}, ("A", "B"), _spgemm_make,
    value=lambda I: canonical(I["A"] @ I["B"]),
    dense=lambda j, d, m: d["A"] @ d["B"],
    vjp=lambda I, w, ct: (on(I["A"], at(ct @ I["B"].T, I["A"])) if w == "A"
                          else on(I["B"], at(I["A"].T @ ct, I["B"]))),
    jvp=lambda I, w, t: t @ I["B"] if w == "A" else I["A"] @ t)


def _mtv_make(rng, real):
    n, k = (20_000, 32) if real else (9, 3)
    return dict(V=sparse_vector(rng, n, max(3, n // 100) if real else 4), M=den(rng, n, k))


add("sparse_vec_times_dense", "spmv", "sum(<j, v> in V) v * M(j)", {"V": "coo"}, ("V", "M"), _mtv_make,
    value=lambda I: I["V"].values @ I["M"][I["V"].coords[0]],
    dense=lambda j, d, m: d["V"] @ d["M"],
    vjp=lambda I, w, ct: (I["V"].with_values(I["M"][I["V"].coords[0]] @ ct) if w == "V"
                          else tensor_dense_values(SparseTensor(I["V"].coords, I["V"].values, (I["M"].shape[0],)),
                                                   I["V"].values)[:, None] * ct[None, :]),
    jvp=lambda I, w, t: (t.values @ I["M"][I["V"].coords[0]] if w == "V"
                         else I["V"].values @ t[I["V"].coords[0]]))

# =========================================================================================================
# SDDMM
# =========================================================================================================


def _sddmm_make(rng, real, fmt_name=REAL_SQUARE):
    S = matrix(rng, real, shape=(7, 6), name=fmt_name)
    k = 16 if real else 3
    return dict(S=S, U=den(rng, S.shape[0], k, scale=0.5), V=den(rng, S.shape[1], k, scale=0.5))


def _uv(I):
    S = I["S"]
    return np.einsum("ek,ek->e", I["U"][rows(S)], I["V"][S.indices])


def _sddmm_vjp(I, w, ct):
    S = I["S"]
    c = at(ct, S)
    G = on(S, c * S.data)
    if w == "U":
        return G @ I["V"]
    if w == "V":
        return G.T @ I["U"]
    return on(S, c * _uv(I))


add("sddmm", "sddmm",
    "sum(<i, r> in S) { i -> sum(<j, s> in r) { j -> s * (sum(<k, u> in U(i)) u * V(j)(k)) } }",
    {"S": "csr"}, ("U", "V", "S"), _sddmm_make,
    value=lambda I: on(I["S"], I["S"].data * _uv(I)),
    dense=lambda j, d, m: d["S"] * (d["U"] @ d["V"].T),
    vjp=_sddmm_vjp,
    jvp=lambda I, w, t: {"U": lambda: on(I["S"], I["S"].data * np.einsum("ek,ek->e", t[rows(I["S"])],
                                                                            I["V"][I["S"].indices])),
                         "V": lambda: on(I["S"], I["S"].data * np.einsum("ek,ek->e", I["U"][rows(I["S"])],
                                                                            t[I["S"].indices])),
                         "S": lambda: on(I["S"], at(t, I["S"]) * _uv(I))}[w]())

add("sddmm_sum", "sddmm", "sum(<i, r> in S) sum(<j, s> in r) s * (sum(<k, u> in U(i)) u * V(j)(k))",
    {"S": "csr"}, ("U", "V", "S"), _sddmm_make,
    value=lambda I: float(I["S"].data @ _uv(I)),
    dense=lambda j, d, m: j.sum(d["S"] * (d["U"] @ d["V"].T)),
    grad=lambda I, w: {"U": lambda: I["S"] @ I["V"], "V": lambda: I["S"].T @ I["U"],
                       "S": lambda: on(I["S"], _uv(I))}[w]())

add("sddmm_sum_csc", "sddmm", "sum(<i, r> in S) sum(<j, s> in r) s * (sum(<k, u> in U(i)) u * V(j)(k))",
    {"S": "csc"}, ("U", "V"), _sddmm_make,
    value=lambda I: float(I["S"].data @ _uv(I)),
    dense=lambda j, d, m: j.sum(d["S"] * (d["U"] @ d["V"].T)),
    grad=lambda I, w: I["S"] @ I["V"] if w == "U" else I["S"].T @ I["U"])

add("sddmm_tanh_let_row", "sddmm",
    "sum(<i, r> in S) let ui = U(i) in sum(<j, s> in r) s * tanh(sum(<k, u> in ui) u * V(j)(k))",
    {"S": "csr"}, ("U", "V"), _sddmm_make,
    value=lambda I: float(I["S"].data @ np.tanh(_uv(I))),
    dense=lambda j, d, m: j.sum(d["S"] * m["S"] * j.tanh(d["U"] @ d["V"].T)),
    grad=lambda I, w: (on(I["S"], I["S"].data * (1 - np.tanh(_uv(I)) ** 2)) @ I["V"] if w == "U"
                       else on(I["S"], I["S"].data * (1 - np.tanh(_uv(I)) ** 2)).T @ I["U"]))

# =========================================================================================================
# Hadamard products of two sparse matrices
# =========================================================================================================


def _two_sparse(rng, real, third=False):
    A = matrix(rng, real, shape=(7, 6), name=REAL_STIFF)
    B = matrix(rng, real, shape=(7, 6), name=REAL_STIFF)
    if real:  # overlapping but different patterns: B keeps a random 60% of A's entries plus its transpose
        keep = rng.random(A.nnz) < 0.6
        B = canonical(on(A, np.where(keep, rng.standard_normal(A.nnz), 0.0)))
        B.eliminate_zeros()
        B = canonical(B + sp.random(*A.shape, density=1e-4, random_state=rng))
    out = dict(A=A, B=B)
    if third:
        out["C"] = matrix(rng, real, shape=(7, 6), name=REAL_STIFF)
    return out


def _had_vals(I):
    return I["A"].data * at(I["B"], I["A"])


add("hadamard_sum", "hadamard", "sum(<i, r> in A) sum(<j, a> in r) a * B(i)(j)",
    {"A": "csr", "B": "csr"}, ("A", "B"), _two_sparse,
    value=lambda I: float(_had_vals(I).sum()),
    dense=lambda j, d, m: j.sum(d["A"] * d["B"]),
    grad=lambda I, w: on(I["A"], at(I["B"], I["A"])) if w == "A" else on(I["B"], at(I["A"], I["B"])))

add("hadamard", "hadamard", "sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a * B(i)(j) } }",
    {"A": "csr", "B": "csr"}, ("A", "B"), _two_sparse,
    value=lambda I: on(I["A"], _had_vals(I)),
    dense=lambda j, d, m: d["A"] * d["B"],
    vjp=lambda I, w, ct: (on(I["A"], at(ct, I["A"]) * at(I["B"], I["A"])) if w == "A"
                          else on(I["B"], at(ct, I["B"]) * at(I["A"], I["B"]))),
    jvp=lambda I, w, t: on(I["A"], at(t, I["A"]) * at(I["B"], I["A"]) if w == "A"
                           else I["A"].data * at(t, I["A"])))

add("hadamard_fro", "hadamard", "sum(<i, r> in A) sum(<j, a> in r) let h = a * B(i)(j) in h * h",
    {"A": "csr", "B": "csr"}, ("A", "B"), _two_sparse,
    value=lambda I: float(np.sum(_had_vals(I) ** 2)),
    dense=lambda j, d, m: j.sum((d["A"] * d["B"]) ** 2),
    grad=lambda I, w: (on(I["A"], 2 * _had_vals(I) * at(I["B"], I["A"])) if w == "A"
                       else on(I["B"], 2 * at(I["A"], I["B"]) ** 2 * I["B"].data)))

add("hadamard3_sum", "hadamard", "sum(<i, r> in A) sum(<j, a> in r) a * B(i)(j) * C(i)(j)",
    {"A": "csr", "B": "csr", "C": "csr"}, ("A", "C"), lambda rng, real: _two_sparse(rng, real, third=True),
    value=lambda I: float(np.sum(_had_vals(I) * at(I["C"], I["A"]))),
    dense=lambda j, d, m: j.sum(d["A"] * d["B"] * d["C"]),
    grad=lambda I, w: (on(I["A"], at(I["B"], I["A"]) * at(I["C"], I["A"])) if w == "A"
                       else on(I["C"], at(I["A"], I["C"]) * at(I["B"], I["C"]))))

add("hadamard_sum_csc", "hadamard", "sum(<i, r> in A) sum(<j, a> in r) a * B(i)(j)",
    {"A": "csr", "B": "csc"}, ("A", "B"), _two_sparse,
    value=lambda I: float(_had_vals(I).sum()),
    dense=lambda j, d, m: j.sum(d["A"] * d["B"]),
    grad=lambda I, w: on(I["A"], at(I["B"], I["A"])) if w == "A" else on(I["B"], at(I["A"], I["B"])))


def _masked_dense_make(rng, real):
    A = matrix(rng, real, shape=(7, 6), name=REAL_STIFF)
    return dict(A=A, W=den(rng, *A.shape)) if not real else dict(A=A, W=den(rng, *A.shape, scale=0.5))


add("masked_sq_error", "hadamard", "sum(<i, r> in A) sum(<j, a> in r) pow(a - W(i)(j), 2.0)",
    {"A": "csr"}, ("W", "A"), _masked_dense_make,
    value=lambda I: float(np.sum((I["A"].data - at(I["W"], I["A"])) ** 2)),
    dense=lambda j, d, m: j.sum(m["A"] * (d["A"] - d["W"]) ** 2),
    grad=lambda I, w: (on(I["A"], 2 * (I["A"].data - at(I["W"], I["A"]))) if w == "A"
                       else on(I["A"], -2 * (I["A"].data - at(I["W"], I["A"]))).toarray()))

# =========================================================================================================
# Row softmax and log-sum-exp
# =========================================================================================================


def _soft_make(rng, real, name=REAL_SQUARE):
    A = matrix(rng, real, shape=(7, 6), name=name)
    return dict(A=A, T=den(rng, *A.shape, scale=0.3) if not real else None,
                W=den(rng, *A.shape) if not real else None, tau=0.7)


def _soft_make_dense_T(rng, real):
    A = matrix(rng, real, shape=(7, 6), name=REAL_STIFF)
    return dict(A=A, T=den(rng, *A.shape, scale=0.3), W=den(rng, *A.shape), tau=0.7)


def _lse(I, scale=1.0):
    A = I["A"]
    return np.log(rowsum(A, np.exp(A.data / scale)))


def _dense_lse(j, d, m, scale=1.0):
    e = m["A"] * j.exp(d["A"] / scale)
    return j.log(e.sum(axis=1))


def _dense_softmax(j, d, m):
    e = m["A"] * j.exp(d["A"])
    return e / e.sum(axis=1, keepdims=True)


def _only(keys):
    return lambda rng, real: {k: v for k, v in _soft_make_dense_T(rng, real).items() if k in keys}


add("row_lse_sum", "softmax", "sum(<i, r> in A) log(sum(<j, a> in r) exp(a))", {"A": "csr"}, ("A",),
    lambda rng, real: {"A": _soft_make(rng, real)["A"]},
    value=lambda I: float(_lse(I).sum()),
    dense=lambda j, d, m: j.sum(_dense_lse(j, d, m)),
    grad=lambda I, w: on(I["A"], row_softmax(I["A"])))

add("row_lse_sum_csc", "softmax", "sum(<i, r> in A) log(sum(<j, a> in r) exp(a))", {"A": "csc"}, ("A",),
    lambda rng, real: {"A": _soft_make(rng, real, REAL_STIFF)["A"]},
    value=lambda I: float(_lse(I).sum()),
    dense=lambda j, d, m: j.sum(_dense_lse(j, d, m)),
    grad=lambda I, w: on(I["A"], row_softmax(I["A"])))

add("row_lse", "softmax", "sum(<i, r> in A) { i -> log(sum(<j, a> in r) exp(a)) }", {"A": "csr"}, ("A",),
    lambda rng, real: {"A": _soft_make(rng, real)["A"]},
    value=_lse,
    dense=_dense_lse,
    vjp=lambda I, w, ct: on(I["A"], ct[rows(I["A"])] * row_softmax(I["A"])),
    jvp=lambda I, w, t: rowsum(I["A"], row_softmax(I["A"]) * at(t, I["A"])))


def _softmax_vjp(I, w, ct):
    A = I["A"]
    p, c = row_softmax(A), at(ct, A)
    return on(A, p * (c - rowsum(A, p * c)[rows(A)]))


add("row_softmax", "softmax",
    "sum(<i, r> in A) let z = sum(<j, a> in r) exp(a) in { i -> sum(<j, a> in r) { j -> exp(a) / z } }",
    {"A": "csr"}, ("A",), lambda rng, real: {"A": _soft_make(rng, real)["A"]},
    value=lambda I: on(I["A"], row_softmax(I["A"])),
    dense=_dense_softmax,
    vjp=_softmax_vjp,
    jvp=lambda I, w, t: _softmax_vjp(I, w, t))  # the softmax Jacobian is symmetric per row


def _logsoftmax_vjp(I, w, ct):
    A = I["A"]
    c = at(ct, A)
    return on(A, c - row_softmax(A) * rowsum(A, c)[rows(A)])


add("row_log_softmax", "softmax",
    "sum(<i, r> in A) let l = log(sum(<j, a> in r) exp(a)) in { i -> sum(<j, a> in r) { j -> a - l } }",
    {"A": "csr"}, ("A",), lambda rng, real: {"A": _soft_make(rng, real)["A"]},
    value=lambda I: on(I["A"], I["A"].data - _lse(I)[rows(I["A"])]),
    dense=lambda j, d, m: m["A"] * (d["A"] - _dense_lse(j, d, m)[:, None]),
    vjp=_logsoftmax_vjp,
    jvp=lambda I, w, t: on(I["A"], at(t, I["A"]) - rowsum(I["A"], row_softmax(I["A"]) * at(t, I["A"]))[
        rows(I["A"])]))

add("softmax_xent", "softmax",
    "sum(<i, r> in A) log(sum(<j, a> in r) exp(a)) - sum(<j, a> in r) a * T(i)(j)",
    {"A": "csr"}, ("A", "T"), _only({"A", "T"}),
    value=lambda I: float(_lse(I).sum() - I["A"].data @ at(I["T"], I["A"])),
    dense=lambda j, d, m: j.sum(_dense_lse(j, d, m)) - j.sum(d["A"] * d["T"]),
    grad=lambda I, w: (on(I["A"], row_softmax(I["A"]) - at(I["T"], I["A"])) if w == "A"
                       else -I["A"].toarray()))


def _softmax_weighted_grad(I, w):
    A = I["A"]
    p, wv = row_softmax(A), at(I["W"], A)
    if w == "W":
        return on(A, p).toarray()
    return on(A, p * (wv - rowsum(A, p * wv)[rows(A)]))


add("softmax_weighted_sum", "softmax",
    "sum(<i, r> in A) let z = sum(<j, a> in r) exp(a) in sum(<j, a> in r) exp(a) / z * W(i)(j)",
    {"A": "csr"}, ("A", "W"), _only({"A", "W"}),
    value=lambda I: float(row_softmax(I["A"]) @ at(I["W"], I["A"])),
    dense=lambda j, d, m: j.sum(_dense_softmax(j, d, m) * d["W"]),
    grad=_softmax_weighted_grad)


def _lse_tau_grad(I, w):
    A, tau = I["A"], I["tau"]
    p = row_softmax(A, A.data / tau)
    if w == "A":
        return on(A, p)
    return float(np.sum(_lse(I, tau)) - np.sum(p * A.data) / tau)


add("lse_temperature", "softmax", "sum(<i, r> in A) tau * log(sum(<j, a> in r) exp(a / tau))",
    {"A": "csr", "tau": "scalar"}, ("A", "tau"), _only({"A", "tau"}),
    value=lambda I: float(I["tau"] * _lse(I, I["tau"]).sum()),
    dense=lambda j, d, m: d["tau"] * j.sum(_dense_lse(j, d, m, d["tau"])),
    grad=_lse_tau_grad)

# =========================================================================================================
# GCN layers
# =========================================================================================================


def _gcn_make(rng, real):
    A = matrix(rng, real, shape=(7, 7), density=0.35, name=REAL_SQUARE, values="positive")
    n = A.shape[0]
    f, h, c = (32, 16, 4) if real else (4, 3, 3)
    deg = rowsum(A, A.data)
    return dict(A=A, X=den(rng, n, f, scale=0.5), W=den(rng, f, h, scale=0.5), W1=den(rng, f, h, scale=0.5),
                W2=den(rng, h, c, scale=0.5), b=vec(rng, h, 0.1), dinv=1.0 / np.sqrt(deg),
                Y=np.eye(h)[rng.integers(0, h, n)], C=den(rng, n, h))  # one-hot labels over the h outputs of W


def _only_gcn(keys):
    return lambda rng, real: {k: v for k, v in _gcn_make(rng, real).items() if k in keys}


GCN_TANH_SUM = """
sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = sum(<f, hf> in h) hf * W(f) in
  sum(<o, zo> in z) tanh(zo)"""


def _gcn_backward(I, w, G):
    """Backward of Z = A X W given dL/dZ = G."""
    A, X, W = I["A"], I["X"], I["W"]
    if w == "W":
        return (A @ X).T @ G
    if w == "X":
        return A.T @ (G @ W.T)
    return on(A, np.einsum("ef,ef->e", (G @ W.T)[rows(A)], X[A.indices]))


def _Z(I):
    return I["A"] @ I["X"] @ I["W"]


add("gcn_tanh_sum", "gcn", GCN_TANH_SUM, {"A": "csr"}, ("W", "X", "A"), _only_gcn({"A", "X", "W"}),
    value=lambda I: float(np.tanh(_Z(I)).sum()),
    dense=lambda j, d, m: j.sum(j.tanh(d["A"] @ d["X"] @ d["W"])),
    grad=lambda I, w: _gcn_backward(I, w, 1 - np.tanh(_Z(I)) ** 2))

add("gcn_layer", "gcn", """
sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = sum(<f, hf> in h) hf * W(f) in
  { i -> sum(<o, zo> in z) { o -> tanh(zo) } }""", {"A": "csr"}, ("W", "X", "A"), _only_gcn({"A", "X", "W"}),
    value=lambda I: np.tanh(_Z(I)),
    dense=lambda j, d, m: j.tanh(d["A"] @ d["X"] @ d["W"]),
    vjp=lambda I, w, ct: _gcn_backward(I, w, ct * (1 - np.tanh(_Z(I)) ** 2)),
    jvp=lambda I, w, t: (1 - np.tanh(_Z(I)) ** 2) * {"W": lambda: I["A"] @ I["X"] @ t,
                                                    "X": lambda: I["A"] @ t @ I["W"],
                                                    "A": lambda: t @ I["X"] @ I["W"]}[w]())

add("gcn_relu_weighted", "gcn", """
sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  sum(<o, w> in sum(<f, hf> in h) hf * W(f)) relu(w) * C(i)(o)""",
    {"A": "csr"}, ("W", "C"), _only_gcn({"A", "X", "W", "C"}),
    value=lambda I: float(np.sum(np.maximum(_Z(I), 0) * I["C"])),
    dense=lambda j, d, m: j.sum(j.maximum(d["A"] @ d["X"] @ d["W"], 0) * d["C"]),
    grad=lambda I, w: (_gcn_backward(I, w, (_Z(I) > 0) * I["C"]) if w == "W" else np.maximum(_Z(I), 0)))


def _Zn(I):
    A = I["A"]
    An = on(A, A.data * I["dinv"][rows(A)] * I["dinv"][A.indices])
    return An, An @ I["X"] @ I["W"]


add("gcn_normalized_softplus", "gcn", """
sum(<i, r> in A)
  let h = sum(<j, a> in r) (a * dinv(i) * dinv(j)) * X(j) in
  let z = sum(<f, hf> in h) hf * W(f) in
  sum(<o, zo> in z) softplus(zo)""", {"A": "csr"}, ("W", "X"), _only_gcn({"A", "X", "W", "dinv"}),
    value=lambda I: float(softplus(_Zn(I)[1]).sum()),
    dense=lambda j, d, m: j.sum(j.logaddexp(0.0, (d["A"] * d["dinv"][:, None] * d["dinv"][None, :])
                                            @ d["X"] @ d["W"])),
    grad=lambda I, w: _gcn_backward(dict(I, A=_Zn(I)[0]), w, sigmoid(_Zn(I)[1])))


def _gcn_xent_G(I):
    Z = _Z(I)
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    return Z, P - I["Y"]


def _logsumexp_rows(Z):
    mx = Z.max(axis=1, keepdims=True)
    return (mx + np.log(np.exp(Z - mx).sum(axis=1, keepdims=True)))[:, 0]


add("gcn_softmax_xent", "gcn", """
sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = sum(<f, hf> in h) hf * W(f) in
  log(sum(<o, zo> in z) exp(zo)) - sum(<o, zo> in z) zo * Y(i)(o)""",
    {"A": "csr"}, ("W", "X", "A"), _only_gcn({"A", "X", "W", "Y"}),
    value=lambda I: float(np.sum(_logsumexp_rows(_Z(I))) - np.sum(_Z(I) * I["Y"])),
    dense=lambda j, d, m: (j.sum(j.log(j.exp(d["A"] @ d["X"] @ d["W"]).sum(axis=1)))
                           - j.sum(d["A"] @ d["X"] @ d["W"] * d["Y"])),
    grad=lambda I, w: _gcn_backward(I, w, _gcn_xent_G(I)[1]))


def _gcn2(I):
    A, X = I["A"], I["X"]
    H = np.tanh(A @ X @ I["W1"])
    Z2 = A @ H @ I["W2"]
    return H, Z2


def _gcn2_grad(I, w):
    A, X = I["A"], I["X"]
    H, Z2 = _gcn2(I)
    G2 = 2 * Z2
    if w == "W2":
        return (A @ H).T @ G2
    dH = A.T @ (G2 @ I["W2"].T)
    return (A @ X).T @ (dH * (1 - H ** 2))


add("gcn_two_layer", "gcn", """
let H = sum(<i, r> in A) {
          i -> let h = sum(<j, a> in r) a * X(j) in
               let z = sum(<f, hf> in h) hf * W1(f) in
               sum(<o, zo> in z) { o -> tanh(zo) } } in
sum(<i, r> in A)
  let g = sum(<j, a> in r) a * H(j) in
  let z2 = sum(<o, go> in g) go * W2(o) in
  sum(<c, zc> in z2) zc * zc""", {"A": "csr"}, ("W1", "W2"), _only_gcn({"A", "X", "W1", "W2"}),
    value=lambda I: float(np.sum(_gcn2(I)[1] ** 2)),
    dense=lambda j, d, m: j.sum((d["A"] @ j.tanh(d["A"] @ d["X"] @ d["W1"]) @ d["W2"]) ** 2),
    grad=_gcn2_grad)


def _gcn_bias(I):
    return np.tanh(_Z(I) + I["b"][None, :])


add("gcn_bias_sq", "gcn", """
sum(<i, r> in A)
  let h = sum(<j, a> in r) a * X(j) in
  let z = (sum(<f, hf> in h) hf * W(f)) + b in
  sum(<o, zo> in z) pow(tanh(zo), 2.0)""", {"A": "csr"}, ("b", "W"), _only_gcn({"A", "X", "W", "b"}),
    value=lambda I: float(np.sum(_gcn_bias(I) ** 2)),
    dense=lambda j, d, m: j.sum(j.tanh(d["A"] @ d["X"] @ d["W"] + d["b"][None, :]) ** 2),
    grad=lambda I, w: ((2 * _gcn_bias(I) * (1 - _gcn_bias(I) ** 2)).sum(axis=0) if w == "b"
                       else _gcn_backward(I, w, 2 * _gcn_bias(I) * (1 - _gcn_bias(I) ** 2))))


def _sage(I):
    A = I["A"]
    deg = np.diff(A.indptr).astype(float)
    Am = on(A, 1.0 / deg[rows(A)])
    return Am, Am @ I["X"] @ I["W"]


add("sage_mean_tanh", "gcn", """
sum(<i, r> in A)
  let deg = sum(<j, _> in r) 1.0 in
  let h = sum(<j, _> in r) (1.0 / deg) * X(j) in
  sum(<o, w> in sum(<f, hf> in h) hf * W(f)) tanh(w)""", {"A": "csr"}, ("X", "W"), _only_gcn({"A", "X", "W"}),
    value=lambda I: float(np.tanh(_sage(I)[1]).sum()),
    dense=lambda j, d, m: j.sum(j.tanh((m["A"] / m["A"].sum(axis=1, keepdims=True)) @ d["X"] @ d["W"])),
    grad=lambda I, w: _gcn_backward(dict(I, A=_sage(I)[0]), w, 1 - np.tanh(_sage(I)[1]) ** 2))

# =========================================================================================================
# Tensors: MTTKRP, TTV, TTM, CP losses (3-D and 4-D, COO and CSF)
# =========================================================================================================


def _tensor_make(rng, real, order=3, rank=None):
    T = tensor(rng, real, order)
    r = rank or (8 if real else 2)
    factors = {name: den(rng, T.shape[m], r, scale=0.5) for m, name in enumerate("ABCD"[:order])}
    out = dict(T=T, **factors)
    out["v"] = vec(rng, T.shape[order - 1])
    out["U"] = den(rng, T.shape[order - 1], r, scale=0.5)
    out.update(a=vec(rng, T.shape[0]), b=vec(rng, T.shape[1]), c=vec(rng, T.shape[2]))
    if order == 4:
        out["d"] = vec(rng, T.shape[3])
    return out


def _tmake(keys, order=3):
    return lambda rng, real: {k: v for k, v in _tensor_make(rng, real, order).items() if k in keys}


def _mttkrp_dense(T, B, C):
    i, j, k = T.coords
    out = np.zeros((T.shape[0], B.shape[1]))
    np.add.at(out, i, T.values[:, None] * B[j] * C[k])
    return out


def _mttkrp_vjp(I, w, ct):
    T, B, C = I["T"], I["B"], I["C"]
    i, j, k = T.coords
    if w == "T":
        return T.with_values(np.einsum("er,er,er->e", ct[i], B[j], C[k]))
    out = np.zeros_like(B if w == "B" else C)
    if w == "B":
        np.add.at(out, j, T.values[:, None] * ct[i] * C[k])
    else:
        np.add.at(out, k, T.values[:, None] * ct[i] * B[j])
    return out


MTTKRP3 = """
sum(<i, ti> in T) { i ->
  sum(<j, tj> in ti) sum(<k, t> in tj)
    sum(<r, b> in B(j)) { r -> t * b * C(k)(r) } }"""

for _name, _fmt, _wrt in (("mttkrp3_csf", "csf", ("B", "C", "T")), ("mttkrp3_coo", "coo", ("B", "T"))):
    add(_name, "tensor", MTTKRP3, {"T": _fmt}, _wrt, _tmake({"T", "B", "C"}),
        value=lambda I: _mttkrp_dense(I["T"], I["B"], I["C"]),
        dense=lambda j, d, m: j.einsum("ijk,jr,kr->ir", d["T"], d["B"], d["C"]),
        vjp=_mttkrp_vjp)

add("mttkrp3_sq_loss", "tensor", """
sum(<i, ti> in T)
  let m = sum(<j, tj> in ti) sum(<k, t> in tj) t * (sum(<r, b> in B(j)) { r -> b * C(k)(r) }) in
  sum(<r, v> in m) v * v""", {"T": "csf"}, ("B", "C"), _tmake({"T", "B", "C"}),
    value=lambda I: float(np.sum(_mttkrp_dense(I["T"], I["B"], I["C"]) ** 2)),
    dense=lambda j, d, m: j.sum(j.einsum("ijk,jr,kr->ir", d["T"], d["B"], d["C"]) ** 2),
    grad=lambda I, w: _mttkrp_vjp(I, w, 2 * _mttkrp_dense(I["T"], I["B"], I["C"])))


def _ttv(I):
    T = I["T"]
    i, j, k = T.coords
    out = np.zeros(T.shape[:2])
    np.add.at(out, (i, j), T.values * I["v"][k])
    return out


def _ttv_vjp(I, w, ct):
    T = I["T"]
    i, j, k = T.coords
    if w == "T":
        return T.with_values(ct[i, j] * I["v"][k])
    return np.bincount(k, weights=T.values * ct[i, j], minlength=T.shape[2])


TTV3 = "sum(<i, ti> in T) { i -> sum(<j, tj> in ti) { j -> sum(<k, t> in tj) t * v(k) } }"
for _name, _fmt, _wrt in (("ttv3_csf", "csf", ("v", "T")), ("ttv3_coo", "coo", ("v",))):
    add(_name, "tensor", TTV3, {"T": _fmt}, _wrt, _tmake({"T", "v"}),
        value=_ttv,
        dense=lambda j, d, m: j.einsum("ijk,k->ij", d["T"], d["v"]),
        vjp=_ttv_vjp,
        jvp=lambda I, w, t: _ttv(dict(I, v=t)) if w == "v" else _ttv(dict(I, T=t)))


def _ttm(I):
    T = I["T"]
    i, j, k = T.coords
    out = np.zeros(T.shape[:2] + (I["U"].shape[1],))
    np.add.at(out, (i, j), T.values[:, None] * I["U"][k])
    return out


def _ttm_vjp(I, w, ct):
    T = I["T"]
    i, j, k = T.coords
    if w == "T":
        return T.with_values(np.einsum("er,er->e", ct[i, j], I["U"][k]))
    out = np.zeros_like(I["U"])
    np.add.at(out, k, T.values[:, None] * ct[i, j])
    return out


TTM3 = "sum(<i, ti> in T) { i -> sum(<j, tj> in ti) { j -> sum(<k, t> in tj) t * U(k) } }"
for _name, _fmt, _wrt in (("ttm3_csf", "csf", ("U", "T")), ("ttm3_coo", "coo", ("U",))):
    add(_name, "tensor", TTM3, {"T": _fmt}, _wrt, _tmake({"T", "U"}),
        value=_ttm,
        dense=lambda j, d, m: j.einsum("ijk,kr->ijr", d["T"], d["U"]),
        vjp=_ttm_vjp,
        jvp=lambda I, w, t: _ttm(dict(I, U=t)) if w == "U" else _ttm(dict(I, T=t)))


def _cp3_res(I):
    T = I["T"]
    i, j, k = T.coords
    return T.values - np.einsum("er,er,er->e", I["A"][i], I["B"][j], I["C"][k])


def _cp3_grad(I, w):
    T = I["T"]
    i, j, k = T.coords
    e = _cp3_res(I)
    if w == "T":
        return T.with_values(2 * e)
    idx, f1, f2 = {"A": (i, I["B"][j], I["C"][k]), "B": (j, I["A"][i], I["C"][k]),
                   "C": (k, I["A"][i], I["B"][j])}[w]
    out = np.zeros_like(I[w])
    np.add.at(out, idx, -2 * e[:, None] * f1 * f2)
    return out


CP3 = """
sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, t> in tj)
  let e = t - sum(<r, a> in A(i)) a * B(j)(r) * C(k)(r) in
  e * e"""
for _name, _fmt, _wrt in (("cp3_loss_csf", "csf", ("A", "B", "C", "T")), ("cp3_loss_coo", "coo", ("A", "C"))):
    add(_name, "tensor", CP3, {"T": _fmt}, _wrt, _tmake({"T", "A", "B", "C"}),
        value=lambda I: float(np.sum(_cp3_res(I) ** 2)),
        dense=lambda j, d, m: j.sum(m["T"] * (d["T"] - j.einsum("ir,jr,kr->ijk", d["A"], d["B"], d["C"])) ** 2),
        grad=_cp3_grad)


def _tinner_make(rng, real):
    T = tensor(rng, real, 3)
    return dict(T=T, D=den(rng, *T.shape))


add("tensor_inner3_coo", "tensor", "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, t> in tj) t * D(i)(j)(k)",
    {"T": "coo"}, ("T", "D"), _tinner_make,
    value=lambda I: float(I["T"].values @ I["D"][tuple(I["T"].coords)]),
    dense=lambda j, d, m: j.sum(d["T"] * d["D"]),
    grad=lambda I, w: (I["T"].with_values(I["D"][tuple(I["T"].coords)]) if w == "T"
                       else I["T"].dense()))


def _multilinear3(I):
    i, j, k = I["T"].coords
    return float(np.sum(I["T"].values * I["a"][i] * I["b"][j] * I["c"][k]))


def _multilinear3_grad(I, w):
    i, j, k = I["T"].coords
    t = I["T"].values
    idx, n, f = {"a": (i, 0, I["b"][j] * I["c"][k]), "b": (j, 1, I["a"][i] * I["c"][k]),
                 "c": (k, 2, I["a"][i] * I["b"][j])}[w]
    return np.bincount(idx, weights=t * f, minlength=I["T"].shape[n])


add("multilinear3_csf", "tensor", "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, t> in tj) t * a(i) * b(j) * c(k)",
    {"T": "csf"}, ("a", "b", "c"), _tmake({"T", "a", "b", "c"}),
    value=_multilinear3,
    dense=lambda j, d, m: j.einsum("ijk,i,j,k->", d["T"], d["a"], d["b"], d["c"]),
    grad=_multilinear3_grad)


def _mttkrp4(I):
    T = I["T"]
    i, j, k, l = T.coords
    out = np.zeros((T.shape[0], I["B"].shape[1]))
    np.add.at(out, i, T.values[:, None] * I["B"][j] * I["C"][k] * I["D"][l])
    return out


def _mttkrp4_vjp(I, w, ct):
    T = I["T"]
    i, j, k, l = T.coords
    B, C, D = I["B"][j], I["C"][k], I["D"][l]
    idx, f = {"B": (j, C * D), "C": (k, B * D), "D": (l, B * C)}[w]
    out = np.zeros_like(I[w])
    np.add.at(out, idx, T.values[:, None] * ct[i] * f)
    return out


add("mttkrp4_csf", "tensor", """
sum(<i, ti> in T) { i ->
  sum(<j, tj> in ti) sum(<k, tk> in tj) sum(<l, t> in tk)
    sum(<r, b> in B(j)) { r -> t * b * C(k)(r) * D(l)(r) } }""",
    {"T": "csf"}, ("B", "D"), _tmake({"T", "B", "C", "D"}, order=4),
    value=_mttkrp4,
    dense=lambda j, d, m: j.einsum("ijkl,jr,kr,lr->ir", d["T"], d["B"], d["C"], d["D"]),
    vjp=_mttkrp4_vjp)


def _ml4(I):
    i, j, k, l = I["T"].coords
    return I["a"][i] * I["b"][j] * I["c"][k] * I["d"][l]


def _ml4_grad(I, w):
    T = I["T"]
    i, j, k, l = T.coords
    if w == "T":
        return T.with_values(_ml4(I))
    if w == "a":
        return np.bincount(i, weights=T.values * I["b"][j] * I["c"][k] * I["d"][l], minlength=T.shape[0])
    return np.bincount(l, weights=T.values * I["a"][i] * I["b"][j] * I["c"][k], minlength=T.shape[3])


add("multilinear4_coo", "tensor",
    "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, tk> in tj) sum(<l, t> in tk) t * a(i) * b(j) * c(k) * d(l)",
    {"T": "coo"}, ("a", "d", "T"), _tmake({"T", "a", "b", "c", "d"}, order=4),
    value=lambda I: float(I["T"].values @ _ml4(I)),
    dense=lambda j, d, m: j.einsum("ijkl,i,j,k,l->", d["T"], d["a"], d["b"], d["c"], d["d"]),
    grad=_ml4_grad)


def _cp4_res(I):
    T = I["T"]
    i, j, k, l = T.coords
    return T.values - np.einsum("er,er,er,er->e", I["A"][i], I["B"][j], I["C"][k], I["D"][l])


def _cp4_grad(I, w):
    T = I["T"]
    i, j, k, l = T.coords
    e = _cp4_res(I)
    idx, f = {"A": (i, I["B"][j] * I["C"][k] * I["D"][l]), "D": (l, I["A"][i] * I["B"][j] * I["C"][k])}[w]
    out = np.zeros_like(I[w])
    np.add.at(out, idx, -2 * e[:, None] * f)
    return out


add("cp4_loss_csf", "tensor", """
sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, tk> in tj) sum(<l, t> in tk)
  let e = t - sum(<r, a> in A(i)) a * B(j)(r) * C(k)(r) * D(l)(r) in
  e * e""", {"T": "csf"}, ("A", "D"), _tmake({"T", "A", "B", "C", "D"}, order=4),
    value=lambda I: float(np.sum(_cp4_res(I) ** 2)),
    dense=lambda j, d, m: j.sum(m["T"] * (d["T"] - j.einsum("ir,jr,kr,lr->ijkl", d["A"], d["B"], d["C"],
                                                             d["D"])) ** 2),
    grad=_cp4_grad)

add("tensor_sqnorm4_coo", "tensor",
    "sum(<i, ti> in T) sum(<j, tj> in ti) sum(<k, tk> in tj) sum(<l, t> in tk) t * t",
    {"T": "coo"}, ("T",), _tmake({"T"}, order=4),
    value=lambda I: float(I["T"].values @ I["T"].values),
    dense=lambda j, d, m: j.sum(d["T"] ** 2),
    grad=lambda I, w: I["T"].with_values(2 * I["T"].values))

# =========================================================================================================
# Sparse attention
# =========================================================================================================


def _attn_make(rng, real):
    M = matrix(rng, real, shape=(6, 6), density=0.4, name=REAL_SQUARE, values="positive")
    n = M.shape[0]
    k = 16 if real else 3
    return dict(M=M, Q=den(rng, n, k, scale=0.5), K=den(rng, n, k, scale=0.5), V=den(rng, n, k),
                G=den(rng, n, k))


def _only_attn(keys):
    return lambda rng, real: {k: v for k, v in _attn_make(rng, real).items() if k in keys}


def _scores(I):
    M = I["M"]
    return np.einsum("ek,ek->e", I["Q"][rows(M)], I["K"][M.indices])


def _attn_p(I):
    return row_softmax(I["M"], _scores(I))


def _scores_backward(I, w, gs):
    """Back through s_e = Q_i . K_j over M's pattern, given dL/ds per entry."""
    G = on(I["M"], gs)
    return G @ I["K"] if w == "Q" else G.T @ I["Q"]


add("attn_scores", "attention",
    "sum(<i, r> in M) { i -> sum(<j, _> in r) { j -> 0.25 * sum(<k, q> in Q(i)) q * K(j)(k) } }",
    {"M": "csr"}, ("Q", "K"), _only_attn({"M", "Q", "K"}),
    value=lambda I: on(I["M"], 0.25 * _scores(I)),
    dense=lambda j, d, m: m["M"] * 0.25 * (d["Q"] @ d["K"].T),
    vjp=lambda I, w, ct: _scores_backward(I, w, 0.25 * at(ct, I["M"])))

ATTN_HEAD = """
sum(<i, r> in M)
  let s = sum(<j, _> in r) { j -> sum(<k, q> in Q(i)) q * K(j)(k) } in
  let z = sum(<j, e> in s) exp(e) in"""


def _dense_attn_p(j, d, m):
    e = m["M"] * j.exp(d["Q"] @ d["K"].T)
    return e / e.sum(axis=1, keepdims=True)


def _attn_softmax_vjp(I, w, ct):
    M = I["M"]
    p, c = _attn_p(I), at(ct, M)
    return _scores_backward(I, w, p * (c - rowsum(M, p * c)[rows(M)]))


add("attn_softmax", "attention", ATTN_HEAD + " { i -> sum(<j, e> in s) { j -> exp(e) / z } }",
    {"M": "csr"}, ("Q", "K"), _only_attn({"M", "Q", "K"}),
    value=lambda I: on(I["M"], _attn_p(I)),
    dense=_dense_attn_p,
    vjp=_attn_softmax_vjp)


def _attn_out_vjp(I, w, ct):
    M = I["M"]
    P = on(M, _attn_p(I))
    if w == "V":
        return P.T @ ct
    dp = np.einsum("ek,ek->e", ct[rows(M)], I["V"][M.indices])
    p = P.data
    return _scores_backward(I, w, p * (dp - rowsum(M, p * dp)[rows(M)]))


add("attn_output", "attention", ATTN_HEAD + " { i -> sum(<j, e> in s) (exp(e) / z) * V(j) }",
    {"M": "csr"}, ("Q", "K", "V"), _only_attn({"M", "Q", "K", "V"}),
    value=lambda I: on(I["M"], _attn_p(I)) @ I["V"],
    dense=lambda j, d, m: _dense_attn_p(j, d, m) @ d["V"],
    vjp=_attn_out_vjp)

add("attn_loss", "attention", ATTN_HEAD + " sum(<j, e> in s) (exp(e) / z) * (sum(<d, v> in V(j)) v * G(i)(d))",
    {"M": "csr"}, ("Q", "K", "V"), _only_attn({"M", "Q", "K", "V", "G"}),
    value=lambda I: float(np.sum((on(I["M"], _attn_p(I)) @ I["V"]) * I["G"])),
    dense=lambda j, d, m: j.sum((_dense_attn_p(j, d, m) @ d["V"]) * d["G"]),
    grad=lambda I, w: _attn_out_vjp(I, w, I["G"]))


def _biased_scores(I):
    return _scores(I) + I["M"].data


def _attn_bias_grad(I, w):
    M = I["M"]
    p = row_softmax(M, _biased_scores(I))
    if w == "M":
        return on(M, p)
    return _scores_backward(I, w, p)


add("attn_bias_lse", "attention", """
sum(<i, r> in M)
  log(sum(<j, bias> in r) exp((sum(<k, q> in Q(i)) q * K(j)(k)) + bias))""",
    {"M": "csr"}, ("M", "Q"), lambda rng, real: {k: v for k, v in _attn_make(rng, real).items()
                                                 if k in ("M", "Q", "K")},
    value=lambda I: float(np.sum(np.log(rowsum(I["M"], np.exp(_biased_scores(I)))))),
    dense=lambda j, d, m: j.sum(j.log((m["M"] * j.exp(d["Q"] @ d["K"].T + d["M"])).sum(axis=1))),
    grad=_attn_bias_grad)

# =========================================================================================================
# Graph Laplacian forms
# =========================================================================================================


def _graph_make(rng, real):
    W = matrix(rng, real, shape=(8, 8), density=0.3, name=REAL_SQUARE, values="positive")
    n = W.shape[0]
    return dict(W=W, A=W, x=vec(rng, n), X=den(rng, n, 8 if real else 3, scale=0.5))


def _g(keys):
    return lambda rng, real: {k: v for k, v in _graph_make(rng, real).items() if k in keys}


def _diff(I):
    W = I["W"]
    return I["x"][rows(W)] - I["x"][W.indices]


def _edge_grad_x(W, g):
    """d/dx of sum_e f(x_i - x_j) given f' per entry: +g at i, -g at j."""
    return rowsum(W, g) - colsum(W, g)


add("laplacian_quad", "laplacian", "sum(<i, r> in W) sum(<j, w> in r) w * (x(i) - x(j)) * (x(i) - x(j))",
    {"W": "csr"}, ("x", "W"), _g({"W", "x"}),
    value=lambda I: float(I["W"].data @ _diff(I) ** 2),
    dense=lambda j, d, m: j.sum(d["W"] * (d["x"][:, None] - d["x"][None, :]) ** 2),
    grad=lambda I, w: (_edge_grad_x(I["W"], 2 * I["W"].data * _diff(I)) if w == "x"
                       else on(I["W"], _diff(I) ** 2)))


def _emb_diff(I):
    W = I["W"]
    return I["X"][rows(W)] - I["X"][W.indices]


def _emb_grad(I, w):
    W = I["W"]
    D = _emb_diff(I)
    if w == "W":
        return on(W, np.sum(D ** 2, axis=1))
    G = 2 * W.data[:, None] * D
    out = np.zeros_like(I["X"])
    np.add.at(out, rows(W), G)
    np.add.at(out, W.indices, -G)
    return out


add("laplacian_embedding", "laplacian",
    "sum(<i, r> in W) sum(<j, w> in r) w * (sum(<k, d> in X(i) - X(j)) d * d)",
    {"W": "csr"}, ("X", "W"), _g({"W", "X"}),
    value=lambda I: float(I["W"].data @ np.sum(_emb_diff(I) ** 2, axis=1)),
    dense=lambda j, d, m: j.sum(d["W"] * j.sum((d["X"][:, None, :] - d["X"][None, :, :]) ** 2, axis=2)),
    grad=_emb_grad)


def _xLx_grad(I, w):
    A, x = I["A"], I["x"]
    if w == "x":
        return 2 * rowsum(A, A.data) * x - (A + A.T) @ x
    r = rows(A)
    return on(A, x[r] ** 2 - x[r] * x[A.indices])


add("laplacian_xLx", "laplacian", """
sum(<i, r> in A)
  let d = sum(<j, a> in r) a in
  d * x(i) * x(i) - sum(<j, a> in r) a * x(i) * x(j)""", {"A": "csr"}, ("x", "A"), _g({"A", "x"}),
    value=lambda I: float(rowsum(I["A"], I["A"].data) @ I["x"] ** 2 - I["x"] @ (I["A"] @ I["x"])),
    dense=lambda j, d, m: j.sum(d["A"].sum(axis=1) * d["x"] ** 2) - d["x"] @ d["A"] @ d["x"],
    grad=_xLx_grad)


def _lap_apply_vjp(I, w, ct):
    A, x = I["A"], I["x"]
    if w == "x":
        return rowsum(A, A.data) * ct - A.T @ ct
    return on(A, ct[rows(A)] * (x[rows(A)] - x[A.indices]))


add("laplacian_apply", "laplacian", "sum(<i, r> in A) { i -> sum(<j, a> in r) a * (x(i) - x(j)) }",
    {"A": "csr"}, ("x", "A"), _g({"A", "x"}),
    value=lambda I: rowsum(I["A"], I["A"].data) * I["x"] - I["A"] @ I["x"],
    dense=lambda j, d, m: d["A"].sum(axis=1) * d["x"] - d["A"] @ d["x"],
    vjp=_lap_apply_vjp,
    jvp=lambda I, w, t: (rowsum(I["A"], I["A"].data) * t - I["A"] @ t if w == "x"
                         else rowsum(I["A"], at(t, I["A"]) * (I["x"][rows(I["A"])] - I["x"][I["A"].indices]))))

add("graph_total_variation", "laplacian", "sum(<i, r> in W) sum(<j, w> in r) w * abs(x(i) - x(j))",
    {"W": "csr"}, ("x",), _g({"W", "x"}),
    value=lambda I: float(I["W"].data @ np.abs(_diff(I))),
    dense=lambda j, d, m: j.sum(d["W"] * j.abs(d["x"][:, None] - d["x"][None, :] + (1 - m["W"]))),
    grad=lambda I, w: _edge_grad_x(I["W"], I["W"].data * np.sign(_diff(I))),
    note="the dense reference shifts off-pattern differences away from abs's kink at 0 (diagonal)")


def _gauss_grad(I, w):
    W = I["W"]
    D = _emb_diff(I)
    k = np.exp(-np.sum(D ** 2, axis=1))
    G = -2 * (W.data * k)[:, None] * D
    out = np.zeros_like(I["X"])
    np.add.at(out, rows(W), G)
    np.add.at(out, W.indices, -G)
    return out


add("gaussian_edge_kernel", "laplacian",
    "sum(<i, r> in W) sum(<j, w> in r) w * exp(-(sum(<k, d> in X(i) - X(j)) d * d))",
    {"W": "csr"}, ("X",), _g({"W", "X"}),
    value=lambda I: float(I["W"].data @ np.exp(-np.sum(_emb_diff(I) ** 2, axis=1))),
    dense=lambda j, d, m: j.sum(d["W"] * j.exp(-j.sum((d["X"][:, None, :] - d["X"][None, :, :]) ** 2, axis=2))),
    grad=_gauss_grad)

# =========================================================================================================
# Logistic and softmax regression on sparse features
# =========================================================================================================


def _clf_make(rng, real):
    X = matrix(rng, real, shape=(9, 5), density=0.4, name=REAL_DESIGN, transpose=True)
    n, f = X.shape
    c = 4 if real else 3
    return dict(X=X, w=vec(rng, f, 0.5), y=rng.choice([-1.0, 1.0], n), t=rng.integers(0, 2, n).astype(float),
                b=0.1, lam=0.05, W=den(rng, f, c, scale=0.5), Y=np.eye(c)[rng.integers(0, c, n)],
                cnt=rng.poisson(1.0, n).astype(float))


def _clf(keys):
    return lambda rng, real: {k: v for k, v in _clf_make(rng, real).items() if k in keys}


def _xw(I):
    return I["X"] @ I["w"]


def _feature_grad(I, w, g):
    """d/dw and d/dX (on X's pattern) of sum_i f(z_i), z = X w, given f'(z_i) = g."""
    X = I["X"]
    return X.T @ g if w == "w" else on(X, g[rows(X)] * I["w"][X.indices])


add("logreg", "logistic", "sum(<i, r> in X) softplus(-y(i) * sum(<j, a> in r) a * w(j))",
    {"X": "csr"}, ("w", "X"), _clf({"X", "w", "y"}),
    value=lambda I: float(softplus(-I["y"] * _xw(I)).sum()),
    dense=lambda j, d, m: j.sum(j.logaddexp(0.0, -d["y"] * (d["X"] @ d["w"]))),
    grad=lambda I, w: _feature_grad(I, w, -I["y"] * sigmoid(-I["y"] * _xw(I))))

add("logreg_coo", "logistic", "sum(<i, r> in X) softplus(-y(i) * sum(<j, a> in r) a * w(j))",
    {"X": "coo"}, ("w",), _clf({"X", "w", "y"}),
    value=lambda I: float(softplus(-I["y"] * _xw(I)).sum()),
    dense=lambda j, d, m: j.sum(j.logaddexp(0.0, -d["y"] * (d["X"] @ d["w"]))),
    grad=lambda I, w: _feature_grad(I, w, -I["y"] * sigmoid(-I["y"] * _xw(I))))


def _lr_bias_z(I):
    return _xw(I) + I["b"]


add("logreg_bias_l2", "logistic", """
(sum(<i, r> in X) softplus(-y(i) * ((sum(<j, a> in r) a * w(j)) + b)))
  + lam * sum(<j, v> in w) v * v""", {"X": "csr", "b": "scalar", "lam": "scalar"}, ("w", "b"),
    _clf({"X", "w", "y", "b", "lam"}),
    value=lambda I: float(softplus(-I["y"] * _lr_bias_z(I)).sum() + I["lam"] * I["w"] @ I["w"]),
    dense=lambda j, d, m: (j.sum(j.logaddexp(0.0, -d["y"] * (d["X"] @ d["w"] + d["b"])))
                           + d["lam"] * j.sum(d["w"] ** 2)),
    grad=lambda I, w: (I["X"].T @ (-I["y"] * sigmoid(-I["y"] * _lr_bias_z(I))) + 2 * I["lam"] * I["w"]
                       if w == "w" else float(np.sum(-I["y"] * sigmoid(-I["y"] * _lr_bias_z(I))))))

add("logreg_xent", "logistic", """
sum(<i, r> in X)
  let p = sigmoid(sum(<j, a> in r) a * w(j)) in
  -(t(i) * log(p) + (1.0 - t(i)) * log(1.0 - p))""", {"X": "csr"}, ("w", "X"), _clf({"X", "w", "t"}),
    value=lambda I: float(-np.sum(I["t"] * np.log(sigmoid(_xw(I))) + (1 - I["t"]) * np.log(1 - sigmoid(_xw(I))))),
    dense=lambda j, d, m: -j.sum(d["t"] * j.log(1 / (1 + j.exp(-(d["X"] @ d["w"]))))
                                 + (1 - d["t"]) * j.log(1 - 1 / (1 + j.exp(-(d["X"] @ d["w"]))))),
    grad=lambda I, w: _feature_grad(I, w, sigmoid(_xw(I)) - I["t"]))

add("logreg_predict", "logistic", "sum(<i, r> in X) { i -> sigmoid(sum(<j, a> in r) a * w(j)) }",
    {"X": "csr"}, ("w", "X"), _clf({"X", "w"}),
    value=lambda I: sigmoid(_xw(I)),
    dense=lambda j, d, m: 1 / (1 + j.exp(-(d["X"] @ d["w"]))),
    vjp=lambda I, w, ct: _feature_grad(I, w, ct * sigmoid(_xw(I)) * (1 - sigmoid(_xw(I)))),
    jvp=lambda I, w, t: sigmoid(_xw(I)) * (1 - sigmoid(_xw(I))) * (I["X"] @ t if w == "w" else t @ I["w"]))

add("poisson_regression", "logistic", """
sum(<i, r> in X) let z = sum(<j, a> in r) a * w(j) in exp(z) - cnt(i) * z""",
    {"X": "csr"}, ("w",), _clf({"X", "w", "cnt"}),
    value=lambda I: float(np.sum(np.exp(_xw(I)) - I["cnt"] * _xw(I))),
    dense=lambda j, d, m: j.sum(j.exp(d["X"] @ d["w"]) - d["cnt"] * (d["X"] @ d["w"])),
    grad=lambda I, w: _feature_grad(I, w, np.exp(_xw(I)) - I["cnt"]))

add("squared_hinge", "logistic", "sum(<i, r> in X) pow(relu(1.0 - y(i) * sum(<j, a> in r) a * w(j)), 2.0)",
    {"X": "csr"}, ("w",), _clf({"X", "w", "y"}),
    value=lambda I: float(np.sum(np.maximum(1 - I["y"] * _xw(I), 0) ** 2)),
    dense=lambda j, d, m: j.sum(j.maximum(1 - d["y"] * (d["X"] @ d["w"]), 0) ** 2),
    grad=lambda I, w: _feature_grad(I, w, -2 * I["y"] * np.maximum(1 - I["y"] * _xw(I), 0)))


def _softreg_G(I):
    Z = I["X"] @ I["W"]
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    return Z, P / P.sum(axis=1, keepdims=True) - I["Y"]


add("softmax_regression", "logistic", """
sum(<i, r> in X)
  let z = sum(<j, a> in r) a * W(j) in
  log(sum(<c, zc> in z) exp(zc)) - sum(<c, zc> in z) zc * Y(i)(c)""", {"X": "csr"}, ("W", "X"),
    _clf({"X", "W", "Y"}),
    value=lambda I: float(np.sum(_logsumexp_rows(I["X"] @ I["W"])) - np.sum((I["X"] @ I["W"]) * I["Y"])),
    dense=lambda j, d, m: (j.sum(j.log(j.exp(d["X"] @ d["W"]).sum(axis=1))) - j.sum((d["X"] @ d["W"]) * d["Y"])),
    grad=lambda I, w: (I["X"].T @ _softreg_G(I)[1] if w == "W" else on(I["X"], np.einsum(
        "ec,ec->e", _softreg_G(I)[1][rows(I["X"])], I["W"][I["X"].indices]))))

# =========================================================================================================
# Matrix factorisation on observed entries
# =========================================================================================================


def _mf_make(rng, real):
    R = matrix(rng, real, shape=(7, 6), density=0.4, name=REAL_STIFF)
    n, m = R.shape
    k = 16 if real else 3
    return dict(R=R, U=den(rng, n, k, scale=0.5), V=den(rng, m, k, scale=0.5), lam=0.1, mu=0.2,
                bu=vec(rng, n, 0.1), bv=vec(rng, m, 0.1))


def _mf(keys, sign=False):
    def make(rng, real):
        I = {k: v for k, v in _mf_make(rng, real).items() if k in keys}
        if sign:
            I["R"].data = np.sign(I["R"].data) + (I["R"].data == 0)
        return I
    return make


def _mf_pred(I):
    R = I["R"]
    return np.einsum("ek,ek->e", I["U"][rows(R)], I["V"][R.indices])


def _mf_factor_grad(I, w, g):
    """d/dU, d/dV of sum_e f(u_i . v_j) given f' per observed entry."""
    G = on(I["R"], g)
    return G @ I["V"] if w == "U" else G.T @ I["U"]


MF_SQ = "sum(<i, r> in R) sum(<j, v> in r) let e = v - sum(<k, u> in U(i)) u * V(j)(k) in e * e"
for _name, _fmt in (("mf_sq", "csr"), ("mf_sq_coo", "coo")):
    add(_name, "factorisation", MF_SQ, {"R": _fmt}, ("U", "V"), _mf({"R", "U", "V"}),
        value=lambda I: float(np.sum((I["R"].data - _mf_pred(I)) ** 2)),
        dense=lambda j, d, m: j.sum(m["R"] * (d["R"] - d["U"] @ d["V"].T) ** 2),
        grad=lambda I, w: _mf_factor_grad(I, w, -2 * (I["R"].data - _mf_pred(I))))

add("mf_regularized", "factorisation", """
let fit = sum(<i, r> in R) sum(<j, v> in r) pow(v - sum(<k, u> in U(i)) u * V(j)(k), 2.0) in
let reg = (sum(<i, u> in U) sum(<k, a> in u) a * a) + (sum(<j, v> in V) sum(<k, b> in v) b * b) in
fit + lam * reg""", {"R": "csr", "lam": "scalar"}, ("U", "V", "lam"), _mf({"R", "U", "V", "lam"}),
    value=lambda I: float(np.sum((I["R"].data - _mf_pred(I)) ** 2)
                          + I["lam"] * (np.sum(I["U"] ** 2) + np.sum(I["V"] ** 2))),
    dense=lambda j, d, m: (j.sum(m["R"] * (d["R"] - d["U"] @ d["V"].T) ** 2)
                           + d["lam"] * (j.sum(d["U"] ** 2) + j.sum(d["V"] ** 2))),
    grad=lambda I, w: (float(np.sum(I["U"] ** 2) + np.sum(I["V"] ** 2)) if w == "lam"
                       else _mf_factor_grad(I, w, -2 * (I["R"].data - _mf_pred(I))) + 2 * I["lam"] * I[w]))


def _mf_bias_e(I):
    R = I["R"]
    return R.data - (I["mu"] + I["bu"][rows(R)] + I["bv"][R.indices] + _mf_pred(I))


def _mf_bias_grad(I, w):
    R, e = I["R"], _mf_bias_e(I)
    if w == "bu":
        return rowsum(R, -2 * e)
    if w == "bv":
        return colsum(R, -2 * e)
    if w == "mu":
        return float(np.sum(-2 * e))
    return _mf_factor_grad(I, w, -2 * e)


add("mf_biases", "factorisation", """
sum(<i, r> in R) sum(<j, v> in r)
  let pred = mu + bu(i) + bv(j) + sum(<k, u> in U(i)) u * V(j)(k) in
  (v - pred) * (v - pred)""", {"R": "csr", "mu": "scalar"}, ("bu", "bv", "U", "mu"),
    _mf({"R", "U", "V", "mu", "bu", "bv"}),
    value=lambda I: float(np.sum(_mf_bias_e(I) ** 2)),
    dense=lambda j, d, m: j.sum(m["R"] * (d["R"] - (d["mu"] + d["bu"][:, None] + d["bv"][None, :]
                                                     + d["U"] @ d["V"].T)) ** 2),
    grad=_mf_bias_grad)

add("mf_logistic", "factorisation",
    "sum(<i, r> in R) sum(<j, v> in r) softplus(-v * sum(<k, u> in U(i)) u * V(j)(k))",
    {"R": "csr"}, ("U", "V"), _mf({"R", "U", "V"}, sign=True),
    value=lambda I: float(np.sum(softplus(-I["R"].data * _mf_pred(I)))),
    dense=lambda j, d, m: j.sum(m["R"] * j.logaddexp(0.0, -d["R"] * (d["U"] @ d["V"].T))),
    grad=lambda I, w: _mf_factor_grad(I, w, -I["R"].data * sigmoid(-I["R"].data * _mf_pred(I))))

add("mf_predict", "factorisation",
    "sum(<i, r> in R) { i -> sum(<j, _> in r) { j -> sum(<k, u> in U(i)) u * V(j)(k) } }",
    {"R": "csr"}, ("U", "V"), _mf({"R", "U", "V"}),
    value=lambda I: on(I["R"], _mf_pred(I)),
    dense=lambda j, d, m: m["R"] * (d["U"] @ d["V"].T),
    vjp=lambda I, w, ct: _mf_factor_grad(I, w, at(ct, I["R"])))

# =========================================================================================================
# Sub-arrays and range sums
# =========================================================================================================


def _seq_make(rng, real):
    n = 100_000 if real else 12
    f = vec(rng, 5 if real else 3)
    return dict(x=vec(rng, n), y=vec(rng, n), f=f, n=n - f.size + 1, m=n - 1, lo=2, hi=n - 3)


def _seq(keys):
    return lambda rng, real: {k: v for k, v in _seq_make(rng, real).items() if k in keys}


def _window_grad(I, lo, hi):
    g = np.zeros_like(I["x"])
    g[lo:hi] = 2 * I["x"][lo:hi]
    return g


add("window_sumsq", "subarray", "sum(<i, v> in x(2:7)) v * v", {}, ("x",), _seq({"x"}),
    value=lambda I: float(np.sum(I["x"][2:7] ** 2)),
    dense=lambda j, d, m: j.sum(d["x"][2:7] ** 2),
    grad=lambda I, w: _window_grad(I, 2, 7))


def _range_dot_grad(I, w, lo, hi):
    g = np.zeros_like(I[w])
    other = I["y"] if w == "x" else I["x"]
    g[lo:hi] = other[lo:hi]
    return g


add("range_dot_const", "subarray", "sum(<i, _> in (1:5)) x(i) * y(i)", {}, ("x", "y"), _seq({"x", "y"}),
    value=lambda I: float(I["x"][1:5] @ I["y"][1:5]),
    dense=lambda j, d, m: d["x"][1:5] @ d["y"][1:5],
    grad=lambda I, w: _range_dot_grad(I, w, 1, 5))

add("range_dot_inputs", "subarray", "sum(<i, _> in (lo:hi)) x(i) * y(i)", {"lo": "int", "hi": "int"},
    ("x",), _seq({"x", "y", "lo", "hi"}),
    value=lambda I: float(I["x"][I["lo"]:I["hi"]] @ I["y"][I["lo"]:I["hi"]]),
    dense=lambda j, d, m: d["x"][d["lo"]:d["hi"]] @ d["y"][d["lo"]:d["hi"]],
    grad=lambda I, w: _range_dot_grad(I, w, I["lo"], I["hi"]))


def _conv(I, f=None, x=None):
    f = I["f"] if f is None else f
    x = I["x"] if x is None else x
    return np.correlate(x, f, mode="valid")


def _conv_vjp(I, w, ct):
    if w == "f":
        return np.correlate(I["x"], ct, mode="valid")
    return np.convolve(ct, I["f"], mode="full")


add("conv1d", "subarray", "sum(<i, _> in (0:n)) { i -> sum(<k, w> in f) w * x(i + k) }", {"n": "int"},
    ("f", "x"), _seq({"x", "f", "n"}),
    value=_conv,
    dense=lambda j, d, m: j.correlate(d["x"], d["f"], mode="valid"),
    vjp=_conv_vjp,
    jvp=lambda I, w, t: _conv(I, f=t) if w == "f" else _conv(I, x=t))


def _conv_loss_grad(I, w):
    return _conv_vjp(I, w, 2 * (_conv(I) - I["y"][:I["n"]]))


add("conv1d_sq_loss", "subarray", """
sum(<i, _> in (0:n))
  let e = (sum(<k, w> in f) w * x(i + k)) - y(i) in
  e * e""", {"n": "int"}, ("f", "x"), _seq({"x", "y", "f", "n"}),
    value=lambda I: float(np.sum((_conv(I) - I["y"][:I["n"]]) ** 2)),
    dense=lambda j, d, m: j.sum((j.correlate(d["x"], d["f"], mode="valid") - d["y"][:d["n"]]) ** 2),
    grad=_conv_loss_grad)


def _smooth_grad(I, w):
    x = I["x"]
    dd = np.diff(x)
    g = np.zeros_like(x)
    g[1:] += 2 * dd
    g[:-1] -= 2 * dd
    return g


add("finite_difference_smoothness", "subarray", "sum(<i, _> in (0:m)) let d = x(i + 1) - x(i) in d * d",
    {"m": "int"}, ("x",), _seq({"x", "m"}),
    value=lambda I: float(np.sum(np.diff(I["x"]) ** 2)),
    dense=lambda j, d, m: j.sum((d["x"][1:] - d["x"][:-1]) ** 2),
    grad=_smooth_grad)


def _rows_window_make(rng, real):
    I = _A_x_y(rng, real)
    return dict(A=I["A"], x=I["x"])


add("row_block_spmv_sum", "subarray", "sum(<i, r> in A(1:4)) sum(<j, a> in r) a * x(j) * x(j)",
    {"A": "csr"}, ("A", "x"), _rows_window_make,
    value=lambda I: float(np.sum(I["A"][1:4] @ (I["x"] ** 2))),
    dense=lambda j, d, m: j.sum(d["A"][1:4] @ (d["x"] ** 2)),
    grad=lambda I, w: (on(I["A"], (rows(I["A"]) >= 1) * (rows(I["A"]) < 4) * I["x"][I["A"].indices] ** 2)
                       if w == "A" else 2 * I["x"] * np.asarray(I["A"][1:4].sum(axis=0)).ravel()))


def _spvec_make(rng, real):
    n = 100_000 if real else 16
    return dict(V=sparse_vector(rng, n, n // 20 if real else 7), U=sparse_vector(rng, n, n // 20 if real else 7))


def _spwin(I, lo=3, hi=12):
    V = I["V"]
    keep = (V.coords[0] >= lo) & (V.coords[0] < hi)
    return keep


add("sparse_window_sumsq", "subarray", "sum(<i, v> in V(3:12)) v * v", {"V": "coo"}, ("V",),
    lambda rng, real: {"V": _spvec_make(rng, real)["V"]},
    value=lambda I: float(np.sum(I["V"].values[_spwin(I)] ** 2)),
    dense=lambda j, d, m: j.sum(d["V"][3:12] ** 2),
    grad=lambda I, w: I["V"].with_values(2 * I["V"].values * _spwin(I)))


def _cumsum_vjp(I, w, ct):
    return np.cumsum(ct[::-1])[::-1] - ct


add("prefix_sums", "subarray", "sum(<k, _> in (0:m)) { k -> sum(<i, v> in x(0:k)) v }", {"m": "int"}, ("x",),
    lambda rng, real: {k: v for k, v in _seq_make(rng, False).items() if k in ("x", "m")} if real else
    {k: v for k, v in _seq_make(rng, real).items() if k in ("x", "m")},
    value=lambda I: np.concatenate([[0.0], np.cumsum(I["x"])[:I["m"] - 1]]),
    dense=lambda j, d, m: j.concatenate([j.zeros(1), j.cumsum(d["x"])[:d["m"] - 1]]),
    vjp=lambda I, w, ct: np.concatenate([_cumsum_vjp(I, w, ct), [0.0]]),
    note="O(n^2) by construction (a prefix sum written as nested sums); small at real size too")

# =========================================================================================================
# Norms, traces, element-wise maps, reductions
# =========================================================================================================


def _A_only(name=REAL_STIFF, values="normal", shape=(7, 6)):
    return lambda rng, real: {"A": matrix(rng, real, shape=shape, name=name, values=values)}


add("frobenius_norm", "norms", "sqrt(sum(<i, r> in A) sum(<j, a> in r) a * a)", {"A": "csr"}, ("A",), _A_only(),
    value=lambda I: float(np.sqrt(I["A"].data @ I["A"].data)),
    dense=lambda j, d, m: j.sqrt(j.sum(d["A"] ** 2)),
    grad=lambda I, w: on(I["A"], I["A"].data / np.sqrt(I["A"].data @ I["A"].data)))

add("l1_sparse_vector", "norms", "sum(<i, v> in V) abs(v)", {"V": "coo"}, ("V",),
    lambda rng, real: {"V": _spvec_make(rng, real)["V"]},
    value=lambda I: float(np.abs(I["V"].values).sum()),
    dense=lambda j, d, m: j.sum(j.abs(d["V"] + (1 - m["V"]))) - j.sum(1 - m["V"]),
    grad=lambda I, w: I["V"].with_values(np.sign(I["V"].values)),
    note="the dense reference shifts off-pattern zeros away from abs's kink")


def _pnorm(x, p=3.0):
    return np.sum(np.abs(x) ** p) ** (1 / p)


add("p_norm", "norms", "pow(sum(<i, v> in x) pow(abs(v), 3.0), 1.0 / 3.0)", {}, ("x",),
    lambda rng, real: {"x": vec(rng, 100_000 if real else 9)},
    value=lambda I: float(_pnorm(I["x"])),
    dense=lambda j, d, m: j.sum(j.abs(d["x"]) ** 3.0) ** (1.0 / 3.0),
    grad=lambda I, w: np.sign(I["x"]) * np.abs(I["x"]) ** 2 / _pnorm(I["x"]) ** 2)


def _cos_parts(I):
    U, V = I["U"], I["V"]
    dense_v = np.zeros(V.shape[0])
    dense_v[V.coords[0]] = V.values
    dense_u = np.zeros(U.shape[0])
    dense_u[U.coords[0]] = U.values
    return dense_u, dense_v


def _cos_grad(I, w):
    u, v = _cos_parts(I)
    d, nu, nv = u @ v, u @ u, v @ v
    s = d / np.sqrt(nu * nv)
    if w == "U":
        g = v / np.sqrt(nu * nv) - s * u / nu
        return I["U"].with_values(g[I["U"].coords[0]])
    g = u / np.sqrt(nu * nv) - s * v / nv
    return I["V"].with_values(g[I["V"].coords[0]])


def _cos_make(rng, real):
    I = _spvec_make(rng, real)
    # make the supports overlap: U takes half of V's keys
    V = I["V"]
    keys = np.union1d(V.coords[0][::2], I["U"].coords[0])
    I["U"] = SparseTensor(keys[None, :], rng.standard_normal(keys.size), V.shape)
    return I


add("cosine_similarity", "norms", """
let d = sum(<i, u> in U) u * V(i) in
let nu = sum(<i, u> in U) u * u in
let nv = sum(<i, v> in V) v * v in
d / sqrt(nu * nv)""", {"U": "coo", "V": "coo"}, ("U", "V"), _cos_make,
    value=lambda I: float(_cos_parts(I)[0] @ _cos_parts(I)[1] / np.sqrt(
        (_cos_parts(I)[0] @ _cos_parts(I)[0]) * (_cos_parts(I)[1] @ _cos_parts(I)[1]))),
    dense=lambda j, d, m: (d["U"] @ d["V"]) / j.sqrt((d["U"] @ d["U"]) * (d["V"] @ d["V"])),
    grad=_cos_grad)


def _trace_ab_make(rng, real):
    A = matrix(rng, real, shape=(7, 7), density=0.35, name=REAL_STIFF)
    B = matrix(rng, real, shape=(7, 7), density=0.35, name=REAL_STIFF)
    if real:
        B = canonical(B.T * 0.5 + sp.random(*B.shape, density=1e-4, random_state=rng))
    return dict(A=A, B=B)


add("trace_of_product", "norms", "sum(<i, r> in A) sum(<j, a> in r) a * B(j)(i)",
    {"A": "csr", "B": "csr"}, ("A", "B"), _trace_ab_make,
    value=lambda I: float(I["A"].data @ at(canonical(I["B"].T), I["A"])),
    dense=lambda j, d, m: j.trace(d["A"] @ d["B"]),
    grad=lambda I, w: (on(I["A"], at(canonical(I["B"].T), I["A"])) if w == "A"
                       else on(I["B"], at(canonical(I["A"].T), I["B"]))))


def _txax_make(rng, real):
    A = matrix(rng, real, shape=(7, 7), density=0.35, name=REAL_STIFF)
    return dict(A=A, X=den(rng, A.shape[0], 8 if real else 3, scale=0.5))


add("trace_XtAX", "norms", "sum(<i, r> in A) sum(<j, a> in r) a * (sum(<k, u> in X(i)) u * X(j)(k))",
    {"A": "csr"}, ("X", "A"), _txax_make,
    value=lambda I: float(np.sum(I["X"] * (I["A"] @ I["X"]))),
    dense=lambda j, d, m: j.trace(d["X"].T @ d["A"] @ d["X"]),
    grad=lambda I, w: ((I["A"] + I["A"].T) @ I["X"] if w == "X"
                       else on(I["A"], np.einsum("ek,ek->e", I["X"][rows(I["A"])], I["X"][I["A"].indices]))))

add("diagonal", "norms", "sum(<i, r> in A) { i -> r(i) }", {"A": "csr"}, ("A",),
    _A_only(name=REAL_STIFF, shape=(7, 7)),
    value=lambda I: I["A"].diagonal(),
    dense=lambda j, d, m: j.diagonal(d["A"]),
    vjp=lambda I, w, ct: on(I["A"], (rows(I["A"]) == I["A"].indices) * ct[rows(I["A"])]))

add("column_sums", "norms", "sum(<i, r> in A) sum(<j, a> in r) { j -> a }", {"A": "csr"}, ("A",), _A_only(),
    value=lambda I: colsum(I["A"], I["A"].data),
    dense=lambda j, d, m: d["A"].sum(axis=0),
    vjp=lambda I, w, ct: on(I["A"], ct[I["A"].indices]),
    jvp=lambda I, w, t: colsum(I["A"], at(t, I["A"])))

add("row_norms", "norms", "sum(<i, r> in A) { i -> sqrt(sum(<j, a> in r) a * a) }", {"A": "csr"}, ("A",),
    _A_only(),
    value=lambda I: np.sqrt(rowsum(I["A"], I["A"].data ** 2)),
    dense=lambda j, d, m: j.sqrt(j.sum(d["A"] ** 2, axis=1)),
    vjp=lambda I, w, ct: on(I["A"], (ct / np.sqrt(rowsum(I["A"], I["A"].data ** 2)))[rows(I["A"])]
                            * I["A"].data))

add("elementwise_exp", "norms", "sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> exp(a) } }", {"A": "csr"},
    ("A",), _A_only(),
    value=lambda I: on(I["A"], np.exp(I["A"].data)),
    dense=lambda j, d, m: m["A"] * j.exp(d["A"]),
    vjp=lambda I, w, ct: on(I["A"], at(ct, I["A"]) * np.exp(I["A"].data)),
    jvp=lambda I, w, t: on(I["A"], at(t, I["A"]) * np.exp(I["A"].data)))


def _rownorm_vjp(I, w, ct):
    A = I["A"]
    s = rowsum(A, A.data)[rows(A)]
    c = at(ct, A)
    return on(A, c / s - rowsum(A, c * A.data)[rows(A)] / s ** 2)


add("row_normalize", "norms", """
sum(<i, r> in A) let s = sum(<j, a> in r) a in { i -> sum(<j, a> in r) { j -> a / s } }""",
    {"A": "csr"}, ("A",), _A_only(values="positive"),
    value=lambda I: on(I["A"], I["A"].data / rowsum(I["A"], I["A"].data)[rows(I["A"])]),
    dense=lambda j, d, m: d["A"] / d["A"].sum(axis=1, keepdims=True),
    vjp=_rownorm_vjp)


def _outer_make(rng, real):
    M = matrix(rng, real, shape=(6, 5), name=REAL_DESIGN)
    return dict(M=M, x=vec(rng, M.shape[0]), y=vec(rng, M.shape[1]))


add("masked_outer", "sddmm", "sum(<i, r> in M) { i -> sum(<j, _> in r) { j -> x(i) * y(j) } }",
    {"M": "csr"}, ("x", "y"), _outer_make,
    value=lambda I: on(I["M"], I["x"][rows(I["M"])] * I["y"][I["M"].indices]),
    dense=lambda j, d, m: m["M"] * j.outer(d["x"], d["y"]),
    vjp=lambda I, w, ct: (rowsum(I["M"], at(ct, I["M"]) * I["y"][I["M"].indices]) if w == "x"
                          else colsum(I["M"], at(ct, I["M"]) * I["x"][rows(I["M"])])))


def _pr_make(rng, real):
    A = matrix(rng, real, shape=(8, 8), density=0.3, name=REAL_SQUARE, values="positive")
    A = canonical(sp.diags(1.0 / rowsum(A, A.data)) @ A)
    n = A.shape[0]
    return dict(A=A, x=rng.uniform(0, 1, n) / n, b=np.full(n, 0.15 / n), alpha=0.85)


def _pr_res(I):
    return I["x"] - I["alpha"] * (I["A"].T @ I["x"]) - I["b"]


def _pr_grad(I, w):
    e = _pr_res(I)
    A = I["A"]
    if w == "x":
        return 2 * e - 2 * I["alpha"] * (A @ e)
    if w == "alpha":
        return float(-2 * e @ (A.T @ I["x"]))
    return on(A, -2 * I["alpha"] * I["x"][rows(A)] * e[A.indices])


add("pagerank_residual", "laplacian", """
let y = sum(<i, r> in A) sum(<j, a> in r) { j -> a * x(i) } in
sum(<j, v> in x) let e = v - alpha * y(j) - b(j) in e * e""",
    {"A": "csr", "alpha": "scalar"}, ("x", "alpha", "A"), _pr_make,
    value=lambda I: float(np.sum(_pr_res(I) ** 2)),
    dense=lambda j, d, m: j.sum((d["x"] - d["alpha"] * (d["A"].T @ d["x"]) - d["b"]) ** 2),
    grad=_pr_grad)

# =========================================================================================================
# The same programs in JAX BCOO and PyTorch sparse, where those libraries express them
# (benchmark competitors; each takes (array module, sparse inputs by name, dense inputs by name))
# =========================================================================================================

def _bcoo_rows_cols(S):
    return S.indices[:, 0], S.indices[:, 1]


def _torch_rows_cols(S):
    idx = S._indices()
    return idx[0], idx[1]


def _lse_rows(lib, rows_index, values, n, segment_sum):
    return lib.log(segment_sum(lib.exp(values), rows_index, n))


COMPETITORS = {
    "spmv": dict(bcoo=lambda j, S, d: S["A"] @ d["x"],
                 torch=lambda t, S, d: t.sparse.mm(S["A"], d["x"][:, None])[:, 0]),
    "spmtv": dict(bcoo=lambda j, S, d: S["A"].T @ d["y"],
                  torch=lambda t, S, d: t.sparse.mm(S["A"].t(), d["y"][:, None])[:, 0]),
    "lsq": dict(bcoo=lambda j, S, d: j.sum((S["A"] @ d["x"] - d["y"]) ** 2),
                torch=lambda t, S, d: ((t.sparse.mm(S["A"], d["x"][:, None])[:, 0] - d["y"]) ** 2).sum()),
    "quadform": dict(bcoo=lambda j, S, d: d["x"] @ (S["A"] @ d["x"]),
                     torch=lambda t, S, d: d["x"] @ t.sparse.mm(S["A"], d["x"][:, None])[:, 0]),
    "bilinear": dict(bcoo=lambda j, S, d: d["u"] @ (S["A"] @ d["v"]),
                     torch=lambda t, S, d: d["u"] @ t.sparse.mm(S["A"], d["v"][:, None])[:, 0]),
    "spmm": dict(bcoo=lambda j, S, d: S["A"] @ d["B"], torch=lambda t, S, d: t.sparse.mm(S["A"], d["B"])),
    "spmm_fro_loss": dict(bcoo=lambda j, S, d: j.sum((S["A"] @ d["B"] - d["C"]) ** 2),
                          torch=lambda t, S, d: ((t.sparse.mm(S["A"], d["B"]) - d["C"]) ** 2).sum()),
    "sddmm_sum": dict(bcoo=lambda j, S, d: j.sum((S["S"] @ d["V"]) * d["U"]),
                      torch=lambda t, S, d: (t.sparse.mm(S["S"], d["V"]) * d["U"]).sum()),
    "hadamard_sum": dict(bcoo=None, torch=lambda t, S, d: t.sparse.sum(S["A"] * S["B"])),
    "gcn_tanh_sum": dict(bcoo=lambda j, S, d: j.sum(j.tanh((S["A"] @ d["X"]) @ d["W"])),
                         torch=lambda t, S, d: t.tanh(t.sparse.mm(S["A"], d["X"]) @ d["W"]).sum()),
    "gcn_layer": dict(bcoo=lambda j, S, d: j.tanh((S["A"] @ d["X"]) @ d["W"]),
                      torch=lambda t, S, d: t.tanh(t.sparse.mm(S["A"], d["X"]) @ d["W"])),
    "gcn_softmax_xent": dict(
        bcoo=lambda j, S, d: _xent(j, (S["A"] @ d["X"]) @ d["W"], d["Y"]),
        torch=lambda t, S, d: _xent(t, t.sparse.mm(S["A"], d["X"]) @ d["W"], d["Y"])),
    "logreg": dict(bcoo=lambda j, S, d: j.sum(j.logaddexp(0.0, -d["y"] * (S["X"] @ d["w"]))),
                   torch=lambda t, S, d: t.nn.functional.softplus(
                       -d["y"] * t.sparse.mm(S["X"], d["w"][:, None])[:, 0]).sum()),
    "softmax_regression": dict(bcoo=lambda j, S, d: _xent(j, S["X"] @ d["W"], d["Y"]),
                               torch=lambda t, S, d: _xent(t, t.sparse.mm(S["X"], d["W"]), d["Y"])),
    "trace_XtAX": dict(bcoo=lambda j, S, d: j.sum(d["X"] * (S["A"] @ d["X"])),
                       torch=lambda t, S, d: (d["X"] * t.sparse.mm(S["A"], d["X"])).sum()),
    "laplacian_apply": dict(bcoo=lambda j, S, d: (S["A"] @ j.ones_like(d["x"])) * d["x"] - S["A"] @ d["x"],
                            torch=lambda t, S, d: (t.sparse.mm(S["A"], t.ones_like(d["x"])[:, None])[:, 0] * d["x"]
                                                   - t.sparse.mm(S["A"], d["x"][:, None])[:, 0])),
    "column_sums": dict(bcoo=lambda j, S, d: S["A"].sum(0).todense(),
                        torch=lambda t, S, d: t.sparse.sum(S["A"], 0).to_dense()),
    "poisson_regression": dict(bcoo=lambda j, S, d: j.sum(j.exp(S["X"] @ d["w"]) - d["cnt"] * (S["X"] @ d["w"])),
                               torch=lambda t, S, d: (t.exp(t.sparse.mm(S["X"], d["w"][:, None])[:, 0])
                                                      - d["cnt"] * t.sparse.mm(S["X"], d["w"][:, None])[:, 0]).sum()),
}


def _xent(lib, Z, Y):
    if hasattr(lib, "logsumexp"):  # torch
        return (lib.logsumexp(Z, dim=1) - (Z * Y).sum(1)).sum()
    import jax.scipy.special as special

    return lib.sum(special.logsumexp(Z, axis=1) - lib.sum(Z * Y, axis=1))
