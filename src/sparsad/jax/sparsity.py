"""Structural sparsity of a JAX function's Jacobian, read from its jaxpr.

`jacobian_sparsity(f, x)` traces f with `jax.make_jaxpr` at x's shape and dtype and propagates,
equation by equation, which entries of x each element of each intermediate can depend on
(through derivatives): a boolean SciPy CSR matrix per variable, rows its flattened elements,
columns x's. The result holds every entry of the Jacobian that is nonzero at any x of that shape
(a superset of the true nonzeros; entries whose derivative is not finite aside). Anything the
rules cannot bound (a primitive without a rule, a gather whose indices depend on x, a loop) makes
the analysis answer "unknown" with the reason: callers then fall back, never guess.
`hessian_sparsity(f, x)` is the same analysis of `jax.grad(f)`.

How the rules work (`RULES`, a table keyed by primitive name):
- elementwise ops (with scalar or NumPy broadcasting): the union of the operands' rows;
- ops that only move elements (reshape, transpose, slice, pad, concatenate, gather with constant
  indices, ...): the op itself is applied to arrays of element numbers (int32, -1 for constants),
  which says where each output element comes from;
- reductions, cumulative ops, sort, dot_general: a 0/1 aggregation matrix times the operands'
  rows (dot_general skips the zero entries of a constant operand: dot with a sparse constant);
- calls (jit, closed_call, remat, cond): the inner jaxprs, recursively; `custom_jvp_call`: the
  jaxpr of its JVP (the custom rule is what jax.jvp differentiates with);
- integer and boolean results carry no derivative; `stop_gradient` none either.
Values computed from constants only (iota, index arithmetic) are evaluated on demand, so indices
built with `jnp.arange` count as constant.

Example:
    >>> import jax.numpy as jnp
    >>> result = jacobian_sparsity(lambda x: x[1:] * x[:-1], jnp.zeros(4))
    >>> result.pattern.toarray().astype(int).tolist()
    [[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    >>> jacobian_sparsity(lambda x: x[jnp.argsort(x)], jnp.zeros(4)).reason
    'gather with indices that depend on the input'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

#: Above this many dependency entries in one variable the analysis answers "unknown" (memory).
MAX_ENTRIES = 50_000_000


@dataclass(frozen=True)
class Sparsity:
    """The analysis' answer: `pattern` (bool CSR, shape (outputs, inputs)) or None with `reason`."""
    pattern: sp.csr_array | None
    reason: str | None = None


class _Unknown(Exception):
    """Raised by a rule that cannot bound its dependencies (the message is the reason)."""


def jacobian_sparsity(f: Callable, x: Any) -> Sparsity:
    """Structural pattern of the Jacobian of f: R^n -> R^m (1-D in and out) at x's shape/dtype."""
    import jax

    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    try:
        closed = jax.make_jaxpr(f)(spec)
    except Exception as error:  # noqa: BLE001 - f may fail to trace abstractly; the caller falls back
        return Sparsity(None, f"f could not be traced abstractly ({type(error).__name__}: {error})")
    return _analyse_closed(closed, int(np.prod(x.shape)))


def hessian_sparsity(f: Callable, x: Any) -> Sparsity:
    """Structural pattern of the Hessian of scalar f: that of the Jacobian of jax.grad(f)."""
    import jax

    return jacobian_sparsity(jax.grad(f), x)


def _analyse_closed(closed, n: int) -> Sparsity:
    if len(closed.jaxpr.invars) != 1 or len(closed.jaxpr.outvars) != 1:
        return Sparsity(None, "f must take and return one array")
    try:
        identity = sp.eye_array(n, dtype=bool, format="csr")
        (out,) = _analyse(closed.jaxpr, closed.consts, [_State(identity, None)], n)
    except _Unknown as unknown:
        return Sparsity(None, str(unknown))
    size = int(np.prod(closed.jaxpr.outvars[0].aval.shape))
    pattern = _rows(out, size, n).tocsr()
    pattern.sum_duplicates()
    return Sparsity(pattern, None)


class _Value:
    """A value computable from constants alone, evaluated on first use (None: not concrete)."""

    def __init__(self, compute: Callable[[], Any]):
        self._compute, self._value, self._done = compute, None, False

    def get(self):
        if not self._done:
            self._value, self._done = self._compute(), True
        return self._value


