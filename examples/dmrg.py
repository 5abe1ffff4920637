"""Two-site DMRG for a random symmetric MPO with graph HVPs (AutoHOOT §6, Figs. 6 and 7g).

The local energy <bra| H_eff |ket> is an einsum of the left environment, two MPO tensors, the
right environment, bra and ket. Its mixed Hessian block d^2/(d bra d ket) is H_eff, so the
eigensolver's matrix-vector product is the HVP with direction (0, v), optimized once per shape
(the zero direction is pruned, the contraction path chosen) and handed to
scipy.sparse.linalg.eigsh. Small local problems use the explicit Hessian of
E(theta) = <theta| H_eff |theta> (which is 2 H_eff), solved densely instead. The energy is checked against exact diagonalization at a small size.

Run: python examples/dmrg.py
"""
from __future__ import annotations

import time
from functools import lru_cache

import numpy as np
import scipy.linalg
from scipy.sparse.linalg import LinearOperator, eigsh

from sparsad import tensor as T

DENSE_LIMIT = 800    # local problems below this size use the explicit Hessian (quimb's rule)
DENSE_EIGH_LIMIT = 45  # ... and below this one a full dense eigh (quimb's choice of backend)
MATVECS = [0]        # graph HVPs handed to eigsh so far (the benchmark reads it)


def random_symmetric_mpo(n_sites: int, d: int, bond: int, seed: int = 0) -> list[np.ndarray]:
    """W_i of shape (left, right, s_out, s_in), each symmetric in (s_out, s_in)."""
    rng = np.random.default_rng(seed)
    mpo = []
    for i in range(n_sites):
        left = 1 if i == 0 else bond
        right = 1 if i == n_sites - 1 else bond
        w = rng.standard_normal((left, right, d, d))
        mpo.append((w + w.transpose(0, 1, 3, 2)) / 2)
    return mpo


def full_hamiltonian(mpo: list[np.ndarray]) -> np.ndarray:
    h = np.ones((1, 1, 1))                       # (w, out, in)
    for w in mpo:
        h = np.einsum("wab,wxst->xasbt", h, w)
        x, a, s, b, t = h.shape
        h = h.reshape(x, a * s, b * t)
    return h[0]


@lru_cache(maxsize=None)
def _local_graphs(shape_l, shape_w1, shape_w2, shape_r):
    # Declared symmetries (checked on feeding): the MPO sites are symmetric in (s_out, s_in), hence
    # so are the environments in (bra bond, ket bond). They let the optimizer see that the two
    # halves of the energy's Hessian are equal, so the local Hessian is one einsum, not a sum.
    L, R = T.Variable("L", shape_l, symmetry=[[0, 2]]), T.Variable("R", shape_r, symmetry=[[0, 2]])
    W1 = T.Variable("W1", shape_w1, symmetry=[[2, 3]])
    W2 = T.Variable("W2", shape_w2, symmetry=[[2, 3]])
    theta_shape = (shape_l[0], shape_w1[2], shape_w2[2], shape_r[0])
    theta, v = T.Variable("theta", theta_shape), T.Variable("v", theta_shape)
    bra, ket = T.Variable("bra", theta_shape), T.Variable("ket", theta_shape)
    # <bra| H_eff |ket>: its Hessian block d^2/(d bra d ket) is H_eff itself, so the HVP with
    # direction (0, v) gives H_eff v as one contraction (the zero direction is pruned away).
    pairing = T.einsum("awc,wxst,xyuv,byd,asub,ctvd->", L, W1, W2, R, bra, ket)
    # The default contraction order is exact for einsums this small (greedy's can cost several times more).
    matvec = T.optimize(T.hvp(pairing, [bra, ket], [T.zeros(theta_shape), v])[0])
    energy = T.einsum("awc,wxst,xyuv,byd,asub,ctvd->", L, W1, W2, R, theta, theta)
    size = int(np.prod(theta_shape))
    hess = None
    if size < DENSE_LIMIT:
        hess = T.optimize(0.5 * T.hessian(energy, [theta])[0][0])
    nodes = [matvec] + ([hess] if hess is not None else [])
    return (L, W1, W2, R, theta, v), T.Executor(nodes), matvec, hess


def local_matvec(left, w1, w2, right):
    """H_eff v as a function of v, from the graph HVP (what eigsh calls)."""
    (L, W1, W2, R, theta, v), ex, matvec, _ = _local_graphs(left.shape, w1.shape, w2.shape, right.shape)
    base = {L: left, W1: w1, W2: w2, R: right}
    return lambda x: ex.run({**base, theta: x, v: x}, out=[matvec])[0]


