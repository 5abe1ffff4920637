"""Storage formats as per-mode levels (dense, compressed, singleton) and their conversions.

A `Format` is a sequence of levels plus a mode order; every named format (dense vector, COO,
CSR, CSC, DCSR, DCSC, dense row/column-major, n-d COO, CSF) is such a sequence with no code of
its own. A `StoredTensor` holds the physical arrays, yields the physical definition of ∇SD
Fig. 10 over `{name}_{field}` variables, and converts to numpy, scipy.sparse and logical dicts.
"""
from sparsad.formats.convert import (as_format, as_logical, from_arrays, from_coordinates,
                                     from_logical, logical_coordinates)
from sparsad.formats.definition import key_plan, physical_definition
from sparsad.formats.format import (COO_MATRIX, COO_VECTOR, CSC, CSR, DCSC, DCSR, DENSE_COL_MAJOR,
                                    DENSE_ROW_MAJOR, DENSE_VECTOR, FORMAT_NAMES, Format, coo, csf,
                                    dense, resolve)
from sparsad.formats.levels import Compressed, Dense, Singleton
from sparsad.formats.tensor import SCIPY_FORMATS, StoredTensor

__all__ = [
    "Format", "Dense", "Compressed", "Singleton", "StoredTensor",
    "DENSE_VECTOR", "COO_VECTOR", "CSR", "CSC", "DCSR", "DCSC", "COO_MATRIX", "DENSE_ROW_MAJOR",
    "DENSE_COL_MAJOR", "dense", "coo", "csf", "resolve", "FORMAT_NAMES", "SCIPY_FORMATS",
    "as_format", "as_logical", "from_arrays", "from_coordinates", "from_logical",
    "logical_coordinates", "physical_definition", "key_plan",
]
