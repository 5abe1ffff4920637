"""Sparse Jacobians and Hessians of JAX functions by colouring and compressed products.

The same mechanism as `sparsad.torch.jacobian`, with the colourings of `sparsad.ops.colouring`:
a distance-1 colouring of the Jacobian's columns (one `jax.jvp` per colour, all batched by
`jax.vmap`), and a star colouring of the Hessian's symmetric pattern (one forward-over-reverse
Hessian-vector product per colour, every entry read directly). The pattern is static (NumPy), so
the functions trace under `jax.jit`. Without `pattern=` it is the structural pattern read from
f's jaxpr (`sparsad.jax.sparsity`), or where that analysis gives up, detected from dense
Jacobians at x and two random points near it (x must then be concrete; size-guarded). A given
pattern is proven at trace time when it holds the structural one, else probed at each call.

Example:
    >>> import jax.numpy as jnp
    >>> J = jacobian(lambda x: x[1:] * x[:-1], jnp.arange(1.0, 5.0))
    >>> J.to_dense().tolist()
    [[2.0, 1.0, 0.0, 0.0], [0.0, 3.0, 2.0, 0.0], [0.0, 0.0, 4.0, 3.0]]
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from sparsad.errors import InputError, ShapeError
from sparsad.jax.matrix import SparseMatrix
from sparsad.ops.colouring import compression_plan, symmetric_pattern
from sparsad.ops.pattern import CSRPattern

#: Without a pattern, detection evaluates the dense derivative; refused above this many entries.
DETECT_MAX_ENTRIES = 10_000_000


def _as_pattern(pattern: Any, shape: tuple[int, int]) -> CSRPattern:
    import scipy.sparse

    if isinstance(pattern, SparseMatrix):
        pattern = pattern.pattern
    elif scipy.sparse.issparse(pattern):
        pattern = CSRPattern.from_scipy(pattern, name="pattern")
    elif type(pattern).__name__ in ("BCOO", "BCSR"):
        pattern = (SparseMatrix.from_bcoo(pattern) if type(pattern).__name__ == "BCOO"
                   else SparseMatrix.from_bcsr(pattern)).pattern
    elif isinstance(pattern, np.ndarray) and pattern.ndim == 2:
        pattern = _from_mask(pattern != 0)
    if not isinstance(pattern, CSRPattern):
        raise InputError(f"pattern must be a sparsad.jax.SparseMatrix, CSRPattern, BCOO/BCSR, scipy sparse matrix "
                         f"or a dense 0/1 NumPy array, got {type(pattern).__name__}")
    if pattern.shape != shape:
        raise ShapeError(f"pattern has shape {pattern.shape} but the derivative has shape {shape}")
    return pattern


def _from_mask(mask: np.ndarray) -> CSRPattern:
    rows, cols = np.nonzero(mask)
    indptr = np.zeros(mask.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=mask.shape[0]), out=indptr[1:])
    return CSRPattern(indptr, cols.astype(np.int64), mask.shape, check=False)


def _detect(dense_at: Callable, x, shape: tuple[int, int], reason: str | None = None) -> CSRPattern:
    """The nonzeros of dense derivatives at x and two random points near it (exact at x), for
    functions whose jaxpr the structural analysis cannot bound (`reason`)."""
    import jax

    why = f" (the structural analysis of f's jaxpr gave up: {reason})" if reason else ""
    if isinstance(x, jax.core.Tracer):
        raise InputError(f"detecting the sparsity pattern needs a concrete x (not inside jit/vmap){why}; "
                         "pass pattern=...")
    if shape[0] * shape[1] > DETECT_MAX_ENTRIES:
        raise InputError(f"detecting the sparsity pattern evaluates a dense {shape[0]} x {shape[1]} derivative, "
                         f"above DETECT_MAX_ENTRIES = {DETECT_MAX_ENTRIES}{why}; pass pattern=... (a SparseMatrix, "
                         "CSRPattern, BCOO or scipy matrix of the structural nonzeros)")
    point = np.asarray(x)
    mask = np.asarray(dense_at(x)) != 0
    rng = np.random.default_rng(0)
    for _ in range(2):
        near = point + rng.standard_normal(point.shape).astype(point.dtype) * (1 + np.abs(point))
        mask |= np.asarray(dense_at(jax.numpy.asarray(near))) != 0
    return _from_mask(mask)


def _check_x(x: Any):
    import jax.numpy as jnp

    if not hasattr(x, "ndim") or x.ndim != 1:
        raise InputError(f"x must be a 1-D array, got {type(x).__name__} {getattr(x, 'shape', '')}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise InputError(f"x must be a floating-point array, got {x.dtype}")
    return jnp.asarray(x)


def _recover(pattern: CSRPattern, kind: str, products: Callable, x, check: bool = False) -> SparseMatrix:
    """Colour (once per pattern), compress with one vmapped product per colour, read entries off.
    `check`: one more product in the batch, with a fixed probe vector, compared with the
    recovered matrix times it (see `_checked`)."""
    import jax
    import jax.numpy as jnp

    seeds, gather = _seeds(pattern, kind, x.dtype)
    if check:
        probe = _probe_vector(pattern, x.dtype)
        seeds = jnp.concatenate([seeds, probe[None, :]])
    stacked = jax.vmap(products)(seeds)
    if stacked.ndim != 2 or stacked.shape[1] != pattern.shape[0]:
        raise ShapeError(f"f returned {tuple(stacked.shape[1:])} per product, but the pattern has "
                         f"{pattern.shape[0]} rows; f must return a 1-D array of that length")
    if not check:
        return SparseMatrix(pattern, _read(stacked, gather))
    values = _read(stacked[:-1], gather)
    return _checked(SparseMatrix(pattern, values), stacked[-1], probe)


def _read(stacked, gather):
    """The entries at `gather` of the flattened products (in bounds by construction, distinct)."""
    return stacked.reshape(-1).at[gather].get(mode="promise_in_bounds", unique_indices=True)


def _probe_vector(pattern: CSRPattern, dtype):
    """A fixed vector of entries in +-[0.5, 1.5) (none zero: no column hides), kept on the pattern."""
    import jax
    import jax.numpy as jnp

    cache = pattern.__dict__.setdefault("_jax_probes", {})
    key = (np.dtype(dtype).str, jax.config.jax_enable_x64)
    if key not in cache:
        rng = np.random.default_rng(0x5EED)
        vector = (rng.random(pattern.shape[1]) + 0.5) * rng.choice([-1.0, 1.0], pattern.shape[1])
        with jax.ensure_compile_time_eval():
            cache[key] = jnp.asarray(vector, dtype=dtype)
    return cache[key]


def _checked(matrix: SparseMatrix, expected, probe) -> SparseMatrix:
    """`matrix` if it times `probe` is the product with the probe (`expected`) row by row, to
    rounding: a nonzero of the derivative outside the pattern (a pattern too small, or detected
    at another point or for another f) makes a row disagree. Then InputError where the values are
    concrete; under jit, vmap or grad, the disagreeing rows' entries become NaN (never a wrong
    matrix)."""
    import jax
    import jax.numpy as jnp

    pattern = matrix.pattern
    values = jax.lax.stop_gradient(matrix.values)
    recovered = jax.ops.segment_sum(values * probe[pattern.indices], pattern.rows, num_segments=pattern.shape[0])
    expected = jax.lax.stop_gradient(expected)
    error = jnp.abs(recovered - expected)
    scale = jnp.abs(recovered) + jnp.abs(expected)
    tolerance = float(np.finfo(np.dtype(values.dtype)).eps) ** 0.5
    bad = error > tolerance * (scale + (scale.max() if scale.size else 0.0))
    if isinstance(bad, jax.core.Tracer):
        return SparseMatrix(pattern, jnp.where(bad[pattern.rows], jnp.nan, matrix.values))
    if bool(bad.any()):
        first = int(np.flatnonzero(np.asarray(bad))[0])
        raise InputError(
            f"the derivative has nonzeros outside `pattern`: row {first} of the product with a probe vector differs "
            f"from the recovered matrix's by {float(error[first]):.3g}. Pass a pattern holding every structural "
            "nonzero of the derivative at this x (a pattern detected at another point misses entries that vanished "
            "there), or pattern=None to detect it here, or check=False to skip this check")
    return matrix


def _plan_arrays(pattern: CSRPattern, kind: str) -> tuple:
    """(colours (n,) in the smallest integer type, number of colours, gather) as JAX arrays, kept
    on the pattern per kind: a call outside jit would otherwise build and transfer them again.
    Under jit they are constants of the compiled computation, whose compile time grows with their
    bytes (n = 10^6: a (colours, n) float64 seed matrix took ~1 s of XLA compile, int8 colours
    0.15 s), so large seed matrices are built from the colours inside it (`_seeds`). Made concrete even
    while tracing (ensure_compile_time_eval), so never a tracer."""
    import jax
    import jax.numpy as jnp

    cache = pattern.__dict__.setdefault("_jax_plan_arrays", {})
    key = (kind, jax.config.jax_enable_x64)
    if key not in cache:
        colours, gather = compression_plan(pattern, kind)
        n_colours = int(colours.max()) + 1
        small = n_colours * pattern.shape[0] < 2**31  # int32 gathers where they fit (faster on CPU)
        colour_type = np.int8 if n_colours <= 127 else np.int16 if n_colours <= 32767 else np.int32
        with jax.ensure_compile_time_eval():
            cache[key] = (jnp.asarray(colours.astype(colour_type)), n_colours,
                          jnp.asarray(gather.astype(np.int32) if small else gather))
    return cache[key]


#: Seed matrices up to this many entries are kept as constants (a few us faster per call at
#: n <= 4,096 than building them in the computation); larger ones are built from the colours.
SEED_CONSTANT_MAX_ENTRIES = 2**20


def _seeds(pattern: CSRPattern, kind: str, dtype) -> tuple:
    """(seeds (colours, n) of `dtype`, gather): a kept constant where small, else built from
    the colours inside the computation (see `_plan_arrays`)."""
    import jax
    import jax.numpy as jnp

    colours, n_colours, gather = _plan_arrays(pattern, kind)
    if n_colours * pattern.shape[1] > SEED_CONSTANT_MAX_ENTRIES:
        return (colours[None, :] == jnp.arange(n_colours, dtype=colours.dtype)[:, None]).astype(dtype), gather
    cache = pattern.__dict__.setdefault("_jax_seeds", {})
    key = (kind, np.dtype(dtype).str, jax.config.jax_enable_x64)
    if key not in cache:
        with jax.ensure_compile_time_eval():
            cache[key] = (colours[None, :] == jnp.arange(n_colours, dtype=colours.dtype)[:, None]).astype(dtype)
    return cache[key], gather


def _structural(analysis, shape: tuple[int, int]) -> CSRPattern | None:
    """The analysis' pattern as a CSRPattern, one object per distinct structure (kept, so calls
    outside jit reuse its colouring and plan arrays), or None where the analysis answered unknown."""
    import hashlib

    matrix = analysis.pattern
    if matrix is None:
        return None
    matrix.sort_indices()
    indptr, indices = matrix.indptr.astype(np.int64), matrix.indices.astype(np.int64)
    key = (shape, hashlib.blake2b(indptr.tobytes() + indices.tobytes(), digest_size=16).digest())
    if key not in _STRUCTURES:
        if len(_STRUCTURES) >= 4:  # (each holds its colouring and plan arrays: ~100 MB at n = 10^6)
            _STRUCTURES.pop(next(iter(_STRUCTURES)))
        _STRUCTURES[key] = CSRPattern(indptr, indices, shape, check=False)
    return _STRUCTURES[key]


_STRUCTURES: dict = {}


def _pattern_and_probe(f: Callable, x, given: Any, shape: tuple[int, int], check: bool, kind: str,
                       analyse: Callable, dense: Callable) -> tuple[CSRPattern, bool]:
    """(pattern, probe?). No pattern: the structural one from f's jaxpr (a superset of the nonzeros
    at every x: no probe), else detection at a concrete x (exact there). A given pattern: trusted
    with check=False; with check=True proven at trace time when it holds the structural pattern,
    else (analysis unknown, or structural entries missing from it: they may be zero at every x,
    so that alone is no error) checked at run time by a probe product."""
    if given is None:
        analysis = analyse()
        pattern = _structural(analysis, shape)
        if pattern is None:
            pattern = _detect(dense, x, shape, analysis.reason)
        return (symmetric_pattern(pattern) if kind == "hessian" else pattern), False
    pattern = _as_pattern(given, shape)
    if kind == "hessian":
        pattern = symmetric_pattern(pattern)
    if not check:
        return pattern, False
    structural = _structural(analyse(), shape)
    return pattern, not (structural is not None and pattern.holds(structural))


def jacobian(f: Callable, x: Any, pattern: Any = None, check: bool = True) -> SparseMatrix:
    """The Jacobian of f: R^n -> R^m at x as a sparsad.jax.SparseMatrix, by a distance-1 column
    colouring and compressed JVPs (one vmapped batch).

    Without `pattern`, the structural pattern read from f's jaxpr (`sparsad.jax.sparsity`; works
    under jit and at any size), or where that analysis cannot bound f (a loop, a primitive without
    a rule, indices computed from x) a pattern detected from dense Jacobians at a concrete x.
    A given `pattern` with `check=True`: proven at trace time when it holds the structural
    pattern (no run-time cost); otherwise checked at each call by one more JVP with a fixed probe
    vector: a nonzero outside it raises InputError (under jit/vmap/grad: NaN entries).
    `check=False` trusts the pattern.

    >>> import numpy as np, jax.numpy as jnp, sparsad.jax as sj
    >>> J = sj.jacobian(lambda z: z * z, jnp.array([1.0, 2.0]))
    >>> np.asarray(J.to_dense()).tolist()
    [[2.0, 0.0], [0.0, 4.0]]
    """
    import jax
    import jax.numpy as jnp

    from sparsad.jax.sparsity import jacobian_sparsity

    x = _check_x(x)
    out = jax.eval_shape(f, x)
    if len(out.shape) != 1:
        raise InputError(f"f must return a 1-D array, got shape {out.shape}")
    shape = (out.shape[0], x.shape[0])
    pattern, probe = _pattern_and_probe(f, x, pattern, shape, check, "jacobian",
                                        lambda: jacobian_sparsity(f, x), jax.jacfwd(f))
    if pattern.nnz == 0 and not (probe and shape[0] and shape[1]):
        return SparseMatrix(pattern, jnp.zeros(0, dtype=out.dtype))
    return _recover(pattern, "jacobian", lambda v: jax.jvp(f, (x,), (v,))[1], x, probe)


def hessian(f: Callable, x: Any, pattern: Any = None, colouring: str = "star", check: bool = True) -> SparseMatrix:
    """The Hessian of scalar f at x as a sparsad.jax.SparseMatrix, by a star colouring (default)
    or a distance-1 colouring (`colouring="distance1"`) of its symmetrised pattern and compressed
    Hessian-vector products (forward over reverse). `pattern` and `check` as in `jacobian`; the
    structural pattern is that of the Jacobian of jax.grad(f).

    >>> import numpy as np, jax.numpy as jnp, sparsad.jax as sj
    >>> H = sj.hessian(lambda z: (z ** 3).sum(), jnp.array([1.0, 2.0]))
    >>> np.asarray(H.to_dense()).tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    import jax
    import jax.numpy as jnp

    from sparsad.jax.sparsity import hessian_sparsity

    x = _check_x(x)
    if colouring not in ("star", "distance1"):
        raise InputError(f"colouring must be 'star' or 'distance1', got {colouring!r}")
    out = jax.eval_shape(f, x)
    if getattr(out, "shape", None) != ():
        raise InputError(f"the Hessian needs f to return a scalar, got shape {getattr(out, 'shape', type(out).__name__)}")
    gradient = jax.grad(f)
    shape = (x.shape[0], x.shape[0])
    pattern, probe = _pattern_and_probe(f, x, pattern, shape, check, "hessian",
                                        lambda: hessian_sparsity(f, x), jax.hessian(f))
    if pattern.nnz == 0 and not (probe and shape[0]):
        return SparseMatrix(pattern, jnp.zeros(0, dtype=x.dtype))
    return _recover(pattern, colouring, lambda v: jax.jvp(gradient, (x,), (v,))[1], x, probe)
