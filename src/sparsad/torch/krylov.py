"""Differentiable Krylov solvers: CG, MINRES, GMRES, BiCGSTAB, with preconditioners, a
convergence report, and matrix-free operators.

Gradients are implicit (adjoint): the backward of x = A^{-1} b is one more solve with A^T by the
same method, gb = A^{-T} g, and gA = -(gb x^T) on A's pattern (or, for a matrix-free operator,
-gb^T (dA/dθ) x for the parameters θ it declares). The adjoint solve is itself differentiable,
so second derivatives work too. The arguments follow SciPy: x0, rtol, atol, maxiter, M.

CG runs its own loop (all right-hand sides at once, any device); MINRES, GMRES and BiCGSTAB are
SciPy's (CPU), one right-hand side at a time. CG and MINRES need a symmetric A and refuse one
that is not (a SparseMatrix is checked entry by entry, an operator with a random probe).

Example:
    >>> import torch, scipy.sparse as sp
    >>> from sparsad.torch import SparseMatrix
    >>> A = SparseMatrix.from_scipy(sp.diags([[-1.0] * 4, [4.0] * 5, [-1.0] * 4], [-1, 0, 1]))
    >>> x, info = cg(A, torch.ones(5, dtype=torch.float64), M="jacobi", return_info=True)
    >>> info.converged
    True
"""
from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch

from sparsad.errors import InputError, ShapeError, UnsupportedError
from sparsad.ops import solve as _solve
from sparsad.ops.solve import ConvergenceInfo, ConvergenceWarning
from sparsad.torch import _traced
from sparsad.torch._functorch import loop_vmap
from sparsad.torch.matrix import SparseMatrix

METHODS = ("cg", "minres", "gmres", "bicgstab")
SYMMETRIC_METHODS = ("cg", "minres")

#: Relative asymmetry max|A - A^T| / max|A| above which CG and MINRES refuse a SparseMatrix.
SYMMETRY_RTOL = 1e-5


class KrylovInfo(ConvergenceInfo):
    """The forward solve's ConvergenceInfo; once a backward pass has run, `adjoint` holds the
    adjoint (gradient) solve's report, so the two iteration counts can be compared.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    >>> x, info = st.cg(A, b, return_info=True)
    >>> info.adjoint is None
    True
    >>> x.sum().backward()
    >>> info.adjoint.converged
    True
    """

    __slots__ = ("adjoint",)

    def __init__(self, iterations: int, residual: float, converged: bool):
        super().__init__(iterations, residual, converged)
        self.adjoint: ConvergenceInfo | None = None


class LinearOperator:
    """A matrix-free square operator: `matvec(v)` = A v on torch tensors of shape (n,), and
    optionally `rmatvec(v)` = A^T v (needed by the adjoint of GMRES and BiCGSTAB).

    `parameters` lists the tensors that matvec reads (and rmatvec, consistently): gradients reach
    them by differentiating matvec at the solution. Set `symmetric=True` when A = A^T (then
    rmatvec defaults to matvec).

    Example:
        >>> import torch
        >>> d = torch.tensor([2.0, 4.0], dtype=torch.float64)
        >>> op = LinearOperator((2, 2), lambda v: d * v, symmetric=True, parameters=[d])
        >>> cg(op, torch.ones(2, dtype=torch.float64))
        tensor([0.5000, 0.2500], dtype=torch.float64)
    """

    def __init__(self, shape: tuple[int, int], matvec: Callable[[torch.Tensor], torch.Tensor],
                 rmatvec: Callable[[torch.Tensor], torch.Tensor] | None = None, *, symmetric: bool = False,
                 parameters: Sequence[torch.Tensor] = (), dtype: torch.dtype = torch.float64, device: Any = "cpu"):
        rows, cols = (int(s) for s in shape)
        if rows != cols:
            raise ShapeError(f"a LinearOperator for a solve must be square, got shape {shape}")
        if not callable(matvec):
            raise InputError(f"matvec must be callable, got {type(matvec).__name__}")
        self.shape, self.symmetric = (rows, cols), bool(symmetric)
        self.matvec = matvec
        self.rmatvec = matvec if rmatvec is None and symmetric else rmatvec
        self.parameters = tuple(parameters)
        for index, p in enumerate(self.parameters):
            if not isinstance(p, torch.Tensor):
                raise InputError(f"parameters[{index}] must be a torch.Tensor, got {type(p).__name__}")
        self.dtype, self.device = dtype, torch.device(device)

    def transposed(self) -> "LinearOperator":
        if self.rmatvec is None:
            raise UnsupportedError("this solve needs A^T v (the adjoint solve of the gradient); give the "
                                   "LinearOperator an rmatvec, or symmetric=True if A = A^T")
        return LinearOperator(self.shape, self.rmatvec, self.matvec, symmetric=self.symmetric,
                              parameters=self.parameters, dtype=self.dtype, device=self.device)


