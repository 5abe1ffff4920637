"""examples/frameworks_layers.py at small size: the GCN + attention model written once in the
language (on sparse input features, Kipf & Welling's first layer) trains in PyTorch and in
JAX/Optax, and its gradients equal dense autograd to 1e-10."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "frameworks_layers.py"


def load():
    spec = importlib.util.spec_from_file_location("frameworks_layers", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_layers_train_and_match_dense_gradients():
    ex = load()
    run = ex.train_torch(small=True, epochs=12)
    assert run["history"][-1] < run["history"][0]
    a_hat, features, labels, classes = ex.graph(small=True)
    import sparsad.torch as st

    assert features.nnz < 0.5 * np.prod(features.shape)  # sparse features, as the datasets' are
    A, X = st.SparseMatrix.from_scipy(a_hat), st.SparseMatrix.from_scipy(features)
    y = torch.as_tensor(labels)
    base = ex.init(X.shape[1], 16, 8, classes, seed=1)
    params = {k: torch.tensor(v, requires_grad=True) for k, v in base.items()}
    ref = {k: torch.tensor(v, requires_grad=True) for k, v in base.items()}
    loss = torch.nn.functional.cross_entropy(ex.torch_model()(A, X, params), y)
    dense = torch.as_tensor(a_hat.toarray()), torch.as_tensor(features.toarray())
    want = torch.nn.functional.cross_entropy(ex.torch_dense_model()(*dense, ref), y)
    torch.testing.assert_close(loss, want, rtol=1e-10, atol=1e-10)
    got = torch.autograd.grad(loss, list(params.values()))
    expected = torch.autograd.grad(want, list(ref.values()))
    for g, w in zip(got, expected):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)


def test_jax_optax_layers_train_and_match_dense_gradients():
    jax = pytest.importorskip("jax")
    pytest.importorskip("optax")
    import jax.numpy as jnp
    import optax

    ex = load()
    with jax.enable_x64(True):
        run = ex.train_jax(small=True, epochs=12)
        assert run["history"][-1] < run["history"][0]
        a_hat, features, labels, classes = ex.graph(small=True)
        import sparsad.jax as sj

        A, dense = sj.SparseMatrix.from_scipy(a_hat), jnp.asarray(a_hat.toarray())
        X, dense_X = sj.SparseMatrix.from_scipy(features), jnp.asarray(features.toarray())
        y = jnp.asarray(labels)
        params = {k: jnp.asarray(v) for k, v in ex.init(X.shape[1], 16, 8, classes, seed=1).items()}
        forward = ex.jax_model()

        dense_model = ex.jax_dense_model()
        dense_forward = lambda p: dense_model(dense, dense_X, p)  # noqa: E731

        loss = lambda f: (lambda p: optax.softmax_cross_entropy_with_integer_labels(f(p), y).mean())  # noqa: E731
        got = jax.grad(loss(lambda p: forward(A, X, p)))(params)
        want = jax.grad(loss(dense_forward))(params)
        for k in params:
            np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-10, atol=1e-10)


def test_the_one_program_gcn_layer_equals_the_composition_and_dense():
    """GCN_LAYER_ONE_PROGRAM (X W inside the program, X sparse or dense), GCN_LAYER applied to
    FEATURES_LAYER's X W (the example's way, X sparse) and to X @ W (X dense) give dense
    autograd's values and gradients w.r.t. W."""
    ex = load()
    import sparsad.torch as st

    a_hat, features, _, _ = ex.graph(small=True)
    A, X = st.SparseMatrix.from_scipy(a_hat), torch.as_tensor(features.toarray())
    sparse_X = st.SparseMatrix.from_scipy(features)
    W = torch.randn(X.shape[1], 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    one = st.compile_program(ex.GCN_LAYER_ONE_PROGRAM, wrt=("W",), out_format="dense")
    aggregate = st.compile_program(ex.GCN_LAYER, wrt=("H",), out_format="dense")
    product = st.compile_program(ex.FEATURES_LAYER, wrt=("W",), out_format="dense")
    dense = torch.as_tensor(a_hat.toarray())

    def value_and_grad(layer):
        leaf = W.clone().requires_grad_(True)
        out = layer(leaf)
        return out.detach(), torch.autograd.grad(out.sin().sum(), leaf)[0]

    want = value_and_grad(lambda W: dense @ (X @ W))
    for layer in (lambda W: one(A=A, X=X, W=W), lambda W: aggregate(A=A, H=X @ W),
                  lambda W: one(A=A, X=sparse_X, W=W), lambda W: aggregate(A=A, H=product(X=sparse_X, W=W))):
        for got, expected in zip(value_and_grad(layer), want):
            torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def test_attention_with_scores_of_hundreds_stays_finite_and_matches_dense():
    """Scores of hundreds (as training grows them on Cora): the example subtracts each row's
    largest score, so exp neither overflows nor underflows, in the values or the gradients."""
    ex = load()
    import sparsad.torch as st

    a_hat, features, labels, classes = ex.graph(small=True)
    A, y = st.SparseMatrix.from_scipy(a_hat), torch.as_tensor(labels)
    X, dense_X = st.SparseMatrix.from_scipy(features), torch.as_tensor(features.toarray())
    base = ex.init(X.shape[1], 16, 8, classes, seed=3)
    base["Wq"], base["Wk"] = 80.0 * base["Wq"], 80.0 * base["Wk"]
    base["W1"] = 30.0 * base["W1"]  # row-normalised features (rows summing to 1): hidden values of order 1
    params = {k: torch.tensor(v, requires_grad=True) for k, v in base.items()}
    ref = {k: torch.tensor(v, requires_grad=True) for k, v in base.items()}
    out = ex.torch_model()(A, X, params)
    hidden = torch.relu(torch.as_tensor(a_hat.toarray()) @ (dense_X @ ref["W1"]))
    assert float(((hidden @ ref["Wq"]) @ (hidden @ ref["Wk"]).T).max()) > 400
    want = ex.torch_dense_model()(torch.as_tensor(a_hat.toarray()), dense_X, ref)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    got = torch.autograd.grad(torch.nn.functional.cross_entropy(out, y), list(params.values()))
    expected = torch.autograd.grad(torch.nn.functional.cross_entropy(want, y), list(ref.values()))
    for g, w in zip(got, expected):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)


