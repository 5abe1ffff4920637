"""Bilinear sparse products as term lists, and their evaluation on NumPy arrays.

Every product in this package (SpMV, SpMM, SpGEMM, their transposes and the masked outer
products of their gradients) is one `Terms` object evaluated towards one of its three roles:

    out[idx[o][t]] += x[idx[x][t]] * y[idx[y][t]]     for every term t

One role (`scalar`) holds one number per index (the values of a sparse operand); the other two
hold a row of `C` channels each. Evaluating towards the scalar role is a masked dot product
(the gradient of sparse values); towards a channel role it is a scaled gather. The derivative of
an evaluation towards role o with respect to the operand of role x is the evaluation of the same
terms towards role x, which is why one forward rule and one term list serve every order of
derivative (VJP: evaluate towards the operand's role; JVP: the product rule).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numba
import numpy as np

from sparsad.ops import kernels
from sparsad.ops.pattern import CSRPattern


@dataclass(frozen=True)
class Plan:
    """The terms grouped by output index: `seg` pointers, and indices into the two input roles."""

    kind: str  # "csr": u is read in order; "single": one term per output; "generic"
    u_role: int
    v_role: int
    seg: np.ndarray | None
    iu: np.ndarray | None
    iv: np.ndarray

    def __post_init__(self):
        # Unsigned indices spare Numba's negative-index wraparound test on every access (~2x on SpMV).
        for name in ("seg", "iu", "iv"):
            array = getattr(self, name)
            if array is not None:
                object.__setattr__(self, name, np.ascontiguousarray(array, dtype=np.uint64))


class Terms:
    """Term list of a bilinear sparse product (see the module docstring).

    >>> import numpy as np
    >>> from sparsad.ops import CSRPattern, spmm_terms
    >>> terms = spmm_terms(CSRPattern(np.array([0, 2, 3]), np.array([0, 1, 1]), (2, 2)))
    >>> terms.n_terms  # one term per stored entry
    3
    """

    def __init__(self, idx: tuple[np.ndarray, np.ndarray, np.ndarray], sizes: tuple[int, int, int],
                 scalar: int = 0, plans: dict[int, Plan] | None = None):
        self.idx = tuple(np.ascontiguousarray(i, dtype=np.int64) for i in idx)
        self.sizes = tuple(int(s) for s in sizes)
        self.scalar = scalar
        self._plans = dict(plans or {})

    @property
    def n_terms(self) -> int:
        return int(self.idx[0].shape[0])

    def roles_into(self, out: int) -> tuple[int, int]:
        """(u_role, v_role) feeding role `out`: the scalar role first when out is a channel role."""
        roles = self.__dict__.setdefault("_roles", {})
        if out not in roles:
            rest = [r for r in range(3) if r != out]
            if out != self.scalar:
                rest.sort(key=lambda r: r != self.scalar)
            roles[out] = (rest[0], rest[1])
        return roles[out]

    def plan(self, out: int) -> Plan:
        if out not in self._plans:
            u_role, v_role = self.roles_into(out)
            order = np.argsort(self.idx[out], kind="stable")
            seg = np.zeros(self.sizes[out] + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.idx[out], minlength=self.sizes[out]), out=seg[1:])
            self._plans[out] = Plan("generic", u_role, v_role, seg,
                                    self.idx[u_role][order], self.idx[v_role][order])
        return self._plans[out]

    @cached_property
    def torch_cache(self) -> dict:
        """Device copies of the index arrays, filled by the PyTorch bridge."""
        return {}


def spmm_terms(pattern: CSRPattern) -> Terms:
    """Terms of A @ X: role 0 = values of A, role 1 = rows of X (columns of A), role 2 = rows of A X.

    >>> import numpy as np
    >>> from sparsad.ops import CSRPattern
    >>> from sparsad.ops.contract import contract
    >>> terms = spmm_terms(CSRPattern(np.array([0, 2, 3]), np.array([0, 1, 1]), (2, 2)))
    >>> contract(terms, 2, {0: np.array([1.0, 2.0, 3.0]), 1: np.array([1.0, 1.0])})  # [[1, 2], [0, 3]] @ [1, 1]
    array([3., 3.])
    """
    return pattern.__dict__.get("_spmm_terms") or _make_spmm_terms(pattern)


def _make_spmm_terms(pattern: CSRPattern) -> Terms:
    nnz = pattern.nnz
    entries = np.arange(nnz, dtype=np.int64)
    plans = {
        2: Plan("csr", 0, 1, pattern.indptr.astype(np.int64), None, pattern.indices.astype(np.int64)),
        0: Plan("single", 1, 2, None, pattern.indices.astype(np.int64), pattern.rows),
    }
    transposed, perm = pattern.transpose
    plans[1] = Plan("generic", 0, 2, transposed.indptr.astype(np.int64), perm.astype(np.int64),
                    transposed.indices.astype(np.int64))
    terms = Terms((entries, pattern.indices, pattern.rows), (nnz, pattern.shape[1], pattern.shape[0]),
                  scalar=0, plans=plans)
    pattern.__dict__["_spmm_terms"] = terms
    return terms


#: Below this many multiply-adds the kernels run on one thread: a parallel launch costs more than
#: it saves on small products, and far more when the cores are shared (a descheduled worker
#: stalls the whole launch).
PARALLEL_MIN_WORK = 1 << 21


def _pick(kernel, work: int):
    return kernel if work >= PARALLEL_MIN_WORK and numba.config.NUMBA_NUM_THREADS > 1 else kernel.serial


def contract(terms: Terms, out: int, operands: dict[int, np.ndarray]) -> np.ndarray:
    """Evaluate `terms` towards role `out` from the operands of the two other roles.

    Scalar-role operands are 1-D (size,), channel-role operands 2-D (size, C) and C-contiguous.
    When `out` is a channel role, its channel operand may also be 1-D (one channel): the result
    is then 1-D too.
    """
    plan = terms.plan(out)
    u, v = operands[plan.u_role], operands[plan.v_role]
    dtype = np.result_type(u, v)
    if out == terms.scalar:
        work = terms.n_terms * u.shape[1]
        result = np.empty(terms.sizes[out], dtype=dtype)
        if plan.kind == "single":
            _pick(kernels.masked_dot, work)(plan.iu, plan.iv, u, v, result)
        else:
            _pick(kernels.dot_scatter, work)(plan.seg, plan.iu, plan.iv, u, v, result)
        return result
    if v.ndim == 1 or v.shape[1] == 1:  # one channel: the 1-D kernels (views, no copies)
        result = np.empty(terms.sizes[out] if v.ndim == 1 else (terms.sizes[out], 1), dtype=dtype)
        flat_v, flat_out = v.reshape(-1), result.reshape(-1)
        if plan.kind == "csr":
            _pick(kernels.csr_vector, terms.n_terms)(plan.seg, plan.iv, u, flat_v, flat_out)
        else:
            _pick(kernels.scale_scatter_vector, terms.n_terms)(plan.seg, plan.iu, plan.iv, u, flat_v, flat_out)
        return result
    work = terms.n_terms * v.shape[1]
    result = np.empty((terms.sizes[out], v.shape[1]), dtype=dtype)
    if plan.kind == "csr":
        _pick(kernels.csr_scale, work)(plan.seg, plan.iv, u, v, result)
    else:
        _pick(kernels.scale_scatter, work)(plan.seg, plan.iu, plan.iv, u, v, result)
    return result


def vector_vjp(terms: Terms, u: np.ndarray, v: np.ndarray, g: np.ndarray, want_u: bool, want_v: bool):
    """Both cotangents of out = A v for SpMV terms (CSR plan towards role 2, 1-D v and g) in one
    serial pass, or None when that does not apply (other terms, parallel-sized work)."""
    plan = terms.plan(2) if terms.scalar == 0 else None
    if plan is None or plan.kind != "csr" or v.ndim != 1 or g.ndim != 1 or \
            _pick(kernels.csr_vector, terms.n_terms) is not kernels.csr_vector.serial:
        return None
    dtype = np.result_type(u, v, g)
    gu = np.empty(terms.sizes[0] if want_u else 0, dtype=dtype)
    gv = np.empty(terms.sizes[1] if want_v else 0, dtype=dtype)
    kernels.csr_vector_vjp(plan.seg, plan.iv, u, v, g, want_u, want_v, gu, gv)
    return (gu if want_u else None), (gv if want_v else None)