@dataclass(frozen=True)
class _State:
    dep: sp.csr_array | None  # rows: the variable's elements (flattened); None: no dependency
    value: _Value | None      # how to compute it from constants; None: depends on the input


def _concrete(value) -> _Value | None:
    import jax

    return None if isinstance(value, jax.core.Tracer) else _Value(lambda: value)


def _size(aval) -> int:
    return int(np.prod(aval.shape))


def _inexact(aval) -> bool:
    return np.issubdtype(np.dtype(aval.dtype), np.inexact) if hasattr(aval, "dtype") else False


def _rows(state: _State, size: int, n: int) -> sp.csr_array:
    return state.dep if state.dep is not None else sp.csr_array((size, n), dtype=bool)


def _analyse(jaxpr, consts, in_states: list[_State], n: int) -> list[_State]:
    """Propagate states through an open jaxpr given its consts' values and its inputs' states."""
    from jax.extend.core import Literal

    env: dict = {}
    for var, value in zip(jaxpr.constvars, consts):
        env[var] = _State(None, _concrete(value))
    for var, state in zip(jaxpr.invars, in_states):
        env[var] = state

    def read(atom) -> _State:
        if isinstance(atom, Literal):
            return _State(None, _concrete(atom.val))
        return env[atom]

    for eqn in jaxpr.eqns:
        states = [read(atom) for atom in eqn.invars]
        if all(state.dep is None for state in states):
            outs = _constant_outputs(eqn, states)
        else:
            rule = RULES.get(eqn.primitive.name)
            if rule is None:
                raise _Unknown(f"no sparsity rule for primitive '{eqn.primitive.name}'")
            outs = rule(eqn, states, n)
        for var, state in zip(eqn.outvars, outs):
            if type(var).__name__ == "DropVar":
                continue
            if state.dep is not None:
                if not _inexact(var.aval):  # integers and booleans carry no derivative
                    state = _State(None, state.value)
                elif state.dep.nnz > MAX_ENTRIES:
                    raise _Unknown(f"'{eqn.primitive.name}' depends on more than {MAX_ENTRIES} entries")
            env[var] = state
    return [read(atom) for atom in jaxpr.outvars]


