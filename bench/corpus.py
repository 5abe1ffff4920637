"""The corpus benchmark (issue 11, item 8): every program of bench/corpora/nablasd.py x every
derivative kind (grad for scalar programs, jacobian, jvp, vjp) x every input it differentiates.

For each case it records whether sparsad ran it compiled or fell back to the interpreter (and
why), or raised (the exception type); the maximum relative error against the hand-written
NumPy/SciPy closed form and against JAX dense autodiff (float64); and, in the benchmark, the
steady time against the closed form (and against JAX BCOO and PyTorch sparse where the entry
gives them). Real inputs come from ../shared/data (synthetic of a similar size if absent).

    sparsad bench corpus [--quick]        # quick: small inputs, references only
    python -m bench.corpus [--quick] [--resume] [--only=spmv,lsq] [--kinds=grad,vjp] [--summary] [--help]

At real size each case runs in a worker process that is stopped past SPARSAD_BENCH_CASE_TIMEOUT_S
(default 120 s; the case is recorded as a timeout), the whole run stops starting cases past
SPARSAD_BENCH_BUDGET_S (default 30 min; the rest are recorded as skipped), and every row is
appended to bench/results/corpus_partial.jsonl as it comes: `--resume` (SPARSAD_BENCH_RESUME=1)
measures only the cases not there yet. Times are the least of a few calls (the machine may be
loaded; each row records the load average).

Writes bench/results/corpus.csv and corpus_*.png, prints the table and a summary: fallbacks by
kind and cause, errors, timeouts, and the worst and median time ratio against the closed form
with the cause of every miss. tests/bench/test_corpus.py runs the same cases at small size.
"""
from __future__ import annotations

import os
import sys

if "numba" not in sys.modules:
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
if "numpy" not in sys.modules:  # one BLAS thread: a threaded ddot waits on a preempted thread
    for _blas_threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_blas_threads, "1")
_XLA_SINGLE = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
if "jax" not in sys.modules and _XLA_SINGLE not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _XLA_SINGLE).strip()

import contextlib
import math
import signal
import statistics
import time
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from bench.common import best_time, plot_bars, print_table, steady_time, write_csv
from bench.corpora.nablasd import ENTRIES, Entry, SparseTensor

SUITE = "corpus"
KINDS = ("grad", "jacobian", "jvp", "vjp")
TANGENT, COTANGENT = "tangent", "cotangent"
JACOBIAN_REFERENCE_LIMIT = 4_000_000  # entries of a dense reference Jacobian (out x in) built at all
RTOL = 1e-9  # max |ours - reference| / max |reference| counted as agreement
DENSE_REFERENCE_BYTES = 200 * 2**20  # JAX's dense program is run only on inputs below this at real size
REAL_REFERENCE_LIMIT = 2_000_000  # entries of a JAX reference computed at real size
UNTIMED_FIRST_S = 2.0  # a case without a closed form whose first call took longer is not timed again


# -- inputs -------------------------------------------------------------------------------------------

def seed_of(*parts: str) -> int:
    return zlib.crc32("/".join(parts).encode())


def sparsad_input(value: Any, fmt: str | None) -> Any:
    """The input as a user passes it: scipy matrices in their format, sparse tensors stored by
    coordinates in the named format, numpy arrays and Python numbers as they are."""
    import sparsad

    if isinstance(value, SparseTensor):
        return sparsad.formats.from_coordinates(value.coords, value.values, value.shape, fmt or "coo")
    if sp.issparse(value):
        return value.asformat(fmt or "csr")
    return value


def densify(value: Any, shape: tuple | None = None) -> np.ndarray:
    """A dense float64 ndarray of any result or input (nested dicts need the shape)."""
    from sparsad.formats import StoredTensor

    if isinstance(value, SparseTensor):
        return value.dense()
    if isinstance(value, StoredTensor):
        return value.to_numpy()
    if sp.issparse(value):
        return np.asarray(value.toarray(), dtype=float)
    if isinstance(value, dict):
        if shape is None:
            raise TypeError("a dict result needs the expected shape")
        out = np.zeros(shape)
        _fill(out, (), value)
        return out
    if hasattr(value, "detach"):
        value = value.detach().numpy()
    out = np.asarray(value, dtype=float)
    if shape is not None and out.shape != tuple(shape) and out.size == int(np.prod(shape)):
        out = out.reshape(shape)
    return out


def _fill(out: np.ndarray, prefix: tuple, value: Any) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _fill(out, prefix + (int(key),), item)
    else:
        out[prefix] += float(value)


def pattern_mask(value: Any) -> np.ndarray | None:
    """1 on the stored entries of a sparse input, None for dense inputs and scalars."""
    if isinstance(value, SparseTensor):
        return value.mask()
    if sp.issparse(value):
        m = value.copy().tocsr()
        m.data = np.ones_like(m.data)
        return m.toarray()
    return None


def random_like(value: Any, rng) -> Any:
    """A tangent or cotangent with the structure of `value` (same pattern for sparse values)."""
    if isinstance(value, SparseTensor):
        return value.with_values(rng.standard_normal(value.values.size))
    if sp.issparse(value):
        out = value.copy().tocsr()
        out.data = rng.standard_normal(out.nnz)
        return out
    if isinstance(value, np.ndarray):
        return rng.standard_normal(value.shape)
    return float(rng.standard_normal())


@dataclass
class Prepared:
    entry: Entry
    real: bool
    raw: dict
    inputs: dict  # as passed to sparsad
    dense: dict | None  # dense numpy arrays (scalars, ints kept); None when too large
    shapes: dict
    masks: dict
    value: Any  # closed-form value
    out_shape: tuple
    jax_cache: dict = field(default_factory=dict)


