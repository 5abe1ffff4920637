"""sparsad.jax: sparse linear algebra and compile_program under jit, grad, jvp, vmap, jacfwd,
jacrev, against dense jax.numpy in float64 (x64 switched on only inside each test)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import sparsad.jax as sj  # noqa: E402

TOL = dict(rtol=1e-10, atol=1e-10)


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _matrix(m, n, density, seed, shift=0.0, lower=False):
    matrix = sp.random(m, n, density=density, format="csr", random_state=seed)
    matrix.data = np.random.default_rng(seed).standard_normal(matrix.nnz)
    if lower:
        matrix = sp.tril(matrix, k=-1)
    if shift:
        matrix = matrix + shift * sp.eye(m, n)
    return sj.SparseMatrix.from_scipy(matrix)


def _on(S):
    return S.pattern.rows, S.pattern.indices.astype(np.int64)


def _case(name):
    rng = np.random.default_rng(7)
    A, B = _matrix(5, 4, 0.5, 1), _matrix(4, 3, 0.5, 2)
    L = _matrix(5, 5, 0.4, 3, shift=3.0, lower=True)
    M = _matrix(5, 5, 0.4, 4, shift=4.0)
    S = sj.SparseMatrix.from_scipy(sp.csr_matrix(M.to_scipy() @ M.to_scipy().T + 5 * sp.eye(5)))
    x, X, b = jnp.asarray(rng.standard_normal(4)), jnp.asarray(rng.standard_normal((4, 2))), jnp.asarray(
        rng.standard_normal(5))
    if name == "spmv":
        return (lambda a, x: sj.spmv(A.with_values(a), x)), (lambda a, x: A.with_values(a).to_dense() @ x), (A.values, x)
    if name == "spmm":
        return (lambda a, X: sj.spmm(A.with_values(a), X)), (lambda a, X: A.with_values(a).to_dense() @ X), (A.values, X)
    if name == "spgemm":
        r, c = _on(sj.spgemm(A, B))
        return ((lambda a, b: sj.spgemm(A.with_values(a), B.with_values(b)).values),
                (lambda a, b: (A.with_values(a).to_dense() @ B.with_values(b).to_dense())[r, c]), (A.values, B.values))
    if name == "add":
        A2 = _matrix(5, 4, 0.3, 5)
        r, c = _on(sj.add(A, A2))
        return ((lambda a, a2: sj.add(A.with_values(a), A2.with_values(a2), 0.5, -2.0).values),
                (lambda a, a2: (0.5 * A.with_values(a).to_dense() - 2.0 * A2.with_values(a2).to_dense())[r, c]),
                (A.values, A2.values))
    if name == "transpose":
        r, c = _on(A.T)
        return (lambda a: sj.transpose(A.with_values(a)).values), (lambda a: A.with_values(a).to_dense().T[r, c]), (A.values,)
    if name == "triangular_solve":
        return ((lambda v, b: sj.triangular_solve(L.with_values(v), b, lower=True)),
                (lambda v, b: jnp.linalg.solve(L.with_values(v).to_dense(), b)), (L.values, b))
    if name == "triangular_unit":  # upper, diagonal taken as ones (stored or not)
        U = sj.transpose(_matrix(5, 5, 0.5, 6, lower=True))

        def unit(v):
            return U.with_values(v).to_dense() + jnp.eye(5)
        return ((lambda v, b: sj.triangular_solve(U.with_values(v), b, lower=False, unit_diagonal=True)),
                (lambda v, b: jnp.linalg.solve(unit(v), b)), (U.values, b))
    if name == "spsolve":
        return ((lambda v, b: sj.spsolve(M.with_values(v), b)),
                (lambda v, b: jnp.linalg.solve(M.with_values(v).to_dense(), b)), (M.values, b))
    if name == "cg":  # symmetric values: the matrix is built from v and its transpose
        perm = S.pattern.transpose[1]

        def sym(v):
            return 0.5 * (v + v[perm])
        return ((lambda v, b: sj.cg(S.with_values(sym(v)), b, rtol=1e-14)),
                (lambda v, b: jnp.linalg.solve(S.with_values(sym(v)).to_dense(), b)), (S.values, b))
    raise KeyError(name)


OPS = ["spmv", "spmm", "spgemm", "add", "transpose", "triangular_solve", "triangular_unit", "spsolve", "cg"]


def _close(got, want):
    jax.tree.map(lambda g, w: np.testing.assert_allclose(np.asarray(g), np.asarray(w), **TOL), got, want)


@pytest.mark.parametrize("name", OPS)
def test_op_under_every_transform_matches_dense(name):
    f, dense, args = _case(name)
    argnums = tuple(range(len(args)))
    # jit, jacrev (vmap of vjp), jacfwd (vmap of jvp), grad, jit of grad, jvp, vmap of each operand
    _close(jax.jit(f)(*args), dense(*args))
    _close(jax.jacrev(f, argnums)(*args), jax.jacrev(dense, argnums)(*args))
    _close(jax.jacfwd(f, argnums)(*args), jax.jacfwd(dense, argnums)(*args))
    loss = lambda g: (lambda *a: jnp.sum(jnp.sin(g(*a))))  # noqa: E731
    _close(jax.grad(loss(f), argnums)(*args), jax.grad(loss(dense), argnums)(*args))
    _close(jax.jit(jax.grad(loss(f), argnums))(*args), jax.grad(loss(dense), argnums)(*args))
    tangents = tuple(0.3 * jnp.ones_like(a) for a in args)
    _close(jax.jvp(f, args, tangents), jax.jvp(dense, args, tangents))
    for k in range(len(args)):  # a batch of each operand in turn (sparse values included)
        batched = jnp.stack([args[k], 2.0 * args[k] + 0.5])
        in_axes = tuple(0 if i == k else None for i in range(len(args)))
        call = list(args)
        call[k] = batched
        _close(jax.vmap(f, in_axes)(*call), jax.vmap(dense, in_axes)(*call))


@pytest.mark.parametrize("name", ["spgemm", "spsolve"])
def test_second_derivatives_match_dense(name):
    f, dense, args = _case(name)
    loss = lambda g: (lambda a: jnp.sum(jnp.sin(g(a, *args[1:]))))  # noqa: E731
    _close(jax.hessian(loss(f))(args[0]), jax.hessian(loss(dense))(args[0]))


def test_bcoo_in_bcoo_out_and_errors():
    from jax.experimental import sparse as jsparse

    A = _matrix(5, 4, 0.5, 1)
    bcoo = A.to_bcoo()
    out = sj.spgemm(bcoo, sj.transpose(bcoo))
    assert type(out).__name__ == "BCOO"
    np.testing.assert_allclose(out.todense(), A.to_dense() @ A.to_dense().T, **TOL)
    dense = jnp.asarray(np.random.default_rng(0).standard_normal((5, 4)))
    dense = dense * (jnp.abs(dense) > 0.5)
    via = sj.SparseMatrix.from_bcoo(jsparse.BCOO.fromdense(dense))
    np.testing.assert_allclose(via.to_dense(), dense)
    from sparsad.errors import InputError, ShapeError

    with pytest.raises(InputError):
        sj.spmv(dense, jnp.ones(4))
    with pytest.raises(ShapeError):
        sj.spmv(A, jnp.ones(5))


GCN = """
let XW = sum(<k, hr> in H) { k -> sum(<f, h> in hr) sum(<c, w> in W(f)) { c -> h * w } } in
sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<c, v> in XW(k)) { c -> a * v } }"""
ENERGY = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * exp(x(i)) * sin(x(j)) }"


def test_compile_program_under_every_transform():
    A = _matrix(6, 6, 0.35, 9, shift=1.0)
    rng = np.random.default_rng(3)
    H, W = jnp.asarray(rng.standard_normal((6, 4))), jnp.asarray(rng.standard_normal((4, 3)))
    gcn = sj.compile_program(GCN)
    f = lambda a, H, W: gcn(A=A.with_values(a), H=H, W=W)  # noqa: E731
    dense = lambda a, H, W: A.with_values(a).to_dense() @ (H @ W)  # noqa: E731
    args = (A.values, H, W)
    argnums = (0, 1, 2)
    _close(jax.jit(f)(*args), dense(*args))
    _close(jax.jit(jax.jacrev(f, argnums))(*args), jax.jacrev(dense, argnums)(*args))
    _close(jax.jacfwd(f, argnums)(*args), jax.jacfwd(dense, argnums)(*args))
    tangents = tuple(jnp.ones_like(t) for t in args)
    _close(jax.jvp(f, args, tangents), jax.jvp(dense, args, tangents))
    batched = jnp.stack([W, -W])
    _close(jax.vmap(f, (None, None, 0))(A.values, H, batched), jax.vmap(dense, (None, None, 0))(A.values, H, batched))

    energy = sj.compile_program(ENERGY, wrt="x")
    x = jnp.asarray(rng.standard_normal(6))
    g = lambda x: jnp.sum(energy(A=A, x=x) ** 2)  # noqa: E731
    gd = lambda x: jnp.sum(((A.to_dense() * jnp.outer(jnp.exp(x), jnp.sin(x))).sum(1)) ** 2)  # noqa: E731
    _close(jax.jit(jax.grad(g))(x), jax.grad(gd)(x))


SCALAR_ENERGY = "sum(<i, r> in A) sum(<j, a> in r) a * exp(x(i)) * sin(x(j))"
SQUARED_SPMV = "sum(<i, r> in A) { i -> sum(<j, a> in r) a * a * x(j) }"
_SECOND: dict = {}


def _second(text, wrt=None):
    if (text, wrt) not in _SECOND:  # one program per text: its derivative programs compile once
        _SECOND[(text, wrt)] = sj.compile_program(text, wrt=wrt)
    return _SECOND[(text, wrt)]


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000))
def test_compile_program_second_derivatives_match_dense(seed):
    """grad of grad, hessian (jacfwd of jacrev) and jit: the derivative programs are themselves
    differentiated (their own jvp/vjp programs), against jax.numpy dense autodiff."""
    rng = np.random.default_rng(seed)
    A = _matrix(5, 5, 0.5, seed % 97 + 1, shift=1.0)
    x = jnp.asarray(rng.standard_normal(5))
    energy = _second(SCALAR_ENERGY, "x")
    f = lambda x: energy(A=A, x=x)  # noqa: E731
    fd = lambda x: jnp.sum(A.to_dense() * jnp.outer(jnp.exp(x), jnp.sin(x)))  # noqa: E731
    _close(jax.hessian(f)(x), jax.hessian(fd)(x))
    _close(jax.jit(jax.jacfwd(jax.jacrev(f)))(x), jax.hessian(fd)(x))
    square_grad = lambda h: (lambda x: jnp.sum(jax.grad(h)(x) ** 2))  # noqa: E731
    _close(jax.grad(square_grad(f))(x), jax.grad(square_grad(fd))(x))

    # sparse values and a dense vector together, vector output: mixed second derivatives
    spmv = _second(SQUARED_SPMV)
    g = lambda a, x: jnp.sum(jnp.sin(spmv(A=A.with_values(a), x=x)))  # noqa: E731
    gd = lambda a, x: jnp.sum(jnp.sin((A.with_values(a).to_dense() ** 2) @ x))  # noqa: E731
    a = A.values * (1.0 + 0.1 * rng.standard_normal(A.values.shape))
    _close(jax.hessian(g, (0, 1))(a, x), jax.hessian(gd, (0, 1))(a, x))
    # forward over reverse, batched: a Hessian-vector product under vmap
    hvp = lambda v: jax.jvp(jax.grad(lambda x: g(a, x)), (x,), (v,))[1]  # noqa: E731
    hvpd = lambda v: jax.jvp(jax.grad(lambda x: gd(a, x)), (x,), (v,))[1]  # noqa: E731
    directions = jnp.asarray(rng.standard_normal((2, 5)))
    _close(jax.vmap(hvp)(directions), jax.vmap(hvpd)(directions))


def test_reverse_mode_runs_the_first_order_vjp_program():
    """grad transposes the jvp program call into the program's own vjp program (not the vjp of
    the jvp program), and the gradient still matches dense autodiff."""
    A = _matrix(6, 6, 0.4, 11, shift=1.0)
    rng = np.random.default_rng(5)
    H, W = jnp.asarray(rng.standard_normal((6, 4))), jnp.asarray(rng.standard_normal((4, 3)))
    gcn = sj.compile_program(GCN, wrt=("W",))
    loss = lambda W: jnp.sum(jnp.tanh(gcn(A=A, H=H, W=W)))  # noqa: E731
    dense = lambda W: jnp.sum(jnp.tanh(A.to_dense() @ (H @ W)))  # noqa: E731
    _close(jax.jit(jax.grad(loss))(W), jax.grad(dense)(W))
    # the program runs as stages (sparsad.opt.stages: X W, then the aggregation): each stage
    # program that was differentiated holds its own derivative programs
    ran = [p for p in ([gcn] if gcn._stages is None else gcn._stages._programs.values()) if p._derived]
    assert ran
    for program in ran:
        kinds = sorted(key[0] for key in program._derived)
        assert kinds == ["jvp", "vjp"]
        jvp_program = next(p for key, p in program._derived.items() if key[0] == "jvp")
        assert not jvp_program._derived  # its own vjp program was never built


def test_a_host_call_on_a_thread_outside_the_callers_x64_block_keeps_float64():
    """XLA may run the kernel on a thread of its own, where the caller's `enable_x64` block does
    not hold: the float64 result must not be cast to float32 (JAX then raised a dtype error)."""
    import threading

    from sparsad.jax.program import _host_call

    dot = sj.compile_program("sum(<i, a> in u) a * v(i)", lower=False)  # the host call, not XLA operations
    u, v = jnp.asarray([1.0, 2.0]), jnp.asarray([3.0, 0.25])
    jax.jit(dot)(u=u, v=v)  # traced in 64-bit mode
    spec_of = {}
    original = dot._host_primal
    dot._host_primal = lambda spec, arrays: spec_of.setdefault("spec", spec) and original(spec, arrays)
    jax.jit(lambda u: dot(u=u, v=v) + 0.0)(u)
    dot._host_primal = original
    seen = []

    def elsewhere():  # a thread in 32-bit mode, as XLA's worker threads are (whatever other tests set)
        from jax._src import dtypes

        with jax.enable_x64(False):
            before = dtypes.canonicalize_dtype(np.float64)
            result = _host_call(spec_of["spec"], [np.asarray(u), np.asarray(v)])
            seen.append((before, dtypes.canonicalize_value(np.asarray(result)).dtype, float(result)))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert seen[0][0] == np.float32  # the thread started in 32-bit mode
    assert seen[0][1] == np.float64 and seen[0][2] == 3.5


ATTENTION = """
sum(<i, r> in A) { i ->
  let z = sum(<j, a> in r) exp(sum(<d, q> in Q(i)) q * K(j)(d)) in
  sum(<j, a> in r)
    let p = exp(sum(<d, q> in Q(i)) q * K(j)(d)) / z in
    sum(<c, v> in V(j)) { c -> p * v } }"""


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000))
def test_attention_gradient_is_one_joint_vjp_kernel_matching_dense(seed):
    """jit(grad) w.r.t. Q, K and V: the three tangents enter one joint jvp program, whose
    transpose is one joint vjp program (each edge's score once for all three); grad of grad
    differentiates that joint program again. Against dense jax.numpy autodiff."""
    A = _matrix(7, 7, 0.3, seed % 97 + 1, shift=1.0)
    mask = A.with_values(jnp.ones_like(A.values)).to_dense() != 0
    rng = np.random.default_rng(seed)
    Q, K, V = (jnp.asarray(rng.standard_normal((7, 3))) for _ in range(3))
    # the host path (lower=False): which kernels a step runs; lowered (the default): no host call
    attention = sj.compile_program(ATTENTION, wrt=("Q", "K", "V"), lower=False)
    loss = lambda Q, K, V: jnp.sum(jnp.sin(attention(A=A, Q=Q, K=K, V=V)))  # noqa: E731
    dense = lambda Q, K, V: jnp.sum(jnp.sin(  # noqa: E731
        jax.nn.softmax(jnp.where(mask, Q @ K.T, -jnp.inf), axis=1) @ V))
    step = jax.jit(jax.grad(loss, (0, 1, 2)))
    _close(step(Q, K, V), jax.grad(dense, (0, 1, 2))(Q, K, V))
    calls = []
    for program in [attention] + list(attention._derived.values()):
        original = program._host_primal
        program._host_primal = (lambda p, o: lambda spec, arrays: calls.append(p) or o(spec, arrays))(program, original)
    step(Q + 1.0, K, V)
    kinds = {key[0] for key, p in attention._derived.items() if p is not None and p in calls}
    assert len(calls) == 2 and kinds == {"joint-vjp"}, "a step runs the primal and one joint vjp kernel"
    lowered = sj.compile_program(ATTENTION, wrt=("Q", "K", "V"))
    lowered_loss = lambda Q, K, V: jnp.sum(jnp.sin(lowered(A=A, Q=Q, K=K, V=V)))  # noqa: E731
    lowered_step = jax.jit(jax.grad(lowered_loss, (0, 1, 2)))
    assert "callback" not in lowered_step.lower(Q, K, V).as_text()
    _close(lowered_step(Q, K, V), jax.grad(dense, (0, 1, 2))(Q, K, V))
    second = lambda f: jax.grad(lambda Q, K, V: sum(jnp.sum(g ** 2) for g in jax.grad(f, (0, 1, 2))(Q, K, V)),  # noqa: E731
                                (0, 1, 2))(Q, K, V)
    _close(second(loss), second(dense))
    # forward mode: the joint jvp program itself, and under vmap (jacfwd)
    tangents = tuple(jnp.asarray(rng.standard_normal((7, 3))) for _ in range(3))
    _close(jax.jvp(loss, (Q, K, V), tangents), jax.jvp(dense, (Q, K, V), tangents))
    _close(jax.jacfwd(loss, (0, 1, 2))(Q, K, V), jax.jacfwd(dense, (0, 1, 2))(Q, K, V))
