"""∇SD's benchmark (§7, Table 1, Figs. 11-16): the six gradient computations compiled by sparsad
against PyTorch and JAX (dense reverse/forward mode, and their own sparse autograd where it works)
and a hand-written SciPy closed form of each derivative. Single-threaded.

    cd /work/main && .venv/bin/python -m bench.nablasd [--quick]
    .venv/bin/python -m bench.nablasd --smvm-scipy   # SMVM's gradient on scipy inputs vs SciPy (issue 11)
    .venv/bin/python -m bench.nablasd --call-overhead   # per-call cost of small derivatives (issue 11)

Writes bench/results/nablasd.csv and nablasd_*.png, prints the table and a "targets" section
(issue 4, part 6). docs/bench_nablasd.md explains how to read them.
"""
from __future__ import annotations

import os

import sys

# Single-threaded competitors: these must be set before numba / jax are first imported. Once
# numba is loaded (inside a test run), changing the variable would make numba refuse to compile,
# so then `_main` lowers the thread count with numba.set_num_threads instead.
if "numba" not in sys.modules:
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
_XLA_SINGLE = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
if _XLA_SINGLE not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _XLA_SINGLE).strip()

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from bench.common import best_time, plot_bars, plot_lines, print_table, write_csv

SUITE = "nablasd"
KERNELS = {  # name -> (sparsad API, wrt): the six §7 gradient computations
    "batax": ("jacobian", "x"), "smmm": ("grad", "B"), "smvm": ("grad", "X"),
    "vva": ("jacobian", "V1"), "vvd": ("grad", "V1"), "vsm": ("jacobian", "s"),
}
MATRIX_KERNELS = ("batax", "smmm", "smvm")
VECTOR_KERNELS = ("vva", "vvd", "vsm")
TOOLS = ("sparsad", "scipy", "torch-dense", "torch-sparse", "jax-dense", "jax-bcoo")
REAL_MATRICES = ("HB/bcspwr10", "Gaertner/nopoly", "DIMACS10/fe_4elt2", "HB/bcsstk25", "HB/bcsstk16")
TABLE1 = ("Williams/pdb1HYS", "Bova/rma10", "Williams/cant", "Williams/consph", "Williams/cop20k_A")
ABLATION = {  # §7.4 / Fig. 16: which optional passes run
    "no-opt": set(), "norm": {"normalize"}, "norm+dps": {"normalize", "dps"},
    "full": {"aggregate", "eqsat", "normalize", "dps", "cse", "hoist", "interchange"},
}
DENSE_LIMIT_BYTES = 2 * 1024**3  # a dense operand (or dense Jacobian) above this: "too large"
MAX_NNZ = 20_000_000  # synthetic matrices above this many entries are not generated
MAX_BATAX_OUT = 12_000_000  # BATAx's output A^T A above this many entries is not attempted


@dataclass
class Config:
    quick: bool
    repeat: int = 5
    budget_s: float = 1.0  # repeats of one measurement stop past this
    cap_s: float = 5.0  # a tool whose estimated time per call exceeds this is skipped
    total_s: float = 14 * 60.0  # whole-run budget: later cases are skipped past it
    start: float = field(default_factory=time.perf_counter)
    rates: dict = field(default_factory=dict)  # (kernel, tool) -> (seconds per unit of work, work)
    unsupported: dict = field(default_factory=dict)  # (kernel, tool) -> the error it raised
    gemm_flops: float = 1e10  # measured at start: single-threaded float64 GEMM rate

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


@dataclass
class Case:
    kernel: str
    group: str  # real | table1 | density | dimension | per-row | ablation
    matrix: str
    n: int
    nnz: int
    A: Any = None  # scipy CSR (matrix kernels)
    B: Any = None  # scipy CSR (SMMM's second operand)
    v1: Any = None  # (indices, values) of a sparse vector (vector kernels)
    v2: Any = None

    @property
    def density(self) -> float:
        return self.nnz / (self.n * self.n if self.kernel in MATRIX_KERNELS else self.n)


# -- data -----------------------------------------------------------------------------------------

def random_matrix(n: int, density: float, seed: int) -> sp.csr_matrix:
    """A canonical CSR n x n matrix with about density * n^2 uniformly placed standard normal entries."""
    rng = np.random.default_rng(seed)
    matrix = sp.random(n, n, density=density, format="csr", random_state=rng,
                       data_rvs=rng.standard_normal)
    matrix.sum_duplicates()
    matrix.sort_indices()
    return matrix


def random_vector(n: int, nnz: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n, size=max(1, nnz), replace=False)).astype(np.int64)
    return idx, rng.standard_normal(idx.size)


def batax_output_nnz(n: int, nnz: int) -> float:
    """Expected entries of A^T A for a random matrix: n^2 (1 - exp(-n d^2))."""
    d = nnz / float(n * n)
    return n * n * -math.expm1(-n * d * d)


def matrix_case(kernel: str, group: str, label: str, A: sp.csr_matrix, B: sp.csr_matrix | None) -> Case:
    return Case(kernel, group, label, A.shape[0], A.nnz, A=A, B=B if B is not None else A)


def vector_case(kernel: str, group: str, label: str, n: int, nnz: int, seed: int) -> Case:
    return Case(kernel, group, label, n, nnz, v1=random_vector(n, nnz, seed), v2=random_vector(n, nnz, seed + 1))


def table1_shapes() -> list[tuple[str, int, int]]:
    """(name, n, nnz) of the paper's Table 1 matrices, from ssstats.csv (fallback: the paper's numbers)."""
    from sparsad._data import shared_data_dir

    paper = {"Williams/pdb1HYS": (36417, 4344765), "Bova/rma10": (46835, 2329092),
             "Williams/cant": (62451, 4007383), "Williams/consph": (83334, 6010480),
             "Williams/cop20k_A": (121192, 2624331)}
    root = shared_data_dir()
    stats = root / "suitesparse" / "ssstats.csv" if root else None
    if stats is not None and stats.is_file():
        for line in stats.read_text().splitlines()[2:]:
            parts = line.split(",")
            key = f"{parts[0]}/{parts[1]}"
            if key in paper and len(parts) > 4:
                paper[key] = (int(parts[2]), int(parts[4]))
    return [(name, *paper[name]) for name in TABLE1]


# -- inputs per tool --------------------------------------------------------------------------------

def raw_inputs(case: Case) -> dict:
    """The inputs sparsad's derivative is called with: scipy CSR, numpy and COO sparse vectors."""
    import sparsad

    rng = np.random.default_rng(7)
    if case.kernel == "batax":
        return dict(beta=1.5, A=case.A, x=rng.standard_normal(case.n))
    if case.kernel == "smmm":
        return dict(A=case.A, B=case.B)
    if case.kernel == "smvm":
        return dict(A=case.A, X=rng.standard_normal(case.n))
    v1 = sparsad.as_format(_dense_vector(case.v1, case.n), "coo")
    if case.kernel == "vsm":
        return dict(V=v1, s=0.7)
    return dict(V1=v1, V2=sparsad.as_format(_dense_vector(case.v2, case.n), "coo"))


