"""Standard test matrices of the numml paper (§3): finite-difference Poisson in 1-D and 2-D."""
from __future__ import annotations

import scipy.sparse as sp


def poisson_1d(n: int) -> sp.csr_matrix:
    """tridiag(-1, 2, -1) of size n (Eq. 7): 3 nonzeros per interior row, SPD."""
    return sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")


def poisson_2d(nx: int, ny: int) -> sp.csr_matrix:
    """A_nx (x) I_ny + I_nx (x) A_ny (Eq. 18), SPD of size nx * ny."""
    matrix = sp.kron(poisson_1d(nx), sp.eye(ny)) + sp.kron(sp.eye(nx), poisson_1d(ny))
    matrix = matrix.tocsr()
    matrix.sort_indices()
    return matrix
