"""sparsad.jax.lower: programs run as XLA operations under jit, checked against closed forms.

Walks the ∇SD corpus (bench/corpora/nablasd.py) at small size: every program whose inputs the
JAX bridge takes (CSR/CSC/COO matrices, dense arrays, numbers) is jitted through
`sparsad.jax.compile_program`; where the forward (or a derivative program) lowers to XLA
operations, with no host callback left, its value, vjp and jvp must equal the hand-written
NumPy/SciPy closed forms to 1e-10 in float64. Programs outside the lowered subset must keep
the host call (and are counted, not failed).
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
jnp = jax.numpy

import sparsad.jax as sj  # noqa: E402
from sparsad.bridge import values_on  # noqa: E402
from sparsad.errors import ShapeError, SparsadError  # noqa: E402


def _close(ours, reference, what):
    ours, reference = np.asarray(ours, dtype=float), np.asarray(reference, dtype=float)
    assert ours.shape == reference.shape, f"{what}: shape {ours.shape} vs {reference.shape}"
    scale = max(1.0, float(np.max(np.abs(reference))) if reference.size else 1.0)
    error = float(np.max(np.abs(ours - reference))) if ours.size else 0.0
    assert error <= 1e-10 * scale, f"{what}: max error {error:.3g}"


def _host_calls(jitted, *args) -> int:
    """How many host callbacks the compiled function still makes (0: all lowered)."""
    return jitted.lower(*args).as_text().count("callback")


def _bridged(raw: dict) -> bool:
    return all(sp.issparse(v) and v.ndim == 2 or isinstance(v, (np.ndarray, int, float)) for v in raw.values())


def _corpus_case(entry):
    """(program, inputs as the JAX bridge takes them, the sparse inputs' patterns, raw inputs)."""
    from bench.corpus import prepare

    P = prepare(entry)
    inputs = {}
    for name, value in P.raw.items():
        if sp.issparse(value):
            inputs[name] = sj.SparseMatrix.from_scipy(value)
        elif isinstance(value, np.ndarray):
            inputs[name] = jnp.asarray(value)
        else:
            inputs[name] = value
    return P, inputs


def _leaf(value):
    return value.values if isinstance(value, sj.SparseMatrix) else jnp.asarray(value, dtype=float)


def _with_leaf(value, leaf):
    return value.with_values(leaf) if isinstance(value, sj.SparseMatrix) else leaf


def _as_leaf_values(value, like):
    """A closed-form derivative or direction as the leaf JAX sees (values on the pattern)."""
    from bench.corpus import densify

    if isinstance(like, sj.SparseMatrix):
        return values_on(value if sp.issparse(value) else np.asarray(densify(value)), like.pattern)
    return densify(value)


def test_corpus_programs_lower_and_match_closed_forms():
    from bench.corpora.nablasd import ENTRIES
    from bench.corpus import closed_form, densify, direction

    not_lowered, slow = [], []
    counts = {"programs": 0, "bridged": 0, "forward": 0, "derivatives": 0, "derivatives lowered": 0}
    with jax.enable_x64(True):
        for entry in ENTRIES.values():
            import time
            started = time.perf_counter()
            counts["programs"] += 1
            P, inputs = _corpus_case(entry)
            if not _bridged(P.raw):
                continue
            counts["bridged"] += 1
            wrt = [w for w in entry.wrt if w in inputs and not isinstance(inputs[w], int)]
            inputs = {k: (float(v) if k in wrt and isinstance(v, float) else v) for k, v in inputs.items()}
            program = sj.compile_program(entry.text, wrt=wrt, lower=True)  # the lowering, not the cost rule
            leaves = [_leaf(inputs[w]) for w in wrt]

            def forward(*xs):
                return program(**{**inputs, **{w: _with_leaf(inputs[w], x) for w, x in zip(wrt, xs)}})

            step = jax.jit(forward)
            try:
                calls = _host_calls(step, *leaves)
            except SparsadError:  # the bridge's own limits (a result shape the types do not give)
                continue
            if calls:
                not_lowered.append(entry.name)
                continue
            counts["forward"] += 1
            _close(step(*leaves), densify(P.value), f"{entry.name} value")
            # every vjp in one jitted function (one XLA compile, one cotangent) when they all lower;
            # else one by one
            done = set()
            if len(wrt) > 1:
                seed = direction(P, wrt[0], "vjp")
                ct = jnp.asarray(densify(seed, np.shape(P.value)) if np.ndim(P.value) else float(seed))
                fn = jax.jit(lambda *xs, ct=ct: jax.vjp(forward, *xs)[1](ct))
                if not _host_calls(fn, *leaves):
                    for w, got in zip(wrt, fn(*leaves)):
                        counts["derivatives"] += 1
                        counts["derivatives lowered"] += 1
                        reference = closed_form(P, w, "vjp", seed)()
                        _close(got, _as_leaf_values(reference, inputs[w]), f"{entry.name} vjp {w}")
                    done = set(wrt)
            for k, w in enumerate(wrt):
                for kind in ("vjp", "jvp") if k == 0 else ("vjp",):  # (forward mode once per program: test time)
                    if kind == "vjp" and w in done:
                        continue
                    counts["derivatives"] += 1
                    seed = direction(P, w, kind)
                    if kind == "vjp":
                        ct = jnp.asarray(densify(seed, np.shape(P.value)) if np.ndim(P.value) else float(seed))
                        fn = jax.jit(lambda *xs, k=k, ct=ct: jax.vjp(lambda x: forward(*xs[:k], x, *xs[k + 1:]),
                                                                       xs[k])[1](ct)[0])
                    else:
                        t = jnp.asarray(_as_leaf_values(seed, inputs[w]))
                        fn = jax.jit(lambda *xs, k=k, t=t: jax.jvp(lambda x: forward(*xs[:k], x, *xs[k + 1:]),
                                                                     (xs[k],), (t,))[1])
                    if _host_calls(fn, *leaves):
                        continue
                    counts["derivatives lowered"] += 1
                    reference = closed_form(P, w, kind, seed)()
                    expected = _as_leaf_values(reference, inputs[w]) if kind == "vjp" else densify(
                        reference, np.shape(P.value))
                    _close(fn(*leaves), expected, f"{entry.name} {kind} {w}")
            slow.append((round(time.perf_counter() - started, 2), entry.name))
    print("corpus lowering:", counts, "not lowered:", not_lowered, sorted(slow)[-8:])
    # the lowering covers most of the corpus the bridge takes (a floor, to notice regressions)
    assert counts["forward"] >= 0.6 * counts["bridged"], counts


# -- hypothesis: random CSR patterns, empty rows and empty matrices included ------------------------
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: name -> (program, inputs differentiated, dense reference (jnp, A dense, mask, rows kept, inputs))
PROGRAMS = {
    "spmv": ("sum(<i, r> in A) { i -> sum(<j, a> in r) a * x(j) }", ("A", "x"),
             lambda j, A, mask, kept, I: A @ I["x"]),
    "spmtv": ("sum(<i, r> in A) sum(<j, a> in r) { j -> a * y(i) }", ("A", "y"),
              lambda j, A, mask, kept, I: A.T @ I["y"]),
    "lsq": ("sum(<i, r> in A) let z = (sum(<j, a> in r) a * x(j)) - y(i) in z * z", ("A", "x", "y"),
            lambda j, A, mask, kept, I: j.sum(j.where(kept, (A @ I["x"] - I["y"]) ** 2, 0.0))),
    "row_lse": ("sum(<i, r> in A) log(sum(<j, a> in r) exp(a * x(j)))", ("A", "x"),
                lambda j, A, mask, kept, I: j.sum(j.where(kept, j.log(j.sum(j.where(mask, j.exp(A * I["x"][None, :]),
                                                                                    0.0), 1) + ~kept), 0.0))),
    "sddmm": ("sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a * sum(<d, q> in Q(i)) q * K(j)(d) } }",
              ("A", "Q", "K"), lambda j, A, mask, kept, I: A * (I["Q"] @ I["K"].T)),
    "attention": (None, ("Q", "K", "V", "M"), None),  # the example's layer (below)
    "gcn": (None, ("A", "H"), lambda j, A, mask, kept, I: A @ I["H"]),
    "window": ("sum(<i, r> in A(1:3)) sum(<j, a> in r) a * x(j) * x(j)", ("A", "x"),
               lambda j, A, mask, kept, I: j.sum((A * I["x"][None, :] ** 2)[1:3])),
}


def _attention_reference(j, A, mask, kept, I):
    scores = j.where(mask, I["Q"] @ I["K"].T - I["M"][:, None], -j.inf)
    weights = j.where(kept[:, None], jax.nn.softmax(j.where(kept[:, None], scores, 0.0), axis=1), 0.0)
    return weights @ I["V"]


_COMPILED: dict = {}


def _program(name):
    from examples.frameworks_layers import ATTENTION_LAYER, GCN_LAYER

    if name not in _COMPILED:
        text, wrt, _ = PROGRAMS[name]
        text = {"attention": ATTENTION_LAYER, "gcn": GCN_LAYER}.get(name, text)
        _COMPILED[name] = sj.compile_program(text, wrt=wrt, lower=True)
    return _COMPILED[name]


@st.composite
def csr_matrices(draw):
    n, m = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    stored = draw(st.lists(st.booleans(), min_size=n * m, max_size=n * m))
    if draw(st.booleans()):  # an empty row (often several)
        row = draw(st.integers(0, n - 1))
        stored[row * m:(row + 1) * m] = [False] * m
    values = draw(st.lists(st.floats(-2, 2, allow_nan=False).filter(lambda v: abs(v) > 1e-3),
                           min_size=n * m, max_size=n * m))
    dense = np.where(np.reshape(stored, (n, m)), np.reshape(values, (n, m)), 0.0)
    return sp.csr_matrix(dense), np.reshape(stored, (n, m))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])  # no shrinking: each example compiles XLA code