def _dense_vector(vec, n: int) -> np.ndarray:
    out = np.zeros(n)
    out[vec[0]] = vec[1]
    return out


def _row_vector(vec, n: int) -> sp.csr_matrix:
    idx, val = vec
    return sp.csr_matrix((val, idx, np.array([0, idx.size])), shape=(1, n))


# -- competitors: each returns a zero-argument callable computing the derivative -------------------

def scipy_closed_form(case: Case, inputs: dict) -> Callable[[], Any]:
    """The derivative written by hand with NumPy/SciPy (the masked convention for sparse wrt)."""
    n = case.n
    if case.kernel == "batax":
        A, beta = inputs["A"], inputs["beta"]
        return lambda: beta * (A.T @ A).tocsr()
    if case.kernel == "smvm":  # A^T 1: column sums
        A = inputs["A"]
        return lambda: np.bincount(A.indices, weights=A.data, minlength=n)
    if case.kernel == "smmm":  # column sums of A, read on B's pattern (row k of B gets colsum_k)
        A, B = inputs["A"], inputs["B"]

        def smmm():
            out = B.copy()
            colsum = np.bincount(A.indices, weights=A.data, minlength=n)
            out.data = np.repeat(colsum, np.diff(B.indptr))
            return out
        return smmm
    idx1, val1 = case.v1
    if case.kernel == "vva":  # the identity on V1's pattern
        def vva():
            indptr = np.zeros(n + 1, dtype=np.int64)
            indptr[idx1 + 1] = 1
            return sp.csr_matrix((np.ones(idx1.size), idx1.copy(), np.cumsum(indptr)), shape=(n, n))
        return vva
    V1 = _row_vector(case.v1, n)
    if case.kernel == "vsm":  # 2 s V
        s = inputs["s"]
        return lambda: V1 * (2.0 * s)
    V2 = _row_vector(case.v2, n)
    pattern = V1.copy()
    pattern.data[:] = 1.0
    return lambda: pattern.multiply(V2).tocsr()  # VVD: V2 masked to V1's pattern


def dense_flops(case: Case) -> float:
    """Work of the dense reverse/forward mode: n^3 products for the two Jacobian/matmul kernels."""
    n = case.n
    if case.kernel in ("batax", "smmm"):
        return 4.0 * n ** 3
    if case.kernel in ("smvm", "vva"):
        return 2.0 * n * n
    return 4.0 * n


def dense_bytes(case: Case, tool: str = "jax-dense") -> int:
    """Bytes of the largest dense array: the matrix, the n x n Jacobian of VVA, and for VSM under
    torch.func.jacrev the n x n cotangent basis (reverse mode pulls back one output at a time)."""
    square = case.kernel in MATRIX_KERNELS + ("vva",) or (case.kernel == "vsm" and tool == "torch-dense")
    return 8 * case.n * case.n if square else 8 * case.n


def torch_dense(case: Case, inputs: dict) -> Callable[[], Any]:
    import torch

    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    k = case.kernel
    if k == "batax":
        D, x, beta = t(inputs["A"].toarray()), t(inputs["x"]), inputs["beta"]
        return lambda: torch.func.jacrev(lambda v: beta * (D.T @ (D @ v)))(x)
    if k in ("smmm", "smvm"):
        DA = t(inputs["A"].toarray())
        other = t(inputs["B"].toarray()) if k == "smmm" else t(inputs["X"])

        def reverse():
            leaf = other.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad((DA @ leaf).sum(), leaf)
            return grad
        return reverse
    v1 = t(_dense_vector(case.v1, case.n))
    if k == "vsm":
        s = torch.tensor(inputs["s"], dtype=torch.float64)
        return lambda: torch.func.jacrev(lambda s_: v1 * s_ * s_)(s)
    v2 = t(_dense_vector(case.v2, case.n))
    if k == "vva":
        return lambda: torch.func.jacrev(lambda a: a + v2)(v1)

    def vvd():
        leaf = v1.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad((leaf * v2).sum(), leaf)
        return grad
    return vvd


def torch_sparse(case: Case, inputs: dict) -> Callable[[], Any]:
    """PyTorch's own sparse autograd (COO tensors); raises where PyTorch does not support it."""
    import torch

    def coo(matrix, grad=False):
        m = matrix.tocoo()
        out = torch.sparse_coo_tensor(np.vstack([m.row, m.col]), m.data, m.shape).coalesce()
        return out.requires_grad_(True) if grad else out

    def vec(v, grad=False):
        out = torch.sparse_coo_tensor(v[0][None, :], v[1], (case.n,)).coalesce()
        return out.requires_grad_(True) if grad else out

    k = case.kernel
    if k == "batax":
        A, At, x, beta = coo(inputs["A"]), coo(inputs["A"].T), torch.from_numpy(inputs["x"]), inputs["beta"]
        return lambda: torch.func.jacrev(lambda v: beta * torch.sparse.mm(At, torch.sparse.mm(A, v[:, None]))[:, 0])(x)
    if k == "smmm":
        A, B = coo(inputs["A"]), coo(inputs["B"])

        def smmm():
            leaf = B.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(torch.sparse.sum(torch.sparse.mm(A, leaf)), leaf)
            return grad
        return smmm
    if k == "smvm":
        A, X = coo(inputs["A"]), torch.from_numpy(inputs["X"])

        def smvm():
            leaf = X.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(torch.sparse.mm(A, leaf[:, None]).sum(), leaf)
            return grad
        return smvm
    V1 = vec(case.v1)
    if k == "vsm":
        s = torch.tensor(inputs["s"], dtype=torch.float64)
        return lambda: torch.func.jacfwd(lambda s_: V1 * s_ * s_)(s)
    V2 = vec(case.v2)
    if k == "vva":
        return lambda: torch.func.jacrev(lambda a: a + V2)(V1)

    def vvd():
        leaf = V1.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(torch.sparse.sum(leaf * V2), leaf)
        return grad
    return vvd


