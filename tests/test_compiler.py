"""sparsad.compile and compiled derivatives: kernels agree with the interpreter and with NumPy/SciPy
on every paper program, several storage formats, random and real matrices."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import sparsad
from sparsad.compiler import compile as compile_program
from sparsad.lang.values import values_equal
from sparsad.programs import PAPER_PROGRAMS, random_inputs

from reference.dense_ad import jax_derivative, kernels, relative_error

COMPILED = ["dot", "dot_v2", "scalar_vector", "trace", "matmul", "map", "batax", "smmm", "smvm", "vva",
            "vvd", "vsm"]


def dense(value):
    return value.toarray() if sp.issparse(value) else np.asarray(value, dtype=float)


@pytest.mark.parametrize("name", COMPILED)
@settings(max_examples=8, deadline=None, phases=(Phase.explicit, Phase.generate))
@given(seed=st.integers(0, 10**6), n=st.integers(1, 9), density=st.floats(0.05, 1.0),
       fmt=st.sampled_from(["csr", "csc", "coo"]))
def test_compiled_paper_programs_match_numpy_in_every_format(name, seed, n, density, fmt):
    entry = PAPER_PROGRAMS[name]
    inputs = random_inputs(entry, np.random.default_rng(seed), n=n, density=density)
    inputs = {k: (v.asformat(fmt) if sp.issparse(v) else v) for k, v in inputs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some format combinations run interpreted; values must agree
        compiled = compile_program(entry.text)(**inputs)
    assert values_equal(compiled, entry.reference(**inputs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", COMPILED)
def test_paper_programs_compile_to_kernels_on_csr_and_dense(name):
    entry = PAPER_PROGRAMS[name]
    inputs = random_inputs(entry, np.random.default_rng(0), n=6, density=0.4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to the interpreter fails the test
        compiled = compile_program(entry.text)
        result = compiled(**inputs)
    assert "@njit" in compiled.show("code")
    assert values_equal(result, entry.reference(**inputs), rtol=1e-12, atol=1e-12)


GRADIENTS = [("batax", "x", "jacobian"), ("smmm", "B", "grad"), ("smvm", "X", "grad"),
             ("vva", "V1", "jacobian"), ("vvd", "V1", "grad"), ("vsm", "s", "jacobian")]


@pytest.mark.parametrize("name, wrt, kind", GRADIENTS)
def test_compiled_derivatives_match_jax(name, wrt, kind):
    rng = np.random.default_rng(5)
    entry = PAPER_PROGRAMS[name]
    inputs = random_inputs(entry, rng, n=7, density=1.0, sparse_matrices=False)
    derivative = getattr(sparsad, kind)(entry.text, wrt=wrt)
    ours = dense(derivative(**inputs))
    fn, _, _ = kernels()[name]
    expected = jax_derivative(fn, wrt, kind, {k: np.asarray(v, dtype=float) for k, v in inputs.items()})
    assert relative_error(ours.reshape(expected.shape), expected) <= 1e-12


@pytest.mark.parametrize("matrix_name", ["HB/bcspwr10", "Gaertner/nopoly"])
def test_compiled_gradients_on_the_papers_real_matrices(suitesparse, matrix_name):
    A = suitesparse(matrix_name)
    x = np.random.default_rng(0).standard_normal(A.shape[1])
    smvm = sparsad.grad(PAPER_PROGRAMS["smvm"].text, wrt="X")
    np.testing.assert_allclose(smvm(A=A, X=x), np.asarray(A.sum(axis=0)).ravel(), rtol=1e-12)
    masked = sparsad.grad(PAPER_PROGRAMS["smvm"].text, wrt="A")(A=A, X=x)
    assert sp.issparse(masked) and masked.nnz == A.nnz
    expected = A.copy()
    expected.data = x[A.indices]
    assert abs(masked - expected).max() <= 1e-14 * abs(expected).max()
    if matrix_name == "HB/bcspwr10":
        batax = sparsad.jacobian(PAPER_PROGRAMS["batax"].text, wrt="x")(beta=0.5, A=A, x=x)
        reference = 0.5 * (A.T @ A)
        assert sp.issparse(batax)
        assert abs(batax - reference).max() <= 1e-12 * abs(reference).max()


def test_show_gives_every_stage_and_the_kernel_source():
    spmv = compile_program("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }")
    with pytest.raises(sparsad.InputError, match="call the compiled program once"):
        spmv.show("code")
    A = sp.random(8, 5, density=0.4, format="csr", random_state=1)
    np.testing.assert_allclose(spmv(A=A, x=np.ones(5)), A @ np.ones(5))
    assert "@njit" in spmv.show("code")
    assert "A_idx(A_pos(" in spmv.show("optimized")
    assert "let A = sum(<_, i> in (0:A_len))" in spmv.show("storage")
    with pytest.raises(ValueError, match="unknown stage"):
        spmv.show("assembly")


def test_formats_can_be_named_and_results_converted():
    A = sp.random(6, 6, density=0.5, format="csr", random_state=2)
    scale = compile_program("A * 3.0", formats={"A": "csc"})
    result = scale(A=A)
    assert sp.issparse(result)
    np.testing.assert_allclose(result.toarray(), 3 * A.toarray())
    np.testing.assert_allclose(scale(A=A, out_format="dense"), 3 * A.toarray())


def test_unsupported_programs_fall_back_with_a_warning(monkeypatch):
    import sparsad.codegen

    def refuse(*args, **kwargs):
        raise sparsad.UnsupportedError("this construct is not lowered (simulated)")

    monkeypatch.setattr(sparsad.codegen, "compile_physical", refuse)
    program = compile_program("let t = sum(<i, r> in A) { i -> r * 2.0 } in "
                              "sum(<k, u> in A) sum(<l, w> in u) t(l)(k) * w")
    A = sp.random(5, 5, density=0.5, format="csr", random_state=3)
    with pytest.warns(sparsad.FallbackWarning, match="runs the optimized program in the interpreter"):
        value = program(A=A)
    dense_a = A.toarray()
    assert value == pytest.approx(2.0 * np.sum(dense_a.T * dense_a))
    assert program.show("code").startswith("# interpreted: this construct is not lowered")


def test_a_kernel_numba_cannot_compile_falls_back_with_a_warning_naming_the_program(monkeypatch):
    """A Numba typing or lowering failure when the kernel first runs is an internal limit: the
    call runs the optimized program in the interpreter (same value), never the user's error."""
    import numba

    from sparsad.codegen import numba_backend

    def uncompilable(*args, **kwargs):
        raise numba.core.errors.TypingError("simulated: no implementation of the operation")

    monkeypatch.setattr(numba_backend, "load_kernel_function", lambda source: uncompilable)
    A = sp.random(6, 5, density=0.5, format="csr", random_state=4)
    x = np.random.default_rng(5).standard_normal(5)
    text = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) * 1.25 }"
    program = compile_program(text)
    with pytest.warns(sparsad.FallbackWarning, match=r"program `sum\(<i, r> in A\).*Numba could not compile"):
        value = program(A=A, x=x)
    np.testing.assert_allclose(value, 1.25 * (A @ x), rtol=1e-12)
    with warnings.catch_warnings():  # the plan now runs interpreted, without warning again
        warnings.simplefilter("error", sparsad.FallbackWarning)
        np.testing.assert_allclose(program(A=A, x=2 * x), 2.5 * (A @ x), rtol=1e-12)
    grad = sparsad.grad("sum(<i, r> in A) sum(<j, a> in r) a * x(j) * x(j) * 0.75", wrt="x")
    with pytest.warns(sparsad.FallbackWarning, match="grad w.r.t. x of .*Numba could not compile"):
        got = grad(A=A, x=x)
    np.testing.assert_allclose(got, 1.5 * x * np.asarray(A.sum(axis=0)).ravel(), rtol=1e-12)