def prepare(entry: Entry, real: bool = False) -> Prepared:
    rng = np.random.default_rng(seed_of(entry.name, "inputs"))
    import sparsad

    reads = set(sparsad.program(entry.text).inputs)
    raw = {k: v for k, v in entry.make(rng, real).items() if k in reads}  # generators may make extras
    inputs = {k: sparsad_input(v, entry.formats.get(k)) for k, v in raw.items()}
    shapes = {k: tuple(getattr(v, "shape", np.shape(v))) for k, v in raw.items()}
    value = entry.value(raw)
    out_shape = tuple(getattr(value, "shape", np.shape(value)))
    dense_bytes = 8 * sum(int(np.prod(s, dtype=np.int64)) for s in list(shapes.values()) + [out_shape])
    dense = masks = None
    if dense_bytes <= DENSE_REFERENCE_BYTES:
        dense = {k: (v if isinstance(v, (int, float)) else densify(v)) for k, v in raw.items()}
        masks = {k: pattern_mask(v) for k, v in raw.items() if pattern_mask(v) is not None}
    return Prepared(entry=entry, real=real, raw=raw, inputs=inputs, dense=dense, shapes=shapes, masks=masks,
                    value=value, out_shape=out_shape)


def direction(P: Prepared, wrt: str, kind: str) -> Any:
    """The tangent (jvp) or cotangent (vjp) of a case, seeded by the case's name."""
    rng = np.random.default_rng(seed_of(P.entry.name, wrt, kind))
    if kind == "jvp":
        return random_like(P.raw[wrt], rng)
    if kind == "vjp":
        return random_like(P.value, rng)
    return None


# -- running sparsad ------------------------------------------------------------------------------------

class Budget(Exception):
    """A measurement ran past its time cap (raised from a timer signal inside Python code)."""


@contextlib.contextmanager
def time_cap(seconds: float | None):
    if not seconds or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise Budget(f"ran past the {seconds:g} s cap")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def count_interpreter():
    """Counts expressions evaluated by sparsad's reference interpreter (0 for a compiled run)."""
    import sparsad.lang.interpret as interpret

    counter = {"n": 0}
    original = interpret._eval

    def counting(expr, env):
        counter["n"] += 1
        return original(expr, env)

    interpret._eval = counting
    try:
        yield counter
    finally:
        interpret._eval = original


def make_derivative(entry: Entry, wrt: str, kind: str):
    import sparsad

    if kind == "grad":
        return sparsad.grad(entry.text, wrt=wrt)
    if kind == "jacobian":
        return sparsad.jacobian(entry.text, wrt=wrt)
    if kind == "jvp":
        return sparsad.jvp(entry.text, wrt=wrt, with_primal=False)  # called with tangent=
    return sparsad.vjp(entry.text, wrt=wrt)  # called with cotangent=


def call_arguments(P: Prepared, wrt: str, kind: str, seed_value: Any) -> dict:
    args = dict(P.inputs)
    if kind == "jvp":
        args[TANGENT] = sparsad_input(seed_value, P.entry.formats.get(wrt))
    elif kind == "vjp":
        args[COTANGENT] = seed_value
    return args


def fallback_cause(caught: list, evaluated: int) -> str | None:
    """Why a call ran in the interpreter, or None if it ran compiled: a FallbackWarning (when
    sparsad has it), a sparsad UserWarning about the interpreter, or interpreter evaluations."""
    import sparsad.errors

    category = getattr(sparsad.errors, "FallbackWarning", None)
    for w in caught:
        message = str(w.message)
        if category is not None and issubclass(w.category, category):
            return message
        if issubclass(w.category, UserWarning) and "interpret" in message and "sparsad" in message:
            return message
    if evaluated:
        return f"ran in the interpreter without a warning ({evaluated} expressions evaluated)"
    return None


@dataclass
class Run:
    status: str  # compiled | fallback | error
    cause: str = ""
    result: Any = None
    first_s: float | None = None
    error_type: str = ""


def run_sparsad(P: Prepared, wrt: str, kind: str, seed_value: Any, cap_s: float | None = None,
                value_only: bool = False) -> tuple[Run, Callable[[], Any] | None]:
    """One call of the derivative (or, with value_only, of the compiled program)."""
    import sparsad

    if value_only:
        fn = sparsad.compile(P.entry.text)
        args = dict(P.inputs)
    else:
        fn = make_derivative(P.entry, wrt, kind)
        args = call_arguments(P, wrt, kind, seed_value)
    try:
        with warnings.catch_warnings(record=True) as caught, count_interpreter() as counter, time_cap(cap_s):
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            result = fn(**args)
            first = time.perf_counter() - t0
    except Budget as error:
        return Run("fallback" if counter["n"] else "error", f"timeout: {error}", error_type="Timeout"), None
    except SystemError as error:  # the cap's signal raised inside a Numba kernel's call into Python
        if isinstance(error.__cause__ or error.__context__, Budget) or (cap_s and time.perf_counter() - t0 >= cap_s):
            return Run("fallback" if counter["n"] else "error", f"timeout: ran past the {cap_s:g} s cap",
                       error_type="Timeout"), None
        return Run("error", f"SystemError: {str(error).splitlines()[0] if str(error) else ''}"[:300],
                   error_type="SystemError"), None
    except Exception as error:  # recorded with its type: an exception is a failure
        return Run("error", f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300],
                   error_type=type(error).__name__), None
    cause = fallback_cause(caught, counter["n"])
    run = Run("fallback" if cause else "compiled", cause or "", result, first)
    return run, (lambda: fn(**args))


# -- references -------------------------------------------------------------------------------------------

def closed_form(P: Prepared, wrt: str, kind: str, seed_value: Any) -> Callable[[], Any] | None:
    """A zero-argument callable computing the case with the hand-written NumPy/SciPy closed form,
    or None where the entry has none at this size."""
    e, I = P.entry, P.raw
    if e.scalar:
        if kind in ("grad", "jacobian"):
            return lambda: e.grad(I, wrt)
        if kind == "vjp":
            return lambda: _scale(e.grad(I, wrt), seed_value)
        return lambda: inner(e.grad(I, wrt), seed_value)
    if kind == "vjp":
        return lambda: e.vjp(I, wrt, seed_value)
    if kind == "jvp" and e.jvp is not None:
        return lambda: e.jvp(I, wrt, seed_value)
    if P.real:
        return None
    if kind == "jacobian":
        return lambda: jacobian_from_vjp(P, wrt)
    if kind == "jvp":
        return lambda: _contract(jacobian_from_vjp(P, wrt), densify(seed_value))
    return None