# -- operators and preconditioners as plain (no autograd) callables ---------------------------------
class _System:
    """A (or A^T) as a plain matvec on torch tensors, plus a SciPy view for SciPy's solvers."""

    def __init__(self, A: SparseMatrix | LinearOperator, values: torch.Tensor | None, transposed: bool):
        self.A, self.transposed = A, transposed
        if isinstance(A, SparseMatrix):
            pattern, vals = A.pattern, values.detach()
            if transposed:
                from sparsad.torch.linalg import pattern_index

                pattern, vals = pattern.transpose[0], vals[pattern_index(pattern, "perm", vals.device)]
            self.pattern, self.values = pattern, vals
        else:
            self.operator = A.transposed() if transposed else A

    @property
    def n(self) -> int:
        return self.A.shape[0]

    def __call__(self, v: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            if isinstance(self.A, SparseMatrix):
                from sparsad.torch._autograd import _evaluate
                from sparsad.ops.contract import spmm_terms

                return _evaluate(spmm_terms(self.pattern), 2, self.values, v)
            if v.ndim == 1:
                return self.operator.matvec(v)
            return torch.stack([self.operator.matvec(c) for c in v.unbind(1)], 1)

    def scipy(self):
        import scipy.sparse.linalg

        if isinstance(self.A, SparseMatrix) and self.values.device.type == "cpu":
            return self.pattern.to_scipy(self.values.numpy())
        dtype = self.A.dtype if isinstance(self.A, SparseMatrix) else self.A.dtype
        return scipy.sparse.linalg.LinearOperator(
            (self.n, self.n), matvec=lambda v: self(torch.as_tensor(np.asarray(v).reshape(-1), dtype=dtype)).numpy(),
            dtype=np.dtype(str(dtype).replace("torch.", "")))


class _Preconditioner:
    """M ≈ A^-1 applied to residuals: Jacobi, ILU, AMG (pyamg), a SparseMatrix, an operator or a callable."""

    def __init__(self, spec: Any, system: _System, symmetric: bool = False):
        self.spec, self.apply_numpy, self.apply_torch = spec, None, None
        self.transpose_of_factor = None  # how to apply M^T without a new setup, when there is one
        if spec is None:
            return
        if isinstance(spec, str):
            self._named(spec.lower(), system, symmetric)
        elif isinstance(spec, SparseMatrix):
            with torch.no_grad():
                matrix = spec.T.detach() if system.transposed else spec.detach()
            self.apply_torch = lambda r: _System(matrix, matrix.values, False)(r)
        elif isinstance(spec, LinearOperator):
            operator = spec.transposed() if system.transposed and not spec.symmetric else spec
            self.apply_torch = _System(operator, None, False)
        elif callable(spec):
            self.apply_torch = spec  # assumed symmetric for the adjoint solve
        else:
            raise InputError(f"M must be None, 'jacobi', 'ilu', 'amg', a SparseMatrix, a LinearOperator or a "
                             f"callable, got {type(spec).__name__}")

    def _named(self, name: str, system: _System, symmetric: bool) -> None:
        if not isinstance(system.A, SparseMatrix):
            raise InputError(f"M={name!r} needs A as a SparseMatrix (it reads A's entries); for a matrix-free "
                             "operator pass a callable or LinearOperator preconditioner")
        matrix = system.scipy()
        if name == "jacobi":
            diagonal = matrix.diagonal()
            if np.any(diagonal == 0):
                raise InputError(f"M='jacobi' needs a nonzero diagonal; A[{int(np.argmax(diagonal == 0))}, "
                                 f"{int(np.argmax(diagonal == 0))}] is zero (try M='ilu')")
            inverse = torch.as_tensor(1.0 / diagonal, dtype=system.values.dtype, device=system.values.device)
            self.apply_torch = lambda r: r * (inverse if r.ndim == 1 else inverse[:, None])
            self.transpose_of_factor = self  # diag(A^T) = diag(A)
        elif name == "ilu":
            import scipy.sparse.linalg

            # symmetric mode (diagonal pivots, symmetric ordering) keeps M close to symmetric,
            # which CG and MINRES need of a preconditioner
            options = {"permc_spec": "MMD_AT_PLUS_A", "diag_pivot_thresh": 0.0,
                       "options": {"SymmetricMode": True}} if symmetric else {}
            try:
                ilu = scipy.sparse.linalg.spilu(matrix.tocsc(), **options)
            except RuntimeError as exc:
                raise InputError(f"M='ilu': the incomplete LU of A failed ({exc}); try M='jacobi'") from None
            self.apply_numpy = ilu.solve
            # the adjoint solve needs ILU(A)^T: the same factors solved transposed, no new factorisation
            self.transpose_of_factor = _Preconditioner(None, system)
            self.transpose_of_factor.spec = name
            self.transpose_of_factor.apply_numpy = lambda r: ilu.solve(r, "T")
            self.transpose_of_factor.transpose_of_factor = self
        elif name == "amg":
            try:
                import pyamg
            except ImportError:  # pragma: no cover - pyamg is a pinned dependency of the solvers extra
                raise UnsupportedError("M='amg' needs pyamg: pip install pyamg") from None
            solver = pyamg.smoothed_aggregation_solver(matrix.tocsr())
            self.apply_numpy = solver.aspreconditioner(cycle="V").matvec
        else:
            raise InputError(f"unknown preconditioner M={name!r}; use 'jacobi', 'ilu' or 'amg'")

    def __call__(self, r: torch.Tensor) -> torch.Tensor:
        if self.apply_torch is not None:
            return self.apply_torch(r)
        columns = r.detach().cpu().numpy()
        if columns.ndim == 1:
            return torch.as_tensor(self.apply_numpy(columns), dtype=r.dtype, device=r.device)
        out = np.stack([self.apply_numpy(np.ascontiguousarray(c)) for c in columns.T], 1)
        return torch.as_tensor(out, dtype=r.dtype, device=r.device)

    def scipy(self, n: int, dtype: torch.dtype):
        import scipy.sparse.linalg

        if self.spec is None:
            return None
        if self.apply_numpy is not None:
            return scipy.sparse.linalg.LinearOperator((n, n), matvec=self.apply_numpy)
        return scipy.sparse.linalg.LinearOperator(
            (n, n), matvec=lambda v: self(torch.as_tensor(np.asarray(v).reshape(-1), dtype=dtype)).numpy())


# -- the solve ------------------------------------------------------------------------------------
class _Spec:
    """Everything about a solve but the tensors: method, operator, options, and the last report."""

    def __init__(self, method: str, A, rtol: float, atol: float, maxiter: int | None, M: Any, transposed: bool = False,
                 restart: int | None = None):
        self.method, self.A, self.rtol, self.atol, self.maxiter = method, A, rtol, atol, maxiter
        self.M, self.transposed, self.restart = M, transposed, restart
        self.info: ConvergenceInfo | None = None
        self.checked = False  # symmetry verified (for these values)
        self.preconditioner: _Preconditioner | None = None

    def adjoint(self) -> "_Spec":
        adjoint = _Spec(self.method, self.A, self.rtol, self.atol, self.maxiter, self.M, not self.transposed,
                        self.restart)
        if self.method in SYMMETRIC_METHODS:  # A^T = A (checked): reuse the check and the preconditioner
            adjoint.checked, adjoint.preconditioner = self.checked, self.preconditioner
        elif self.preconditioner is not None:  # M^T from M's own setup where possible (Jacobi, ILU)
            adjoint.preconditioner = self.preconditioner.transpose_of_factor
        return adjoint


def _run(spec: _Spec, values: torch.Tensor | None, b: torch.Tensor, x0: torch.Tensor | None) -> torch.Tensor:
    system = _System(spec.A, values, spec.transposed)
    if spec.method in SYMMETRIC_METHODS and not spec.checked:
        _check_symmetric(system, values)
        spec.checked = True
    if spec.preconditioner is None:
        spec.preconditioner = _Preconditioner(spec.M, system, symmetric=spec.method in SYMMETRIC_METHODS)
    M = spec.preconditioner
    if spec.method == "cg":
        x, info = _solve.cg(system, b, rtol=spec.rtol, atol=spec.atol, maxiter=spec.maxiter, x0=x0,
                            M=None if spec.M is None else M, name="cg", warn=False)
    else:
        x, info = _scipy_solve(spec, system, M, b, x0)
    spec.info = info = KrylovInfo(info.iterations, info.residual, info.converged)
    if not info.converged:
        what = "adjoint (gradient) solve" if spec.transposed else "solve"
        warnings.warn(f"{spec.method}: the {what} did not converge in {info.iterations} iterations (relative "
                      f"residual {info.residual:.2e}, rtol {spec.rtol:g}); raise maxiter or precondition "
                      f"(M='jacobi', 'ilu', 'amg')", ConvergenceWarning, stacklevel=4)
    return x


def _scipy_solve(spec: _Spec, system: _System, M: _Preconditioner, b: torch.Tensor, x0):
    import scipy.sparse.linalg as sla

    if b.device.type != "cpu":
        raise UnsupportedError(f"{spec.method} runs SciPy's solver on the CPU; move A and b with .to('cpu') or use cg")
    operator, preconditioner = system.scipy(), M.scipy(system.n, b.dtype)
    solver = {"minres": sla.minres, "gmres": sla.gmres, "bicgstab": sla.bicgstab}[spec.method]
    rhs = b.detach().numpy()
    rhs2 = rhs[:, None] if rhs.ndim == 1 else rhs
    start = None if x0 is None else x0.detach().numpy().reshape(rhs2.shape)
    columns, worst, converged, total = [], 0.0, True, 0
    for c in range(rhs2.shape[1]):
        count = [0]

        def callback(*_):
            count[0] += 1

        options = {"rtol": spec.rtol, "maxiter": spec.maxiter, "M": preconditioner, "callback": callback,
                   "x0": None if start is None else start[:, c]}
        if spec.method != "minres":
            options["atol"] = spec.atol
        if spec.method == "gmres":
            options["callback_type"] = "pr_norm"
            if spec.restart is not None:
                options["restart"] = spec.restart
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reported below as our ConvergenceWarning
            x, code = solver(operator, rhs2[:, c], **options)
        residual = np.linalg.norm(rhs2[:, c] - operator @ x) / max(np.linalg.norm(rhs2[:, c]), np.finfo(float).tiny)
        bnorm = np.linalg.norm(rhs2[:, c])
        tolerance_met = residual * bnorm <= max(spec.rtol * bnorm, spec.atol) * 10
        if code < 0 and residual <= np.sqrt(np.finfo(rhs2.dtype).eps):
            # a breakdown near the answer (residual at rounding level): keep x, report whether
            # the tolerance was met (a ConvergenceWarning follows when not)
            code = 0 if tolerance_met else 1
        if code < 0 and spec.method == "bicgstab":  # a true BiCGSTAB breakdown: GMRES has none
            warnings.warn(f"bicgstab broke down (SciPy info={code}) on right-hand side column {c}; that column "
                          "was solved with gmres instead", ConvergenceWarning, stacklevel=5)
            gmres_options = {k: v for k, v in options.items() if k != "callback"}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                x, code = sla.gmres(operator, rhs2[:, c], **gmres_options)
            residual = np.linalg.norm(rhs2[:, c] - operator @ x) / max(bnorm, np.finfo(float).tiny)
            tolerance_met = residual * bnorm <= max(spec.rtol * bnorm, spec.atol) * 10
        if code < 0:
            raise InputError(f"{spec.method}: SciPy reports a breakdown (info={code}); the matrix or "
                             "preconditioner is unsuitable for this method (try gmres)")
        ok = code == 0 and tolerance_met
        converged &= bool(ok)
        worst, total = max(worst, residual), max(total, count[0])
        columns.append(x)
    out = torch.as_tensor(np.stack(columns, 1), dtype=b.dtype)
    return (out[:, 0] if rhs.ndim == 1 else out), ConvergenceInfo(total, worst, converged)


def _check_symmetric(system: _System, values: torch.Tensor | None) -> None:
    method = "cg/minres"
    if isinstance(system.A, SparseMatrix):
        _solve.check_symmetric(system.pattern, system.values.cpu().numpy(), SYMMETRY_RTOL, "A")
        return
    if system.operator.symmetric:
        return
    generator = torch.Generator().manual_seed(0)
    u, v = (torch.randn(system.n, dtype=system.A.dtype, generator=generator).to(system.A.device) for _ in range(2))
    left, right = float(u @ system(v)), float(system(u) @ v)
    scale = max(abs(left), abs(right), 1e-300)
    if abs(left - right) > 1e-8 * scale * 10:
        raise InputError(f"{method} needs a symmetric operator, but u·(A v) = {left:.6g} differs from (A u)·v = "
                         f"{right:.6g} for random u, v; use gmres or bicgstab, or declare symmetric=True if "
                         "this is rounding")


class _KrylovSolve(torch.autograd.Function):
    """x = op(A)^-1 b for the options in `spec`; values are A's (None for an operator)."""

    @staticmethod
    def forward(spec, x0, b, values, *parameters):
        return _run(spec, values, b, x0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        spec, _x0, _b, values, *parameters = inputs
        ctx.spec, ctx.info = spec, spec.info
        ctx.n_parameters = len(parameters)
        ctx.save_for_backward(output, values, *parameters)
        ctx.save_for_forward(output, values, *parameters)

    @staticmethod
    def backward(ctx, g):
        x, values, *parameters = ctx.saved_tensors
        spec = ctx.spec
        adjoint = spec.adjoint()
        gb = _KrylovSolve.apply(adjoint, None, g, values, *parameters)
        if ctx.info is not None:
            ctx.info.adjoint = adjoint.info
        gvalues = None
        if values is not None and ctx.needs_input_grad[3]:
            from sparsad.torch.solve import _masked_outer

            pattern = spec.A.pattern
            gvalues = -(_masked_outer(pattern, x, gb) if spec.transposed else _masked_outer(pattern, gb, x))
        gparams = _operator_vjp(spec, x, gb, parameters, ctx.needs_input_grad[4:])
        return (None, None, gb, gvalues, *gparams)

    @staticmethod
    def jvp(ctx, _spec, _x0, db, dvalues, *dparameters):
        x, values, *parameters = ctx.saved_tensors
        spec = ctx.spec
        rhs = torch.zeros_like(x) if db is None else db
        if dvalues is not None:
            from sparsad.torch.solve import _apply, _transposed

            pattern, dv = (_transposed(spec.A.pattern, dvalues) if spec.transposed else (spec.A.pattern, dvalues))
            rhs = rhs - _apply(pattern, dv, x)
        if any(d is not None for d in dparameters):
            rhs = rhs - _operator_jvp(spec, x, parameters, dparameters)
        tangent = copy.copy(spec)  # same operator, check and preconditioner; its own report, so the
        tangent.info = None        # forward's (returned by return_info) is not overwritten
        return _KrylovSolve.apply(tangent, None, rhs, values, *parameters)

    @staticmethod
    def vmap(info, in_dims, spec, x0, b, values, *parameters):
        if in_dims[3] is not None or any(d is not None for d in in_dims[4:]):
            raise UnsupportedError("vmap over the matrix of a Krylov solve is not supported; vmap over b only")
        return loop_vmap(_KrylovSolve, info, in_dims, spec, x0, b, values, *parameters)


def _operator_apply(spec: _Spec, x: torch.Tensor) -> torch.Tensor:
    operator = spec.A.transposed() if spec.transposed else spec.A
    if x.ndim == 1:
        return operator.matvec(x)
    return torch.stack([operator.matvec(c) for c in x.unbind(1)], 1)


def _operator_vjp(spec: _Spec, x, gb, parameters, needed) -> list:
    """-gb^T d(op(A) x)/dθ for the operator's declared parameters (autograd through matvec)."""
    if not parameters or not any(needed):
        return [None] * len(parameters)
    if torch.is_grad_enabled():
        raise UnsupportedError("second derivatives with respect to a LinearOperator's parameters are not "
                               "supported (create_graph=True); differentiate once, or pass A as a SparseMatrix")
    wanted = [p for p, need in zip(parameters, needed) if need]
    with torch.enable_grad():  # the partial derivative at fixed x: x and gb enter as constants
        out = _operator_apply(spec, x.detach())
        grads = torch.autograd.grad(out, wanted, grad_outputs=-gb.detach(), allow_unused=True)
    it = iter(grads)
    return [next(it) if need else None for need in needed]


def _operator_jvp(spec: _Spec, x, parameters, dparameters) -> torch.Tensor:
    raise UnsupportedError("forward-mode derivatives with respect to a LinearOperator's parameters are not "
                           "supported (its matvec closes over them); use reverse mode (backward) for them")


def _check_b(A, b: Any, name: str = "b") -> torch.Tensor:
    if not isinstance(b, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor, got {type(b).__name__}")
    if b.layout != torch.strided:
        raise InputError(f"{name} must be a dense tensor, got layout {b.layout}")
    if b.ndim not in (1, 2) or b.shape[0] != A.shape[0]:
        raise ShapeError(f"{name} must have shape ({A.shape[0]},) or ({A.shape[0]}, k), got {tuple(b.shape)}")
    if b.dtype != A.dtype:
        raise InputError(f"{name} has dtype {b.dtype} but A has {A.dtype}; convert one of them")
    return b


def _solve_with(method: str, A, b, x0, rtol, atol, maxiter, M, return_info, restart=None):
    if not isinstance(A, (SparseMatrix, LinearOperator)):
        raise InputError(f"A must be a SparseMatrix or a sparsad.torch.LinearOperator, got {type(A).__name__}")
    if A.shape[0] != A.shape[1]:
        raise ShapeError(f"A must be square for {method}, got shape {A.shape}")
    b = _check_b(A, b)
    if x0 is not None:
        x0 = _check_b(A, x0, "x0")
        if x0.shape != b.shape:
            raise ShapeError(f"x0 must have b's shape {tuple(b.shape)}, got {tuple(x0.shape)}")
        x0 = x0.detach()
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not (isinstance(value, (int, float)) and value >= 0):
            raise InputError(f"{name} must be a non-negative number, got {value!r}")
    if maxiter is not None and (not isinstance(maxiter, int) or maxiter < 0):
        raise InputError(f"maxiter must be a non-negative int or None, got {maxiter!r}")
    if isinstance(A, SparseMatrix) and (_traced.tracing() or _traced.is_fake(A.values, b, x0)):
        return _traced_solve(method, A, b, x0, float(rtol), float(atol), maxiter, M, return_info, restart)
    spec = _Spec(method, A, float(rtol), float(atol), maxiter, M, restart=restart)
    if isinstance(A, SparseMatrix):
        x = _KrylovSolve.apply(spec, x0, b, A.values)
    else:
        x = _KrylovSolve.apply(spec, x0, b, None, *A.parameters)
    return (x, spec.info) if return_info else x


def _traced_solve(method: str, A: SparseMatrix, b, x0, rtol: float, atol: float, maxiter, M, return_info, restart):
    """The solve as the custom op `sparsad::krylov` (under torch.compile, on meta or fake tensors)."""
    if return_info:
        raise UnsupportedError(f"{method}(..., return_info=True) reports the iterations of an eager call; under "
                               "torch.compile (or on meta/fake tensors) call it without return_info")
    if not (M is None or isinstance(M, str)):
        raise UnsupportedError(f"{method}: under torch.compile (or on meta/fake tensors) M must be None, 'jacobi', "
                               "'ilu' or 'amg'")
    pattern = _traced.as_static(A.pattern) if _traced.tracing() else _traced.Static.of(A.pattern)
    config = pattern.krylov_config(method, *map(_traced.concrete, (rtol, atol, maxiter)), M, _traced.concrete(restart))
    return _traced.krylov(config, A.values, b, x0)


_TOL_DEPRECATED = object()


def cg(A: SparseMatrix | LinearOperator, b: torch.Tensor, x0: torch.Tensor | None = None, *, rtol: float = 1e-10,
       atol: float = 0.0, maxiter: int | None = None, M: Any = None, return_info: bool = False,
       tol: Any = _TOL_DEPRECATED):
    """x = A^{-1} b by (preconditioned) conjugate gradients; A symmetric positive definite.

    Arguments as SciPy's `cg` (x0, rtol, atol, maxiter, M) except the default rtol (1e-10, since
    the gradient is only as accurate as the solves). `tol` is the deprecated name of rtol.
    `return_info=True` returns (x, ConvergenceInfo). Runs on any device; b may hold k columns.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> x, info = st.cg(A, b, return_info=True)
    >>> x, info.converged, info.info
    (tensor([0.0909, 0.6364], dtype=torch.float64), True, 0)
    """
    if tol is not _TOL_DEPRECATED:
        warnings.warn("cg(tol=...) is deprecated; use rtol=... (and atol=...) as in SciPy", DeprecationWarning,
                      stacklevel=2)
        rtol = tol
    return _solve_with("cg", A, b, x0, rtol, atol, maxiter, M, return_info)


def minres(A: SparseMatrix | LinearOperator, b: torch.Tensor, x0: torch.Tensor | None = None, *,
           rtol: float = 1e-10, maxiter: int | None = None, M: Any = None, return_info: bool = False):
    """x = A^{-1} b by MINRES (SciPy); A symmetric, possibly indefinite. Gradients by the adjoint solve.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.minres(A, b)
    tensor([0.0909, 0.6364], dtype=torch.float64)
    """
    return _solve_with("minres", A, b, x0, rtol, 0.0, maxiter, M, return_info)


def gmres(A: SparseMatrix | LinearOperator, b: torch.Tensor, x0: torch.Tensor | None = None, *,
          rtol: float = 1e-10, atol: float = 0.0, restart: int | None = None, maxiter: int | None = None,
          M: Any = None, return_info: bool = False):
    """x = A^{-1} b by restarted GMRES (SciPy); any nonsingular A. The gradient solves with A^T.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.gmres(A, b, rtol=1e-12)
    tensor([0.0909, 0.6364], dtype=torch.float64)
    """
    return _solve_with("gmres", A, b, x0, rtol, atol, maxiter, M, return_info, restart)


def bicgstab(A: SparseMatrix | LinearOperator, b: torch.Tensor, x0: torch.Tensor | None = None, *,
             rtol: float = 1e-10, atol: float = 0.0, maxiter: int | None = None, M: Any = None,
             return_info: bool = False):
    """x = A^{-1} b by BiCGSTAB (SciPy); any nonsingular A. The gradient solves with A^T.

    >>> import torch, sparsad.torch as st
    >>> A = st.SparseMatrix.from_dense(torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64))
    >>> b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> st.bicgstab(A, b, rtol=1e-12)
    tensor([0.0909, 0.6364], dtype=torch.float64)
    """
    return _solve_with("bicgstab", A, b, x0, rtol, atol, maxiter, M, return_info)