@pytest.mark.parametrize("fault", ["InternalError", "ProgramTypeError"])
def test_an_internal_fault_of_code_generation_falls_back_and_is_not_the_users_error(fault, monkeypatch):
    import sparsad.codegen

    def broken(*args, **kwargs):
        raise getattr(sparsad.errors, fault)("simulated fault in code generation")

    monkeypatch.setattr(sparsad.codegen, "compile_physical", broken)
    A = sp.random(5, 4, density=0.5, format="csr", random_state=6)
    x = np.arange(4.0)
    with pytest.warns(sparsad.FallbackWarning, match="simulated fault in code generation"):
        value = compile_program("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) * 0.5 }")(A=A, x=x)
    np.testing.assert_allclose(value, 0.5 * (A @ x), rtol=1e-12)


def test_bad_indices_never_reach_a_kernel():
    spmv = compile_program("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }")
    A = sp.csr_matrix((np.ones(2), np.array([0, 7]), np.array([0, 1, 2])), shape=(2, 3))
    with pytest.raises(sparsad.FormatError):
        spmv(A=A, x=np.ones(3))
    good = sp.random(2, 9, density=0.5, format="csr", random_state=0)
    with pytest.raises((sparsad.FormatError, sparsad.ShapeError, sparsad.InputError)):
        spmv(A=good, x=np.ones(3))  # x too short for A's columns


