"""The paper's applications (Table 1) as plain Python on tensors, with their inputs.

Each function is written the way a user would write it (loops, ``if``/``break``, scalar
arithmetic); the same source runs on torch tensors and — for the ``*_jax`` twins, which differ
only in the array module — on JAX arrays.  ``make_*`` build the inputs of the three
configurations of Table 1 (``config`` 1, 2, 3) from a seed.
"""
from __future__ import annotations

import numpy as np

# --------------------------------------------------------------------------- BGDHyperOpt (Fig. 6)
BGD_SIZES = {1: 200, 2: 1000, 3: 2000}


def bgd_hyperopt(x, y, r, T: int = 60, tol: float = 1e-6):
    """Error of linear regression fitted by batch gradient descent with learning rate ``r`` (Fig. 6).

    d(err)/dr drives the learning-rate search.  The inner sum over records is one tensor
    statement, as in the paper's implementation; ``bgd_hyperopt_loops`` keeps it as a loop.
    """
    import torch

    M = x.shape[0]
    w = 0.0 * r
    k = 0
    while k < T:
        k += 1
        d = torch.sum(2 * x * (x * w - y)) / M
        if torch.abs(d) < tol:
            break
        w = w - r * d
    e = torch.sum((y - x * w) ** 2)
    return torch.sqrt(e) / M


def bgd_hyperopt_loops(x, y, r, T: int = 60, tol: float = 1e-6):
    """Fig. 6(a) verbatim: nested ``for`` inside ``while`` with ``break``, a second ``for`` after."""
    import torch

    M = x.shape[0]
    w = 0.0 * r
    k = 0
    while k < T:
        k += 1
        d = 0.0 * r
        for i in range(M):
            d = d + 2 * x[i] * (x[i] * w - y[i])
        d = d / M
        if torch.abs(d) < tol:
            break
        w = w - r * d
    e = 0.0 * r
    for j in range(M):
        e = e + (y[j] - x[j] * w) ** 2
    return torch.sqrt(e) / M


def bgd_hyperopt_jax(x, y, r, T: int = 60, tol: float = 1e-6):
    import jax.numpy as jnp

    M = x.shape[0]
    w = 0.0 * r
    k = 0
    while k < T:
        k += 1
        d = jnp.sum(2 * x * (x * w - y)) / M
        if jnp.abs(d) < tol:
            break
        w = w - r * d
    e = jnp.sum((y - x * w) ** 2)
    return jnp.sqrt(e) / M


def bgd_hyperopt_scan(x, y, r, T: int = 60, tol: float = 1e-6):
    """The JAX-idiomatic baseline: ``lax.scan`` over T steps, the break as a mask."""
    import jax
    import jax.numpy as jnp

    M = x.shape[0]

    def step(carry, _):
        w, done = carry
        d = jnp.sum(2 * x * (x * w - y)) / M
        done = done | (jnp.abs(d) < tol)
        return (jnp.where(done, w, w - r * d), done), None

    (w, _), _ = jax.lax.scan(step, (0.0 * r, jnp.array(False)), None, length=T)
    return jnp.sqrt(jnp.sum((y - x * w) ** 2)) / M


def make_bgd(config: int = 1, seed: int = 0, size: int | None = None, backend: str = "torch"):
    M = size or BGD_SIZES[config]
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, M)
    y = 3.0 * x + 0.5 + 0.1 * rng.standard_normal(M)
    return _arrays(backend, x, y, np.float64(0.2)), (60, 1e-3)


# --------------------------------------------------------------------------- Brachistochrone
BRACH_SIZES = {1: 200, 2: 400, 3: 1000}


def brachistochrone(h, dx: float, g: float = 9.81, h0: float = 0.05):
    """Descent time along the polyline through depths ``h`` at spacing ``dx`` (speed from energy)."""
    import torch

    upper, lower = h[:-1], h[1:]
    ds = torch.sqrt(dx * dx + (lower - upper) ** 2)
    v_up = torch.sqrt(2 * g * (upper + h0))
    v_low = torch.sqrt(2 * g * (lower + h0))
    return torch.sum(2 * ds / (v_up + v_low))


def brachistochrone_jax(h, dx: float, g: float = 9.81, h0: float = 0.05):
    import jax.numpy as jnp

    upper, lower = h[:-1], h[1:]
    ds = jnp.sqrt(dx * dx + (lower - upper) ** 2)
    v_up = jnp.sqrt(2 * g * (upper + h0))
    v_low = jnp.sqrt(2 * g * (lower + h0))
    return jnp.sum(2 * ds / (v_up + v_low))


def make_brachistochrone(config: int = 1, seed: int = 0, size: int | None = None, backend: str = "torch"):
    n = size or BRACH_SIZES[config]
    t = np.linspace(0.0, 1.0, n)
    rng = np.random.default_rng(seed)
    h = 1.0 * np.sin(np.pi * t / 2) + 0.01 * rng.standard_normal(n) ** 2
    return _arrays(backend, h), (1.0 / (n - 1),)


# --------------------------------------------------------------------------- HMC, logistic regression
HMC_SIZES = {1: (100, 1), 2: (1000, 2), 3: (800, 3)}


def hmc_potential(beta, Xt, y, sigma: float = 1.0):
    """U(β) = −log p(β | X, y) for logistic regression; ``Xt`` holds the records' features by row."""
    import torch

    z = 0.0 * Xt[0]
    for d in range(Xt.shape[0]):
        z = z + Xt[d] * beta[d]
    loglik = torch.sum(y * z - torch.log(1 + torch.exp(z)))
    return -loglik + torch.sum(beta * beta) / (2 * sigma * sigma)


