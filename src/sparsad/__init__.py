"""sparsad: differentiable programming over sparse and dense tensors.

>>> import numpy as np, sparsad
>>> dot = sparsad.program("sum(<i, a> in V1) a * V2(i)")
>>> dot(V1=np.array([1.0, 2.0]), V2=np.array([3.0, 4.0]))
11.0
"""
from sparsad import errors
from sparsad.errors import (
    DensifyWarning,
    DerivativeRuleError,
    DTypeError,
    FallbackWarning,
    InternalError,
    OptimizationWarning,
    FormatError,
    InputError,
    MemoryLimitError,
    OptionError,
    ProgramError,
    ProgramTypeError,
    ShapeError,
    SparsadError,
    UnsupportedError,
)
from sparsad.lang.program import Program, program
from sparsad.ad.api import Derivative, grad, jacobian, jvp, vjp
from sparsad import formats
from sparsad.compiler import CompiledProgram, compile
from sparsad.formats import StoredTensor, as_format, from_arrays, from_logical

__version__ = "0.1.0.dev0"

__all__ = [
    "Program", "program", "errors", "Derivative", "grad", "jacobian", "jvp", "vjp",
    "compile", "CompiledProgram", "formats", "StoredTensor", "as_format", "from_arrays", "from_logical",
    "SparsadError", "ProgramError", "ProgramTypeError", "InputError", "FormatError", "ShapeError",
    "DTypeError", "DerivativeRuleError", "UnsupportedError", "DensifyWarning",
    "MemoryLimitError", "OptionError",
    "DTypeError", "DerivativeRuleError", "UnsupportedError", "DensifyWarning", "FallbackWarning",
    "OptimizationWarning", "InternalError",
]