@given(csr_matrices(), st.sampled_from(sorted(PROGRAMS)), st.integers(0, 1000))
def test_lowered_programs_match_dense_autodiff_on_random_patterns(matrix, name, seed):
    """Values and gradients (jit(grad), and jvp) of lowered programs on random CSR patterns with
    empty rows, against jax.numpy dense autodiff (masked convention for A's values)."""
    csr, stored = matrix
    n, m = csr.shape
    rng = np.random.default_rng(seed)
    with jax.enable_x64(True):
        A = sj.SparseMatrix.from_scipy(csr)
        mask = jnp.asarray(stored)
        kept = jnp.asarray(stored.any(1))
        square = name in ("attention", "gcn", "sddmm")
        if square and n != m:
            A = sj.SparseMatrix.from_scipy(sp.csr_matrix(csr[:min(n, m), :min(n, m)]))
            n = m = min(n, m)
            mask, kept = jnp.asarray(stored[:n, :n]), jnp.asarray(stored[:n, :n].any(1))
        inputs = {"x": rng.standard_normal(m), "y": rng.standard_normal(n), "Q": rng.standard_normal((n, 2)),
                  "K": rng.standard_normal((m, 2)), "V": rng.standard_normal((m, 3)), "M": rng.standard_normal(n),
                  "H": rng.standard_normal((m, 3))}
        text, wrt, reference = PROGRAMS[name]
        reference = reference or _attention_reference
        program = _program(name)
        names = [w for w in wrt if w != "A"] + (["A"] if "A" in wrt else [])
        leaves = [A.values if w == "A" else jnp.asarray(inputs[w]) for w in names]
        reads = set(program.program.inputs)

        def ours(*xs):
            given = {w: (A.with_values(x) if w == "A" else x) for w, x in zip(names, xs)}
            out = program(**{**{k: jnp.asarray(v) for k, v in inputs.items() if k in reads}, "A": A, **given})
            return jnp.sum(jnp.sin(out))

        positions = (np.asarray(A.pattern.rows), np.asarray(A.pattern.indices, dtype=np.int64))

        def dense(*xs):
            given = {w: x for w, x in zip(names, xs)}
            values = given.pop("A", A.values)
            matrix = jnp.zeros((n, m)).at[positions].set(values)
            return jnp.sum(jnp.sin(reference(jnp, matrix, mask, kept, {**inputs, **given})))

        if name == "window" and n < 3:  # A(1:3) reaches outside a matrix of fewer than 3 rows
            with pytest.raises(ShapeError, match="outside"):
                jax.jit(ours)(*leaves)
            return
        argnums = tuple(range(len(names)))
        step = jax.jit(jax.grad(ours, argnums))
        # a sub-array of rows: its vjp program iterates a dictionary whose key set may differ per
        # row, which the lowering refuses (host call) unless it is the same for every row
        assert name == "window" or _host_calls(step, *leaves) == 0, f"{name} did not lower"
        _close(jax.jit(ours)(*leaves), dense(*leaves), f"{name} value")
        for k, (got, want) in enumerate(zip(step(*leaves), jax.grad(dense, argnums)(*leaves))):
            _close(got, want, f"{name} gradient {names[k]}")
        tangents = tuple(jnp.asarray(rng.standard_normal(leaf.shape)) for leaf in leaves)
        _close(jax.jit(lambda *xs: jax.jvp(ours, xs, tangents)[1])(*leaves), jax.jvp(dense, tuple(leaves), tangents)[1],
               f"{name} jvp")