def _jax():
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def jax_dense(case: Case, inputs: dict) -> Callable[[], Any]:
    jax = _jax()
    import jax.numpy as jnp

    k = case.kernel
    if k == "batax":
        D, x, beta = jnp.asarray(inputs["A"].toarray()), jnp.asarray(inputs["x"]), inputs["beta"]
        fn = jax.jit(lambda D, v: jax.jacfwd(lambda u: beta * (D.T @ (D @ u)))(v))
        return lambda: fn(D, x).block_until_ready()
    if k in ("smmm", "smvm"):
        DA = jnp.asarray(inputs["A"].toarray())
        other = jnp.asarray(inputs["B"].toarray() if k == "smmm" else inputs["X"])
        fn = jax.jit(jax.grad(lambda o, D: (D @ o).sum()))
        return lambda: fn(other, DA).block_until_ready()
    v1 = jnp.asarray(_dense_vector(case.v1, case.n))
    if k == "vsm":
        fn = jax.jit(jax.jacfwd(lambda s_, V: V * s_ * s_))
        return lambda: fn(inputs["s"], v1).block_until_ready()
    v2 = jnp.asarray(_dense_vector(case.v2, case.n))
    if k == "vva":
        fn = jax.jit(jax.jacfwd(lambda a, b: a + b))
    else:
        fn = jax.jit(jax.grad(lambda a, b: (a * b).sum()))
    return lambda: fn(v1, v2).block_until_ready()


def jax_bcoo(case: Case, inputs: dict) -> Callable[[], Any]:
    """jax.experimental.sparse (BCOO); raises where JAX has no rule."""
    jax = _jax()
    import jax.numpy as jnp
    from jax.experimental import sparse as jsp

    def ready(out):
        return jax.block_until_ready(out)

    def vec(v):
        return jsp.BCOO((jnp.asarray(v[1]), jnp.asarray(v[0][:, None])), shape=(case.n,))

    k = case.kernel
    if k in MATRIX_KERNELS:
        A = jsp.BCOO.from_scipy_sparse(inputs["A"])
    if k == "batax":
        beta = inputs["beta"]
        fn = jax.jit(lambda A, v: jax.jacfwd(lambda u: beta * (A.T @ (A @ u)))(v))
        x = jnp.asarray(inputs["x"])
        return lambda: ready(fn(A, x))
    if k == "smmm":  # BCOO x BCOO, gradient w.r.t. B's stored values
        B = jsp.BCOO.from_scipy_sparse(inputs["B"])
        fn = jax.jit(jsp.grad(lambda b, a: (a @ b).sum()))
        return lambda: ready(fn(B, A))
    if k == "smvm":
        fn = jax.jit(jax.grad(lambda X, a: (a @ X).sum()))
        X = jnp.asarray(inputs["X"])
        return lambda: ready(fn(X, A))
    V1 = vec(case.v1)
    if k == "vsm":  # the Jacobian of V s s's stored values
        fn = jax.jit(jax.jacfwd(lambda s_, V: (V * s_ * s_).data))
        return lambda: ready(fn(inputs["s"], V1))
    V2 = vec(case.v2)
    if k == "vva":
        fn = jax.jit(jsp.jacrev(lambda a, b: (a + b).todense()))
    else:
        fn = jax.jit(jsp.grad(lambda a, b: (a * b).sum()))
    return lambda: ready(fn(V1, V2))


COMPETITORS = {"scipy": scipy_closed_form, "torch-dense": torch_dense, "torch-sparse": torch_sparse,
               "jax-dense": jax_dense, "jax-bcoo": jax_bcoo}


# -- measuring ----------------------------------------------------------------------------------------

def _product_pairs(case: Case) -> float:
    """Multiply-adds of the sparse product A B (SMMM): nnz(A) times B's entries per row."""
    return case.A.nnz * (case.B.nnz / case.n)


def _work(case: Case, tool: str) -> float:
    """What a tool's time should scale with (for estimating a skipped size from a measured one)."""
    if tool in ("torch-dense", "jax-dense"):
        return dense_flops(case)
    if case.kernel == "batax":
        return batax_output_nnz(case.n, case.nnz) + case.nnz + case.n
    if case.kernel == "smmm" and tool in ("sparsad", "torch-sparse", "sparsad-dict"):
        return _product_pairs(case) + case.nnz + case.n
    if case.kernel in VECTOR_KERNELS:
        return case.nnz + (case.n if case.kernel == "vva" else 0) + 1.0
    return float(case.nnz + case.n)


def _bytes(case: Case, tool: str) -> float:
    """Rough peak memory of a tool's derivative (dense operands, dense Jacobians, sparse products)."""
    if tool in ("torch-dense", "jax-dense"):
        return dense_bytes(case, tool)
    if tool == "jax-bcoo" and case.kernel in ("batax", "vva"):
        return 8.0 * case.n * case.n  # a dense Jacobian (batax) / a dense cotangent basis (vva)
    if tool == "torch-sparse" and case.kernel == "smmm":  # measured: ~500 bytes per product pair
        return 600.0 * _product_pairs(case)
    return 0.0


def _estimate(cfg: Config, case: Case, tool: str) -> float | None:
    known = cfg.rates.get((case.kernel, tool))
    if known is None and tool in ("torch-dense", "jax-dense"):
        return dense_flops(case) / cfg.gemm_flops
    return None if known is None else known[0] * _work(case, tool)


def _learn(cfg: Config, case: Case, tool: str, seconds: float) -> None:
    """Remember seconds per unit of work, from the largest case measured so far."""
    work = _work(case, tool)
    known = cfg.rates.get((case.kernel, tool))
    if seconds > 1e-3 and (known is None or work >= known[1]):
        cfg.rates[(case.kernel, tool)] = (seconds / work, work)


def _skip_reason(cfg: Config, case: Case, tool: str) -> tuple[str, float | None] | None:
    if cfg.elapsed() > cfg.total_s:
        return "skipped: whole-run time budget spent", None
    if _bytes(case, tool) > DENSE_LIMIT_BYTES:
        what = "dense operand or Jacobian" if tool.endswith("dense") else "intermediate"
        return f"too large: {what} ~{_bytes(case, tool) / 1e9:.3g} GB", None
    if (case.kernel, tool) in cfg.unsupported:
        return f"unsupported: {cfg.unsupported[(case.kernel, tool)]}", None
    est = _estimate(cfg, case, tool)
    if est is not None and est > cfg.cap_s:
        return f"skipped: estimated {est:.3g} s per call > cap {cfg.cap_s:g} s", est
    return None


def _row(case: Case, tool: str, **fields: Any) -> dict:
    row = dict(kernel=case.kernel, group=case.group, matrix=case.matrix, n=case.n, nnz=case.nnz,
               density=case.density, log2_density=round(math.log2(case.density), 2), tool=tool,
               status="ok", compile_s="", run_s="", ratio="", run_raw_s="", est_run_s="", max_rel_err="",
               note="")
    row.update(fields)
    return row


def _first_and_steady(cfg: Config, fn: Callable[[], Any]) -> tuple[Any, float, float]:
    start = time.perf_counter()
    result = fn()
    first = time.perf_counter() - start
    steady = best_time(fn, repeat=cfg.repeat, warmup=0, budget_s=cfg.budget_s)
    return result, first, steady


