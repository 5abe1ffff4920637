"""`sparsad demo`: the paper's kernels on a shipped matrix, each result next to NumPy/SciPy's,
compiled gradients against PyTorch, then one run of each other pillar (`demo_pillars`)."""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from sparsad.lang.program import program
from sparsad.lang.values import values_equal
from sparsad.programs import PAPER_PROGRAMS


def poisson_2d(grid: int) -> sp.csr_matrix:
    """The 5-point Laplacian on a grid x grid mesh: an SPD matrix of order grid**2."""
    one_d = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(grid, grid))
    eye = sp.identity(grid)
    matrix = (sp.kron(eye, one_d) + sp.kron(one_d, eye)).tocsr()
    matrix.eliminate_zeros()
    return matrix


def demo_inputs(entry, matrix: sp.csr_matrix, rng: np.random.Generator) -> dict:
    n = matrix.shape[0]
    inputs = {}
    for name, kind in entry.kinds.items():
        if kind == "scalar":
            inputs[name] = float(np.round(rng.uniform(0.5, 2.0), 3))
        elif kind == "vector":
            inputs[name] = rng.standard_normal(n)
        else:
            inputs[name] = matrix if name != "M2" and name != "B" else matrix.T.tocsr()
    return inputs


def _summary(value) -> str:
    if isinstance(value, float):
        return f"{value: .10g}"
    if sp.issparse(value):
        return f"{type(value).__name__} {value.shape}, nnz={value.nnz}, |.|_F={sp.linalg.norm(value):.6g}"
    array = np.asarray(value)
    return f"array {array.shape}, |.|_2={np.linalg.norm(array):.6g}"


def run_demo(grid: int = 8, seed: int = 0, extra_matrix: str | None = "HB/bcspwr03",
             pillars: bool = True) -> bool:
    """Run every paper program through the reference interpreter, the compiled gradients and one
    example of each other pillar; True if all match."""
    rng = np.random.default_rng(seed)
    matrices = [(f"Poisson {grid}x{grid} grid (generated)", poisson_2d(grid))]
    if extra_matrix:
        from sparsad._data import load_suitesparse

        real = load_suitesparse(extra_matrix)
        if real is not None:
            matrices.append((f"SuiteSparse {extra_matrix}", real))
        else:
            print(f"(../shared/data not found: skipping the real matrix {extra_matrix})")
    all_ok = True
    for label, matrix in matrices:
        print(f"\n== {label}: {matrix.shape[0]}x{matrix.shape[1]}, nnz={matrix.nnz} ==")
        print(f"{'program':<22} {'sparsad (interpreter)':<52} {'NumPy/SciPy':<52} match")
        for entry in PAPER_PROGRAMS.values():
            inputs = demo_inputs(entry, matrix, rng)
            start = time.perf_counter()
            ours = program(entry.text)(**inputs)
            elapsed = time.perf_counter() - start
            reference = entry.reference(**inputs)
            ok = values_equal(ours, reference, rtol=1e-10, atol=1e-10)
            all_ok &= ok
            print(f"{entry.name:<22} {_summary(ours):<52} {_summary(reference):<52} "
                  f"{'yes' if ok else 'NO'}  ({elapsed * 1e3:.0f} ms)")
        all_ok &= run_gradients(matrix, rng)
    all_ok &= run_compiled(grid=45)
    if pillars:
        from sparsad.demo_pillars import run_pillars

        all_ok &= run_pillars()
    print("\nAll results match NumPy/SciPy." if all_ok else "\nSOME RESULTS DIFFER.")
    return all_ok