# -- the key sets of computed dictionaries, against the interpreter --------------------------------
#: (program, result shape); A is a 5 x 4 CSR matrix with an empty row, x and y dense vectors (4,),
#: M a dense 3 x 4 matrix, perm an integer array (a constant)
SEMANTICS = [
    ("let d = sum(<i, r> in A) { i -> 1.0 } in sum(<k, w> in d) 1.0", ()),  # non-empty rows
    ("let c = sum(<i, r> in A) sum(<j, a> in r) { j -> a } in sum(<j, s> in c) 1.0", ()),  # columns used
    ("let d = sum(<i, v> in x) if 0.0 < v then { i -> v } in sum(<k, w> in d) 1.0", ()),  # keys dropped
    ("let d = sum(<i, v> in x) { i -> if 0.0 < v then v } in sum(<k, w> in d) 1.0", ()),
    ("sum(<i, u> in x) sum(<j, v> in y) { i -> { j -> u * v } }", (4, 4)),
    ("sum(<i, r> in M) { i -> r * 2.0 }", (3, 4)),
    ("sum(<i, _> in (2:5)) x(i) + 1.0", ()),
    ("sum(<i, v> in x(1:3)) v + 1.0", ()),
    ("sum(<i, v> in x) y(i + 1)", ()),
    ("sum(<i, v> in x) if v < 0.5 then v * v else exp(v)", ()),
    ("sum(<k, p> in perm) x(p) * (k + 1)", ()),
    ("sum(<i, r> in A) { i -> sum(<j, a> in r) if j = i then a else 2.0 * a }", (5,)),
    ("sum(<i, r> in A) let s = sum(<j, a> in r) { j -> a * x(j) } in { i -> sum(<j, e> in s) e * e }", (5,)),
    ("sum(<i, r> in A) sum(<j, a> in r) { i -> { j -> a } } + { j -> { i -> a } }", (5, 5)),
    ("sum(<i, r> in A(1:4)) { i -> sum(<j, a> in r) a }", (5,)),
    ("sum(<i, r> in A) { i -> sum(<j, a> in r) A(0)(j) * a }", (5,)),
    ("let t = sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> a } } in sum(<i, r> in t) sum(<j, a> in r) a * a", ()),
    ("sum(<i, r> in A) { 2 -> sum(<j, a> in r) a } + { 0 -> 1.0 }", (3,)),
    ("sum(<i, v> in x) sum(<j, w> in x) if i < j then v * w", ()),
    ("sum(<i, r> in A) sum(<j, a> in r) relu(a) + step(a) + sign(a) + sigmoid(a) + softplus(a) + pow(abs(a), 1.5)",
     ()),
]