def measure_sparsad(cfg: Config, case: Case, inputs: dict, tool: str = "sparsad",
                    passes: set | None = None, output: str = "auto") -> tuple[dict, Any]:
    """Compile time (first call minus a steady call) and run time on pre-stored inputs."""
    import sparsad
    from sparsad.programs import PAPER_PROGRAMS

    skip = _skip_reason(cfg, case, tool)
    if skip:
        return _row(case, tool, status=skip[0].split(":")[0], note=skip[0], est_run_s=skip[1] or ""), None
    api, wrt = KERNELS[case.kernel]
    derivative = getattr(sparsad, api)(PAPER_PROGRAMS[case.kernel].text, wrt=wrt)
    if passes is not None or output != "auto":
        derivative = derivative.compiled(passes=passes, output=output)
    stored = {k: v if isinstance(v, float) else sparsad.as_format(v) for k, v in inputs.items()}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result, first, steady = _first_and_steady(cfg, lambda: derivative(**stored))
    except Exception as error:  # recorded, not hidden
        return _row(case, tool, status="error", note=f"{type(error).__name__}: {error}"[:300]), None
    interpreted = [str(w.message) for w in caught if "interpreter" in str(w.message)]
    row = _row(case, tool, compile_s=max(first - steady, 0.0), run_s=steady)
    if interpreted:
        row.update(status="interpreted", note=interpreted[0][:300])
    if tool == "sparsad" and any(sp.issparse(v) for v in inputs.values()):
        # the same call on scipy matrices: adds the boundary's validation of the CSR arrays
        row["run_raw_s"] = best_time(lambda: derivative(**inputs), repeat=cfg.repeat, warmup=1,
                                     budget_s=cfg.budget_s)
    _learn(cfg, case, tool, steady)
    return row, result


def measure_competitor(cfg: Config, case: Case, inputs: dict, tool: str) -> tuple[dict, Any]:
    skip = _skip_reason(cfg, case, tool)
    if skip:
        status = skip[0].split(":")[0].split(" (")[0]
        return _row(case, tool, status=status, note=skip[0], est_run_s=skip[1] or ""), None
    try:
        fn = COMPETITORS[tool](case, inputs)
        result, first, steady = _first_and_steady(cfg, fn)
    except Exception as error:
        message = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"[:300]
        if isinstance(error, MemoryError) or "allocat" in message.lower():
            return _row(case, tool, status="too large", note=f"out of memory under the run's limit: {message}"), None
        cfg.unsupported[(case.kernel, tool)] = message
        return _row(case, tool, status="unsupported", note=message), None
    compile_s = max(first - steady, 0.0) if tool.startswith("jax") else ""
    _learn(cfg, case, tool, steady)
    return _row(case, tool, compile_s=compile_s, run_s=steady), result


def max_rel_err(ours: Any, reference: Any) -> float:
    """max |ours - reference| / max |reference| (vectors dense, matrices sparse)."""
    if isinstance(ours, dict):
        raise TypeError("dict output")
    if sp.issparse(reference) and reference.shape[0] == 1:
        reference = reference.toarray().ravel()
    if sp.issparse(ours) and ours.shape[0] == 1:
        ours = ours.toarray().ravel()
    if sp.issparse(reference) or sp.issparse(ours):
        diff = sp.csr_matrix(ours) - sp.csr_matrix(reference)
        scale = abs(sp.csr_matrix(reference)).max()
        err = abs(diff).max() if diff.nnz else 0.0
    else:
        ours, reference = np.asarray(ours, dtype=float), np.asarray(reference, dtype=float)
        if ours.shape != reference.shape:
            return float("inf")
        err, scale = np.abs(ours - reference).max(initial=0.0), np.abs(reference).max(initial=0.0)
    return float(err / scale) if scale else float(err)


def run_case(cfg: Config, case: Case, tools=TOOLS, dict_output: bool = False) -> list[dict]:
    inputs = raw_inputs(case)
    rows, results = [], {}
    row, ours = measure_sparsad(cfg, case, inputs)
    rows.append(row)
    for tool in tools[1:]:
        r, results[tool] = measure_competitor(cfg, case, inputs, tool)
        rows.append(r)
    if dict_output:
        rows.append(measure_sparsad(cfg, case, inputs, tool="sparsad-dict", output="dict")[0])
    reference = results.get("scipy")
    if ours is not None and reference is not None:
        rows[0]["max_rel_err"] = max_rel_err(ours, reference)
        if rows[0]["max_rel_err"] > 1e-9:
            rows[0]["status"] = "MISMATCH"
    base = rows[0]["run_s"]
    for r in rows:
        value = r["run_s"] if r["run_s"] != "" else r["est_run_s"]
        if base != "" and value != "" and base > 0:
            r["ratio"] = value / base
    return rows


# -- the suite ------------------------------------------------------------------------------------------

def _measure_gemm(cfg: Config) -> None:
    import torch

    m = torch.randn(600, 600, dtype=torch.float64)
    seconds = best_time(lambda: m @ m, repeat=5, warmup=1, budget_s=1.0)
    cfg.gemm_flops = 2 * 600 ** 3 / seconds


def density_cases(cfg: Config) -> list[Case]:
    sizes = [200] if cfg.quick else [1000, 100_000]
    exponents = [4, 6] if cfg.quick else list(range(4, 15))
    cases = []
    for n in sizes:
        for e in exponents:
            d = 2.0 ** -e
            if n * n * d <= MAX_NNZ:
                A = random_matrix(n, d, seed=e)
                B = random_matrix(n, d, seed=100 + e)
                cases += [matrix_case(k, "density", f"random 2^-{e}", A, B) for k in MATRIX_KERNELS
                          if k != "batax" or batax_output_nnz(n, A.nnz) <= MAX_BATAX_OUT]
            nnz = max(1, round(n * d))
            cases += [vector_case(k, "density", f"random 2^-{e}", n, nnz, seed=e) for k in VECTOR_KERNELS]
    return cases


def dimension_cases(cfg: Config) -> list[Case]:
    sizes = [100, 400] if cfg.quick else [1000, 3000, 10_000, 30_000, 100_000]
    exponents = [4] if cfg.quick else [6, 12]
    cases = []
    for e in exponents:
        d = 2.0 ** -e
        for n in sizes:
            if n * n * d <= MAX_NNZ:
                A = random_matrix(n, d, seed=1000 + n + e)
                B = random_matrix(n, d, seed=2000 + n + e)
                cases += [matrix_case(k, "dimension", f"random 2^-{e}", A, B) for k in MATRIX_KERNELS
                          if k != "batax" or batax_output_nnz(n, A.nnz) <= MAX_BATAX_OUT]
            cases += [vector_case(k, "dimension", f"random 2^-{e}", n, max(1, round(n * d)), seed=n + e)
                      for k in VECTOR_KERNELS]
    return cases