def _median_time(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def run_compiled(grid: int = 45) -> bool:
    """A compiled gradient (Numba kernel) timed against PyTorch dense reverse mode."""
    from sparsad.ad.api import grad, jacobian

    A = poisson_2d(grid)
    n = A.shape[0]
    x = np.random.default_rng(1).standard_normal(n)
    print(f"\n== compiled gradients on a Poisson {grid}x{grid} matrix: {n}x{n}, nnz={A.nnz} ==")
    cases = [
        ("SMVM d/dA (masked)", grad(PAPER_PROGRAMS["smvm"].text, wrt="A"), dict(A=A, X=x)),
        ("BATAx d/dx", jacobian(PAPER_PROGRAMS["batax"].text, wrt="x"), dict(beta=1.5, A=A, x=x)),
    ]
    expected = {"SMVM d/dA (masked)": _masked_outer(A, x), "BATAx d/dx": 1.5 * (A.T @ A)}
    ok_all = True
    for label, derivative, inputs in cases:
        start = time.perf_counter()
        result = derivative(**inputs)
        first = time.perf_counter() - start
        run = _median_time(lambda: derivative(**inputs))
        ok = abs(result - expected[label]).max() <= 1e-10 * abs(expected[label]).max()
        ok_all &= ok
        torch_time = _torch_time(label, A, x)
        versus = (f"PyTorch dense reverse mode {torch_time * 1e3:8.1f} ms  ({torch_time / run:6.1f}x slower)"
                  if torch_time else "PyTorch not installed")
        print(f"{label:<22} sparsad {run * 1e3:8.2f} ms (first call with compilation {first:5.2f} s)  "
              f"{versus}  match: {'yes' if ok else 'NO'}")
    return ok_all


def _masked_outer(A: sp.csr_matrix, x: np.ndarray) -> sp.csr_matrix:
    result = A.copy()
    result.data = x[A.indices].astype(float)
    return result


def _torch_time(label: str, A: sp.csr_matrix, x: np.ndarray) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    dense = torch.tensor(A.toarray(), dtype=torch.float64)
    vector = torch.tensor(x, dtype=torch.float64)
    if label.startswith("SMVM"):
        def run():
            matrix = dense.clone().requires_grad_(True)
            (matrix @ vector).sum().backward()
            return matrix.grad
    else:
        def run():
            return torch.func.jacrev(lambda v: 1.5 * (dense.T @ (dense @ v)))(vector)
    run()
    return _median_time(run, repeat=3)


def gradient_cases(A: sp.csr_matrix, rng: np.random.Generator):
    """(label, derivative, inputs, closed form) for the §7 gradient computations."""
    from sparsad.ad.api import grad, jacobian

    n = A.shape[1]
    x, v1, v2, beta, s = rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n), 1.5, 0.7
    texts = {name: PAPER_PROGRAMS[name].text for name in PAPER_PROGRAMS}
    pattern = A.copy()
    pattern.data[:] = 1.0  # the stored pattern, explicit zeros included: the masked convention
    return [
        ("SMVM d/dX", grad(texts["smvm"], wrt="X"), dict(A=A, X=x), np.asarray(A.sum(axis=0)).ravel()),
        ("SMMM d/dB", grad(texts["smmm"], wrt="B"), dict(A=A, B=A),
         pattern.multiply(np.asarray(A.sum(axis=0)).reshape(-1, 1)).tocsr()),
        ("BATAx d/dx", jacobian(texts["batax"], wrt="x"), dict(beta=beta, A=A, x=x), beta * (A.T @ A).toarray()),
        ("VVD d/dV1", grad(texts["vvd"], wrt="V1"), dict(V1=v1, V2=v2), v2),
        ("VVA d/dV1", jacobian(texts["vva"], wrt="V1"), dict(V1=v1, V2=v2), np.eye(n)),
        ("VSM d/ds", jacobian(texts["vsm"], wrt="s"), dict(V=v1, s=s), 2 * s * v1),
    ]


def run_gradients(A: sp.csr_matrix, rng: np.random.Generator) -> bool:
    print(f"\n{'gradient':<26} {'sparsad (' + 'mode' + ')':<52} {'closed form (NumPy/SciPy)':<52} match")
    ok_all = True
    for label, derivative, inputs, expected in gradient_cases(A, rng):
        start = time.perf_counter()
        ours = derivative(**inputs)
        elapsed = time.perf_counter() - start
        ok = values_equal(ours, expected, rtol=1e-10, atol=1e-10)
        ok_all &= ok
        mode = derivative.resolved_mode()
        print(f"{label + ' [' + mode + ']':<26} {_summary(ours):<52} {_summary(expected):<52} "
              f"{'yes' if ok else 'NO'}  ({elapsed * 1e3:.0f} ms)")
    return ok_all