@pytest.mark.parametrize("text, shape", SEMANTICS)
def test_lowered_values_equal_the_interpreter_or_refuse(text, shape):
    """The lowering either refuses a program (None: the caller keeps the host call) or equals
    the reference interpreter, including which keys a computed dictionary holds."""
    from sparsad.jax.lower import ConstantInput, DenseInput, SparseInput, lower_program
    from sparsad.lang.interpret import evaluate
    from sparsad.lang.parse import parse
    from sparsad.ops.pattern import CSRPattern

    rng = np.random.default_rng(7)
    dense = rng.standard_normal((5, 4)) * (rng.random((5, 4)) < 0.5)
    dense[3] = 0.0
    A = sp.csr_matrix(dense)
    values = {"x": rng.standard_normal(4), "y": rng.standard_normal(4), "M": rng.standard_normal((3, 4)),
              "perm": np.array([2, 0, 3, 1])}
    expr = parse(text)
    with jax.enable_x64(True):
        inputs = {"A": SparseInput(CSRPattern(A.indptr, A.indices, A.shape)), "x": DenseInput((4,)),
                  "y": DenseInput((4,)), "M": DenseInput((3, 4)), "perm": ConstantInput(values["perm"])}
        function = lower_program(expr, inputs, ("dense", shape))
        if function is None:
            return
        ours = jax.jit(function)({"A": jnp.asarray(A.data), **{k: jnp.asarray(v) for k, v in values.items()
                                                                 if k != "perm"}})
    from bench.corpus import densify

    reference = densify(evaluate(expr, {"A": A, **values}), shape)
    _close(ours, reference, text)