# -- n-d COO, and reuse of unchanged inputs across calls -------------------------------------------

def _random_tensor(shape, density, seed):
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random(shape) < density, rng.standard_normal(shape), 0.0)
    return dense


@pytest.mark.parametrize("fmt", ["coo", "csf"])
def test_order_3_and_4_tensors_in_coo_and_csf_compile(fmt):
    import warnings

    T = _random_tensor((5, 4, 3), 0.3, 1)
    rng = np.random.default_rng(2)
    B, C = rng.standard_normal((4, 2)), rng.standard_normal((3, 2))
    mttkrp = ("sum(<i, t1> in T) { i -> sum(<j, t2> in t1) sum(<k, t> in t2) sum(<r, b> in B(j)) "
              "{ r -> t * b * C(k)(r) } }")
    loss = "sum(<i, t1> in T) sum(<j, t2> in t1) sum(<k, t> in t2) sum(<r, b> in B(j)) t * b * C(k)(r)"
    stored = sparsad.as_format(T, fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        got = compile_program(mttkrp)(T=stored, B=B, C=C)
        grad_b = sparsad.grad(loss, "B")(T=stored, B=B, C=C)
        T4 = _random_tensor((3, 4, 2, 3), 0.3, 3)
        norm = compile_program("sum(<i, a> in T) sum(<j, b> in a) sum(<k, c> in b) sum(<l, t> in c) t * t")(
            T=sparsad.as_format(T4, fmt))
    got = got.toarray() if sp.issparse(got) else got
    assert np.allclose(got, np.einsum("ijk,jr,kr->ir", T, B, C), rtol=1e-12)
    assert isinstance(grad_b, np.ndarray) and np.allclose(grad_b, np.einsum("ijk,kr->jr", T, C), rtol=1e-12)
    assert norm == pytest.approx(float(np.sum(T4 * T4)), rel=1e-12)


def test_unchanged_scipy_inputs_are_converted_once_and_changes_in_place_are_seen(monkeypatch):
    import sparsad.formats.convert as convert

    A = sp.random(30, 20, density=0.2, format="csr", random_state=5)
    x = np.random.default_rng(0).standard_normal(20)
    smv = compile_program("sum(<i, r> in A) sum(<j, a> in r) a * x(j) * x(j)")
    calls = []
    original = convert._from_scipy
    monkeypatch.setattr(convert, "_from_scipy", lambda *a, **k: calls.append(1) or original(*a, **k))
    assert smv(A=A, x=x) == pytest.approx(float((A @ (x * x)).sum()), rel=1e-12)
    smv(A=A, x=x)
    assert len(calls) == 1  # the second call reused the conversion
    A.data *= 2.0  # values changed in place
    assert smv(A=A, x=x) == pytest.approx(float((A @ (x * x)).sum()), rel=1e-12)
    A.indices[:] = (A.indices + 1) % 20  # the structure changed in place (now possibly unsorted)
    A.has_sorted_indices = False
    expected = float((A @ (x * x)).sum())
    assert smv(A=A, x=x) == pytest.approx(expected, rel=1e-12)
    assert len(calls) >= 2  # converted (and validated) again
    bad = A.copy()
    smv(A=bad, x=x)
    bad.indices[0] = 99  # out of range, in place: validated again, our own error
    with pytest.raises(sparsad.FormatError):
        smv(A=bad, x=x)


# -- sub-arrays and range sums compile; forward mode takes sum(<_, i> in (lo:hi)) ------------------

def test_sub_arrays_past_the_end_raise_as_in_the_interpreter():
    x = np.ones(8)
    text = "sum(<i, a> in x(lo:hi)) a * a * i"
    for run in (sparsad.program(text), compile_program(text), sparsad.grad(text, "x")):
        with pytest.raises(sparsad.errors.ShapeError, match="axis 0 of input 'x'"):
            run(x=x, lo=5, hi=12)


@pytest.mark.parametrize("lo,hi", [(2, 5), (5, 8), (0, 0), (3, 3), (6, 2)])
def test_sub_arrays_of_dense_vectors_compile_and_match_numpy(lo, hi):
    import warnings

    x = np.random.default_rng(lo * 7 + hi).standard_normal(8)
    text = "sum(<i, a> in x(lo:hi)) a * a * i"
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        const = compile_program(text.replace("lo:hi", f"{lo}:{hi}"))(x=x)
        dynamic = compile_program(text)(x=x, lo=lo, hi=hi)
        grad = sparsad.grad(text, "x")(x=x, lo=lo, hi=hi)
    keys = np.arange(8)
    inside = (keys >= lo) & (keys < hi)
    assert const == pytest.approx(float(np.sum(x[inside] ** 2 * keys[inside])), rel=1e-12, abs=1e-12)
    assert dynamic == pytest.approx(const, rel=1e-12, abs=1e-12)
    assert isinstance(grad, np.ndarray) and np.allclose(grad, 2 * x * keys * inside, rtol=1e-12)


def test_row_slices_and_range_sums_compile_in_every_derivative_kind():
    import warnings

    rng = np.random.default_rng(3)
    A = sp.random(6, 8, density=0.5, format="csr", random_state=1)
    x, dx = rng.standard_normal(8), rng.standard_normal(8)
    suffix = "sum(<i, r> in A) sum(<j, a> in r) a * (sum(<k, y> in x(j:m)) y)"
    ranged = "sum(<_, i> in (1:6)) x(i) * x(i)"
    suffix_sums = np.array([x[j:6].sum() for j in range(8)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        value = compile_program(suffix)(A=A, x=x, m=6)
        grad = sparsad.grad(suffix, "x")(A=A, x=x, m=6)
        _, tangent = sparsad.jvp(ranged, "x")(x=x, tangent=dx)
        cotangent = sparsad.vjp(ranged, "x")(x=x, cotangent=3.0)
    colsum = np.asarray(A.sum(axis=0)).ravel()
    assert value == pytest.approx(float(colsum @ suffix_sums), rel=1e-12)
    expected = np.array([colsum[: min(k, 5) + 1].sum() if k < 6 else 0.0 for k in range(8)])
    assert np.allclose(grad, expected, rtol=1e-12)
    assert tangent == pytest.approx(float(2 * x[1:6] @ dx[1:6]), rel=1e-12)
    assert np.allclose(cotangent, 3.0 * 2 * x * ((np.arange(8) >= 1) & (np.arange(8) < 6)), rtol=1e-12)


_WINDOW_TEXTS = ("sum(<i, v> in V(lo:hi)) v * v * i",
                 "let w = sum(<i, a> in x) { i -> a * a } in sum(<i, v> in w(lo:hi)) v * i")
_WINDOWS = {"value V": compile_program(_WINDOW_TEXTS[0]), "grad V": sparsad.grad(_WINDOW_TEXTS[0], "V"),
            "value x": compile_program(_WINDOW_TEXTS[1]), "grad x": sparsad.grad(_WINDOW_TEXTS[1], "x"),
            "jvp x": sparsad.jvp(_WINDOW_TEXTS[1], "x", tangent="dx"),
            "vjp x": sparsad.vjp(_WINDOW_TEXTS[1], "x", cotangent="c")}  # compiled once, for every example


@settings(max_examples=10, deadline=None)
@given(lo=st.integers(0, 8), hi=st.integers(0, 8), seed=st.integers(0, 2**16))
def test_windows_of_sparse_vectors_and_of_intermediates_compile_in_every_kind(lo, hi, seed):
    """`V(lo:hi)` of a COO vector and `w(lo:hi)` of a let-bound intermediate: the entries whose key
    lies in [lo, hi) (constant bounds within the axis: past it, an input's window is a ShapeError
    and an intermediate's is checked in the interpreter first, with a warning)."""
    import warnings

    from sparsad.formats import as_format

    rng = np.random.default_rng(seed)
    keys = np.sort(rng.choice(8, size=4, replace=False))
    values = rng.standard_normal(4)
    dense_v = np.zeros(8)
    dense_v[keys] = values
    V = as_format(sp.coo_matrix((values, (np.zeros(4, int), keys)), shape=(1, 8)).toarray()[0], "coo")
    x = rng.standard_normal(8)
    window = lambda k: (k >= lo) & (k < hi)  # noqa: E731
    k = np.arange(8)
    lo_in, hi_in = lo, hi
    sparse_text = "sum(<i, v> in V(lo:hi)) v * v * i"
    inter_text = "let w = sum(<i, a> in x) { i -> a * a } in sum(<i, v> in w(lo:hi)) v * i"
    with warnings.catch_warnings():
        warnings.simplefilter("error", sparsad.FallbackWarning)
        got = [_WINDOWS["value V"](V=V, lo=lo, hi=hi), _WINDOWS["grad V"](V=V, lo=lo, hi=hi),
               _WINDOWS["value x"](x=x, lo=lo, hi=hi), _WINDOWS["grad x"](x=x, lo=lo, hi=hi),
               _WINDOWS["jvp x"](x=x, dx=np.ones(8), lo=lo, hi=hi), _WINDOWS["vjp x"](x=x, c=0.5, lo=lo, hi=hi)]
    inside = window(k) & (k >= lo_in) & (k < hi_in)
    assert got[0] == pytest.approx(float(np.sum(dense_v[inside] ** 2 * k[inside])), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(sparsad.program(sparse_text)(V=V, lo=lo, hi=hi), got[0], rtol=1e-12, atol=1e-12)
    grad_v = got[1].toarray().ravel() if hasattr(got[1], "toarray") else np.asarray(got[1])
    np.testing.assert_allclose(grad_v, 2 * dense_v * k * inside, rtol=1e-12, atol=1e-12)
    inside = window(k)
    assert got[2] == pytest.approx(float(np.sum(x[inside] ** 2 * k[inside])), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(got[3], 2 * x * k * inside, rtol=1e-12, atol=1e-12)
    tangent = got[4][1] if isinstance(got[4], tuple) else got[4]
    assert float(tangent) == pytest.approx(float(np.sum(2 * x * k * inside)), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(got[5], 0.5 * 2 * x * k * inside, rtol=1e-12, atol=1e-12)


def test_an_unknown_pass_name_is_the_users_option_error():
    with pytest.raises(sparsad.OptionError, match="did you mean 'hoist'"):
        sparsad.compile("sum(<i, a> in x) a * a", passes={"hoistt"})


def test_pow_of_signed_zero_follows_ieee_in_both_paths():
    import warnings

    x = np.array([-0.0, 0.0, 2.0])
    for exponent in (-1.0, -2.0, -3.0):
        text = f"sum(<i, a> in x) {{ i -> pow(a, {exponent}) }}"
        with warnings.catch_warnings(), np.errstate(divide="ignore"):
            warnings.simplefilter("ignore")
            expected = np.power(x, exponent)
            np.testing.assert_array_equal(sparsad.program(text)(x=x), expected)
            np.testing.assert_array_equal(sparsad.compile(text)(x=x), expected)
