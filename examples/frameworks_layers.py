"""A GCN layer and a sparse (graph) attention layer written once in sparsad's language, trained
in PyTorch (`sparsad.torch.compile_program`) and in a JAX/Optax loop (`sparsad.jax.compile_program`).

Model: logits = Attention(A, Q=H Wq, K=H Wk, V=H Wv) with H = relu(A_hat (X W1)), trained on node
labels with cross-entropy and Adam. Cora (Planetoid) when the shared data folder has it, else a
random graph; `small=True` runs a tiny random graph for the tests.

The node features X are sparse, as the datasets' bag-of-words rows are (Cora: 2,708 x 1,433, 1.3 %
stored), and the first layer is Kipf & Welling's: X W1 is a sparse-times-dense product
(`FEATURES_LAYER`, a program), then the aggregation A_hat H (`GCN_LAYER`), each compiled once
with its vjp program. With dense inputs instead (a hidden layer), users of torch.sparse
(`A @ (X @ W)`) and PyG (a linear layer, then message passing) compute X W in the framework (its
BLAS GEMM) and only the aggregation as the program. `GCN_LAYER_ONE_PROGRAM` is the whole layer as
one program; it computes the same values (for sparse or dense X), and `compile_program` cuts it
at its let (`sparsad.opt.stages`), so the backward pass reuses the forward's X W instead of
recomputing it (see docs/benchmarks.md for the cost).

    python examples/frameworks_layers.py
"""
from __future__ import annotations

import weakref

import numpy as np
import scipy.sparse as sp

#: A_hat H, the GCN aggregation (H = X W computed by the framework): one program, any framework.
GCN_LAYER = "sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<c, h> in H(k)) { c -> a * h } }"

#: X W for sparse features X (rows of stored words) and dense weights W: the first layer's product.
FEATURES_LAYER = "sum(<k, xr> in X) { k -> sum(<f, x> in xr) sum(<c, w> in W(f)) { c -> x * w } }"

#: A_hat (X W) as one program (the benchmark's "one program" row).
GCN_LAYER_ONE_PROGRAM = """
let XW = sum(<k, xr> in X) { k -> sum(<f, x> in xr) sum(<c, w> in W(f)) { c -> x * w } } in
sum(<i, r> in A) { i -> sum(<k, a> in r) sum(<c, v> in XW(k)) { c -> a * v } }"""

#: softmax over each row's stored neighbours of q_i . k_j, applied to V. M(i) is any per-row
#: constant (the softmax does not depend on it); each row's largest score, as PyG's softmax
#: subtracts, keeps exp from overflowing once training has grown the scores.
ATTENTION_LAYER = """
sum(<i, r> in A) { i ->
  let z = sum(<j, a> in r) exp((sum(<d, q> in Q(i)) q * K(j)(d)) - M(i)) in
  sum(<j, a> in r)
    let p = exp((sum(<d, q> in Q(i)) q * K(j)(d)) - M(i)) / z in
    sum(<c, v> in V(j)) { c -> p * v } }"""


def graph(small: bool, seed: int = 0):
    """(normalised adjacency with self loops, sparse row-normalised features (CSR), labels, classes)."""
    rng = np.random.default_rng(seed)
    data = None
    if not small:
        try:
            from sparsad.torch.planetoid import load_planetoid

            data = load_planetoid("cora")
        except Exception:  # noqa: BLE001 - no shared data: a random graph instead
            data = None
    if data is not None:
        adjacency, features, labels = data.adjacency, data.features, data.labels
    else:
        n = 12 if small else 500
        adjacency = sp.random(n, n, density=3.0 / n, random_state=seed, format="csr")
        adjacency = ((adjacency + adjacency.T) > 0).astype(np.float64)
        features = sp.random(n, 10 if small else 200, density=0.3 if small else 0.05, random_state=rng,
                             data_rvs=lambda k: rng.uniform(0.5, 1.5, k))
        labels = rng.integers(0, 3, n)
    adjacency = sp.csr_matrix(adjacency + sp.eye(adjacency.shape[0]))
    degree = np.asarray(adjacency.sum(1)).ravel()
    scale = sp.diags(1.0 / np.sqrt(degree))
    a_hat = sp.csr_matrix(scale @ adjacency @ scale)
    a_hat.sort_indices()
    features = sp.csr_matrix(features, dtype=np.float64)
    sums = np.asarray(features.sum(1)).ravel()  # Kipf & Welling's row normalisation (empty rows stay 0)
    features = sp.csr_matrix(sp.diags(np.divide(1.0, sums, out=np.zeros_like(sums), where=sums != 0)) @ features)
    features.sort_indices()
    return a_hat, features, np.asarray(labels), int(np.max(labels)) + 1