def per_row_cases(cfg: Config) -> list[Case]:
    """Fixed entries per row (matrices) or fixed nnz (vectors) while n grows: time ~ nnz, not n^2."""
    sizes = [] if cfg.quick else [1000, 10_000, 100_000, 1_000_000]
    cases = []
    for n in sizes:
        A = random_matrix(n, 8.0 / n, seed=3000 + n)
        B = random_matrix(n, 8.0 / n, seed=4000 + n)
        cases += [matrix_case(k, "per-row", "random 8/row", A, B) for k in MATRIX_KERNELS
                  if k != "batax" or batax_output_nnz(n, A.nnz) <= MAX_BATAX_OUT]
        cases += [vector_case(k, "per-row", "random nnz=1000", n, 1000, seed=5000 + n) for k in VECTOR_KERNELS]
    return cases


def real_cases(cfg: Config) -> list[Case]:
    from sparsad._data import load_suitesparse

    names = ("HB/bcspwr03",) if cfg.quick else REAL_MATRICES
    cases = []
    for name in names:
        A = load_suitesparse(name)
        if A is None:
            print(f"(skipping {name}: not found under ../shared/data)")
            continue
        A.sum_duplicates()
        A.sort_indices()
        cases += [matrix_case(k, "real", name.split("/")[1], A, None) for k in MATRIX_KERNELS]
    return cases


def table1_cases(cfg: Config) -> list[Case]:
    """Synthetic matrices with the dimensions and nnz of the paper's Table 1 (the files are not shipped)."""
    if cfg.quick:
        return []
    cases = []
    for name, n, nnz in table1_shapes():
        A = random_matrix(n, nnz / (n * n), seed=n)
        label = f"{name.split('/')[1]} (synthetic)"
        cases += [matrix_case(k, "table1", label, A, A) for k in MATRIX_KERNELS
                  if k != "batax" or batax_output_nnz(n, A.nnz) <= MAX_BATAX_OUT]
    return cases


def ablation_rows(cfg: Config) -> list[dict]:
    """§7.4 / Fig. 16: BATAx with no normalization, normalization, + DPS, all passes; array vs dict."""
    n = 200 if cfg.quick else 2000
    exponents = [4] if cfg.quick else [14, 12, 10, 8, 6]  # sparse first: estimates guard the dense end
    variants = {"no-opt": ABLATION["no-opt"], "full": ABLATION["full"]} if cfg.quick else ABLATION
    rows = []
    for e in exponents:
        A = random_matrix(n, 2.0 ** -e, seed=6000 + e)
        case = matrix_case("batax", "ablation", f"random 2^-{e}", A, None)
        inputs = raw_inputs(case)
        for output, label in (("auto", "arr"), ("dict", "dict")):
            for name, passes in variants.items():
                row, _ = measure_sparsad(cfg, case, inputs, tool=f"sparsad-{label} {name}", passes=passes,
                                         output=output)
                row["variant"] = name
                row["output"] = label
                rows.append(row)
    return rows


# -- targets (issue 4, part 6) ----------------------------------------------------------------------------

def _get(rows: list[dict], case_row: dict, tool: str) -> dict | None:
    for r in rows:
        if r["tool"] == tool and all(r[k] == case_row[k] for k in ("kernel", "group", "matrix", "n", "nnz")):
            return r
    return None


def evaluate_targets(rows: list[dict]) -> list[str]:
    lines = []
    ours = [r for r in rows if r["tool"] == "sparsad" and r["group"] != "ablation"]
    lines.append("(a) density <= 2^-9 and n >= 10,000: sparsad >= 100x faster than PyTorch dense reverse "
                 "mode, or PyTorch cannot run")
    for kernel in KERNELS:
        met, missed = [], []
        for r in ours:
            if r["kernel"] != kernel or r["n"] < 10_000 or r["density"] > 2.0 ** -9:
                continue
            torch_row = _get(rows, r, "torch-dense")
            where = f"{r['group']} {r['matrix']} n={r['n']}"
            if torch_row["status"] == "too large":
                met.append(f"{where}: PyTorch cannot run ({torch_row['note']})")
            elif r["run_s"] == "":
                missed.append(f"{where}: sparsad not measured ({r['note'][:80]})")
            elif torch_row["run_s"] != "" or torch_row["est_run_s"] != "":
                ratio = torch_row["ratio"]
                kind = "measured" if torch_row["run_s"] != "" else "estimated"
                (met if ratio >= 100 else missed).append(f"{where}: {ratio:.3g}x ({kind})")
            else:
                missed.append(f"{where}: PyTorch {torch_row['status']} ({torch_row['note'][:60]})")
        if not met and not missed:
            lines.append(f"  {kernel:6s} no case in range")
            continue
        verdict = "MET" if not missed else f"MISSED in {len(missed)} of {len(met) + len(missed)}"
        lines.append(f"  {kernel:6s} {verdict}")
        lines += [f"      miss {m}" for m in missed] + [f"      ok   {m}" for m in met[:4]]
        if len(met) > 4:
            lines.append(f"      ok   ... and {len(met) - 4} more")
    floor = {k: min((r["run_s"] for r in ours if r["kernel"] == k and r["run_s"] != ""), default=None)
             for k in KERNELS}
    lines.append("  (per-call floor: sparsad's fastest run of each kernel in this run, "
                 + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in floor.items() if v is not None) + ")")
    lines.append("(b) every real matrix: sparsad within 2x of the SciPy closed form "
                 "(ratio = sparsad / SciPy; pre-stored inputs, and [scipy-matrix inputs])")
    for r in [r for r in ours if r["group"] == "real"]:
        ref = _get(rows, r, "scipy")
        if r["run_s"] == "" or not ref or ref["run_s"] == "":
            lines.append(f"  {r['kernel']:6s} {r['matrix']:10s} MISSED: not measured ({r['status']} {r['note'][:80]})")
            continue
        slow = r["run_s"] / ref["run_s"]
        raw = f"[{r['run_raw_s'] / ref['run_s']:.3g}x]" if r["run_raw_s"] != "" else ""
        why = ""
        if slow > 2 and floor[r["kernel"]] and floor[r["kernel"]] > 2 * ref["run_s"]:
            why = f"; SciPy's whole time is below 1/2 of sparsad's per-call floor {floor[r['kernel']] * 1e6:.0f} us"
        lines.append(f"  {r['kernel']:6s} {r['matrix']:10s} {'MET   ' if slow <= 2 else 'MISSED'} "
                     f"{slow:.3g}x {raw} (sparsad {r['run_s'] * 1e3:.3g} ms, SciPy {ref['run_s'] * 1e3:.3g} ms{why})")
    lines.append("(c) derivative time grows with nnz, not n^2: log-log slope of sparsad time vs n at fixed "
                 "entries per row (matrices) / fixed nnz (vectors); n^2 growth would be slope 2")
    for kernel in KERNELS:
        pts = [(r["n"], r["run_s"]) for r in ours if r["kernel"] == kernel and r["group"] == "per-row"
               and r["run_s"] != ""]
        if len(pts) < 2:
            lines.append(f"  {kernel:6s} too few points")
            continue
        slope = float(np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)[0])
        sweep = [(r["nnz"], r["run_s"]) for r in ours if r["kernel"] == kernel and r["group"] == "density"
                 and r["n"] == 100_000 and r["run_s"] != ""]
        extra = ""
        if len(sweep) >= 2:
            s2 = float(np.polyfit(np.log([p[0] for p in sweep]), np.log([p[1] for p in sweep]), 1)[0])
            extra = f"; slope vs nnz at n=100,000 (density sweep) {s2:.2f}"
        verdict = "MET" if slope < 1.5 else "MISSED"
        lines.append(f"  {kernel:6s} {verdict} slope vs n {slope:.2f} over n={pts[0][0]}..{pts[-1][0]}{extra}")
    problems = [r for r in rows if r["tool"].startswith("sparsad") and r["status"] in ("interpreted", "error",
                                                                                        "MISMATCH")]
    lines.append(f"sparsad failures / interpreter fallbacks / mismatches: {len(problems)}")
    for r in problems[:20]:
        lines.append(f"  {r['tool']} {r['kernel']} {r['group']} {r['matrix']} n={r['n']}: {r['status']} "
                     f"{r['note'][:160]}")
    return lines


