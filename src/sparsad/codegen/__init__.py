"""Code generation (∇SD §5.5): physical program -> loop IR -> Python source -> Numba kernel.

    kernel = compile_physical(program, input_types, output="auto", shape=None)
    result = kernel(**physical_arrays)      # float, numpy array, scipy.sparse matrix or dict
    print(kernel.source)                    # the generated Python

See `loops` (lowering in destination-passing style), `outputs` (output kinds and the cost
model of output="auto"), `bounds` (index checks at the boundary), `numba_backend`.
"""
from sparsad.codegen.loops import LoopProgram, lower
from sparsad.codegen.numba_backend import Kernel, compile_physical, generate_source, kernel_cache_dir
from sparsad.codegen.outputs import OUTPUT_CHOICES, OutputPlan, choose_output

__all__ = ["compile_physical", "Kernel", "lower", "LoopProgram", "generate_source",
           "kernel_cache_dir", "OUTPUT_CHOICES", "OutputPlan", "choose_output"]