def inner(a: Any, b: Any) -> float:
    """sum(a * b) of two values of one shape (numbers, arrays, scipy matrices, SparseTensors),
    without densifying a sparse one (the closed form of a scalar program's jvp at real size)."""
    if isinstance(a, SparseTensor) or isinstance(b, SparseTensor):
        s, other = (a, b) if isinstance(a, SparseTensor) else (b, a)
        if isinstance(other, SparseTensor):
            keys_s = np.ravel_multi_index(tuple(s.coords), s.shape)
            keys_o = np.ravel_multi_index(tuple(other.coords), other.shape)
            common, at_s, at_o = np.intersect1d(keys_s, keys_o, assume_unique=True, return_indices=True)
            return float(np.dot(s.values[at_s], other.values[at_o]))
        return float(np.dot(s.values, densify(other)[tuple(s.coords)]))
    if sp.issparse(a) or sp.issparse(b):
        s, other = (a, b) if sp.issparse(a) else (b, a)
        other = other if sp.issparse(other) else np.asarray(other, dtype=float)
        return float(s.multiply(other).sum())
    return float(np.sum(np.asarray(a, dtype=float) * np.asarray(b, dtype=float)))


def _scale(g: Any, c: float) -> Any:
    if isinstance(g, SparseTensor):
        return g.with_values(g.values * c)
    return g * c


def _contract(J: np.ndarray, t: np.ndarray) -> np.ndarray:
    axes = t.ndim
    return np.tensordot(J, t, axes=(list(range(J.ndim - axes, J.ndim)), list(range(axes))))


def jacobian_from_vjp(P: Prepared, wrt: str) -> np.ndarray:
    """The Jacobian (output axes, then input axes) from the closed-form vjp of each unit cotangent."""
    in_shape = P.shapes[wrt]
    J = np.zeros(P.out_shape + in_shape)
    value = P.value
    if sp.issparse(value):
        coo = value.tocoo()
        positions = list(zip(coo.row, coo.col))
    else:
        positions = list(np.ndindex(P.out_shape))
    for pos in positions:
        if sp.issparse(value):
            ct = value.copy().tocsr()
            ct.data = np.zeros(ct.nnz)
            ct[pos] = 1.0
        else:
            ct = np.zeros(P.out_shape)
            ct[pos] = 1.0
        J[pos] = densify(P.entry.vjp(P.raw, wrt, ct), in_shape)
    return J


@contextlib.contextmanager
def jax_x64():
    import jax

    if hasattr(jax, "enable_x64"):
        with jax.enable_x64(True):
            yield
    else:  # older JAX
        from jax.experimental import enable_x64

        with enable_x64():
            yield


def jax_reference(P: Prepared, wrt: str, kind: str, seed_value: Any) -> np.ndarray:
    """The case by JAX autodiff of the program written densely (masked to wrt's pattern).

    All cases of a program are computed by one jitted function (compiled once per program)."""
    key = (wrt, kind)
    if P.real:
        if kind == "jacobian":  # one compilation per Jacobian: a case too large for JAX fails alone
            return jax_references(P, [(wrt, kind, seed_value)])[key]
        if key not in P.jax_cache and not P.jax_cache.get("batch tried"):
            # the one-pass kinds (grad, vjp, jvp) of a program in one jitted function: one JAX
            # compilation per program instead of one per case; each result is used once
            P.jax_cache["batch tried"] = True
            batch = [(w, k, direction(P, w, k)) for _, w, k in cases([P.entry])
                     if k != "jacobian" and reference_size(P, w, k) <= REAL_REFERENCE_LIMIT]
            with contextlib.suppress(Exception):  # then case by case below
                P.jax_cache.update(jax_references(P, batch))
        if key in P.jax_cache:
            return P.jax_cache.pop(key)
        return jax_references(P, [(wrt, kind, seed_value)])[key]
    if key not in P.jax_cache:
        P.jax_cache.update(jax_references(P, [(w, k, direction(P, w, k)) for _, w, k in cases([P.entry])
                                              if reference_size(P, w, k) <= JACOBIAN_REFERENCE_LIMIT]))
    if key not in P.jax_cache:  # a seed other than the case's own
        P.jax_cache.update(jax_references(P, [(wrt, kind, seed_value)]))
        return P.jax_cache.pop(key)
    return P.jax_cache[key]


def jax_references(P: Prepared, wanted: list) -> dict:
    import jax
    import jax.numpy as jnp

    with jax_x64():
        static = {k: v for k, v in P.dense.items() if isinstance(v, (int, float))}  # ints index and slice
        arrays = {k: jnp.asarray(v) for k, v in P.dense.items() if k not in static}
        masks = {k: jnp.asarray(v) for k, v in P.masks.items()}
        names = sorted({w for w, _, _ in wanted})
        seeds = {f"{w}|{k}": jnp.asarray(densify(s), dtype=jnp.float64) for w, k, s in wanted if s is not None}

        def all_cases(xs, seeds, arrays, masks):  # arrays as arguments: XLA does not constant-fold them
            out = {}
            for w, k, _ in wanted:
                def f(x, w=w):
                    return P.entry.dense(jnp, {**static, **arrays, **xs, w: x}, masks)
                x0 = xs[w]
                if k == "jvp":
                    out[f"{w}|{k}"] = jax.jvp(f, (x0,), (seeds[f"{w}|{k}"],))[1]
                elif k == "vjp":
                    out[f"{w}|{k}"] = jax.vjp(f, x0)[1](seeds[f"{w}|{k}"])[0]
                elif k == "grad":
                    out[f"{w}|{k}"] = jax.grad(f)(x0)
                else:  # reverse mode when the output is the smaller side (scalar programs)
                    small_out = int(np.prod(P.out_shape, dtype=np.int64)) <= int(np.prod(P.shapes[w], dtype=np.int64))
                    out[f"{w}|{k}"] = (jax.jacrev if small_out else jax.jacfwd)(f)(x0)
            return out

        xs = {w: jnp.asarray(P.dense[w], dtype=jnp.float64) for w in names}
        results = jax.jit(all_cases)(xs, seeds, arrays, masks)
        out = {}
        for w, k, _ in wanted:
            value = np.asarray(results[f"{w}|{k}"])
            mask = P.masks.get(w)
            out[(w, k)] = value if (mask is None or k == "jvp") else value * mask
        return out


COMPARE_LIMIT = 50_000_000  # entries of a dense comparison; sparse results beyond it are compared sparsely


