"""sparsad.jax.lower.choice: lowered XLA operations or the host call, by XLA's temporary memory
and the size of the largest scatter-add on the CPU. The rule is exercised with a small limit (monkeypatched), so that programs at test
size cross it; values and gradients on either path equal dense JAX autodiff in float64."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
jnp = jax.numpy

import sparsad.jax as sj  # noqa: E402
from sparsad.errors import InputError  # noqa: E402
from sparsad.jax.lower import choice  # noqa: E402

SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }"


def _host_calls(jitted, *args) -> int:
    return jitted.lower(*args).as_text().count("callback")


def _gather_sum(index):
    return lambda x: jnp.sum(jnp.exp(x[index]) * jnp.sin(x[index[::-1]]))


def test_temporary_memory_is_bounded_by_the_jaxprs_intermediates():
    """The cheap bound the rule tries first is an upper bound of XLA's own figure."""
    index = np.random.default_rng(0).integers(0, 50, 20_000)
    for function in (_gather_sum(index), lambda x: jnp.cumsum(x[index] ** 2)):
        abstract = [jax.ShapeDtypeStruct((50,), np.float32)]
        bound = choice.intermediate_bytes(jax.make_jaxpr(function)(*abstract).jaxpr)
        assert 0 < choice.temp_bytes(function, abstract) <= bound


def test_the_rule_keeps_the_host_call_above_the_limit_on_the_cpu_only(monkeypatch):
    index = np.random.default_rng(1).integers(0, 50, 20_000)
    abstract = [jax.ShapeDtypeStruct((50,), np.float32)]
    temp = choice.temp_bytes(_gather_sum(index), abstract)
    monkeypatch.setattr(choice, "CPU_TEMP_LIMIT", temp - 1)
    assert not choice.prefer_lowered(_gather_sum(index), abstract, "cpu")
    assert choice.prefer_lowered(_gather_sum(index), abstract, "cuda")  # pooled allocators: always lowered
    monkeypatch.setattr(choice, "CPU_TEMP_LIMIT", temp)
    assert choice.prefer_lowered(_gather_sum(index), abstract, "cpu")


def test_compile_program_takes_the_path_the_rule_chooses_and_both_are_exact(monkeypatch):
    """lower="auto" (default) follows the rule, derivative programs included; lower=True ignores
    it; either way values and gradients equal dense autodiff."""
    rng = np.random.default_rng(2)
    csr = sp.random(30, 20, density=0.3, random_state=3, format="csr")
    with jax.enable_x64(True):
        A = sj.SparseMatrix.from_scipy(csr)
        x = jnp.asarray(rng.standard_normal(20))
        dense = jnp.asarray(csr.toarray())
        expected_value = jnp.sum(jnp.tanh(dense @ x))
        expected_grad = jax.grad(lambda v: jnp.sum(jnp.tanh(dense @ v)))(x)
        for limit, lower, callbacks in [(choice.CPU_TEMP_LIMIT, "auto", 0), (0, "auto", 2), (0, True, 0)]:
            monkeypatch.setattr(choice, "CPU_TEMP_LIMIT", limit)
            monkeypatch.setattr(choice, "intermediate_bytes", lambda jaxpr: limit + 1)  # measure, always
            spmv = sj.compile_program(SPMV, wrt=("x",), lower=lower)
            loss = lambda v: jnp.sum(jnp.tanh(spmv(A=A, x=v)))  # noqa: E731
            step = jax.jit(jax.value_and_grad(loss))
            assert _host_calls(step, x) == callbacks, (limit, lower)
            value, grad = step(x)
            np.testing.assert_allclose(value, expected_value, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(grad, expected_grad, rtol=1e-12, atol=1e-12)


def test_the_choice_is_made_once_per_signature(monkeypatch):
    calls = []
    original = choice.prefer_lowered
    monkeypatch.setattr(choice, "prefer_lowered", lambda *a: calls.append(a[1][0].shape) or original(*a))
    spmv = sj.compile_program(SPMV, wrt=("x",))
    csr = sp.random(6, 5, density=0.5, random_state=4, format="csr")
    A = sj.SparseMatrix.from_scipy(csr, dtype=np.float32)
    for _ in range(2):  # a new trace of the same signature: the choice is reused
        jax.jit(lambda v: spmv(A=A, x=v))(jnp.ones(5, np.float32)).block_until_ready()
    assert len(calls) == 1


def test_lower_accepts_only_auto_true_or_false():
    with pytest.raises(InputError, match="lower="):
        sj.compile_program(SPMV, lower="always")


FEATURES = "sum(<k, xr> in X) { k -> sum(<f, x> in xr) sum(<c, w> in W(f)) { c -> x * w } }"


def test_the_largest_scatter_is_measured_in_bytes_of_updates():
    """A segment sum of n rows of c float64 values scatters n * c * 8 bytes of updates; the
    largest of several scatters counts, inside sub-jaxprs too."""
    ids = np.sort(np.random.default_rng(5).integers(0, 40, 300))

    def two_sums(x):
        small = jax.ops.segment_sum(x[:10], ids[:10], 40)
        inner = jax.jit(lambda y: jax.ops.segment_sum(y, ids, 40))  # a sub-jaxpr (pjit)
        return small, inner(x)

    with jax.enable_x64(True):
        jaxpr = jax.make_jaxpr(two_sums)(jax.ShapeDtypeStruct((300, 7), np.float64)).jaxpr
    assert choice.largest_scatter_bytes(jaxpr) == 300 * 7 * 8
    assert choice.largest_scatter_bytes(jax.make_jaxpr(lambda x: x * 2)(jnp.ones(3)).jaxpr) == 0


def test_a_scatter_past_the_limit_keeps_the_host_call_on_the_cpu_and_both_paths_are_exact(monkeypatch):
    """X W with X sparse (a scatter of one row of W's width per stored entry): with the scatter
    limit below its updates, lower="auto" runs the program and its vjp program as host calls on
    the CPU (lowered on other platforms); values and gradients equal dense autodiff either way."""
    rng = np.random.default_rng(6)
    csr = sp.random(25, 40, density=0.2, random_state=7, format="csr")
    with jax.enable_x64(True):
        X, dense = sj.SparseMatrix.from_scipy(csr), jnp.asarray(csr.toarray())
        W = jnp.asarray(rng.standard_normal((40, 3)))
        expected_value = jnp.sum(jnp.sin(dense @ W))
        expected_grad = jax.grad(lambda w: jnp.sum(jnp.sin(dense @ w)))(W)
        updates = csr.nnz * 3 * 8
        for limit, callbacks in [(updates, 0), (updates - 1, 2)]:
            monkeypatch.setattr(choice, "CPU_SCATTER_LIMIT", limit)
            product = sj.compile_program(FEATURES, wrt=("W",))
            step = jax.jit(jax.value_and_grad(lambda w: jnp.sum(jnp.sin(product(X=X, W=w)))))
            assert _host_calls(step, W) == callbacks, limit
            value, grad = step(W)
            np.testing.assert_allclose(value, expected_value, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(grad, expected_grad, rtol=1e-12, atol=1e-12)
        abstract = [jax.ShapeDtypeStruct((40, 3), np.float64)]
        function = lambda w: jax.ops.segment_sum(w[csr.indices], np.repeat(np.arange(25), np.diff(csr.indptr)), 25)  # noqa: E731
        monkeypatch.setattr(choice, "CPU_SCATTER_LIMIT", 0)
        assert not choice.prefer_lowered(function, abstract, "cpu")
        assert choice.prefer_lowered(function, abstract, "cuda")
