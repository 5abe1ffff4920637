"""Layers written once in sparsad's language, run as framework ops: forward + backward time of the
GCN layer A_hat (X W) as the example writes it (X W in the framework, the aggregation A_hat H as
the program), of the same layer as one program ("gcn, one program": X W in compiled loops too),
and of a sparse attention layer (softmax over each node's neighbours; its backward is one joint
vjp program for Q, K and V), against torch.sparse, PyG-style scatter code
(index_add_; in JAX jax.ops.segment_sum, as jraph does), jax.experimental.sparse (BCOO) and
dense, on the Planetoid graphs (Cora, CiteSeer,
PubMed) from /work/shared/data. Single-threaded everywhere (torch, Numba, XLA).

    .venv/bin/python -m bench.frameworks [--quick] [--graphs=cora,pubmed] [--frameworks=jax] [--layers=sparse]
    .venv/bin/python -m bench.frameworks --interleaved [--graphs=cora]  # sparse-features A/B, interleaved
    sparsad bench frameworks

Writes bench/results/frameworks.csv and frameworks.png; "time / ours" is a row's time over the
`compile_program` time of the same layer and graph in the same framework (torch rows over
`sparsad.torch.compile_program`, JAX rows over `sparsad.jax.compile_program`), in the same run;
> 1 means ours is faster. Times are CPU time of the process (time.process_time; everything is
single-threaded), the minimum over the repeats: on a shared machine wall time mostly measures
the other jobs (a 3 ms step took 3 to 30 ms of wall time at a load of 20 on two cores). For our rows, "kernel ms" is the time spent inside
compiled programs (sparsad.compile calls: plan lookup plus kernel) and "bridge ms" the rest of
the step (autograd Function or JAX primitive, conversions, derivative dispatch); a small random
graph shows the fixed per-call overhead.

The row "sparsad.jax compile_program, host callbacks" runs the same JAX programs with
`lower=False`: the compiled kernels through host callbacks, the path used before programs were
lowered to XLA operations (sparsad.jax.lower); the row "..., always lowered" with `lower=True`:
XLA operations wherever the program allows, without the CPU cost rule of `lower="auto"` (the
default, sparsad.jax.lower.choice, which keeps the host call for a computation that would need
more than 32 MiB of temporary memory). Their "time / ours" is what the default gains over each.

The layer "gcn, sparse features" is Kipf & Welling's first GCN layer on each dataset's own
features, sparse as they are (bag-of-words rows, row-normalised; PubMed's shared copy lacks
`allx`, so only its 1,060 labelled and test rows have features): A_hat (X W) with X sparse,
gradient w.r.t. W. Ours is the example's two programs (FEATURES_LAYER: X W, then GCN_LAYER), also
as one program (GCN_LAYER_ONE_PROGRAM with X sparse) and through sparsad's spmm ops; every
competitor gets X sparse too (torch.sparse CSR and COO, index_add_ over X's entries then A_hat's,
X BCOO @ W then A_hat BCOO @ H, segment_sum). "SciPy's four CSR products alone" times the step's sparse
work with no framework at all (A_hat (X W) and X^T (A_hat^T G), transposes made beforehand): a
reference for how much of each step is the sparse products themselves (printed after the table).

The rows "X W alone (bound: no aggregation)" time the GCN step without its sparse part (X W and
its backward, the same GEMMs in every implementation): a competitor's time over that one bounds
what any aggregation kernel could gain over it (printed after the table; not plotted).
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from bench.common import RESULTS_DIR, print_table, write_csv  # noqa: E402

# the layers are the example's own programs: the bench times exactly what users are shown
from examples.frameworks_layers import (ATTENTION_LAYER, FEATURES_LAYER, GCN_LAYER,  # noqa: E402
                                        GCN_LAYER_ONE_PROGRAM, jax_row_max_scores, torch_row_max_scores)

ONE_PROGRAM = "gcn, one program"
#: Kipf & Welling's first GCN layer on the dataset's real (sparse, row-normalised) features:
#: A_hat (X W) with X sparse (n x features) and W dense (features x 16), gradient w.r.t. W
SPARSE_X = "gcn, sparse features"
#: the sparse-features layer as one program (X W and the aggregation in one compiled program)
SPARSE_X_ONE = "{} compile_program, one program"
#: the sparse-features step's four products (A_hat (X W) and X^T (A_hat^T G)) by SciPy's CSR
#: kernels, transposes made once, no framework: what the sparse work costs without any bridge,
#: autograd or conversion (a reference for the competitors' times; not plotted)
SCIPY_PRODUCTS = "SciPy's four CSR products alone (reference: no framework)"
#: sparsad.jax.compile_program(..., lower=False): the kernels through host callbacks, not XLA operations
HOST_CALLBACK = "sparsad.jax compile_program, host callbacks"
#: sparsad.jax.compile_program(..., lower=True): XLA operations wherever possible (no cost rule)
ALWAYS_LOWERED = "sparsad.jax compile_program, always lowered"
#: the GCN step with the aggregation left out (X W and its backward only): no implementation of
#: the layer can take less, so (competitor's time) / (this time) bounds any speed-up over it
DENSE_PART = "X W alone in {} (bound: no aggregation)"
DENSE_LIMIT = 5000  # the dense competitor only below this many nodes (n^2 doubles)


def graphs(quick: bool, only: list[str] | None = None) -> list[tuple[str, sp.csr_matrix, sp.csr_matrix]]:
    """(name, normalised adjacency with self loops, row-normalised sparse features) of real graphs
    (those present in the shared data), `only` those named when given (names as printed: cora,
    citeseer, pubmed, random-300). The features are the dataset's own (bag-of-words, PubMed's
    TF-IDF), row-normalised as Kipf & Welling's preprocessing does; random-300 gets a random
    sparse matrix of 300 x 500 at 1 %."""
    found = []
    from sparsad.torch.planetoid import load_planetoid

    for name in (["cora"] if quick else ["cora", "citeseer", "pubmed"]):
        if only is not None and name not in only:
            continue
        try:
            data = load_planetoid(name)
            found.append((name, data.adjacency, data.features))
        except Exception as error:  # noqa: BLE001 - absent data: the other graphs still run
            print(f"({name} unavailable: {error})")
    rng = np.random.default_rng(0)
    small = sp.random(300, 300, density=4.0 / 300, random_state=rng, format="csr")
    if only is None or "random-300" in only:  # kernels of microseconds: the bridge's fixed cost shows
        found.append(("random-300", small, sp.random(300, 500, density=0.01, random_state=rng, format="csr")))
    out = []
    for name, adjacency, features in found:
        adjacency = sp.csr_matrix((abs(adjacency) + abs(adjacency).T) > 0, dtype=np.float64)
        adjacency = sp.csr_matrix(adjacency + sp.eye(adjacency.shape[0]))
        scale = sp.diags(1.0 / np.sqrt(np.asarray(adjacency.sum(1)).ravel()))
        a_hat = sp.csr_matrix(scale @ adjacency @ scale)
        a_hat.sum_duplicates()
        a_hat.sort_indices()
        out.append((name, a_hat, row_normalised(features)))
    return out


def row_normalised(features: sp.spmatrix) -> sp.csr_matrix:
    """Each row divided by its sum (rows of zeros stay zero), float64, sorted indices, no
    explicit zeros: Kipf & Welling's `preprocess_features`."""
    features = sp.csr_matrix(features, dtype=np.float64)
    features.eliminate_zeros()
    sums = np.asarray(features.sum(1)).ravel()
    scaled = sp.csr_matrix(sp.diags(np.divide(1.0, sums, out=np.zeros_like(sums), where=sums != 0)) @ features)
    scaled.sum_duplicates()
    scaled.sort_indices()
    return scaled


