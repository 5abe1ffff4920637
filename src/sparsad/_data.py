"""Where the real data of ../shared/data lives, for tests, benchmarks and the demo."""
from __future__ import annotations

import os
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path | None:
    """The shared data folder: $SPARSAD_DATA, else ../shared/data beside the checkout; None if absent."""
    candidates = []
    if os.environ.get("SPARSAD_DATA"):
        candidates.append(Path(os.environ["SPARSAD_DATA"]))
    candidates += [_REPO_ROOT.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]
    for path in candidates:
        if path.is_dir():
            return path
    return None


def suitesparse_path(group_and_name: str) -> Path | None:
    """Path of a SuiteSparse matrix such as 'HB/bcspwr10', or None if the data is absent."""
    root = shared_data_dir()
    if root is None:
        return None
    path = root / "suitesparse" / f"{group_and_name}.mtx"
    return path if path.is_file() else None


def load_suitesparse(group_and_name: str):
    """The matrix as scipy CSR (float64, symmetric files expanded); None if absent."""
    import scipy.io
    import scipy.sparse

    path = suitesparse_path(group_and_name)
    if path is None:
        return None
    matrix = scipy.io.mmread(str(path))
    matrix = scipy.sparse.csr_matrix(matrix)
    if matrix.dtype.kind == "c":
        return matrix
    return matrix.astype("float64")


def real_tensors(limit_mb: float = 50.0):
    """(name, float64 array) for each dense real tensor of ../shared/data/tensors (order >= 3,
    NaN-free, under limit_mb); nothing if the data is absent."""
    import numpy as np

    root = shared_data_dir()
    if root is None or not (root / "tensors").is_dir():
        return
    for path in sorted((root / "tensors").glob("*.npy")):
        x = np.load(path, allow_pickle=False)
        if x.ndim >= 3 and x.dtype.kind == "f" and np.isfinite(x).all() and x.nbytes < limit_mb * 2**20:
            yield path.stem, np.asarray(x, dtype=np.float64)