def compare(ours: Any, reference: Any, shape: tuple) -> float | str:
    """max |ours - reference| / max |reference|, sparse when both are scipy matrices."""
    if sp.issparse(ours) and sp.issparse(reference):
        diff = sp.csr_matrix(ours, dtype=float) - sp.csr_matrix(reference, dtype=float)
        scale = abs(sp.csr_matrix(reference)).max() if reference.nnz else 0.0
        err = abs(diff).max() if diff.nnz else 0.0
        return float(err / scale) if scale else float(err)
    if int(np.prod(shape, dtype=np.int64)) > COMPARE_LIMIT:
        return ""
    return max_rel_err(densify(ours, shape), densify(reference, shape))


def max_rel_err(ours: np.ndarray, reference: np.ndarray) -> float:
    if ours.shape != reference.shape:
        if ours.size == reference.size:
            ours = ours.reshape(reference.shape)
        else:
            return math.inf
    err = float(np.max(np.abs(ours - reference), initial=0.0))
    scale = float(np.max(np.abs(reference), initial=0.0))
    if not np.isfinite(err):
        return math.inf
    return err / scale if scale > 0 else err


def expected_shape(P: Prepared, wrt: str, kind: str) -> tuple:
    in_shape = P.shapes[wrt]
    if kind in ("grad", "vjp"):
        return in_shape
    if kind == "jvp":
        return P.out_shape
    return P.out_shape + in_shape


def reference_size(P: Prepared, wrt: str, kind: str) -> int:
    return int(np.prod(expected_shape(P, wrt, kind), dtype=np.int64))


def cases(entries=None, kinds=KINDS) -> list[tuple[Entry, str, str]]:
    """(entry, wrt, kind) for every program, input differentiated and derivative kind."""
    out = []
    for entry in (entries or ENTRIES.values()):
        for wrt in entry.wrt:
            for kind in kinds:
                if kind == "grad" and not entry.scalar:
                    continue
                out.append((entry, wrt, kind))
    return out


def check_case(P: Prepared, wrt: str, kind: str, cap_s: float | None = None, with_jax: bool = True) -> dict:
    """Run one case and compare with both references; the row of the table (without timings)."""
    seed_value = direction(P, wrt, kind)
    run, again = run_sparsad(P, wrt, kind, seed_value, cap_s=cap_s)
    row = dict(program=P.entry.name, category=P.entry.category, wrt=wrt, kind=kind, status=run.status,
               cause=run.cause, error_type=run.error_type, out_type="", err_closed="", err_jax="",
               first_s=run.first_s if run.first_s is not None else "")
    shape = expected_shape(P, wrt, kind)
    if run.status != "error" and run.first_s is not None:  # a run stopped by the time cap has no result
        row["out_type"] = type(run.result).__name__
        reference = closed_form(P, wrt, kind, seed_value)
        if reference is not None:
            row["err_closed"] = compare(run.result, reference(), shape)
        if with_jax and P.dense is not None and reference_size(P, wrt, kind) <= JACOBIAN_REFERENCE_LIMIT:
            row["err_jax"] = max_rel_err(densify(run.result, shape), jax_reference(P, wrt, kind, seed_value))
    row["_again"] = again
    row["_seed"] = seed_value
    return row


def check_value(P: Prepared) -> dict:
    """The program's value: compiled (and, at small size, interpreted) against the closed form and JAX."""
    import sparsad
    import jax.numpy as jnp

    run, _ = run_sparsad(P, "", "value", None, value_only=True)
    row = dict(program=P.entry.name, category=P.entry.category, wrt="", kind="value", status=run.status,
               cause=run.cause, error_type=run.error_type, out_type="", err_closed="", err_jax="",
               err_jax_closed="", err_interpreter="")
    dense_value = None
    if P.dense is not None:
        with jax_x64():
            dense_value = np.asarray(P.entry.dense(jnp, {k: (v if isinstance(v, (int, float)) else jnp.asarray(v))
                                                          for k, v in P.dense.items()}, P.masks))
        row["err_jax_closed"] = max_rel_err(dense_value, densify(P.value, P.out_shape))
    if not P.real:
        interpreted = sparsad.program(P.entry.text)(**P.inputs)
        row["err_interpreter"] = compare(interpreted, P.value, P.out_shape)
    if run.status != "error":
        row["out_type"] = type(run.result).__name__
        row["err_closed"] = compare(run.result, P.value, P.out_shape)
        if dense_value is not None:
            row["err_jax"] = max_rel_err(densify(run.result, P.out_shape), dense_value)
    return row


# -- competitors -----------------------------------------------------------------------------------------

def competitor(P: Prepared, wrt: str, kind: str, tool: str, seed_value: Any) -> Callable[[], Any] | None:
    """JAX BCOO (jitted) or PyTorch sparse computing the case, where the corpus writes the
    program in that library (bench.corpora.nablasd.COMPETITORS); derivatives with respect to a
    sparse input are taken with respect to its stored values."""
    from bench.corpora.nablasd import COMPETITORS

    fn = COMPETITORS.get(P.entry.name, {}).get(tool)
    if fn is None:
        return None
    return (_bcoo_case if tool == "bcoo" else _torch_case)(P, wrt, kind, seed_value, fn)


def _seed_values(value: Any) -> np.ndarray:
    if sp.issparse(value):
        return value.tocoo().data  # row-major order: the order of the competitors' indices
    return np.asarray(value, dtype=float)


def _bcoo_case(P, wrt, kind, seed_value, fn):
    import jax
    import jax.numpy as jnp
    from jax.experimental import sparse as jsparse

    with jax_x64():
        sparse_in = {}
        for name, raw in P.raw.items():
            if sp.issparse(raw):
                coo = raw.tocsr().tocoo()
                sparse_in[name] = (jnp.asarray(np.stack([coo.row, coo.col], axis=1)), jnp.asarray(coo.data),
                                   coo.shape)
        dense_in = {k: (v if isinstance(v, (int, float)) else jnp.asarray(v)) for k, v in P.raw.items()
                    if k not in sparse_in}

        def g(x):
            S = {k: jsparse.BCOO((x if k == wrt else data, idx), shape=shape)
                 for k, (idx, data, shape) in sparse_in.items()}
            return fn(jnp, S, {**dense_in, **({wrt: x} if wrt in dense_in else {})})

        x0 = sparse_in[wrt][1] if wrt in sparse_in else dense_in[wrt]
        seed = jnp.asarray(_seed_values(seed_value)) if seed_value is not None else None
        if kind == "grad":
            f = jax.jit(jax.grad(g))
        elif kind == "jacobian":
            f = jax.jit(jax.jacrev(g))
        elif kind == "jvp":
            f = jax.jit(lambda x: jax.jvp(g, (x,), (seed,))[1])
        else:
            f = jax.jit(lambda x: jax.vjp(g, x)[1](seed)[0])

    def run():
        with jax_x64():
            return f(x0).block_until_ready()
    run()
    return run