# -- plots --------------------------------------------------------------------------------------------------

def make_plots(rows: list[dict]) -> list:
    paths = []
    timed = [r for r in rows if r["run_s"] != ""]
    for kernel in KERNELS:
        for n in sorted({r["n"] for r in timed if r["group"] == "density"}):
            sel = [r for r in timed if r["kernel"] == kernel and r["group"] == "density" and r["n"] == n]
            if sel:
                paths.append(plot_lines(SUITE, sel, "density", "run_s", "tool", name=f"{SUITE}_density_{kernel}_n{n}",
                                        title=f"{kernel}: time vs density, n={n} (Figs. 12/14)"))
        for matrix in sorted({r["matrix"] for r in timed if r["group"] == "dimension"}):
            sel = [r for r in timed if r["kernel"] == kernel and r["group"] == "dimension" and r["matrix"] == matrix]
            if sel:
                tag = matrix.split()[-1].replace("^", "")
                paths.append(plot_lines(SUITE, sel, "n", "run_s", "tool", name=f"{SUITE}_dimension_{kernel}_{tag}",
                                        title=f"{kernel}: time vs dimension, density {matrix.split()[-1]} (Figs. 13/15)"))
        sel = [r for r in timed if r["kernel"] == kernel and r["group"] == "per-row"]
        if sel:
            paths.append(plot_lines(SUITE, sel, "n", "run_s", "tool", name=f"{SUITE}_perrow_{kernel}",
                                    title=f"{kernel}: time vs n at fixed nnz per row"))
        for group in ("real", "table1"):
            sel = [dict(r, label=f"{r['matrix'].split(' ')[0]}:{r['tool']}") for r in rows
                   if r["kernel"] == kernel and r["group"] == group and r["ratio"] != "" and r["tool"] != "sparsad"]
            if sel:
                paths.append(plot_bars(SUITE, sel, "label", "ratio", name=f"{SUITE}_{group}_{kernel}",
                                       title=f"{kernel} on {group} matrices: time / sparsad time (Fig. 11)"))
    abl = [dict(r, label=f"{r['matrix'].split()[-1]} {r['output']} {r['variant']}") for r in timed
           if r["group"] == "ablation"]
    if abl:
        paths.append(plot_bars(SUITE, abl, "label", "run_s", name=f"{SUITE}_ablation_batax",
                               title="BATAx: passes and dict vs array output (Fig. 16), seconds"))
    return paths


COLUMNS = ("kernel", "group", "matrix", "n", "nnz", "log2_density", "tool", "status", "compile_s", "run_s",
           "est_run_s", "ratio", "max_rel_err")


MEMORY_LIMIT_BYTES = 10 * 1024**3  # the run's own heap limit: a runaway tool fails, the machine does not


def main(quick: bool = False) -> None:
    import resource

    old_limit = resource.getrlimit(resource.RLIMIT_DATA)
    hard = old_limit[1]
    if hard == resource.RLIM_INFINITY or hard > MEMORY_LIMIT_BYTES:
        resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_LIMIT_BYTES, hard))
    try:
        _main(quick)
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, old_limit)