# -- PyTorch competitors ----------------------------------------------------------------------------
def torch_cases(a_hat: sp.csr_matrix, features: int, hidden: int) -> dict:
    import warnings

    import torch

    import sparsad.torch as st

    n = a_hat.shape[0]
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(n, features, dtype=torch.float64, generator=gen)
    W = torch.randn(features, hidden, dtype=torch.float64, generator=gen, requires_grad=True)
    Q, K, V = (torch.randn(n, hidden, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(3))
    A = st.SparseMatrix.from_scipy(a_hat)
    rows = torch.as_tensor(A.pattern.rows)
    cols = torch.as_tensor(A.pattern.indices.astype(np.int64))
    vals = A.values.detach()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        A_csr = torch.sparse_csr_tensor(torch.as_tensor(a_hat.indptr, dtype=torch.int64), cols, vals, size=a_hat.shape)
    dense = torch.as_tensor(a_hat.toarray()) if n <= DENSE_LIMIT else None
    gcn = st.compile_program(GCN_LAYER, wrt=("H",), out_format="dense")
    gcn_one = st.compile_program(GCN_LAYER_ONE_PROGRAM, wrt=("W",), out_format="dense")
    attention = st.compile_program(ATTENTION_LAYER, wrt=("Q", "K", "V"), out_format="dense")

    def run(fn, *leaves):
        """(forward + backward step, forward value for the agreement check)."""
        def step():
            out = fn()
            torch.autograd.grad(out.square().sum(), leaves)
        return step, lambda: fn().detach().numpy()

    def scatter_gcn():
        H = X @ W
        return torch.zeros(n, hidden, dtype=H.dtype).index_add_(0, rows, vals[:, None] * H[cols])

    def scatter_attention():  # PyG-style: gather, per-row softmax by scatter, scatter-add
        scores = (Q[rows] * K[cols]).sum(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # index_reduce is "beta"
            top = torch.zeros(n, dtype=scores.dtype).index_reduce_(0, rows, scores.detach(), "amax",
                                                                    include_self=False)
        weights = (scores - top[rows]).exp()
        z = torch.zeros(n, dtype=scores.dtype).index_add_(0, rows, weights)
        return torch.zeros(n, hidden, dtype=scores.dtype).index_add_(0, rows, (weights / z[rows])[:, None] * V[cols])

    def dense_attention():
        scores = (Q @ K.T).masked_fill(dense == 0, float("-inf"))
        return torch.softmax(scores, 1) @ V

    cases = {
        ("gcn", "sparsad.torch.compile_program"): run(lambda: gcn(A=A, H=X @ W), W),
        ("gcn", "sparsad.torch (spmm op)"): run(lambda: A @ (X @ W), W),
        ("gcn", "torch.sparse (CSR mm)"): run(lambda: A_csr @ (X @ W), W),
        ("gcn", "index_add_ scatter"): run(scatter_gcn, W),
        ("gcn", DENSE_PART.format("torch")): run(lambda: X @ W, W),
        (ONE_PROGRAM, "sparsad.torch.compile_program"): run(lambda: gcn_one(A=A, X=X, W=W), W),
        # with each row's largest score subtracted, as the example does (and the scatter code)
        ("attention", "sparsad.torch.compile_program"):
            run(lambda: attention(A=A, Q=Q, K=K, V=V, M=torch_row_max_scores(A, Q, K)), Q, K, V),
        ("attention", "index_add_ scatter"): run(scatter_attention, Q, K, V),
    }
    if dense is not None:
        cases[("gcn", "dense torch")] = run(lambda: dense @ (X @ W), W)
        cases[("attention", "dense torch")] = run(dense_attention, Q, K, V)
    return cases


def torch_sparse_feature_cases(a_hat: sp.csr_matrix, x: sp.csr_matrix, hidden: int) -> dict:
    """The first GCN layer on the dataset's sparse features, A_hat (X W), gradient w.r.t. W, in
    PyTorch: ours (two programs, X W then the aggregation; and one program), the spmm op of
    sparsad.torch, torch.sparse CSR and COO, the index_add_ scatter and dense."""
    import warnings

    import torch

    import sparsad.torch as st

    n, features = x.shape
    W = torch.randn(features, hidden, dtype=torch.float64, generator=torch.Generator().manual_seed(1),
                    requires_grad=True)
    A, X = st.SparseMatrix.from_scipy(a_hat), st.SparseMatrix.from_scipy(x)
    product = st.compile_program(FEATURES_LAYER, wrt=("W",), out_format="dense")
    aggregate = st.compile_program(GCN_LAYER, wrt=("H",), out_format="dense")
    one = st.compile_program(GCN_LAYER_ONE_PROGRAM, wrt=("W",), out_format="dense")

    def csr(m):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
            return torch.sparse_csr_tensor(torch.as_tensor(m.indptr, dtype=torch.int64),
                                           torch.as_tensor(m.indices, dtype=torch.int64),
                                           torch.as_tensor(m.data), size=m.shape)

    def coo(m):
        m = m.tocoo()
        return torch.sparse_coo_tensor(torch.as_tensor(np.vstack([m.row, m.col]), dtype=torch.int64),
                                       torch.as_tensor(m.data), size=m.shape).coalesce()

    a_csr, x_csr, a_coo, x_coo = csr(a_hat), csr(x), coo(a_hat), coo(x)
    a_rows, a_cols, a_vals = (torch.as_tensor(v) for v in _coo_arrays(a_hat))
    x_rows, x_cols, x_vals = (torch.as_tensor(v) for v in _coo_arrays(x))

    def scatter():  # PyG-style: gather the rows of W, scale, index_add_; then the same over A_hat
        H = torch.zeros(n, hidden, dtype=W.dtype).index_add_(0, x_rows, x_vals[:, None] * W[x_cols])
        return torch.zeros(n, hidden, dtype=W.dtype).index_add_(0, a_rows, a_vals[:, None] * H[a_cols])

    def run(fn):
        def step():
            torch.autograd.grad(fn().square().sum(), (W,))
        return step, lambda: fn().detach().numpy()

    x_t, a_t = sp.csr_matrix(x.T), sp.csr_matrix(a_hat.T)  # transposed once, outside the step
    W_np = W.detach().numpy()

    def scipy_products():  # the step's four sparse products alone: no autograd, no conversions
        out = a_hat @ (x @ W_np)
        x_t @ (a_t @ (2.0 * out))
        return out

    cases = {
        (SPARSE_X, "sparsad.torch.compile_program"): run(lambda: aggregate(A=A, H=product(X=X, W=W))),
        (SPARSE_X, SPARSE_X_ONE.format("sparsad.torch")): run(lambda: one(A=A, X=X, W=W)),
        (SPARSE_X, "sparsad.torch (spmm op)"): run(lambda: A @ (X @ W)),
        (SPARSE_X, "torch.sparse (CSR mm)"): run(lambda: a_csr @ (x_csr @ W)),
        (SPARSE_X, "torch.sparse (COO mm)"): run(lambda: torch.sparse.mm(a_coo, torch.sparse.mm(x_coo, W))),
        (SPARSE_X, "index_add_ scatter"): run(scatter),
        (SPARSE_X, SCIPY_PRODUCTS): (scipy_products, scipy_products),
    }
    if n <= DENSE_LIMIT:
        a_dense, x_dense = torch.as_tensor(a_hat.toarray()), torch.as_tensor(x.toarray())
        cases[(SPARSE_X, "dense torch")] = run(lambda: a_dense @ (x_dense @ W))
    return cases


def _coo_arrays(m: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, columns as int64, values) of a CSR matrix's stored entries, in row order."""
    rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    return rows, m.indices.astype(np.int64), np.asarray(m.data, dtype=np.float64)


# -- JAX competitors ---------------------------------------------------------------------------------
def jax_cases(a_hat: sp.csr_matrix, features: int, hidden: int) -> dict:
    import jax
    import jax.numpy as jnp
    from jax.experimental import sparse as jsparse

    import sparsad.jax as sj

    n = a_hat.shape[0]
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.standard_normal((n, features)))
    W = jnp.asarray(rng.standard_normal((features, hidden)))
    Q, K, V = (jnp.asarray(rng.standard_normal((n, hidden))) for _ in range(3))
    A = sj.SparseMatrix.from_scipy(a_hat, dtype=np.float64)
    bcoo = jsparse.BCOO.from_scipy_sparse(a_hat)
    rows = bcoo.indices[:, 0]
    dense = jnp.asarray(a_hat.toarray()) if n <= DENSE_LIMIT else None
    gcn = sj.compile_program(GCN_LAYER, wrt=("H",))
    gcn_one = sj.compile_program(GCN_LAYER_ONE_PROGRAM, wrt=("W",))
    attention = sj.compile_program(ATTENTION_LAYER, wrt=("Q", "K", "V", "M"))
    # the same programs through host callbacks (lower=False): the path before sparsad.jax.lower
    gcn_host = sj.compile_program(GCN_LAYER, wrt=("H",), lower=False)
    attention_host = sj.compile_program(ATTENTION_LAYER, wrt=("Q", "K", "V", "M"), lower=False)
    # and always lowered (lower=True): XLA operations even where the CPU cost rule keeps the host call
    gcn_always = sj.compile_program(GCN_LAYER, wrt=("H",), lower=True)
    attention_always = sj.compile_program(ATTENTION_LAYER, wrt=("Q", "K", "V", "M"), lower=True)

    def bcoo_attention(Q, K, V):
        # scores on the pattern (SDDMM), softmax by row through BCOO row sums, then BCOO @ V
        scores = jsparse.bcoo_dot_general_sampled(Q, K.T, bcoo.indices, dimension_numbers=(([1], [0]), ([], [])))
        weights = jnp.exp(scores)
        z = jsparse.BCOO((weights, bcoo.indices), shape=bcoo.shape) @ jnp.ones(n)
        return jsparse.BCOO((weights / z[rows], bcoo.indices), shape=bcoo.shape) @ V

    cols = jnp.asarray(a_hat.indices.astype(np.int64))
    vals = jnp.asarray(a_hat.data)
    rows_sorted = jnp.asarray(np.repeat(np.arange(n), np.diff(a_hat.indptr)))

    def segment_gcn(W):  # jraph-style: gather, scale, segment_sum
        return jax.ops.segment_sum(vals[:, None] * (X @ W)[cols], rows_sorted, n, indices_are_sorted=True)

    def segment_attention(Q, K, V):
        weights = jnp.exp(jnp.sum(Q[rows_sorted] * K[cols], 1))
        z = jax.ops.segment_sum(weights, rows_sorted, n, indices_are_sorted=True)
        return jax.ops.segment_sum((weights / z[rows_sorted])[:, None] * V[cols], rows_sorted, n,
                                   indices_are_sorted=True)

    def dense_attention(Q, K, V):
        scores = jnp.where(dense != 0, Q @ K.T, -jnp.inf)
        return jax.nn.softmax(scores, axis=1) @ V

    def timed(forward, *leaves):
        step = jax.jit(jax.grad(lambda *xs: jnp.sum(forward(*xs) ** 2), argnums=tuple(range(len(leaves)))))
        return (lambda: jax.block_until_ready(step(*leaves))), lambda: np.asarray(forward(*leaves))

    cases = {
        ("gcn", "sparsad.jax.compile_program"): timed(lambda W: gcn(A=A, H=X @ W), W),
        ("gcn", HOST_CALLBACK): timed(lambda W: gcn_host(A=A, H=X @ W), W),
        ("gcn", ALWAYS_LOWERED): timed(lambda W: gcn_always(A=A, H=X @ W), W),
        ("gcn", "sparsad.jax (spmm op)"): timed(lambda W: sj.spmm(A, X @ W), W),
        ("gcn", "jax.experimental.sparse BCOO"): timed(lambda W: bcoo @ (X @ W), W),
        ("gcn", "jax segment_sum scatter"): timed(segment_gcn, W),
        ("gcn", DENSE_PART.format("jax.numpy")): timed(lambda W: X @ W, W),
        (ONE_PROGRAM, "sparsad.jax.compile_program"): timed(lambda W: gcn_one(A=A, X=X, W=W), W),
        ("attention", "sparsad.jax.compile_program"):
            timed(lambda Q, K, V: attention(A=A, Q=Q, K=K, V=V, M=jax_row_max_scores(A, Q, K)), Q, K, V),
        ("attention", HOST_CALLBACK):
            timed(lambda Q, K, V: attention_host(A=A, Q=Q, K=K, V=V, M=jax_row_max_scores(A, Q, K)), Q, K, V),
        ("attention", ALWAYS_LOWERED):
            timed(lambda Q, K, V: attention_always(A=A, Q=Q, K=K, V=V, M=jax_row_max_scores(A, Q, K)), Q, K, V),
        ("attention", "jax segment_sum scatter"): timed(segment_attention, Q, K, V),
    }
    if dense is not None:
        # BCOO's SDDMM (bcoo_dot_general_sampled) transposes through bcoo_todense: its gradient
        # holds n x n dense matrices (6 GB on PubMed), so it runs where dense does
        cases[("attention", "jax.experimental.sparse BCOO")] = timed(bcoo_attention, Q, K, V)
        cases[("gcn", "dense jax.numpy")] = timed(lambda W: dense @ (X @ W), W)
        cases[("attention", "dense jax.numpy")] = timed(dense_attention, Q, K, V)
    return cases


def jax_sparse_feature_cases(a_hat: sp.csr_matrix, x: sp.csr_matrix, hidden: int) -> dict:
    """The first GCN layer on the dataset's sparse features, A_hat (X W), gradient w.r.t. W, in
    JAX under jit(grad): ours (two programs; one program; host callbacks; always lowered), sparsad.jax.spmm,
    jax.experimental.sparse BCOO (X @ W, then A_hat @ H), jraph-style segment_sum and dense."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import sparse as jsparse

    import sparsad.jax as sj

    n, features = x.shape
    W = jnp.asarray(np.random.default_rng(1).standard_normal((features, hidden)))
    A, X = sj.SparseMatrix.from_scipy(a_hat, dtype=np.float64), sj.SparseMatrix.from_scipy(x, dtype=np.float64)
    a_bcoo, x_bcoo = jsparse.BCOO.from_scipy_sparse(a_hat), jsparse.BCOO.from_scipy_sparse(x)
    product = sj.compile_program(FEATURES_LAYER, wrt=("W",))
    aggregate = sj.compile_program(GCN_LAYER, wrt=("H",))
    one = sj.compile_program(GCN_LAYER_ONE_PROGRAM, wrt=("W",))
    product_host = sj.compile_program(FEATURES_LAYER, wrt=("W",), lower=False)
    aggregate_host = sj.compile_program(GCN_LAYER, wrt=("H",), lower=False)
    product_always = sj.compile_program(FEATURES_LAYER, wrt=("W",), lower=True)
    aggregate_always = sj.compile_program(GCN_LAYER, wrt=("H",), lower=True)
    a_rows, a_cols, a_vals = (jnp.asarray(v) for v in _coo_arrays(a_hat))
    x_rows, x_cols, x_vals = (jnp.asarray(v) for v in _coo_arrays(x))

    def segment(W):  # jraph-style: gather, scale, segment_sum (indices sorted by row)
        H = jax.ops.segment_sum(x_vals[:, None] * W[x_cols], x_rows, n, indices_are_sorted=True)
        return jax.ops.segment_sum(a_vals[:, None] * H[a_cols], a_rows, n, indices_are_sorted=True)

    def timed(forward):
        step = jax.jit(jax.grad(lambda W: jnp.sum(forward(W) ** 2)))
        return (lambda: jax.block_until_ready(step(W))), lambda: np.asarray(forward(W))

    cases = {
        (SPARSE_X, "sparsad.jax.compile_program"): timed(lambda W: aggregate(A=A, H=product(X=X, W=W))),
        (SPARSE_X, SPARSE_X_ONE.format("sparsad.jax")): timed(lambda W: one(A=A, X=X, W=W)),
        (SPARSE_X, HOST_CALLBACK): timed(lambda W: aggregate_host(A=A, H=product_host(X=X, W=W))),
        (SPARSE_X, ALWAYS_LOWERED): timed(lambda W: aggregate_always(A=A, H=product_always(X=X, W=W))),
        (SPARSE_X, "sparsad.jax (spmm op)"): timed(lambda W: sj.spmm(A, sj.spmm(X, W))),
        (SPARSE_X, "jax.experimental.sparse BCOO"): timed(lambda W: a_bcoo @ (x_bcoo @ W)),
        (SPARSE_X, "jax segment_sum scatter"): timed(segment),
    }
    if n <= DENSE_LIMIT:
        a_dense, x_dense = jnp.asarray(a_hat.toarray()), jnp.asarray(x.toarray())
        cases[(SPARSE_X, "dense jax.numpy")] = timed(lambda W: a_dense @ (x_dense @ W))
    return cases


def cpu_time(step, repeat: int, warmup: int = 2, budget_s: float = 20.0) -> float:
    """Minimum CPU seconds of the process over `repeat` calls of `step` after `warmup` calls
    (stops early past `budget_s` of wall time)."""
    import time

    for _ in range(warmup):
        step()
    best, start = float("inf"), time.perf_counter()
    for _ in range(repeat):
        t0 = time.process_time()
        step()
        best = min(best, time.process_time() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return best


def kernel_split(step, repeat: int) -> tuple[float, float]:
    """(CPU seconds inside compiled programs, CPU seconds elsewhere) of the call of `step` with
    the least CPU time among `repeat` calls after one warm-up."""
    import time

    import sparsad.compiler as compiler

    original = compiler.CompiledProgram.__call__
    spent = [0.0]

    def clocked(self, *args, **kwargs):
        start = time.process_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent[0] += time.process_time() - start

    compiler.CompiledProgram.__call__ = clocked
    best = (float("inf"), 0.0)
    try:
        step()
        for _ in range(repeat):
            spent[0] = 0.0
            start = time.process_time()
            step()
            total = time.process_time() - start
            if total < best[0]:
                best = (total, spent[0])
    finally:
        compiler.CompiledProgram.__call__ = original
    return best[1], best[0] - best[1]


def _is_bound(impl: str) -> bool:
    return impl.endswith("(bound: no aggregation)")


def _is_reference(impl: str) -> bool:
    """A row that is no competitor (a bound, or SciPy's products alone): not plotted."""
    return _is_bound(impl) or impl == SCIPY_PRODUCTS


def print_bounds(rows: list[dict]) -> None:
    """For the GCN layer: the most any implementation of it could gain over each competitor, the
    competitor's time over the time of the step without the aggregation (X W and its backward,
    which every implementation runs as the same GEMMs), and how much of that ours reaches."""
    print("\nGCN: the largest speed-up any aggregation kernel could give over a competitor is its time "
          "over the step without aggregation (X W alone):")
    for row in rows:
        if row["layer"] != "gcn" or not _is_bound(row["impl"]):
            continue
        same = [r for r in rows if r["matrix"] == row["matrix"] and r["layer"] == "gcn"
                and r["framework"] == row["framework"] and not _is_bound(r["impl"])]
        parts = [f"{r['impl']} <= {r['cpu ms'] / row['cpu ms']:.2f}x (ours: {r['time / ours']:.2f}x)"
                 for r in same if not r["impl"].endswith("compile_program") and "dense" not in r["impl"]]
        print(f"  {row['matrix']} ({row['framework']}): X W alone {row['cpu ms']:.3f} ms; " + "; ".join(parts))
    references = [r for r in rows if r["impl"] == SCIPY_PRODUCTS]
    if references:
        print("\nGCN on sparse features: each step's time over the least time of the four sparse products "
              "alone (SciPy's CSR kernels with no framework, or our PyTorch step's compiled kernels):")
    for ref in references:
        same = [r for r in rows if r["matrix"] == ref["matrix"] and r["layer"] == SPARSE_X and r is not ref
                and "dense" not in r["impl"]]
        # our PyTorch step runs all four products as compiled kernels (JAX's may lower some to XLA)
        kernels = [float(r["kernel ms"]) for r in same if r["impl"] == "sparsad.torch.compile_program"]
        floor = min([ref["cpu ms"], *kernels])
        parts = [f"{r['impl']} {r['cpu ms']:.3f} ms = {r['cpu ms'] / floor:.2f}x" for r in same]
        print(f"  {ref['matrix']}: SciPy's products {ref['cpu ms']:.3f} ms, least sparse work {floor:.3f} ms; "
              + "; ".join(parts))


def plot_ratios(rows: list[dict]):
    """Horizontal bars, one per competitor row: its time over our same-framework time (log
    scale; right of 1: ours faster), grouped by graph and layer; written to frameworks.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if not r["impl"].endswith("compile_program") and not _is_reference(r["impl"])]
    fig, ax = plt.subplots(figsize=(8.0, 0.6 + 0.19 * len(shown)))
    labels = [f"{r['matrix']} {r['layer']}: {r['impl']}" for r in shown]
    ratios = [float(r["time / ours"]) for r in shown]
    colors = ["tab:green" if x >= 1 else "tab:red" for x in ratios]
    ax.barh(range(len(shown)), ratios, color=colors)
    ax.set_yticks(range(len(shown)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("competitor / our compile_program, CPU time (same framework; > 1: ours faster)", fontsize=8)
    ax.set_title("forward + backward, single thread", fontsize=9)
    fig.tight_layout()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / "frameworks.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


#: --layers=dense: the layers on 64 random dense features (gcn, one program, attention);
#: --layers=sparse: the GCN layer on the datasets' sparse features
LAYER_GROUPS = ("dense", "sparse")


def main(quick: bool = False, only: list[str] | None = None, frameworks: tuple[str, ...] = ("torch", "jax"),
         layers: tuple[str, ...] = LAYER_GROUPS) -> None:
    """Run the bench (`only`: these graphs; `frameworks`: "torch" and/or "jax" rows; `layers`:
    "dense" and/or "sparse", see LAYER_GROUPS)."""
    import torch

    torch.set_num_threads(1)
    try:
        import numba

        numba.set_num_threads(1)
    except Exception:  # noqa: BLE001
        pass
    features, hidden = (32, 16) if quick else (64, 16)
    rows = []
    for name, a_hat, x in graphs(quick, only):
        load = os.getloadavg()[0]  # the machine is shared: the 1-minute load average, per graph
        print(f"{name}: n={a_hat.shape[0]}, nnz={a_hat.nnz}, features {x.shape[1]} with nnz={x.nnz} "
              f"(load average {load:.1f})", flush=True)
        makers = {"torch": [], "jax": []}
        if "dense" in layers:
            makers["torch"].append(lambda: torch_cases(a_hat, features, hidden))
            makers["jax"].append(lambda: jax_cases(a_hat, features, hidden))
        if "sparse" in layers:
            makers["torch"].append(lambda: torch_sparse_feature_cases(a_hat, x, hidden))
            makers["jax"].append(lambda: jax_sparse_feature_cases(a_hat, x, hidden))
        times, values, split = {}, {}, {}
        import jax

        for framework in ("torch", "jax"):
            if framework not in frameworks:
                continue
            with jax.enable_x64(True):
                for make in makers[framework]:
                    for key, (step, value) in make().items():
                        times[key] = cpu_time(step, repeat=5 if quick else 15, budget_s=5 if quick else 20)
                        values[key] = value()
                        if "compile_program" in key[1]:
                            split[key] = kernel_split(step, 5 if quick else 10)
        for layer, impl in [key for key in times if key[0] == "gcn" and "compile_program" not in key[1]]:
            # the one-program layer computes the same function: its competitors are the gcn rows'
            framework = "jax" if "jax" in impl else "torch"
            if (ONE_PROGRAM, f"sparsad.{framework}.compile_program") in times:
                times[(ONE_PROGRAM, impl)], values[(ONE_PROGRAM, impl)] = times[(layer, impl)], values[(layer, impl)]
        for (layer, impl), seconds in times.items():
            framework = "jax" if "jax" in impl else "torch"
            # each framework's rows against its own compile_program (the JAX cases draw their own inputs)
            ours = (layer, f"sparsad.{framework}.compile_program")
            reference = values[ours]
            error = None if _is_bound(impl) else float(np.max(np.abs(values[(layer, impl)] - reference)))
            scale = float(np.max(np.abs(reference))) if reference.size else 0.0
            if error is not None and not error <= 1e-9 * max(1.0, scale):  # float64 throughout
                raise AssertionError(f"{name} {layer}: {impl} differs from ours by {error:.3g} (largest |value| {scale:.3g})")
            rows.append({"matrix": name, "n": a_hat.shape[0], "nnz": a_hat.nnz, "layer": layer,
                         "features nnz": x.nnz if layer == SPARSE_X else "",
                         "framework": framework, "impl": impl,
                         "cpu ms": 1e3 * seconds, "time / ours": seconds / times[ours], "load avg": round(load, 1),
                         "kernel ms": 1e3 * split[(layer, impl)][0] if (layer, impl) in split else "",
                         "bridge ms": 1e3 * split[(layer, impl)][1] if (layer, impl) in split else "",
                         "max |value - ours|": "" if error is None else error})
    print_table(rows, ["matrix", "nnz", "layer", "impl", "cpu ms", "time / ours", "kernel ms", "bridge ms",
                       "max |value - ours|", "load avg"])
    print_bounds(rows)
    path = write_csv("frameworks", rows)
    plot = plot_ratios(rows)
    print(f"wrote {path} and {plot}")


def interleaved_sparse_features(only: list[str] | None = None, rounds: int = 5) -> None:
    """The sparse-features GCN step as an interleaved A/B in one process: every case in turn,
    `rounds` times, each case's least CPU time over the rounds (a shared machine's load moves
    between rounds, not within one turn). Prints one line per graph; writes nothing."""
    import jax
    import torch

    torch.set_num_threads(1)
    with jax.enable_x64(True):
        for name, a_hat, x in graphs(False, only):
            cases = {**torch_sparse_feature_cases(a_hat, x, 16), **jax_sparse_feature_cases(a_hat, x, 16)}
            cases = {impl: step for (_, impl), (step, _) in cases.items() if "dense" not in impl}
            best, loads = dict.fromkeys(cases, float("inf")), []
            for _ in range(rounds):
                loads.append(os.getloadavg()[0])
                for impl, step in cases.items():
                    best[impl] = min(best[impl], cpu_time(step, repeat=8, warmup=1, budget_s=4))
            print(f"{name} (load {min(loads):.1f}-{max(loads):.1f}), CPU ms: "
                  + "; ".join(f"{impl} {1e3 * t:.3f}" for impl, t in best.items()), flush=True)


def _listed(flag: str) -> list[str] | None:
    """The comma-separated values of `--flag=a,b` on the command line, or None."""
    for arg in sys.argv[1:]:
        if arg.startswith(f"--{flag}="):
            return [v for v in arg.split("=", 1)[1].split(",") if v]
    return None


if __name__ == "__main__" and "--interleaved" in sys.argv:  # the sparse-features A/B (docs/benchmarks.md)
    interleaved_sparse_features(only=_listed("graphs"))
elif __name__ == "__main__":
    main(quick="--quick" in sys.argv, only=_listed("graphs"), frameworks=tuple(_listed("frameworks") or ("torch", "jax")),
         layers=tuple(_listed("layers") or LAYER_GROUPS))