def _torch_case(P, wrt, kind, seed_value, fn):
    import torch

    sparse_in = {}
    for name, raw in P.raw.items():
        if sp.issparse(raw):
            coo = raw.tocsr().tocoo()
            sparse_in[name] = (torch.from_numpy(np.stack([coo.row, coo.col]).astype(np.int64)),
                               torch.from_numpy(coo.data.copy()), coo.shape)
    dense_in = {k: (v if isinstance(v, (int, float)) else torch.from_numpy(np.ascontiguousarray(v)))
                for k, v in P.raw.items() if k not in sparse_in}

    def g(x):
        S = {k: torch.sparse_coo_tensor(idx, x if k == wrt else data, shape, is_coalesced=True)
             for k, (idx, data, shape) in sparse_in.items()}
        return fn(torch, S, {**dense_in, **({wrt: x} if wrt in dense_in else {})})

    x0 = sparse_in[wrt][1] if wrt in sparse_in else dense_in[wrt]
    seed = torch.from_numpy(np.array(_seed_values(seed_value))) if seed_value is not None else None

    def reverse(cotangent):
        x = x0.detach().requires_grad_(True)
        out = g(x)
        (grad,) = torch.autograd.grad(out, x, grad_outputs=cotangent)
        return grad

    if kind == "grad":
        run = lambda: reverse(None)  # noqa: E731
    elif kind == "vjp":
        run = lambda: reverse(seed)  # noqa: E731
    elif kind == "jvp":
        run = lambda: torch.func.jvp(g, (x0,), (seed,))[1]  # noqa: E731
    else:
        run = lambda: torch.autograd.functional.jacobian(g, x0)  # noqa: E731
    start = time.perf_counter()
    run()
    run.first_s = time.perf_counter() - start  # eager PyTorch: the first call is a timing too
    return run


# -- the benchmark ----------------------------------------------------------------------------------------

@dataclass
class Config:
    quick: bool
    repeat: int = 3
    budget_s: float = 0.25  # repeats of one timing stop past this
    cap_s: float = 20.0  # soft cap of one call (a timer signal: stops Python code, not a C/Rust loop)
    # hard cap of one case: the worker process running it is stopped and the case recorded as a timeout
    case_timeout_s: float = float(os.environ.get("SPARSAD_BENCH_CASE_TIMEOUT_S", 120))
    total_s: float = float(os.environ.get("SPARSAD_BENCH_BUDGET_S", 30 * 60))  # later cases: "skipped"
    start: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def bench_case(cfg: Config, P: Prepared, wrt: str, kind: str) -> dict:
    with_jax = P.dense is not None and (not P.real or reference_size(P, wrt, kind) <= REAL_REFERENCE_LIMIT)
    if P.real and with_jax and kind == "jacobian":  # dense Jacobians cost min(out, in) passes over the inputs
        passes = min(int(np.prod(P.out_shape, dtype=np.int64)), int(np.prod(P.shapes[wrt], dtype=np.int64)))
        with_jax = passes * sum(np.asarray(v).size for v in P.dense.values()) <= 2e8
    try:
        row = check_case(P, wrt, kind, cap_s=cfg.cap_s, with_jax=with_jax)
    except Exception as error:  # a reference that cannot run at this size: recorded
        row = dict(program=P.entry.name, category=P.entry.category, wrt=wrt, kind=kind, status="error",
                   cause=f"harness: {type(error).__name__}: {error}"[:300], error_type="harness")
        return row
    again, seed_value = row.pop("_again"), row.pop("_seed")
    row.update(sparsad_s="", closed_s="", ratio="", bcoo_s="", torch_s="", competitor_note="")
    if again is None:
        return row
    slow = isinstance(row.get("first_s"), float) and row["first_s"] > 2 * cfg.budget_s
    reference = closed_form(P, wrt, kind, seed_value)
    if slow and row["first_s"] > UNTIMED_FIRST_S and reference is None:
        # nothing to compare a steady time with (no closed form at this size; the competitors
        # build such Jacobians densely): a second slow call would only spend the run's time
        row["competitor_note"] = f"not timed: the first call took {row['first_s']:.3g} s and there is no closed form"
        return row
    # the least of a few calls (on a loaded machine the median measures the other processes), in
    # batches for short calls (bench.common.steady_time): ours, the closed form and the competitors
    # alike; a slow first call is followed by one timed call only
    try:
        with time_cap(cfg.cap_s * 2):
            row["sparsad_s"] = best_time(again, repeat=1, warmup=0, reduce=min) if slow else \
                steady_time(again, repeat=cfg.repeat, budget_s=cfg.budget_s)
    except Budget:
        row["cause"] = (row["cause"] + "; steady timing ran past the cap").strip("; ")
        return row
    if reference is not None:
        try:
            with time_cap(cfg.cap_s * 2):
                row["closed_s"] = steady_time(reference, repeat=cfg.repeat, budget_s=cfg.budget_s)
        except Budget:
            row["competitor_note"] = "closed form: timing ran past the cap"
        if row["closed_s"]:
            row["ratio"] = row["sparsad_s"] / row["closed_s"] if row["closed_s"] > 0 else ""
    dense_jacobian = reference_size(P, wrt, kind) if kind == "jacobian" else 0
    for tool in ("bcoo", "torch"):
        if dense_jacobian > 2e7:  # both competitors build the Jacobian densely
            row["competitor_note"] = (row.get("competitor_note", "") + f"; {tool}: dense Jacobian of "
                                      f"{dense_jacobian:.3g} entries not attempted").strip("; ")
            continue
        try:
            with time_cap(cfg.cap_s):
                fn = competitor(P, wrt, kind, tool, seed_value)
                if fn is not None and getattr(fn, "first_s", 0.0) > cfg.budget_s:
                    row[f"{tool}_s"] = fn.first_s  # slow: one call is the measurement
                elif fn is not None:
                    row[f"{tool}_s"] = steady_time(fn, repeat=cfg.repeat, budget_s=cfg.budget_s)
        except Exception as error:
            row[f"{tool}_s"] = ""
            row["competitor_note"] = (row.get("competitor_note", "") + f"; {tool}: {type(error).__name__}: "
                                      f"{str(error)[:80]}").strip("; ")
    return row