@lru_cache(maxsize=None)
def _env_graph(side, shape_env, shape_a, shape_w):
    E, A, W = T.Variable("E", shape_env), T.Variable("A", shape_a), T.Variable("W", shape_w)
    if side == "left":
        grown = T.einsum("awc,asb,wxst,ctd->bxd", E, A, W, A)
    else:
        grown = T.einsum("byd,asb,wyst,ctd->awc", E, A, W, A)
    return (E, A, W), T.Executor(T.optimize(grown))


def _grow(side, env, a, w):
    (E, A, W), ex = _env_graph(side, env.shape, a.shape, w.shape)
    return ex.run({E: env, A: a, W: w})[0]


def _grow_left(env, a, w):
    return _grow("left", env, a, w)


def _grow_right(env, a, w):
    return _grow("right", env, a, w)


def _local_ground_state(left, w1, w2, right, guess, tol):
    (L, W1, W2, R, theta, v), ex, _, hess = _local_graphs(left.shape, w1.shape, w2.shape, right.shape)
    n = guess.size
    if hess is not None and n < DENSE_LIMIT:
        (h,) = ex.run({L: left, W1: w1, W2: w2, R: right, theta: guess, v: guess}, out=[hess])
        h = h.reshape(n, n)
        if n < DENSE_EIGH_LIMIT:
            vals, vecs = scipy.linalg.eigh(h, subset_by_index=[0, 0])   # the lowest eigenpair only
        else:
            # ARPACK on the dense matrix, started from the current state (quimb does the same): a full
            # LAPACK tridiagonalization costs more, and far more when BLAS threads wait on a busy machine.
            vals, vecs = eigsh(h, k=1, which="SA", v0=guess.ravel(), tol=tol)
        return vals[0], vecs[:, 0].reshape(guess.shape)

    matvec_of = local_matvec(left, w1, w2, right)

    def apply(x):
        MATVECS[0] += 1
        return matvec_of(x.reshape(guess.shape)).ravel()

    op = LinearOperator((n, n), matvec=apply, dtype=np.float64)
    vals, vecs = eigsh(op, k=1, which="SA", v0=guess.ravel(), tol=tol)
    return vals[0], vecs[:, 0].reshape(guess.shape)


def initial_state(n: int, d: int, max_bond: int, seed: int = 0) -> list[np.ndarray]:
    """A random MPS (left, phys, right) with the largest bonds max_bond allows."""
    rng = np.random.default_rng(seed)
    dims = [1] + [min(d ** i, d ** (n - i), max_bond) for i in range(1, n)] + [1]
    return [rng.standard_normal((dims[i], d, dims[i + 1])) for i in range(n)]


