"""The counting sort behind `opt.interchange.derived_inputs` (Numba, cached on disk)."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def transpose_pattern(pos, idx, ncols):
    """(tpos, tidx, tperm) of the transpose of the CSR pattern (pos, idx): column pointers, the
    row of each entry in column order, and its position in idx. Rows stay sorted per column.
    Entries whose column lies outside 0..ncols-1 raise (the bounds of the transposed arrays)."""
    nrows = pos.shape[0] - 1
    nnz = pos[nrows] - pos[0]
    tpos = np.zeros(ncols + 1, np.int64)
    for i in range(nrows):
        for p in range(pos[i], pos[i + 1]):
            c = idx[p]
            if c < 0 or c >= ncols:
                raise IndexError("sparsad: a column index lies outside the matrix")
            tpos[c + 1] += 1
    for c in range(ncols):
        tpos[c + 1] += tpos[c]
    fill = tpos[:ncols].copy()
    tidx = np.empty(nnz, np.int64)
    tperm = np.empty(nnz, np.int64)
    for i in range(nrows):
        for p in range(pos[i], pos[i + 1]):
            c = idx[p]
            d = fill[c]
            tidx[d] = i
            tperm[d] = p
            fill[c] = d + 1
    return tpos, tidx, tperm