def _bind(eqn, values: list, **overrides):
    """Evaluate one equation on concrete values (at trace time, even under an outer jit)."""
    from jax._src.core import eval_context  # (ensure_compile_time_eval does not reach a raw bind)

    subfuns, params = eqn.primitive.get_bind_params({**eqn.params, **overrides})
    with eval_context():
        out = eqn.primitive.bind(*subfuns, *values, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


def _constant_outputs(eqn, states: list[_State]) -> list[_State]:
    """No operand depends on the input: outputs neither (values on demand if all are concrete)."""
    if any(state.value is None for state in states) or eqn.primitive.name in _NOT_EVALUATED:
        return [_State(None, None) for _ in eqn.outvars]
    cache: dict = {}

    def output(k: int):
        def compute():
            if "outs" not in cache:
                cache["outs"] = _bind(eqn, [state.value.get() for state in states])
            return cache["outs"][k]
        return _Value(compute)
    return [_State(None, output(k)) for k in range(len(eqn.outvars))]


_NOT_EVALUATED = {"rng_bit_generator", "random_bits", "random_seed", "random_wrap", "random_unwrap",
                  "while", "scan", "pure_callback", "io_callback", "debug_callback"}


# ----------------------------------------------------------------------------- rules


def _elementwise(eqn, states: list[_State], n: int) -> list[_State]:
    """Each output element depends on the elements of the operands it is computed from (with
    scalar or NumPy broadcasting); every output of the equation on all of them."""
    shape = tuple(eqn.outvars[0].aval.shape)
    size = int(np.prod(shape))
    total = None
    for atom, state in zip(eqn.invars, states):
        if state.dep is None:
            continue
        in_shape = tuple(atom.aval.shape)
        if in_shape == shape:
            rows = state.dep
        else:
            try:
                numbers = np.broadcast_to(np.arange(int(np.prod(in_shape))).reshape(in_shape), shape)
            except ValueError:
                raise _Unknown(f"'{eqn.primitive.name}' with operand shapes that do not broadcast") from None
            rows = state.dep[numbers.ravel()]
        total = rows if total is None else total + rows
    return [_State(total if total is not None and tuple(v.aval.shape) == shape else
                   _broadcast_rows(total, shape, tuple(v.aval.shape), eqn), None) for v in eqn.outvars]


def _broadcast_rows(rows, shape, out_shape, eqn):
    if rows is None:
        return None
    if int(np.prod(out_shape)) == int(np.prod(shape)):
        return rows
    raise _Unknown(f"'{eqn.primitive.name}' with outputs of another shape than its result")


def _no_derivative(eqn, states, n):
    return [_State(None, None) for _ in eqn.outvars]


def _moves(eqn, states: list[_State], n: int) -> list[_State]:
    """Ops whose every output element is a copy of one operand element (or a constant): apply the
    op itself to the operands' element numbers (offset per operand, -1 for constants)."""
    import jax.numpy as jnp

    pieces, numbers, offset = [], [], 0
    for atom, state in zip(eqn.invars, states):
        aval = atom.aval
        if _inexact(aval):
            size = _size(aval)
            if state.dep is None:
                numbers.append(np.full(aval.shape, -1, dtype=np.int32))
                continue
            pieces.append(state.dep)
            numbers.append(np.arange(offset, offset + size, dtype=np.int64).reshape(aval.shape))
            offset += size
        elif state.value is None:
            raise _Unknown(f"{eqn.primitive.name} with indices that depend on the input")
        else:
            numbers.append(state.value.get())
    if offset >= 2**31 - 1:
        raise _Unknown(f"'{eqn.primitive.name}' on more than 2^31 elements")
    if eqn.primitive.name in _NUMPY_MOVES:  # (no XLA compile per op and shape)
        outs = [_NUMPY_MOVES[eqn.primitive.name](eqn.params, *numbers)]
    else:
        numbers = [jnp.asarray(v, dtype=jnp.int32) if isinstance(v, np.ndarray) and v.dtype == np.int64 else v
                   for v in numbers]
        overrides = {"fill_value": -1} if "fill_value" in eqn.params else {}
        try:
            outs = _bind(eqn, numbers, **overrides)
        except Exception as error:  # noqa: BLE001 - a primitive refusing integer operands: no guess
            raise _Unknown(f"'{eqn.primitive.name}' could not be applied to element numbers ({error})") from None
    stacked = sp.vstack(pieces + [sp.csr_array((1, n), dtype=bool)], format="csr")
    result = []
    for var, out in zip(eqn.outvars, outs):
        source = np.asarray(out).ravel().astype(np.int64)
        source[source < 0] = stacked.shape[0] - 1  # the empty row
        result.append(_State(stacked[source], None) if _inexact(var.aval) else _State(None, None))
    return result


def _np_reshape(params, a):
    if params.get("dimensions") is not None:
        a = np.transpose(a, params["dimensions"])
    return a.reshape(params["new_sizes"])


def _np_broadcast_in_dim(params, a):
    shape, dims = tuple(params["shape"]), tuple(params["broadcast_dimensions"])
    expanded = [1] * len(shape)
    for axis, dim in enumerate(dims):
        expanded[dim] = a.shape[axis]
    return np.broadcast_to(a.reshape(expanded), shape)


def _np_slice(params, a):
    strides = params.get("strides") or (1,) * a.ndim
    return a[tuple(slice(int(lo), int(hi), int(st)) for lo, hi, st in
                   zip(params["start_indices"], params["limit_indices"], strides))]


def _np_pad(params, a, value):
    """lax.pad: per dim, `interior` copies of the value between elements, then low/high (negative:
    cropped)."""
    fill = np.asarray(value).reshape(())
    for axis, (low, high, interior) in enumerate(params["padding_config"]):
        low, high, interior = int(low), int(high), int(interior)
        length = a.shape[axis]
        if interior and length > 1:
            spread_shape = list(a.shape)
            spread_shape[axis] = (length - 1) * (interior + 1) + 1
            spread = np.full(spread_shape, fill, dtype=a.dtype)
            index = [slice(None)] * a.ndim
            index[axis] = slice(None, None, interior + 1)
            spread[tuple(index)] = a
            a = spread
        widths = [(0, 0)] * a.ndim
        widths[axis] = (max(low, 0), max(high, 0))
        a = np.pad(a, widths, constant_values=fill)
        index = [slice(None)] * a.ndim
        index[axis] = slice(max(-low, 0), a.shape[axis] - max(-high, 0))
        a = a[tuple(index)]
    return a


_NUMPY_MOVES: dict[str, Callable] = {
    "reshape": _np_reshape,
    "squeeze": lambda params, a: a.reshape([s for d, s in enumerate(a.shape) if d not in
                                            {k % a.ndim for k in params["dimensions"]}]),
    "expand_dims": lambda params, a: np.expand_dims(a, tuple(params["dimensions"])),
    "broadcast_in_dim": _np_broadcast_in_dim,
    "transpose": lambda params, a: np.transpose(a, params["permutation"]),
    "rev": lambda params, a: np.flip(a, tuple(params["dimensions"])) if params["dimensions"] else a,
    "slice": _np_slice,
    "pad": _np_pad,
    "concatenate": lambda params, *arrays: np.concatenate(arrays, axis=params["dimension"]),
}


def _select_n(eqn, states, n):
    """A constant predicate picks one case per element; otherwise any case may be picked."""
    if states[0].value is not None:
        return _moves(eqn, states, n)
    return _elementwise(eqn, states, n)


def _aggregate(eqn, states: list[_State], n: int, build: Callable) -> list[_State]:
    """dep(out) = sum over dependent operands k of A_k @ dep(operand k), with 0/1 matrices A_k
    from `build(eqn, k, states)` (None: operand k does not reach the output)."""
    out_aval = eqn.outvars[0].aval
    total = None
    for k, state in enumerate(states):
        if state.dep is None:
            continue
        matrix = build(eqn, k, states)
        if matrix is None:
            continue
        rows = (matrix @ state.dep).tocsr()
        total = rows if total is None else total + rows
    if any(_size(var.aval) != _size(out_aval) for var in eqn.outvars):
        raise _Unknown(f"'{eqn.primitive.name}' with outputs of different sizes")
    return [_State(total, None) for _ in eqn.outvars]


def _matrix(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sp.csr_array:
    if rows.size > MAX_ENTRIES:
        raise _Unknown(f"an aggregation with more than {MAX_ENTRIES} entries")
    return sp.csr_array((np.ones(rows.size, dtype=bool), (rows.ravel(), cols.ravel())), shape=shape)


def _reduction_matrix(eqn, k, states):
    shape = tuple(eqn.invars[0].aval.shape)
    axes = tuple(a % max(len(shape), 1) for a in eqn.params["axes"])
    kept = tuple(1 if d in axes else s for d, s in enumerate(shape))
    out_number = np.broadcast_to(np.arange(int(np.prod(kept))).reshape(kept), shape).ravel()
    size = int(np.prod(shape))
    return _matrix(out_number, np.arange(size), (int(np.prod(kept)), size))


def _along_axis_matrix(shape, axis, which: str):
    """Pairs (out, in) of elements in the same slice along `axis`: all pairs, or in <= out
    ('lower'), or in >= out ('upper')."""
    length = shape[axis]
    numbers = np.moveaxis(np.arange(int(np.prod(shape))).reshape(shape), axis, -1).reshape(-1, length)
    if which == "all":
        out_pos, in_pos = np.repeat(np.arange(length), length), np.tile(np.arange(length), length)
    elif which == "lower":
        out_pos, in_pos = np.tril_indices(length)
    else:
        out_pos, in_pos = np.triu_indices(length)
    size = int(np.prod(shape))
    return _matrix(numbers[:, out_pos], numbers[:, in_pos], (size, size))


def _cumulative_matrix(eqn, k, states):
    shape = tuple(eqn.invars[0].aval.shape)
    return _along_axis_matrix(shape, eqn.params["axis"] % len(shape),
                              "upper" if eqn.params.get("reverse") else "lower")


def _sort_matrix(eqn, k, states):
    if not _inexact(eqn.invars[k].aval):
        return None
    shape = tuple(eqn.invars[0].aval.shape)
    return _along_axis_matrix(shape, eqn.params["dimension"] % len(shape), "all")


def _dot_general_matrix(eqn, k, states):
    """Output (batch, lhs free, rhs free) depends on operand k's entries along the contracted
    dims, only where the other operand is nonzero when it is a concrete constant."""
    (contract_l, contract_r), (batch_l, batch_r) = eqn.params["dimension_numbers"]
    shapes = [tuple(atom.aval.shape) for atom in eqn.invars]
    contracts, batches = (tuple(contract_l), tuple(contract_r)), (tuple(batch_l), tuple(batch_r))
    frees = [tuple(d for d in range(len(shapes[i])) if d not in contracts[i] + batches[i]) for i in (0, 1)]

    def canonical(i, array):  # -> (batch, free, contract) as a 3-D array
        order = batches[i] + frees[i] + contracts[i]
        shape = shapes[i]
        dims = [int(np.prod([shape[d] for d in part])) for part in (batches[i], frees[i], contracts[i])]
        return np.transpose(array, order).reshape(dims)

    own = canonical(k, np.arange(int(np.prod(shapes[k]))).reshape(shapes[k]))  # (B, F_k, K)
    other = 1 - k
    if states[other].value is not None and states[other].dep is None:
        mask = canonical(other, np.asarray(states[other].value.get()) != 0)  # (B, F_o, K)
    else:
        dims = [int(np.prod([shapes[other][d] for d in part])) for part in (batches[other], frees[other],
                                                                            contracts[other])]
        mask = np.ones(dims, dtype=bool)
    b, f_own, c = own.shape
    f_other = mask.shape[1]
    # out[(b, i_lhs, j_rhs)] for each nonzero (b, f_o, c) of the other operand and each own free f
    nb, no, nc = np.nonzero(mask)
    if nb.size * f_own > MAX_ENTRIES:
        raise _Unknown(f"dot_general with more than {MAX_ENTRIES} dependency pairs")
    own_free = np.arange(f_own)
    if k == 0:
        rows = (nb[:, None] * f_own + own_free[None, :]) * f_other + no[:, None]
    else:
        rows = (nb[:, None] * f_other + no[:, None]) * f_own + own_free[None, :]
    cols = own[nb[:, None], own_free[None, :], nc[:, None]]
    return _matrix(rows, cols, (b * f_own * f_other, int(np.prod(shapes[k]))))


def _scatter(eqn, states, n):
    """scatter, scatter-add/-sub/-mul/-min/-max at constant indices: each output element depends
    on its operand element and on the updates that land on it (for scatter, the one that wins
    among them: the union holds it). Where each update lands is read off the transpose of a
    scatter-add with the same indices (a gather) applied to the output's element numbers (+1;
    0: dropped)."""
    import jax
    from jax._src.core import eval_context

    operand, indices, updates = states
    if indices.value is None:
        raise _Unknown(f"{eqn.primitive.name} with indices that depend on the input")
    out_aval, update_aval = eqn.invars[0].aval, eqn.invars[2].aval
    size, count = _size(out_aval), _size(update_aval)
    dtype = np.float32 if size < 2**24 else np.float64
    if dtype == np.float64 and not jax.config.jax_enable_x64:
        raise _Unknown(f"{eqn.primitive.name} into more than 2^24 elements without x64")
    index_values = indices.value.get()

    def scatter(values):
        return jax.lax.scatter_add(jax.numpy.zeros(out_aval.shape, dtype), index_values, values,
                                   eqn.params["dimension_numbers"], mode=eqn.params["mode"])
    with eval_context():
        numbers = jax.numpy.arange(1, size + 1, dtype=dtype).reshape(out_aval.shape)
        (landing,) = jax.linear_transpose(scatter, jax.ShapeDtypeStruct(update_aval.shape, dtype))(numbers)
    target = np.asarray(landing).ravel().astype(np.int64) - 1
    total = operand.dep
    if updates.dep is not None:
        kept = target >= 0
        spread = (_matrix(target[kept], np.arange(count)[kept], (size, count)) @ updates.dep).tocsr()
        total = spread if total is None else total + spread
    return [_State(total, None)]


def _call(jaxpr_param: str, closed: bool = True):
    def rule(eqn, states, n):
        inner = eqn.params[jaxpr_param]
        if closed:
            return _analyse(inner.jaxpr, inner.consts, states, n)
        if inner.constvars:
            raise _Unknown(f"'{eqn.primitive.name}' with an inner jaxpr holding constants")
        return _analyse(inner, [], states, n)
    return rule


def _cond(eqn, states, n):
    """Any branch may run: the union of the branches' dependencies (the index carries none)."""
    results = [_analyse(branch.jaxpr, branch.consts, states[1:], n) for branch in eqn.params["branches"]]
    outs = []
    for k, var in enumerate(eqn.outvars):
        deps = [result[k].dep for result in results if result[k].dep is not None]
        outs.append(_State(sum(deps[1:], deps[0]) if deps else None, None))
    return outs


def _custom_jvp(eqn, states, n):
    """The derivative jax.jvp takes here is the custom rule's: analyse the jaxpr of the JVP of
    this one equation, primals as constants of unknown value, tangents carrying the operands'
    dependencies. Its tangent outputs depend on the input as the equation's outputs do."""
    import jax

    invars = list(eqn.invars)
    subfuns, params = eqn.primitive.get_bind_params(eqn.params)

    def one(*values):
        out = eqn.primitive.bind(*subfuns, *values, **params)
        return list(out) if eqn.primitive.multiple_results else [out]

    differentiable = [k for k, atom in enumerate(invars) if _inexact(atom.aval)]

    def tangent_outputs(primals, tangents):
        def restricted(*chosen):
            values = list(primals)
            for k, value in zip(differentiable, chosen):
                values[k] = value
            return one(*values)
        return jax.jvp(restricted, [primals[k] for k in differentiable], list(tangents))[1]

    specs = [jax.ShapeDtypeStruct(atom.aval.shape, atom.aval.dtype) for atom in invars]
    try:
        traced = jax.make_jaxpr(tangent_outputs)(specs, [specs[k] for k in differentiable])
    except Exception as error:  # noqa: BLE001
        raise _Unknown(f"the custom JVP rule could not be traced ({type(error).__name__})") from None
    inner_states = [_State(None, None) for _ in invars] + [states[k] for k in differentiable]
    tangents = _analyse(traced.jaxpr, traced.consts, inner_states, n)
    return [_State(state.dep, None) for state in tangents]


_ELEMENTWISE = (
    "neg sign floor ceil round is_finite exp exp2 log log1p expm1 tanh logistic sin cos tan asin acos atan "
    "sinh cosh asinh acosh atanh sqrt rsqrt cbrt abs integer_pow square erf erfc erf_inv lgamma digamma "
    "igamma igammac igamma_grad_a random_gamma_grad bessel_i0e bessel_i1e polygamma zeta regularized_incomplete_beta "
    "add add_any sub mul div rem pow max min atan2 nextafter clamp convert_element_type reduce_precision "
    "real imag conj complex eq ne lt le gt ge and or not xor population_count clz shift_left "
    "shift_right_logical shift_right_arithmetic copy copy_p"
).split()
_MOVES = ("reshape squeeze expand_dims broadcast_in_dim transpose rev slice pad concatenate gather "
          "dynamic_slice dynamic_update_slice split").split()

#: Rules keyed by primitive name: (eqn, operand states, n) -> output states.
RULES: dict[str, Callable] = {
    **{name: _elementwise for name in _ELEMENTWISE},
    **{name: _moves for name in _MOVES},
    "select_n": _select_n,
    "stop_gradient": _no_derivative,
    "optimization_barrier": lambda eqn, states, n: [_State(s.dep, None) for s in states],
    **{name: (lambda eqn, states, n: _aggregate(eqn, states, n, _reduction_matrix))
       for name in "reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or argmax argmin".split()},
    **{name: (lambda eqn, states, n: _aggregate(eqn, states, n, _cumulative_matrix))
       for name in "cumsum cumprod cummax cummin cumlogsumexp".split()},
    "sort": lambda eqn, states, n: _aggregate(eqn, states, n, _sort_matrix),
    "dot_general": lambda eqn, states, n: _aggregate(eqn, states, n, _dot_general_matrix),
    "pjit": _call("jaxpr"),
    "jit": _call("jaxpr"),
    "closed_call": _call("call_jaxpr"),
    "core_call": _call("call_jaxpr", closed=False),
    "remat": _call("jaxpr", closed=False),
    "checkpoint": _call("jaxpr", closed=False),
    "remat2": _call("jaxpr", closed=False),
    "cond": _cond,
    **{name: _scatter for name in "scatter scatter-add scatter-sub scatter-mul scatter-min scatter-max".split()},
    "custom_jvp_call": _custom_jvp,
    "debug_callback": lambda eqn, states, n: [_State(None, None) for _ in eqn.outvars],  # (prints only)
}