def dmrg(mpo: list[np.ndarray], max_bond: int, sweeps: int = 4, seed: int = 0, tol: float = 1e-10,
         init: list[np.ndarray] | None = None, sweep_sequence: str = "RL"):
    """Ground-state energy by two-site DMRG; returns (energy, energies per sweep).

    init: the starting MPS (site tensors (left, phys, right), outer bonds 1), e.g. the state of a
    previous run or another code's; by default a random one drawn from `seed`.
    sweep_sequence: the directions of one sweep, "RL" (right then left) or "R" (quimb's default).
    """
    if not sweep_sequence or set(sweep_sequence) - {"R", "L"}:
        from sparsad.errors import InputError

        raise InputError(f"dmrg: sweep_sequence={sweep_sequence!r} must be a string of 'R' and 'L'")
    n, d = len(mpo), mpo[0].shape[2]
    if init is None:
        mps = initial_state(n, d, max_bond, seed)
    else:
        mps = [np.array(a, dtype=np.float64) for a in init]
        if len(mps) != n or any(a.ndim != 3 or a.shape[1] != d for a in mps) or mps[0].shape[0] != 1 \
                or mps[-1].shape[2] != 1 or any(a.shape[2] != b.shape[0] for a, b in zip(mps, mps[1:])):
            from sparsad.errors import ShapeError

            raise ShapeError(f"dmrg: init must be {n} site tensors (left, {d}, right) with matching bonds "
                             f"and outer bonds 1; got shapes {[a.shape for a in mps]}")
    for i in range(n - 1, 0, -1):                 # right-canonical form
        q, r = np.linalg.qr(mps[i].reshape(mps[i].shape[0], -1).T)
        mps[i] = q.T.reshape(-1, d, mps[i].shape[2])
        mps[i - 1] = np.einsum("asb,cb->asc", mps[i - 1], r)
    left = [np.ones((1, 1, 1))] + [None] * n
    right = [None] * n + [np.ones((1, 1, 1))]
    for i in range(n - 1, 0, -1):
        right[i] = _grow_right(right[i + 1], mps[i], mpo[i])
    history = []
    energy = None
    for _ in range(sweeps):
        passes = {"R": ("right", range(n - 1)), "L": ("left", range(n - 2, -1, -1))}
        for direction, bonds in (passes[c] for c in sweep_sequence):
            for i in bonds:
                guess = np.einsum("asb,btc->astc", mps[i], mps[i + 1])
                energy, theta = _local_ground_state(left[i], mpo[i], mpo[i + 1], right[i + 2], guess, tol)
                a, s, t, c = theta.shape
                u, sv, vh = np.linalg.svd(theta.reshape(a * s, t * c), full_matrices=False)
                k = min(max_bond, int(np.sum(sv > 1e-14 * sv[0])) or 1)
                u, sv, vh = u[:, :k], sv[:k] / np.linalg.norm(sv[:k]), vh[:k]
                if direction == "right":
                    mps[i], mps[i + 1] = u.reshape(a, s, k), (sv[:, None] * vh).reshape(k, t, c)
                    left[i + 1] = _grow_left(left[i], mps[i], mpo[i])
                else:
                    mps[i], mps[i + 1] = (u * sv).reshape(a, s, k), vh.reshape(k, t, c)
                    right[i + 1] = _grow_right(right[i + 2], mps[i + 1], mpo[i + 1])
        history.append(energy)
    return energy, history


def quimb_dmrg(mpo: list[np.ndarray], max_bond: int, sweeps: int, tol: float = 1e-10,
               init: list[np.ndarray] | None = None):
    """The same problem through quimb's two-site DMRG, or None where quimb is not installed.

    init: the starting MPS in our layout (site tensors (left, phys, right)); quimb's own random
    state by default.
    """
    try:
        import quimb.tensor as qtn
    except ImportError:
        return None
    n = len(mpo)
    # quimb's end tensors have no dummy outer bond: drop ours.
    arrays = [w[0] if i == 0 else (w[:, 0] if i == n - 1 else w) for i, w in enumerate(mpo)]
    p0 = None
    if init is not None:     # quimb's layout: (left, right, phys), no outer bonds
        sites = [a[0].T if i == 0 else (a[:, :, 0] if i == n - 1 else a.transpose(0, 2, 1))
                 for i, a in enumerate(init)]
        p0 = qtn.MatrixProductState(sites, shape="lrp")
    solver = qtn.DMRG2(qtn.MatrixProductOperator(arrays, shape="lrud"), bond_dims=max_bond,
                       cutoffs=1e-14, p0=p0)
    # The same local eigensolver as ours (ARPACK, ncv 20, tolerance tol); quimb's defaults are looser.
    solver.opts["local_eig_tol"], solver.opts["local_eig_ncv"] = tol, 20
    solver.solve(max_sweeps=sweeps, tol=tol, verbosity=0)
    return float(np.real(solver.energy))


def main(small: bool = False) -> dict:
    if small:
        n_sites, d, bond, max_bond = 6, 2, 3, 8
    else:
        n_sites, d, bond, max_bond = 8, 3, 4, 81
    mpo = random_symmetric_mpo(n_sites, d, bond)
    t0 = time.perf_counter()
    energy, history = dmrg(mpo, max_bond, sweeps=3 if small else 4)
    elapsed = time.perf_counter() - t0
    exact = float(np.linalg.eigvalsh(full_hamiltonian(mpo))[0])
    print(f"DMRG N={n_sites} d={d} MPO bond {bond} max MPS bond {max_bond}: E = {energy:.12f} "
          f"({elapsed:.2f}s); exact diagonalization {exact:.12f}; |diff| = {abs(energy - exact):.2e}")
    quimb_energy = quimb_dmrg(mpo, max_bond, sweeps=4)
    if quimb_energy is not None:
        print(f"quimb DMRG2: E = {quimb_energy:.12f}; |diff| to ours = {abs(energy - quimb_energy):.2e}")
    return {"energy": energy, "exact": exact, "quimb": quimb_energy, "history": history}


if __name__ == "__main__":
    main()