def summarize(rows: list[dict]) -> list[str]:
    skipped = [r for r in rows if r["status"] == "skipped"]
    derivs = [r for r in rows if r["kind"] != "value" and r["status"] != "skipped"]
    lines = [f"cases not run (time budget spent): {len(skipped)}"] if skipped else []
    n = len(derivs)
    for r in derivs:  # a first call stopped by the soft cap is a timeout too
        if r["status"] == "error" and r.get("error_type") == "Timeout":
            r["status"] = "timeout"
    fallbacks = [r for r in derivs if r["status"] == "fallback"]
    errors = [r for r in derivs if r["status"] == "error"]
    timeouts = [r for r in derivs if r["status"] == "timeout"]
    compiled = sum(r["status"] == "compiled" for r in derivs)
    lines.append(f"derivatives: {n}; compiled {compiled} ({100 * compiled / max(n, 1):.1f}%), "
                 f"fallback {len(fallbacks)} ({100 * len(fallbacks) / max(n, 1):.1f}%), "
                 f"errors {len(errors)}, timeouts {len(timeouts)} (target: >= 98% compiled)")
    for kind in KINDS:
        mine = [r for r in derivs if r["kind"] == kind]
        lines.append(f"  {kind:8s} {len(mine):4d} cases: compiled {sum(r['status'] == 'compiled' for r in mine)}, "
                     f"fallback {sum(r['status'] == 'fallback' for r in mine)}, "
                     f"error {sum(r['status'] == 'error' for r in mine)}, "
                     f"timeout {sum(r['status'] == 'timeout' for r in mine)}")
    causes: dict[str, list] = {}
    for r in fallbacks + errors + timeouts:
        causes.setdefault(short_cause(r), []).append(f"{r['program']}/{r['wrt']}/{r['kind']}")
    lines.append("causes of fallbacks and errors:")
    for cause, which in sorted(causes.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(which):4d}  {cause}")
        lines.append(f"        e.g. {', '.join(which[:6])}{' ...' if len(which) > 6 else ''}")
    values = [r for r in rows if r["kind"] == "value"]
    if values:
        lines.append(f"forward (compiled value): {sum(r['status'] == 'compiled' for r in values)} of "
                     f"{len(values)} compiled, {sum(r['status'] == 'fallback' for r in values)} fallback, "
                     f"{sum(r['status'] == 'error' for r in values)} errors")
    wrong = [r for r in derivs + values if _bad(r.get("err_closed")) or _bad(r.get("err_jax"))]
    lines.append(f"wrong results (max rel. error > {RTOL:g} vs closed form or JAX): {len(wrong)}")
    for r in wrong[:20]:
        lines.append(f"  {r['program']}/{r['wrt']}/{r['kind']}: closed {r.get('err_closed')}, jax {r.get('err_jax')}")
    timed = [r for r in derivs if isinstance(r.get("ratio"), float)]
    if timed:
        ratios = sorted(r["ratio"] for r in timed)
        worst = max(timed, key=lambda r: r["ratio"])
        lines.append(f"time vs closed form over {len(timed)} timed cases: median {statistics.median(ratios):.3g}x, "
                     f"worst {worst['ratio']:.3g}x ({worst['program']}/{worst['wrt']}/{worst['kind']}, "
                     f"{worst['status']}); within 5x: {sum(x <= 5 for x in ratios)}, "
                     f"within 2x: {sum(x <= 2 for x in ratios)} (targets: all <= 5x, median <= 2x)")
        ran_compiled = sorted(r["ratio"] for r in timed if r["status"] == "compiled")
        if ran_compiled:
            lines.append(f"  of which compiled: {len(ran_compiled)} cases, median {statistics.median(ran_compiled):.3g}x, "
                         f"worst {ran_compiled[-1]:.3g}x, within 5x: {sum(x <= 5 for x in ran_compiled)}")
        lines.append("misses (> 5x the closed form), with cause:")
        for r in sorted((r for r in timed if r["ratio"] > 5), key=lambda r: -r["ratio"]):
            lines.append(f"  {r['ratio']:9.3g}x  {r['program']}/{r['wrt']}/{r['kind']}: {r['status']}: {miss_cause(r)}")
    return lines


PER_CALL_S = 50e-6  # a few times the cost of a call that does nothing (about 7-20 us)


def miss_cause(row: dict) -> str:
    """What the row tells about a slow case: a fallback's cause, or where the time goes."""
    if row["status"] != "compiled":
        return row["cause"][:110]
    ours, closed = row["sparsad_s"], row["closed_s"]
    times = f"sparsad {ours * 1e6:.0f} us vs closed form {closed * 1e6:.0f} us"
    if ours < PER_CALL_S:
        return f"per-call overhead: {times} (a whole call under {PER_CALL_S * 1e6:.0f} us is mostly the Python " \
               "call path: `python -m bench.nablasd --smvm-scipy` measures it)"
    out = f", returns {row['out_type']}" if row.get("out_type") else ""
    return f"the compiled kernel: {times}{out}"