def _main(quick: bool) -> None:
    cfg = Config(quick=quick)
    if quick:
        cfg.repeat, cfg.budget_s, cfg.cap_s, cfg.total_s = 2, 0.2, 1.0, 600.0
    try:
        import numba

        numba.set_num_threads(1)
    except Exception:  # numba may have been initialised with fewer threads already
        pass
    import torch

    torch.set_num_threads(1)
    _measure_gemm(cfg)
    print(f"nablasd benchmark ({'quick' if quick else 'full'}), single-threaded; "
          f"float64 GEMM ~{cfg.gemm_flops / 1e9:.1f} GFLOP/s")
    rows: list[dict] = []
    groups = [("density", density_cases), ("dimension", dimension_cases), ("real", real_cases),
              ("per-row", per_row_cases), ("table1", table1_cases)]
    for label, build in groups:
        t0 = time.perf_counter()
        cases = build(cfg)
        for case in cases:
            rows += run_case(cfg, case, dict_output=case.group == "real")
            print(f"    [{cfg.elapsed():5.0f} s] {case.kernel} {case.group} {case.matrix} n={case.n} "
                  f"nnz={case.nnz}", file=sys.stderr, flush=True)
        print(f"  {label}: {len(cases)} cases in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    t0 = time.perf_counter()
    rows += ablation_rows(cfg)
    print(f"  ablation in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    for r in rows:
        r.setdefault("variant", "")
        r.setdefault("output", "")
    print_table(rows, COLUMNS)
    path = write_csv(SUITE, rows)
    for stale in path.parent.glob(f"{SUITE}_*.png"):  # plots of an earlier run with other sizes
        stale.unlink()
    plots = make_plots(rows)
    print(f"\nwrote {path} and {len(plots)} plots in {path.parent} ({cfg.elapsed():.0f} s)")
    print("\n== targets (issue 4, part 6) ==")
    for line in evaluate_targets(rows):
        print(line)


def targets_from_csv(path=None) -> list[str]:
    """The targets section again, from a written CSV (no re-measuring)."""
    import csv

    from bench.common import RESULTS_DIR

    with open(path or RESULTS_DIR / f"{SUITE}.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for r in rows:
        r["n"], r["nnz"] = int(r["n"]), int(r["nnz"])
        for k in ("density", "compile_s", "run_s", "ratio", "run_raw_s", "est_run_s", "max_rel_err"):
            r[k] = float(r[k]) if r.get(k) not in ("", None) else ""
    return evaluate_targets(rows)


# -- user programs: derivatives of programs beyond the paper's six, against NumPy/SciPy closed forms --

USER_PROGRAMS = {
    # name: (program, wrt, closed form of the gradient from the inputs)
    "smvm dA": ("sum(<i, r> in A) sum(<j, a> in r) a * x(j)", "A",
                lambda A, x: sp.csr_matrix((x[A.indices], A.indices, A.indptr), shape=A.shape)),
    "hadamard dA": ("sum(<i, r> in A) sum(<j, a> in r) a * T(i)(j)", "A", lambda A, T: T.multiply(A != 0).tocsr()),
    "spmm loss dB": ("sum(<i, r> in A) sum(<j, a> in r) sum(<k, b> in B(j)) a * b", "B",
                     lambda A, B: np.repeat(np.asarray(A.sum(axis=0)).T, B.shape[1], axis=1)),
    "sddmm dU": ("sum(<i, r> in A) sum(<j, a> in r) a * (sum(<k, u> in U(i)) u * V(j)(k))", "U",
                 lambda A, U, V: A @ V),
    "gcn dW": ("sum(<i, r> in A) let h = sum(<j, a> in r) sum(<k, x> in X(j)) { k -> a * x } in "
               "sum(<k, hv> in h) sum(<c, w> in W(k)) hv * w * hv * w", "W",
               lambda A, X, W: 2 * W * ((A @ X) ** 2).sum(axis=0)[:, None]),
    "row lse dA": ("sum(<i, r> in A) log(sum(<j, a> in r) exp(a))", "A", lambda A: _row_softmax(A)),
    "lsq dx": ("sum(<i, r> in A) let e = (sum(<j, a> in r) a * x(j)) - y(i) in e * e", "x",
               lambda A, x, y: 2 * (A.T @ (A @ x - y))),
    "laplacian dy": ("sum(<i, r> in A) sum(<j, a> in r) a * (y(i) - y(j)) * (y(i) - y(j))", "y",
                     lambda A, y: 2 * ((np.asarray(A.sum(axis=1)).ravel() + np.asarray(A.sum(axis=0)).ravel()) * y
                                       - (A @ y + A.T @ y))),
}


def _row_softmax(A: sp.csr_matrix) -> sp.csr_matrix:
    """The softmax of each row's stored entries, vectorized (the gradient of the row log-sum-exp)."""
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    row_max = np.full(A.shape[0], -np.inf)
    np.maximum.at(row_max, rows, A.data)
    e = np.exp(A.data - row_max[rows])
    return sp.csr_matrix((e / np.bincount(rows, e, A.shape[0])[rows], A.indices, A.indptr), shape=A.shape)


def _user_inputs(A: sp.csr_matrix, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    n, m = A.shape
    T = A.copy()
    T.data = rng.standard_normal(T.nnz)
    T = (T + sp.random(n, m, density=min(1.0, A.nnz / (n * m)), random_state=seed, format="csr")).tocsr()
    return dict(A=A, x=rng.standard_normal(m), y=rng.standard_normal(n),
                T=T, B=rng.standard_normal((m, 16)), U=rng.standard_normal((n, 16)), V=rng.standard_normal((m, 16)),
                X=rng.standard_normal((m, 16)), W=rng.standard_normal((16, 8)))


def user_programs_main(quick: bool = False) -> list[dict]:
    """Compiled gradients of user-style programs vs their closed forms (same run): table, CSV, plot."""
    import inspect
    import warnings

    import sparsad
    from bench.common import best_time, plot_bars, print_table, write_csv
    from sparsad._data import load_suitesparse

    matrices = [("random n=20000 10/row", random_matrix(20000, 10 / 20000, 1))]
    if not quick:
        try:
            matrices.append(("HB/bcsstk16", load_suitesparse("HB/bcsstk16").tocsr()))
        except Exception as error:  # data absent: say so, keep the synthetic case
            print(f"  (skipping HB/bcsstk16: {error})", file=sys.stderr)
    rows = []
    for label, A in matrices:
        A = sp.csr_matrix(A, dtype=np.float64)
        A.sum_duplicates()
        inputs = _user_inputs(A, 3)
        for name, (text, wrt, closed) in USER_PROGRAMS.items():
            if name in ("lsq dx", "laplacian dy") and A.shape[0] != A.shape[1]:
                continue
            needed = sparsad.program(text).inputs
            args = {k: inputs[k] for k in needed}
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                derivative = sparsad.grad(text, wrt=wrt)
                ours = derivative(**args)
            fallback = any(issubclass(w.category, sparsad.FallbackWarning) for w in caught)
            closed_args = {k: args[k] for k in inspect.signature(closed).parameters}
            reference = closed(**closed_args)
            error = max_rel_err(ours, reference)
            t_ours = best_time(lambda: derivative(**args), repeat=3 if quick else 7)
            t_ref = best_time(lambda: closed(**closed_args), repeat=3 if quick else 7)
            rows.append(dict(matrix=label, program=name, nnz=A.nnz, compiled=not fallback,
                             ours_s=t_ours, closed_form_s=t_ref, ratio=t_ours / t_ref, max_rel_err=error))
    print_table(rows, ["matrix", "program", "nnz", "compiled", "ours_s", "closed_form_s", "ratio", "max_rel_err"])
    path = write_csv(f"{SUITE}_users", rows)
    plot = plot_bars(f"{SUITE}_users", [dict(r, label=f"{r['program']} ({r['matrix'].split()[0]})") for r in rows],
                     "label", "ratio", title="compiled gradient time / closed form (lower is better)")
    ratios = sorted(r["ratio"] for r in rows)
    print(f"\nwrote {path} and {plot}; median ratio {ratios[len(ratios) // 2]:.2f}, worst {ratios[-1]:.2f}, "
          f"fallbacks {sum(not r['compiled'] for r in rows)}")
    return rows


# -- per-call cost on scipy inputs (issue 11, item 7) ---------------------------------------------------

def _fastest(fn: Callable[[], Any], calls: int) -> float:
    """The least time of `calls` calls (a loaded machine preempts some of them; none is faster than
    the code itself)."""
    return best_time(fn, repeat=calls, warmup=3, budget_s=float("inf"), reduce=min)


def smvm_scipy_main(quick: bool = False) -> list[dict]:
    """SMVM's gradient (w.r.t. X: A^T 1) called with a scipy CSR matrix and a NumPy vector, as a
    user calls it, against the SciPy closed form on the same inputs, on every real matrix of this
    suite; and the per-call floor (a trivial kernel on a 4-vector, SMVM's gradient on a 5 x 5
    matrix). Single-threaded, same run; table, CSV and plot."""
    import sparsad
    from sparsad._data import load_suitesparse
    from sparsad.programs import PAPER_PROGRAMS

    try:
        import numba

        numba.set_num_threads(1)
    except Exception:  # numba may have been initialised with fewer threads already
        pass
    calls = 200 if quick else 2000
    grad = sparsad.grad(PAPER_PROGRAMS["smvm"].text, wrt="X")
    rows = []
    for name in (("HB/bcspwr03",) if quick else REAL_MATRICES):
        A = load_suitesparse(name)
        if A is None:
            print(f"(skipping {name}: not found under ../shared/data)")
            continue
        A.sum_duplicates()
        A.sort_indices()
        n = A.shape[0]
        X = np.random.default_rng(7).standard_normal(n)
        reference = lambda A=A, n=n: np.bincount(A.indices, weights=A.data, minlength=n)  # noqa: E731
        error = max_rel_err(grad(A=A, X=X), reference())
        stored = dict(A=sparsad.as_format(A), X=sparsad.as_format(X))
        t_scipy_in = _fastest(lambda: grad(A=A, X=X), calls)
        t_stored = _fastest(lambda: grad(**stored), calls)
        t_closed = _fastest(reference, calls)
        rows.append(dict(case=name.split("/")[1], n=n, nnz=A.nnz, sparsad_scipy_inputs_s=t_scipy_in,
                         sparsad_stored_inputs_s=t_stored, scipy_closed_form_s=t_closed,
                         ratio=t_scipy_in / t_closed, ratio_stored=t_stored / t_closed, max_rel_err=error))
    tiny = sp.random(5, 5, density=0.4, format="csr", random_state=0)
    x5 = np.ones(5)
    total = sparsad.compile("sum(<i, a> in V) a")
    v4 = np.ones(4)
    floors = {"per-call: compile(sum V) on a 4-vector": lambda: total(V=v4),
              "per-call: SMVM grad on a 5 x 5 CSR": lambda: grad(A=tiny, X=x5)}
    for label, fn in floors.items():
        fn()
        rows.append(dict(case=label, n=0, nnz=0, sparsad_scipy_inputs_s=_fastest(fn, calls * 5),
                         sparsad_stored_inputs_s="", scipy_closed_form_s="", ratio="", ratio_stored="",
                         max_rel_err=""))
    load = os.getloadavg()
    print(f"SMVM gradient on scipy inputs vs SciPy's closed form (least of {calls} calls; load average "
          f"{load[0]:.2f})")
    print_table(rows)
    path = write_csv(f"{SUITE}_smvm_scipy", rows)
    ratios = [r for r in rows if r["ratio"] != ""]
    plot = plot_bars(f"{SUITE}_smvm_scipy", [dict(r, label=r["case"]) for r in ratios], "label", "ratio",
                     title="SMVM grad on scipy inputs: sparsad time / SciPy closed form (target <= 2)")
    worst = max((r["ratio"] for r in ratios), default=float("nan"))
    print(f"\nwrote {path} and {plot}; worst ratio {worst:.2f} (target <= 2: {'MET' if worst <= 2 else 'MISSED'})")
    return rows


#: (program of bench/corpora, wrt, kinds): the corpus misses caused by the per-call floor (issue 11)
CALL_OVERHEAD_CASES = (("ridge", "lam", ("grad", "jacobian", "jvp", "vjp")), ("ridge", "x", ("grad",)),
                       ("bilinear", "u", ("grad", "jvp", "vjp")), ("l1_sparse_vector", "V", ("grad", "vjp")),
                       ("sparse_vec_times_dense", "V", ("jvp", "vjp")),
                       ("sparse_vec_times_dense", "M", ("jvp",)), ("prefix_sums", "x", ("vjp",)),
                       ("sparse_window_sumsq", "V", ("jacobian",)))


def call_overhead_main(quick: bool = False) -> list[dict]:
    """The per-call cost of compiled derivatives on small inputs (the corpus programs whose misses
    come from it), called as a user calls them (keyword inputs, warm: the kernel compiled and the
    inputs seen before), against the hand-written closed form on the same inputs; plus the floor,
    a compiled `sum` of a 4-vector against `np.sum`. Least of many calls, same run; table, CSV, plot."""
    import sparsad
    from bench import corpus as C

    try:
        import numba

        numba.set_num_threads(1)
    except Exception:  # numba may have been initialised with fewer threads already
        pass
    calls = 500 if quick else 5000
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, wrt, kinds in CALL_OVERHEAD_CASES:
            P = C.prepare(C.ENTRIES[name], real=False)
            for kind in kinds:
                seed = C.direction(P, wrt, kind)
                derivative = C.make_derivative(P.entry, wrt, kind)
                arguments = C.call_arguments(P, wrt, kind, seed)
                closed = C.closed_form(P, wrt, kind, seed)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    ours = derivative(**arguments)
                fell_back = any(issubclass(w.category, sparsad.errors.FallbackWarning) for w in caught)
                error = C.compare(ours, closed(), C.expected_shape(P, wrt, kind)) if closed else ""
                t_ours = _fastest(lambda: derivative(**arguments), calls)
                t_closed = _fastest(closed, calls) if closed else float("nan")
                rows.append(dict(case=f"{name}/{wrt}/{kind}", status="fallback" if fell_back else "compiled",
                                 sparsad_us=1e6 * t_ours, closed_form_us=1e6 * t_closed,
                                 ratio=t_ours / t_closed, max_rel_err=error))
        total, v4 = sparsad.compile("sum(<i, a> in V) a"), np.ones(4)
        total(V=v4)
        t_ours, t_closed = _fastest(lambda: total(V=v4), calls), _fastest(lambda: float(np.sum(v4)), calls)
        rows.append(dict(case="floor: compile(sum V) on a 4-vector", status="compiled", sparsad_us=1e6 * t_ours,
                         closed_form_us=1e6 * t_closed, ratio=t_ours / t_closed,
                         max_rel_err=abs(total(V=v4) - 4.0) / 4.0))
    load = os.getloadavg()
    print(f"per-call cost on small inputs vs the closed form (least of {calls} calls, microseconds; load "
          f"average {load[0]:.2f})")
    print_table(rows)
    path = write_csv(f"{SUITE}_call_overhead", rows)
    plot = plot_bars(f"{SUITE}_call_overhead", [dict(r, label=r["case"]) for r in rows], "label", "ratio",
                     title="per-call cost on small inputs: sparsad / closed form (target <= 5)")
    over = [r["case"] for r in rows if r["ratio"] > 5]
    median = sorted(r["sparsad_us"] for r in rows)[len(rows) // 2]
    print(f"\nwrote {path} and {plot}; median sparsad call {median:.1f} us; over 5x: {over or 'none'}")
    return rows


if __name__ == "__main__":
    if "--call-overhead" in sys.argv[1:]:
        call_overhead_main(quick="--quick" in sys.argv[1:])
    elif "--smvm-scipy" in sys.argv[1:]:
        smvm_scipy_main(quick="--quick" in sys.argv[1:])
    elif "--users" in sys.argv[1:]:
        user_programs_main(quick="--quick" in sys.argv[1:])
    elif "--targets" in sys.argv[1:]:
        print("\n".join(targets_from_csv()))
    else:
        main(quick="--quick" in sys.argv[1:])