def init(features: int, hidden: int, heads: int, classes: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    glorot = lambda a, b: rng.uniform(-1, 1, (a, b)) * np.sqrt(6.0 / (a + b))  # noqa: E731
    return {"W1": glorot(features, hidden), "Wq": glorot(hidden, heads), "Wk": glorot(hidden, heads),
            "Wv": glorot(hidden, classes)}


# -- PyTorch ---------------------------------------------------------------------------------------
def torch_model():
    import torch

    import sparsad.torch as st

    features = st.compile_program(FEATURES_LAYER, wrt=("W",), out_format="dense")
    gcn = st.compile_program(GCN_LAYER, wrt=("H",), out_format="dense")
    attention = st.compile_program(ATTENTION_LAYER, wrt=("Q", "K", "V"), out_format="dense")

    def forward(A, X, params):  # A, X: sparsad.torch.SparseMatrix
        hidden = torch.relu(gcn(A=A, H=features(X=X, W=params["W1"])))
        Q, K, V = hidden @ params["Wq"], hidden @ params["Wk"], hidden @ params["Wv"]
        return attention(A=A, Q=Q, K=K, V=V, M=torch_row_max_scores(A, Q, K))

    return forward


#: the scores q_i . k_j on A's stored pattern (an SDDMM): their maximum per row is M
SCORES = "sum(<i, r> in A) { i -> sum(<j, a> in r) { j -> sum(<d, q> in Q(i)) q * K(j)(d) } }"

_SCORES: list = []  # the compiled SCORES program (made at first use)
_PATTERNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # CSRPattern -> StoredTensor


def _pattern_input(pattern):
    """A's pattern (values 1) as a StoredTensor, made and validated once per pattern."""
    from sparsad.formats import CSR, StoredTensor

    stored = _PATTERNS.get(pattern)
    if stored is None:
        stored = _PATTERNS[pattern] = StoredTensor(CSR, pattern.shape, {
            "len": pattern.shape[0], "pos": pattern.indptr, "idx": pattern.indices, "val": np.ones(pattern.nnz)})
    return stored


def torch_row_max_scores(A, Q, K):
    """Each row's largest q_i . k_j over its stored neighbours j (a constant: no gradient): the
    scores on A's pattern by the compiled SCORES program on the tensors' NumPy views (about
    twice as fast as torch.sparse.sampled_addmm here), then torch's maximum per row."""
    import torch

    import sparsad
    import sparsad.torch as st

    if torch.compiler.is_compiling():  # (NumPy cannot enter a torch.compile graph) torch gathers and a scatter
        rows, cols = st.coo_indices(A)
        scores = (Q.detach()[rows] * K.detach()[cols]).sum(1)
        empty = torch.full((A.shape[0],), float("-inf"), dtype=scores.dtype)
        return empty.scatter_reduce(0, rows, scores, "amax")
    if not _SCORES:
        _SCORES.append(sparsad.compile(SCORES))
    scores = _SCORES[0](A=_pattern_input(A.pattern), Q=Q.detach().numpy(), K=K.detach().numpy())
    # the rows of the result's own pattern (A's, unless an entry were not stored)
    return torch.segment_reduce(torch.from_numpy(scores.data), "max",
                                offsets=torch.from_numpy(scores.indptr.astype(np.int64)))


def torch_dense_model():
    """The same model on dense tensors, A and X dense (the reference for gradients)."""
    import torch

    def forward(A, X, params):
        hidden = torch.relu(A @ (X @ params["W1"]))
        scores = (hidden @ params["Wq"]) @ (hidden @ params["Wk"]).T
        scores = scores.masked_fill(A == 0, float("-inf"))
        return torch.softmax(scores, 1) @ (hidden @ params["Wv"])

    return forward


def train_torch(small: bool = True, epochs: int = 30, lr: float = 0.05) -> dict:
    import torch

    import sparsad.torch as st

    a_hat, features, labels, classes = graph(small)
    A, X = st.SparseMatrix.from_scipy(a_hat), st.SparseMatrix.from_scipy(features)
    y = torch.as_tensor(labels)
    params = {k: torch.tensor(v, requires_grad=True) for k, v in init(X.shape[1], 16, 8, classes).items()}
    forward = torch_model()
    optimizer = torch.optim.Adam(params.values(), lr=lr)
    history = []
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward(A, X, params), y)
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    return {"history": history, "params": params}


