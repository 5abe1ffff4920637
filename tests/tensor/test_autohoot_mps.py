"""AutoHOOT's MPS/DMRG tests (tests/mps_test.py) as our own: MPS and MPO builders, and two-site
DMRG from a given initial state against exact diagonalisation and quimb."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from sparsad import tensor as T
from sparsad.errors import SparsadError
from sparsad.tensor.cse import Canonicalizer
from sparsad.tensor.graph import topological

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


def test_mps_builder():
    state, sites = T.mps(4, ranks=[5, 6, 7])
    assert [s.shape for s in sites] == [(5, 2), (5, 6, 2), (6, 7, 2), (7, 2)]
    expect = T.einsum("ab,acd,cef,eg->bdfg", *sites)
    canon = Canonicalizer()
    assert canon.id(state) == canon.id(expect)


def _values(nodes, sites, seed=0):
    rng = np.random.default_rng(seed)
    feed = {}
    for s in sites:
        x = rng.standard_normal(s.shape)
        for group in s.symmetry:
            x = x + np.swapaxes(x, *group)
        feed[s] = x
    return T.Executor(nodes).run(feed)


def test_mpo_builder(run):
    op, sites = T.mpo(4, ranks=[5, 6, 7])
    expect = T.einsum("abc,adef,dghi,gjk->behjcfik", *sites)
    canon = Canonicalizer()
    assert canon.id(op) == canon.id(expect)
    assert all(s.symmetry for s in sites)
    a, b = _values([op, expect], sites)
    np.testing.assert_allclose(a, b)
    # symmetric sites make the operator symmetric: up and down axes swapped, same operator
    n = 2 ** 4
    np.testing.assert_allclose(a.reshape(n, n), a.reshape(n, n).T, atol=1e-10)


def test_builders_refuse_bad_arguments():
    for bad in (lambda: T.mps(1, []), lambda: T.mps(3, [2]), lambda: T.mpo(3, [2, 0]), lambda: T.mps(3, [2, 2], 0)):
        with pytest.raises(SparsadError):
            bad()


def test_dmrg_local_hessian_is_one_einsum_with_symmetric_sites():
    L, R = T.Variable("L", (2, 3, 2), symmetry=[[0, 2]]), T.Variable("R", (2, 3, 2), symmetry=[[0, 2]])
    W1 = T.Variable("W1", (3, 3, 2, 2), symmetry=[[2, 3]])
    W2 = T.Variable("W2", (3, 3, 2, 2), symmetry=[[2, 3]])
    theta = T.Variable("theta", (2, 2, 2, 2))
    energy = T.einsum("awc,wxst,xyuv,byd,asub,ctvd->", L, W1, W2, R, theta, theta)
    hess = T.hessian(energy, [theta])[0][0]
    opt = T.optimize(hess)
    assert not any(isinstance(n, (T.Add, T.Sub)) for n in topological([opt]))
    vals = _values([hess, opt, theta], [L, W1, W2, R, theta])
    np.testing.assert_allclose(vals[1], vals[0], rtol=1e-10)


@pytest.fixture(scope="module")
def dmrg():
    import dmrg as module

    return module


def test_dmrg_from_an_initial_state_is_exact_and_deterministic(dmrg):
    mpo = dmrg.random_symmetric_mpo(5, 2, 3, seed=1)
    init = dmrg.initial_state(5, 2, 4, seed=7)
    e1, _ = dmrg.dmrg(mpo, 4, sweeps=2, init=init)
    e2, _ = dmrg.dmrg(mpo, 4, sweeps=2, init=[a.copy() for a in init])
    exact = np.linalg.eigvalsh(dmrg.full_hamiltonian(mpo))[0]
    assert e1 == e2
    assert abs(e1 - exact) < 1e-8
    with pytest.raises(SparsadError):
        dmrg.dmrg(mpo, 4, init=init[:-1])


def test_dmrg_through_graph_hvps_and_eigsh(dmrg, monkeypatch):
    monkeypatch.setattr(dmrg, "DENSE_LIMIT", 0)          # every local problem through the HVP
    mpo = dmrg.random_symmetric_mpo(5, 2, 3, seed=4)
    before = dmrg.MATVECS[0]
    energy, _ = dmrg.dmrg(mpo, 4, sweeps=2, init=dmrg.initial_state(5, 2, 4, seed=5))
    assert dmrg.MATVECS[0] > before
    assert abs(energy - np.linalg.eigvalsh(dmrg.full_hamiltonian(mpo))[0]) < 1e-8


@pytest.mark.parametrize("seed", [2, 11, 17])
def test_dmrg_one_sweep_matches_quimb_from_the_same_state(dmrg, seed):
    """One right-going sweep of each code from the same initial MPS (no random start on either
    side, so nothing here depends on luck) reaches the same energy, the exact ground state."""
    pytest.importorskip("quimb")
    mpo = dmrg.random_symmetric_mpo(5, 2, 3, seed=seed)
    init = dmrg.initial_state(5, 2, 4, seed=seed + 1)
    ours, _ = dmrg.dmrg(mpo, 4, sweeps=1, init=init, sweep_sequence="R")
    theirs = dmrg.quimb_dmrg(mpo, 4, sweeps=1, init=init)
    exact = np.linalg.eigvalsh(dmrg.full_hamiltonian(mpo))[0]
    assert abs(ours - theirs) < 1e-8 * abs(exact)
    assert abs(ours - exact) < 1e-8 * abs(exact)