def summary_from_csv(path=None) -> list[str]:
    """The summary again from a written CSV (no re-measuring)."""
    import csv

    from bench.common import RESULTS_DIR

    with open(path or RESULTS_DIR / f"{SUITE}.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for r in rows:
        for k in ("err_closed", "err_jax", "sparsad_s", "closed_s", "ratio", "bcoo_s", "torch_s", "first_s"):
            if r.get(k) not in ("", None):
                with contextlib.suppress(ValueError):
                    r[k] = float(r[k])
    return summarize(rows)


def _bad(err) -> bool:
    return isinstance(err, float) and not err <= RTOL


def short_cause(row: dict) -> str:
    """The cause without per-program detail (names, numbers), so that equal causes group."""
    import re

    text = row.get("cause", "")
    if row["status"] == "error":
        text = text.split(":")[0] + ": " + ":".join(text.split(":")[1:2])
    text = re.sub(r"\(\d+ expressions evaluated\)", "", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\d+", "N", text)
    return text[:150].strip()


COLUMNS = ("program", "wrt", "kind", "status", "err_closed", "err_jax", "sparsad_s", "closed_s", "ratio",
           "bcoo_s", "torch_s", "cause")


# -- the run: one worker process, a hard time cap per case, rows appended as they come -----------------

def tasks_of(names: list[str] | None = None, kinds: tuple = KINDS) -> list[tuple[str, str, str]]:
    """(program, wrt, kind) in run order: program by program (its inputs are loaded once), the
    program's value first ("", "value"), then its derivatives."""
    out = []
    by_program: dict[str, list] = {}
    for entry, wrt, kind in cases([ENTRIES[n] for n in names] if names else None, kinds):
        by_program.setdefault(entry.name, []).append((entry.name, wrt, kind))
    for name, derivatives in by_program.items():
        out += [(name, "", "value")] + derivatives
    return out


def _base_row(name: str, wrt: str, kind: str, **fields: Any) -> dict:
    entry = ENTRIES[name]
    return dict(program=name, category=entry.category, wrt=wrt, kind=kind, **fields)


def run_task(cfg: Config, task: tuple[str, str, str], loaded: dict) -> dict:
    """The row of one task; `loaded` keeps the current program's prepared inputs (one at a time)."""
    name, wrt, kind = task
    P = loaded.get(name)
    if P is None:
        loaded.clear()
        try:
            P = prepare(ENTRIES[name], real=not cfg.quick)
        except Exception as error:  # the inputs or closed form failed: recorded, the run goes on
            P = f"harness: preparing the inputs: {type(error).__name__}: {error}"[:300]
        loaded[name] = P
    if isinstance(P, str):
        return _base_row(name, wrt, kind, status="error", cause=P, error_type="harness")
    if kind == "value":
        try:
            return check_value(P)
        except Exception as error:  # a reference too large at this size: recorded
            return _base_row(name, wrt, kind, status="error", cause=f"harness: {type(error).__name__}: {error}"[:300],
                             error_type="harness")
    return bench_case(cfg, P, wrt, kind)


def _plain(row: dict) -> dict:
    """Python numbers and strings only (rows cross a pipe and go to a JSON file)."""
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()
            if isinstance(v, (str, int, float, bool, np.generic)) or v is None}


MEMORY_FRACTION = 0.6  # of the memory available at start: a worker's heap limit


def _serve(conn, quick: bool, fields: dict) -> None:
    """The worker process: runs tasks one at a time and sends back their rows."""
    import resource

    try:  # a runaway case fails in the worker (MemoryError), not the machine
        with open("/proc/meminfo") as handle:
            available = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("MemAvailable"))
        resource.setrlimit(resource.RLIMIT_DATA, (int(MEMORY_FRACTION * available), resource.getrlimit(
            resource.RLIMIT_DATA)[1]))
    except (OSError, ValueError, StopIteration):
        pass
    _single_threaded()
    cfg = Config(quick=quick, **fields)
    loaded: dict = {}
    warnings.simplefilter("ignore")
    conn.send("ready")
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        conn.send(_plain(run_task(cfg, task, loaded)))


def _single_threaded() -> None:
    with contextlib.suppress(Exception):  # BLAS libraries loaded before the variables were set
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1)
    with contextlib.suppress(Exception):
        import numba

        numba.set_num_threads(1)
    with contextlib.suppress(Exception):
        import torch

        torch.set_num_threads(1)


class Worker:
    """One spawned worker process (a fresh interpreter: nothing forked from JAX's or Numba's
    threads). A task that does not answer within its time is stopped by ending this process
    (by its own pid); the next task starts a new one."""

    START_TIMEOUT_S = 600.0  # importing NumPy, SciPy and the corpus under load

    def __init__(self, cfg: Config):
        self.fields = dict(repeat=cfg.repeat, budget_s=cfg.budget_s, cap_s=cfg.cap_s)
        self.quick = cfg.quick
        self.process = None
        self.conn = None

    def _start(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, self.quick, self.fields), daemon=True,
                                       name="sparsad-corpus-worker")
        self.process.start()
        child.close()
        if not self.conn.poll(self.START_TIMEOUT_S) or self.conn.recv() != "ready":
            self.stop()
            raise RuntimeError(f"the benchmark's worker process did not start within {self.START_TIMEOUT_S:g} s")

    def run(self, task: tuple, timeout_s: float) -> dict | str:
        """The task's row, or "timeout", or "crash: <exit code>"."""
        if self.process is None:
            self._start()
        self.conn.send(task)
        try:
            if self.conn.poll(timeout_s):
                return self.conn.recv()
            outcome = "timeout"
        except (EOFError, OSError):
            outcome = "crash"
        code = self.stop()
        return outcome if outcome == "timeout" else f"crash: exit code {code}"

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.is_alive():
            self.process.kill()
        self.process.join(30)
        code = self.process.exitcode
        self.conn.close()
        self.process = self.conn = None
        return code

    def close(self) -> None:
        if self.process is not None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(10)
            self.stop()


def partial_path():
    import bench.common

    return bench.common.RESULTS_DIR / f"{SUITE}_partial.jsonl"


def _key(row: dict) -> tuple:
    return (row["program"], row.get("wrt", ""), row["kind"])


def read_partial(path) -> dict[tuple, dict]:
    """Rows already measured (a resumed run does not measure them again)."""
    import json

    done = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError):
                row = json.loads(line)
                done[_key(row)] = row
    return done


GIVE_UP_AFTER_TIMEOUTS = 2  # a program's cases are not run after this many of them timed out


