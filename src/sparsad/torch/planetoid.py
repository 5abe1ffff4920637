"""Planetoid citation graphs (Cora, CiteSeer, PubMed) in the Kipf & Welling format and split.

The files are Python 2 pickles; they are read with an unpickler that resolves only an explicit
allow-list of classes (scipy CSR, numpy arrays and dtypes, defaultdict, list), never a bare
`pickle.load`, as ../shared/data/PROVENANCE.md requires. NumPy/SciPy only (no torch).
"""
from __future__ import annotations

import collections
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsad.errors import FormatError, InputError


def _allowed() -> dict[tuple[str, str], object]:
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct
    return {
        ("scipy.sparse.csr", "csr_matrix"): sp.csr_matrix,
        ("scipy.sparse._csr", "csr_matrix"): sp.csr_matrix,
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("collections", "defaultdict"): collections.defaultdict,
        ("__builtin__", "list"): list,
        ("builtins", "list"): list,
    }


class _AllowListUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        allowed = _allowed()
        if (module, name) not in allowed:
            raise FormatError(f"refusing to unpickle {module}.{name}: not on the Planetoid allow-list")
        return allowed[(module, name)]


def load_pickle(path: Path):
    """Unpickle a Planetoid file through the allow-list (latin1 for the Python 2 pickles)."""
    with open(path, "rb") as handle:
        return _AllowListUnpickler(handle, encoding="latin1").load()


@dataclass(frozen=True)
class Planetoid:
    name: str
    adjacency: sp.csr_matrix  # symmetric 0/1, no added self loops
    features: sp.csr_matrix  # rows as in the files (row-normalise before training)
    labels: np.ndarray  # class index per node (-1 where unknown)
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    @property
    def num_classes(self) -> int:
        return int(self.labels.max()) + 1


def planetoid_dir() -> Path | None:
    from sparsad._data import shared_data_dir

    root = shared_data_dir()
    path = None if root is None else root / "planetoid"
    return path if path is not None and path.is_dir() else None


def load_planetoid(name: str, root: Path | None = None) -> Planetoid:
    """Cora / CiteSeer / PubMed with the standard split (140/120/60 train per class, 500 val, 1000 test).

    PubMed's `allx` is absent from the shared copy: its unlabeled-node features are zero rows
    then, so PubMed serves timing, not published accuracy.
    """
    name = name.lower()
    if name not in ("cora", "citeseer", "pubmed"):
        raise InputError(f"name must be 'cora', 'citeseer' or 'pubmed', got {name!r}")
    root = Path(root) if root is not None else planetoid_dir()
    if root is None or not (root / f"ind.{name}.graph").is_file():
        raise FileNotFoundError(f"Planetoid files for {name} not found (looked in {root}); set SPARSAD_DATA")
    part = {key: load_pickle(root / f"ind.{name}.{key}") for key in ("x", "y", "tx", "ty", "graph")}
    allx_path, ally_path = root / f"ind.{name}.allx", root / f"ind.{name}.ally"
    ally = load_pickle(ally_path)
    if allx_path.is_file():
        allx = sp.csr_matrix(load_pickle(allx_path))
    else:  # features of the unlabeled training nodes are missing from this copy
        allx = sp.vstack([sp.csr_matrix(part["x"]),
                          sp.csr_matrix((ally.shape[0] - part["x"].shape[0], part["x"].shape[1]))]).tocsr()
    test_order = np.loadtxt(root / f"ind.{name}.test.index", dtype=np.int64)
    test_sorted = np.sort(test_order)
    tx, ty = sp.csr_matrix(part["tx"]), np.asarray(part["ty"])
    if name == "citeseer":  # isolated test nodes have no features: pad them with zero rows
        full = np.arange(test_sorted.min(), test_sorted.max() + 1)
        tx_full = sp.lil_matrix((full.shape[0], tx.shape[1]))
        tx_full[test_sorted - test_sorted.min(), :] = tx
        ty_full = np.zeros((full.shape[0], ty.shape[1]))
        ty_full[test_sorted - test_sorted.min(), :] = ty
        tx, ty = tx_full.tocsr(), ty_full
    features = sp.vstack([allx, tx]).tolil()
    features[test_order, :] = features[test_sorted, :]
    onehot = np.vstack([np.asarray(ally), ty])
    onehot[test_order, :] = onehot[test_sorted, :]
    labels = np.where(onehot.sum(1) > 0, onehot.argmax(1), -1)
    n = features.shape[0]
    graph = part["graph"]
    rows = np.fromiter((i for i, nbrs in graph.items() for _ in nbrs), dtype=np.int64)
    cols = np.fromiter((j for nbrs in graph.values() for j in nbrs), dtype=np.int64)
    n = max(n, int(rows.max()) + 1, int(cols.max()) + 1)
    adjacency = sp.coo_matrix((np.ones(rows.shape[0]), (rows, cols)), shape=(n, n)).tocsr()
    adjacency = ((adjacency + adjacency.T) > 0).astype(np.float64).tocsr()
    n_train = part["y"].shape[0]
    return Planetoid(name, adjacency, features.tocsr(), labels, np.arange(n_train),
                     np.arange(n_train, n_train + 500), test_sorted)
