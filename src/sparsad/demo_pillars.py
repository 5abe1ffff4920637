"""The other three pillars in `sparsad demo`: a PyTorch training run on a SparseMatrix, an
einsum-graph Hessian-vector product, and a coarsened (symbolically differentiated) code region.
Each checks its derivative against an independent reference and says whether it matched."""
from __future__ import annotations

import time

import numpy as np

from sparsad.demo import _median_time


def run_torch_training() -> bool:
    """Learned Jacobi weights (numml §3.1): a few seconds of Adam with masked gradients."""
    try:
        from sparsad.torch.demo import main
    except ImportError:
        print("\n(PyTorch not installed: skipping the sparsad.torch training run)")
        return True
    print("\n== sparsad.torch: differentiable sparse linear algebra ==")
    return bool(main(n=32, epochs=150)["gradcheck"])


def run_tensor_hvp(s: int = 8, rank: int = 3) -> bool:
    """CP loss ||X - [[A, B, C]]||^2: the optimized HVP graph against central differences of the gradient."""
    from sparsad import tensor as T

    rng = np.random.default_rng(2)
    X = T.Variable("X", (s, s, s))
    factors = [T.Variable(name, (s, rank)) for name in "ABC"]
    directions = [T.Variable("d" + name, (s, rank)) for name in "ABC"]
    residual = X - T.einsum("ir,jr,kr->ijk", *factors)
    loss = T.einsum("ijk,ijk->", residual, residual)
    grads = T.grad(loss, factors)
    hvps = T.optimize(T.hvp(loss, factors, directions))
    feed = {v: rng.standard_normal(v.shape) for v in [X, *factors, *directions]}
    start = time.perf_counter()
    ours = T.Executor(hvps).run(feed)
    elapsed = time.perf_counter() - start
    gradient = T.Executor(grads)
    step = 1e-5
    plus = gradient.run({**feed, **{f: feed[f] + step * feed[d] for f, d in zip(factors, directions)}})
    minus = gradient.run({**feed, **{f: feed[f] - step * feed[d] for f, d in zip(factors, directions)}})
    reference = [(p - m) / (2 * step) for p, m in zip(plus, minus)]
    err = max(np.abs(o - r).max() / np.abs(r).max() for o, r in zip(ours, reference))
    ok = err < 1e-6
    print("\n== sparsad.tensor: einsum-graph Hessian-vector product ==")
    print(f"CP loss, {s}x{s}x{s} tensor, rank {rank}: HVP w.r.t. (A, B, C) from the optimized graph "
          f"({elapsed * 1e3:.1f} ms) vs central differences of the gradient: rel. err {err:.1e}  "
          f"match: {'yes' if ok else 'NO'}")
    return ok


def run_coarsened_gradient() -> bool:
    """BGDHyperOpt (coarsening Fig. 6): the loop's closed-form adjoint against PyTorch autograd."""
    try:
        import torch

        import sparsad.coarsen as coarsen
        from sparsad.coarsen import apps
    except ImportError:
        print("\n(PyTorch not installed: skipping the coarsening demo)")
        return True
    fn, _, make, argnums = apps.APPS["BGDHyperOpt"]
    tensors, static = make(1)
    args = tensors + static
    gradient = coarsen.grad(fn, argnums=argnums)
    start = time.perf_counter()
    for _ in range(2):        # the first calls trace, differentiate and compile (adjoint, then primal)
        ours = gradient(*args)
    setup = time.perf_counter() - start
    elapsed = _median_time(lambda: gradient(*args))
    ours = ours if isinstance(ours, tuple) else (ours,)
    nums = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    leaves = [a.detach().clone().requires_grad_(True) if isinstance(a, torch.Tensor) and i in nums else a
              for i, a in enumerate(args)]
    wrt = [leaves[i] for i in nums]
    reference = torch.autograd.grad(fn(*leaves), wrt)
    torch_time = _median_time(lambda: torch.autograd.grad(fn(*leaves), wrt))
    err = max(float((o - r).abs().max() / r.abs().max().clamp_min(1e-300)) for o, r in zip(ours, reference))
    ok = err <= 1e-10
    print("\n== sparsad.coarsen: symbolic derivative of a loop with a data-dependent break ==")
    print(f"BGDHyperOpt (learning-rate search, 200 points): coarsen.grad {elapsed * 1e3:.3f} ms "
          f"(first two calls with tracing and compilation {setup:.1f} s) vs PyTorch autograd "
          f"(forward + backward) {torch_time * 1e3:.2f} ms; rel. err {err:.1e}  match: {'yes' if ok else 'NO'}")
    print("  (sparsad.coarsen.explain(f, *args) prints the loop's closed form and the generated code)")
    return ok


def run_pillars() -> bool:
    ok = run_torch_training()
    ok &= run_tensor_hvp()
    ok &= run_coarsened_gradient()
    return ok