def main(quick: bool = False, only: list[str] | None = None, kinds: tuple = KINDS, resume: bool | None = None,
         isolate: bool | None = None, case_timeout_s: float | None = None) -> None:
    """Run the corpus: `isolate` (default: at real size) runs each case in a worker process that
    is stopped past `case_timeout_s`; rows are appended to bench/results/corpus_partial.jsonl as
    they come, and `resume` (or SPARSAD_BENCH_RESUME=1) measures only the cases not there yet."""
    import json

    cfg = Config(quick=quick)
    if quick:
        cfg.repeat, cfg.budget_s, cfg.cap_s, cfg.total_s = 2, 0.1, 20.0, 10 * 60.0
    resume = os.environ.get("SPARSAD_BENCH_RESUME", "") == "1" if resume is None else resume
    isolate = not quick if isolate is None else isolate
    if case_timeout_s is not None:
        cfg.case_timeout_s = case_timeout_s
    from tqdm import tqdm

    tasks = tasks_of(only, kinds)
    path = partial_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    done = read_partial(path) if resume else {}
    if not resume:
        path.write_text("")
    load_start = os.getloadavg()
    print(f"corpus benchmark ({'quick: small inputs' if quick else 'real inputs'}), {len(ENTRIES)} programs, "
          f"{len(tasks)} tasks ({len(done)} already measured), single-threaded, "
          f"{'one worker process, ' if isolate else ''}{cfg.case_timeout_s:g} s per case, "
          f"{cfg.total_s:g} s in all; load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    worker = Worker(cfg) if isolate else None
    loaded: dict = {}
    timeouts: dict[str, int] = {}
    try:
        with warnings.catch_warnings(), tqdm(tasks, desc="corpus", unit="case", file=sys.stderr) as bar:
            warnings.simplefilter("ignore")
            for task in bar:
                name, wrt, kind = task
                if task in done or cfg.elapsed() > cfg.total_s:  # past the budget: listed at the end, not run
                    continue
                bar.set_postfix_str(f"{name}/{wrt}/{kind}"[:40])
                started = time.perf_counter()
                if timeouts.get(name, 0) >= GIVE_UP_AFTER_TIMEOUTS:
                    row = _base_row(name, wrt, kind, status="timeout", error_type="Timeout",
                                    cause=f"not run: {timeouts[name]} earlier cases of this program timed out")
                elif worker is None:
                    row = _plain(run_task(cfg, task, loaded))
                else:
                    outcome = worker.run(task, cfg.case_timeout_s)
                    if outcome == "timeout":
                        timeouts[name] = timeouts.get(name, 0) + 1
                        row = _base_row(name, wrt, kind, status="timeout", error_type="Timeout",
                                        cause=f"timeout: no result within {cfg.case_timeout_s:g} s (the worker was "
                                              "stopped)")
                    elif isinstance(outcome, str):
                        row = _base_row(name, wrt, kind, status="error", error_type="crash",
                                        cause=f"the worker process died ({outcome[7:]})")
                    else:
                        row = outcome
                row.update(wall_s=time.perf_counter() - started, load1=os.getloadavg()[0])
                done[task] = row
                with path.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
    finally:
        if worker is not None:
            worker.close()
    rows = [done.get(task) or _base_row(*task, status="skipped", cause="the run's time budget was spent")
            for task in tasks]
    for r in rows:
        for c in COLUMNS:
            r.setdefault(c, "")
    print_table([dict(r, cause=r["cause"][:70]) for r in rows if r["kind"] != "value"], COLUMNS)
    path = write_csv(SUITE, rows)
    for stale in path.parent.glob(f"{SUITE}_*.png"):
        stale.unlink()
    timed = [dict(r, label=f"{r['program']}/{r['wrt']}/{r['kind']}") for r in rows
             if isinstance(r.get("ratio"), float)]
    if timed:
        timed.sort(key=lambda r: -r["ratio"])
        plot_bars(SUITE, timed[:60], "label", "ratio", name=f"{SUITE}_ratio_worst",
                  title="sparsad time / closed-form time (60 slowest cases)")
    status_rows = []
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        for status in ("compiled", "fallback", "error", "timeout"):
            status_rows.append(dict(label=f"{kind}:{status}", count=sum(r["status"] == status for r in mine) or 0.5))
    plot_bars(SUITE, status_rows, "label", "count", name=f"{SUITE}_status", logy=False,
              title="corpus derivatives by kind and status")
    load_end = os.getloadavg()
    print(f"\nwrote {path} and plots in {path.parent} ({cfg.elapsed():.0f} s; load average at start "
          f"{load_start[0]:.2f}, at end {load_end[0]:.2f}, 15-min {load_end[2]:.2f})")
    print("\n== summary (issue 11) ==")
    for line in summarize(rows):
        print(line)


def parse_arguments(argv: list[str] | None = None):
    """The command line of `python -m bench.corpus` (`sparsad bench corpus` calls `main` itself)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.corpus", description=" ".join(
        (__doc__ or "The compiler corpus benchmark.").split("\n\n")[0].split()))
    parser.add_argument("--quick", action="store_true", help="small inputs, for a smoke run")
    parser.add_argument("--only", type=lambda text: [n for n in text.split(",") if n], default=None,
                        metavar="PROG[,PROG...]", help="run only these programs (comma-separated names)")
    parser.add_argument("--kinds", type=lambda text: tuple(k for k in text.split(",") if k), default=KINDS,
                        metavar="KIND[,KIND...]", help=f"derivative kinds to run (default: {','.join(KINDS)})")
    parser.add_argument("--resume", action="store_true", default=None,
                        help="measure only the cases not yet in bench/results/corpus_partial.jsonl")
    parser.add_argument("--summary", action="store_true", help="print the summary of the last CSV and exit")
    arguments = parser.parse_args(argv)
    unknown = [k for k in arguments.kinds if k not in KINDS]
    if unknown:
        parser.error(f"--kinds: unknown kind(s) {unknown}; choose from {list(KINDS)}")
    if arguments.only is not None:
        missing = [n for n in arguments.only if n not in ENTRIES]
        if missing:
            parser.error(f"--only: no program named {missing}")
    return arguments


if __name__ == "__main__":
    _arguments = parse_arguments()
    if _arguments.summary:
        from bench.common import RESULTS_DIR

        if not (RESULTS_DIR / f"{SUITE}.csv").exists():
            sys.exit(f"no {RESULTS_DIR / f'{SUITE}.csv'} yet: run the benchmark first")
        print("\n".join(summary_from_csv()))
    else:
        main(quick=_arguments.quick, only=_arguments.only, kinds=_arguments.kinds, resume=_arguments.resume)
