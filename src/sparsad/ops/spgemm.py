"""Symbolic phase of sparse @ sparse: the product's pattern and its term list (once per pattern pair)."""
from __future__ import annotations

import numpy as np

from sparsad.ops import kernels
from sparsad.ops.contract import Plan, Terms
from sparsad.ops.pattern import CSRPattern


def spgemm_symbolic(a: CSRPattern, b: CSRPattern) -> tuple[CSRPattern, Terms]:
    """Pattern of C = A B and terms with role 0 = A values, 1 = B values, 2 = C values.

    The pattern is structural: an entry (i, j) is present when some A[i, k] B[k, j] term exists,
    even if the values happen to cancel, so that the gradient reaches every contributing entry.
    """
    ones_a = a.to_scipy(np.ones(a.nnz, dtype=np.float64))
    ones_b = b.to_scipy(np.ones(b.nnz, dtype=np.float64))
    product = (ones_a @ ones_b).tocsr()
    product.sort_indices()
    c = CSRPattern(product.indptr.astype(np.int64), product.indices.astype(np.int64),
                   (a.shape[0], b.shape[1]), check=False)
    ta, tb, tc, seg = kernels.spgemm_terms(
        a.indptr.astype(np.int64), a.indices.astype(np.int64), b.indptr.astype(np.int64),
        b.indices.astype(np.int64), c.indptr, c.indices, b.shape[1])
    terms = Terms((ta, tb, tc), (a.nnz, b.nnz, c.nnz), scalar=0,
                  plans={2: Plan("generic", 0, 1, seg, ta, tb)})
    return c, terms