# -- JAX / Optax -----------------------------------------------------------------------------------
def jax_model():
    import jax

    import sparsad.jax as sj

    features = sj.compile_program(FEATURES_LAYER, wrt=("W",))
    gcn = sj.compile_program(GCN_LAYER, wrt=("H",))
    # M is an argument of the traced function: it is differentiable input (its tangent is zero)
    attention = sj.compile_program(ATTENTION_LAYER, wrt=("Q", "K", "V", "M"))

    def forward(A, X, params):  # A, X: sparsad.jax.SparseMatrix
        hidden = jax.nn.relu(gcn(A=A, H=features(X=X, W=params["W1"])))
        Q, K, V = hidden @ params["Wq"], hidden @ params["Wk"], hidden @ params["Wv"]
        return attention(A=A, Q=Q, K=K, V=V, M=jax_row_max_scores(A, Q, K))

    return forward


def jax_dense_model():
    """The same model on dense arrays, A and X dense (the reference for gradients)."""
    import jax
    import jax.numpy as jnp

    def forward(A, X, params):
        hidden = jax.nn.relu(A @ (X @ params["W1"]))
        scores = jnp.where(A != 0, (hidden @ params["Wq"]) @ (hidden @ params["Wk"]).T, -jnp.inf)
        return jax.nn.softmax(scores, axis=1) @ (hidden @ params["Wv"])

    return forward


def jax_row_max_scores(A, Q, K):
    """Each row's largest q_i . k_j over its stored neighbours j (stop_gradient: a constant)."""
    import jax

    rows, cols = A.pattern.rows, A.pattern.indices.astype(np.int64)
    scores = jax.lax.stop_gradient((Q[rows] * K[cols]).sum(1))
    return jax.ops.segment_max(scores, rows, num_segments=A.shape[0], indices_are_sorted=True)


def train_jax(small: bool = True, epochs: int = 30, lr: float = 0.05) -> dict:
    """Needs float64 for the 1e-10 comparisons: run inside `with jax.enable_x64(True):`."""
    import jax
    import jax.numpy as jnp
    import optax

    import sparsad.jax as sj

    a_hat, features, labels, classes = graph(small)
    A, X = sj.SparseMatrix.from_scipy(a_hat), sj.SparseMatrix.from_scipy(features)
    y = jnp.asarray(labels)
    params = {k: jnp.asarray(v) for k, v in init(X.shape[1], 16, 8, classes).items()}
    forward = jax_model()

    def loss_fn(params):
        return optax.softmax_cross_entropy_with_integer_labels(forward(A, X, params), y).mean()

    optimizer = optax.adam(lr)
    state = optimizer.init(params)

    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, state = optimizer.update(grads, state)
        return optax.apply_updates(params, updates), state, loss

    history = []
    for _ in range(epochs):
        params, state, loss = step(params, state)
        history.append(float(loss))
    return {"history": history, "params": params}


def main(small: bool = False) -> dict:
    import time

    import jax

    start = time.perf_counter()
    torch_run = train_torch(small, epochs=10 if small else 100)
    print(f"PyTorch: loss {torch_run['history'][0]:.4f} -> {torch_run['history'][-1]:.4f} "
          f"({time.perf_counter() - start:.1f} s)")
    start = time.perf_counter()
    with jax.enable_x64(True):
        jax_run = train_jax(small, epochs=10 if small else 100)
    print(f"JAX/Optax: loss {jax_run['history'][0]:.4f} -> {jax_run['history'][-1]:.4f} "
          f"({time.perf_counter() - start:.1f} s)")
    return {"torch": torch_run, "jax": jax_run}


if __name__ == "__main__":
    main()
