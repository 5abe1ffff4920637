"""sparsad: differentiable programming over sparse and dense tensors."""
from sparsad import errors
from sparsad.errors import (
    DensifyWarning,
    DerivativeRuleError,
    DTypeError,
    FormatError,
    InputError,
    ProgramError,
    ProgramTypeError,
    ShapeError,
    SparsadError,
    UnsupportedError,
)

__version__ = "0.1.0.dev0"