def hmc_potential_jax(beta, Xt, y, sigma: float = 1.0):
    import jax.numpy as jnp

    z = 0.0 * Xt[0]
    for d in range(Xt.shape[0]):
        z = z + Xt[d] * beta[d]
    loglik = jnp.sum(y * z - jnp.log(1 + jnp.exp(z)))
    return -loglik + jnp.sum(beta * beta) / (2 * sigma * sigma)


def make_hmc(config: int = 1, seed: int = 0, size: int | None = None, backend: str = "torch"):
    n, dim = HMC_SIZES[config]
    n = size or n
    rng = np.random.default_rng(seed)
    Xt = rng.standard_normal((dim, n))
    true = rng.standard_normal(dim)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-true @ Xt))).astype(np.float64)
    beta = 0.5 * rng.standard_normal(dim)
    return _arrays(backend, beta, Xt, y), ()


# --------------------------------------------------------------------------- HookeanSpring
SPRING_SIZES = {1: 10, 2: 20, 3: 40}


def spring_energy(px, py, k: float = 10.0, rest: float = 0.1):
    """Elastic energy of a chain of Hookean springs, written as the scalar loop of the paper."""
    import torch

    n = px.shape[0]
    energy = 0.0 * px[0]
    for i in range(n - 1):
        dx = px[i + 1] - px[i]
        dy = py[i + 1] - py[i]
        length = torch.sqrt(dx * dx + dy * dy)
        energy = energy + 0.5 * k * (length - rest) ** 2
    return energy


def spring_energy_jax(px, py, k: float = 10.0, rest: float = 0.1):
    import jax.numpy as jnp

    n = px.shape[0]
    energy = 0.0 * px[0]
    for i in range(n - 1):
        dx = px[i + 1] - px[i]
        dy = py[i + 1] - py[i]
        length = jnp.sqrt(dx * dx + dy * dy)
        energy = energy + 0.5 * k * (length - rest) ** 2
    return energy


def make_spring(config: int = 1, seed: int = 0, size: int | None = None, backend: str = "torch"):
    n = size or SPRING_SIZES[config]
    rng = np.random.default_rng(seed)
    px = np.cumsum(0.1 + 0.05 * rng.standard_normal(n))
    py = 0.05 * rng.standard_normal(n)
    return _arrays(backend, px, py), ()


# --------------------------------------------------------------------------- CartPole
CARTPOLE_STEPS = {1: 6, 2: 8, 3: 10}


def cartpole_loss(state, actions):
    """Loss of a CartPole roll-out (Fig. 2): the physics update per step, one loss term per step."""
    import torch

    x, x_dot, theta, theta_dot = state[0], state[1], state[2], state[3]
    loss = 0.0 * x
    for t in range(actions.shape[0]):
        force = 10.0 * actions[t]
        sin, cos = torch.sin(theta), torch.cos(theta)
        temp = (force + 0.05 * theta_dot * theta_dot * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos * cos / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        x = x + 0.02 * x_dot
        x_dot = x_dot + 0.02 * x_acc
        theta = theta + 0.02 * theta_dot
        theta_dot = theta_dot + 0.02 * theta_acc
        margin = torch.relu((2.4 - torch.abs(x)) * (0.21 - torch.abs(theta)))
        loss = loss + (0.5 - margin) ** 2
    return loss


def cartpole_loss_jax(state, actions):
    import jax
    import jax.numpy as jnp

    x, x_dot, theta, theta_dot = state[0], state[1], state[2], state[3]
    loss = 0.0 * x
    for t in range(actions.shape[0]):
        force = 10.0 * actions[t]
        sin, cos = jnp.sin(theta), jnp.cos(theta)
        temp = (force + 0.05 * theta_dot * theta_dot * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos * cos / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        x = x + 0.02 * x_dot
        x_dot = x_dot + 0.02 * x_acc
        theta = theta + 0.02 * theta_dot
        theta_dot = theta_dot + 0.02 * theta_acc
        margin = jax.nn.relu((2.4 - jnp.abs(x)) * (0.21 - jnp.abs(theta)))
        loss = loss + (0.5 - margin) ** 2
    return loss


def make_cartpole(config: int = 1, seed: int = 0, size: int | None = None, backend: str = "torch"):
    steps = size or CARTPOLE_STEPS[config]
    rng = np.random.default_rng(seed)
    state = np.array([0.1, 0.0, 0.05, -0.02]) + 0.01 * rng.standard_normal(4)
    actions = np.tanh(rng.standard_normal(steps))
    return _arrays(backend, state, actions), ()


def _arrays(backend: str, *values):
    if backend == "torch":
        import torch
        return tuple(torch.tensor(v, dtype=torch.float64) for v in values)
    import jax.numpy as jnp
    return tuple(jnp.asarray(v, dtype=jnp.float64) for v in values)


APPS = {
    "BGDHyperOpt": (bgd_hyperopt, bgd_hyperopt_jax, make_bgd, (2,)),
    "Brachistochrone": (brachistochrone, brachistochrone_jax, make_brachistochrone, (0,)),
    "HMC": (hmc_potential, hmc_potential_jax, make_hmc, (0,)),
    "HookeanSpring": (spring_energy, spring_energy_jax, make_spring, (0, 1)),
    "CartPole": (cartpole_loss, cartpole_loss_jax, make_cartpole, (0, 1)),
}
"""name -> (torch function, jax function, input maker, differentiated argument positions)"""