def test_example_layers_lowered_under_jit_match_dense_autodiff():
    """The GCN + attention model of examples/frameworks_layers.py under jit(grad): no host call
    left, and the gradients equal jax.numpy dense autodiff to 1e-10 (float64)."""
    optax = pytest.importorskip("optax")
    import examples.frameworks_layers as ex

    with jax.enable_x64(True):
        a_hat, features, labels, classes = ex.graph(small=True)
        A, dense = sj.SparseMatrix.from_scipy(a_hat), jnp.asarray(a_hat.toarray())
        X, dense_X = sj.SparseMatrix.from_scipy(features), jnp.asarray(features.toarray())  # sparse features
        y = jnp.asarray(labels)
        params = {k: jnp.asarray(v) for k, v in ex.init(X.shape[1], 16, 8, classes, seed=2).items()}
        forward = ex.jax_model()

        dense_model = ex.jax_dense_model()
        dense_forward = lambda p: dense_model(dense, dense_X, p)  # noqa: E731

        loss = lambda f: (lambda p: optax.softmax_cross_entropy_with_integer_labels(f(p), y).mean())  # noqa: E731
        step = jax.jit(jax.grad(loss(lambda p: forward(A, X, p))))
        assert _host_calls(step, params) == 0
        got, want = step(params), jax.grad(loss(dense_forward))(params)
        for k in params:
            _close(got[k], want[k], f"example gradient {k}")
        _close(jax.jit(lambda p: forward(A, X, p))(params), dense_forward(params), "example value")


def test_a_window_outside_the_rows_raises_under_jit():
    """The `window` program on a matrix of 2 rows: A(1:3) reaches outside axis 0, the interpreter's
    ShapeError under jit too (the case the random patterns above draw at n < 3)."""
    with jax.enable_x64(True):
        A = sj.SparseMatrix.from_scipy(sp.csr_matrix(np.array([[1.0, 0.0], [2.0, 3.0]])))
        program = _program("window")
        with pytest.raises(ShapeError, match="outside"):
            jax.jit(lambda x: program(A=A, x=x))(jnp.ones(2))