def test_row_max_scores_equal_the_masked_dense_maximum():
    """The shift M the example subtracts: each row's largest q_i . k_j over its stored entries
    (by the compiled SDDMM program), on random patterns with an empty row and an explicit zero."""
    ex = load()
    import scipy.sparse as sp

    import sparsad.torch as st

    rng = np.random.default_rng(5)
    for n, density in ((7, 0.4), (30, 0.1), (30, 0.1)):  # the third call reuses the pattern cache
        a = sp.random(n, n, density=density, random_state=n, format="csr")
        a = sp.csr_matrix(a + sp.eye(n, format="csr"))
        a.data[0] = 0.0  # an explicit zero is a stored entry too
        a = sp.csr_matrix((a.data, a.indices, np.append(a.indptr, a.nnz)), shape=(n + 1, n))  # row n: empty
        A = st.SparseMatrix.from_scipy(a)
        Q, K = torch.tensor(rng.standard_normal((n + 1, 3))), torch.tensor(rng.standard_normal((n, 3)))
        M = ex.torch_row_max_scores(A, Q.requires_grad_(), K)
        mask = torch.zeros(n + 1, n, dtype=torch.bool)
        for i in range(n + 1):
            mask[i, a.indices[a.indptr[i]:a.indptr[i + 1]]] = True
        dense = (Q.detach() @ K.T).masked_fill(~mask, float("-inf")).max(1).values
        assert not M.requires_grad
        torch.testing.assert_close(M[:n], dense[:n], rtol=1e-12, atol=1e-12)
