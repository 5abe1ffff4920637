"""A corpus of scalar-heavy functions written the way PyTorch users write them, for ``sparsad.coarsen``.

Nothing here was written for the library: loops start from ``0.0`` or ``torch.tensor(0.)``,
iterate with ``zip``/``enumerate``/``reversed``, call helpers with keyword arguments, update in
place, stack lists, break early.  Each ``Case`` holds the torch function, a JAX twin written
with ``jax.numpy`` (the same maths; data-dependent control flow becomes ``where``/``scan`` as a
JAX user writes it), an input generator and the arguments to differentiate.

``Case.inputs(rng, small)`` returns the positional arguments: NumPy arrays (0-d included) are
tensors, Python numbers are static arguments (trip counts, step sizes).  ``small=True`` gives
the short trip counts the tests use; the benchmark uses the natural ones (10–100).

>>> case = CASES_BY_NAME["euler_decay"]
>>> args = draw(case, seed=0, small=True)
>>> float(case.torch_fn(*args)) > 0
True
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax


@dataclass(frozen=True)
class Case:
    name: str
    kind: str                                    # physics, ode, optimization, rnn, recurrence, finance, ...
    torch_fn: Callable
    jax_fn: Callable
    inputs: Callable[[np.random.Generator, bool], tuple]
    argnums: tuple[int, ...]
    constructs: str                              # the Python forms it exercises, for the report


CASES: list[Case] = []


def case(kind: str, argnums, constructs: str, jax_fn: Callable, inputs: Callable, name: str | None = None,
         fn: Callable | None = None):
    """Register ``fn`` (or the decorated function) as a corpus entry."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def register(f):
        CASES.append(Case(name or f.__name__, kind, f, jax_fn, inputs, nums, constructs))
        return f

    return register(fn) if fn is not None else register


def draw(c: Case, seed: int, small: bool, backend: str = "torch") -> tuple:
    """The arguments of one input draw of ``c`` on ``backend`` ("torch" float64 tensors, "jax", "numpy")."""
    args = c.inputs(np.random.default_rng(seed), small)
    if backend == "numpy":
        return args
    if backend == "torch":
        return tuple(torch.tensor(a, dtype=torch.float64) if isinstance(a, np.ndarray) else a for a in args)
    return tuple(jnp.asarray(a, dtype=jnp.float64) if isinstance(a, np.ndarray) else a for a in args)


def _s(rng, lo, hi):
    return np.asarray(rng.uniform(lo, hi))


def _v(rng, n, lo, hi):
    return rng.uniform(lo, hi, n)


def _n(small, small_n, full_n):
    return small_n if small else full_n


# ===================================================================================== physics / ODEs

def _euler_decay_jax(k, y0, steps, dt=0.01):
    return lax.fori_loop(0, steps, lambda _, y: y - dt * k * y, y0)


@case("ode", (0, 1), "for range, Python float dt", _euler_decay_jax,
      lambda rng, small: (_s(rng, 0.5, 2.0), _s(rng, 0.5, 1.5), _n(small, 5, 80)))
def euler_decay(k, y0, steps, dt=0.01):
    y = y0
    for _ in range(steps):
        y = y - dt * k * y
    return y


def _spring_jax(k, x0, v0, steps, dt=0.05):
    def body(_, state):
        x, v = state
        v = v - dt * k * x
        return x + dt * v, v

    x, v = lax.fori_loop(0, steps, body, (x0, v0))
    return 0.5 * v ** 2 + 0.5 * k * x ** 2


@case("physics", (0, 1, 2), "tuple assignment, two carried scalars", _spring_jax,
      lambda rng, small: (_s(rng, 0.5, 3.0), _s(rng, -1, 1), _s(rng, -1, 1), _n(small, 6, 100)))
def spring_semi_implicit_euler(k, x0, v0, steps, dt=0.05):
    x, v = x0, v0
    for i in range(steps):
        v = v - dt * k * x
        x = x + dt * v
    energy = 0.5 * v ** 2 + 0.5 * k * x ** 2
    return energy


def logistic_rhs(y, r, K):
    return r * y * (1 - y / K)


def _rk4_logistic_jax(r, K, y0, steps, dt=0.1):
    def f(y):
        return r * y * (1 - y / K)

    def body(_, y):
        k1 = f(y)
        k2 = f(y + 0.5 * dt * k1)
        k3 = f(y + 0.5 * dt * k2)
        k4 = f(y + dt * k3)
        return y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    return lax.fori_loop(0, steps, body, y0)


@case("ode", (0, 1, 2), "module-level helper called with tensors", _rk4_logistic_jax,
      lambda rng, small: (_s(rng, 0.5, 1.5), _s(rng, 2, 5), _s(rng, 0.1, 1.0), _n(small, 4, 50)))
def rk4_logistic(r, K, y0, steps, dt=0.1):
    y = y0
    for _ in range(steps):
        k1 = logistic_rhs(y, r, K)
        k2 = logistic_rhs(y + 0.5 * dt * k1, r, K)
        k3 = logistic_rhs(y + 0.5 * dt * k2, r, K)
        k4 = logistic_rhs(y + dt * k3, r, K)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


def _rk4_pendulum_jax(theta0, omega0, g_over_l, steps, dt=0.05):
    def f(th, om):
        return om, -g_over_l * jnp.sin(th)

    def body(_, state):
        th, om = state
        a1, b1 = f(th, om)
        a2, b2 = f(th + 0.5 * dt * a1, om + 0.5 * dt * b1)
        a3, b3 = f(th + 0.5 * dt * a2, om + 0.5 * dt * b2)
        a4, b4 = f(th + dt * a3, om + dt * b3)
        return th + dt / 6 * (a1 + 2 * a2 + 2 * a3 + a4), om + dt / 6 * (b1 + 2 * b2 + 2 * b3 + b4)

    th, om = lax.fori_loop(0, steps, body, (theta0, omega0))
    return (th - 0.1) ** 2 + 0.1 * om ** 2


@case("ode", (0, 1, 2), "nested helper returning a tuple", _rk4_pendulum_jax,
      lambda rng, small: (_s(rng, -1, 1), _s(rng, -0.5, 0.5), _s(rng, 5, 15), _n(small, 3, 40)))
def rk4_pendulum(theta0, omega0, g_over_l, steps, dt=0.05):
    def f(th, om):
        return om, -g_over_l * torch.sin(th)

    th, om = theta0, omega0
    for _ in range(steps):
        a1, b1 = f(th, om)
        a2, b2 = f(th + 0.5 * dt * a1, om + 0.5 * dt * b1)
        a3, b3 = f(th + 0.5 * dt * a2, om + 0.5 * dt * b2)
        a4, b4 = f(th + dt * a3, om + dt * b3)
        th = th + dt / 6 * (a1 + 2 * a2 + 2 * a3 + a4)
        om = om + dt / 6 * (b1 + 2 * b2 + 2 * b3 + b4)
    return (th - 0.1) ** 2 + 0.1 * om ** 2


def _projectile_jax(v0, angle, drag, steps, dt=0.02, g=9.81):
    def body(_, state):
        x, y, vx, vy, landed = state
        speed = jnp.sqrt(vx ** 2 + vy ** 2)
        nvx = vx - dt * drag * speed * vx
        nvy = vy - dt * (g + drag * speed * vy)
        nx, ny = x + dt * nvx, y + dt * nvy
        keep = lambda old, new: jnp.where(landed, old, new)  # noqa: E731
        return keep(x, nx), keep(y, ny), keep(vx, nvx), keep(vy, nvy), landed | (ny < 0)

    zero = jnp.zeros_like(v0)
    state = (zero, zero, v0 * jnp.cos(angle), v0 * jnp.sin(angle), jnp.array(False))
    return lax.fori_loop(0, steps, body, state)[0]


@case("physics", (0, 1, 2), "break on a traced value, zeros_like state", _projectile_jax,
      lambda rng, small: (_s(rng, 3, 6), _s(rng, 0.5, 1.0), _s(rng, 0.01, 0.1), _n(small, 8, 80)))
def projectile_drag(v0, angle, drag, steps, dt=0.02, g=9.81):
    x = torch.zeros_like(v0)
    y = torch.zeros_like(v0)
    vx = v0 * torch.cos(angle)
    vy = v0 * torch.sin(angle)
    for _ in range(steps):
        speed = torch.sqrt(vx ** 2 + vy ** 2)
        vx = vx - dt * drag * speed * vx
        vy = vy - dt * (g + drag * speed * vy)
        x = x + dt * vx
        y = y + dt * vy
        if y < 0:
            break
    return x


def _lorenz_jax(sigma, rho, beta, steps, dt=0.01):
    def body(_, state):
        x, y, z = state
        dx = sigma * (y - x)
        dy = x * (rho - z) - y
        dz = x * y - beta * z
        return x + dt * dx, y + dt * dy, z + dt * dz

    one = jnp.ones_like(sigma)
    x, y, z = lax.fori_loop(0, steps, body, (one, one, one))
    return x + y + z


@case("ode", (0, 1, 2), "state starts as Python floats", _lorenz_jax,
      lambda rng, small: (_s(rng, 8, 12), _s(rng, 20, 30), _s(rng, 2, 3), _n(small, 5, 100)))
def lorenz_euler(sigma, rho, beta, steps, dt=0.01):
    x, y, z = 1.0, 1.0, 1.0
    for _ in range(steps):
        dx = sigma * (y - x)
        dy = x * (rho - z) - y
        dz = x * y - beta * z
        x, y, z = x + dt * dx, y + dt * dy, z + dt * dz
    return x + y + z


def _spring_chain_jax(x, k, steps, dt=0.05):
    def body(_, state):
        x, v = state
        stretch = x[1:] - x[:-1] - 1.0
        f_right = jnp.concatenate([k * stretch, jnp.zeros(1)])
        f_left = jnp.concatenate([jnp.zeros(1), -k * stretch])
        v = v + dt * (f_right + f_left)
        return x + dt * v, v

    x, _ = lax.fori_loop(0, steps, body, (x, jnp.zeros_like(x)))
    return jnp.sum(x ** 2)


@case("physics", (0, 1), "torch.cat of traced slices with new zeros", _spring_chain_jax,
      lambda rng, small: (np.arange(5.0) + rng.uniform(-0.2, 0.2, 5), _s(rng, 1, 3), _n(small, 4, 40)))
def spring_chain_cat(x, k, steps, dt=0.05):
    v = torch.zeros_like(x)
    for _ in range(steps):
        stretch = x[1:] - x[:-1] - 1.0
        f_right = torch.cat([k * stretch, torch.zeros(1, dtype=x.dtype)])
        f_left = torch.cat([torch.zeros(1, dtype=x.dtype), -k * stretch])
        v = v + dt * (f_right + f_left)
        x = x + dt * v
    return (x ** 2).sum()


def _heat_jax(u0, alpha, steps):
    def body(_, u):
        return u.at[1:-1].set(u[1:-1] + alpha * (u[2:] - 2 * u[1:-1] + u[:-2]))

    return jnp.sum(lax.fori_loop(0, steps, body, u0) ** 2)


@case("physics", (0, 1), "clone + in-place slice assignment", _heat_jax,
      lambda rng, small: (_v(rng, 8, 0, 1), _s(rng, 0.1, 0.4), _n(small, 4, 50)))
def heat_equation_inplace(u0, alpha, steps):
    u = u0.clone()
    for _ in range(steps):
        new = u.clone()
        new[1:-1] = u[1:-1] + alpha * (u[2:] - 2 * u[1:-1] + u[:-2])
        u = new
    return (u ** 2).sum()


def _nbody_jax(px, py, mass, steps, dt=0.01, eps=0.1):
    def accelerations(p, q):
        d = p[None, :] - p[:, None]
        e = q[None, :] - q[:, None]
        inv_r3 = (d ** 2 + e ** 2 + eps) ** -1.5 * (1 - jnp.eye(p.shape[0]))
        return jnp.sum(mass * d * inv_r3, axis=1), jnp.sum(mass * e * inv_r3, axis=1)

    def body(_, state):
        px, py, vx, vy = state
        ax, ay = accelerations(px, py)
        vx, vy = vx + dt * ax, vy + dt * ay
        return px + dt * vx, py + dt * vy, vx, vy

    px, py, _, _ = lax.fori_loop(0, steps, body, (px, py, jnp.zeros_like(px), jnp.zeros_like(py)))
    return jnp.sum(px ** 2 + py ** 2)


@case("physics", (0, 1, 2), "nested loops, if i != j, list append + torch.stack", _nbody_jax,
      lambda rng, small: (_v(rng, 3, -1, 1), _v(rng, 3, -1, 1), _v(rng, 3, 0.5, 1.5), _n(small, 2, 15)))
def nbody_2d(px, py, mass, steps, dt=0.01, eps=0.1):
    n = px.shape[0]
    vx = torch.zeros_like(px)
    vy = torch.zeros_like(py)
    for _ in range(steps):
        ax, ay = [], []
        for i in range(n):
            fx, fy = 0.0, 0.0
            for j in range(n):
                if i != j:
                    dx = px[j] - px[i]
                    dy = py[j] - py[i]
                    r3 = (dx ** 2 + dy ** 2 + eps) ** 1.5
                    fx = fx + mass[j] * dx / r3
                    fy = fy + mass[j] * dy / r3
            ax.append(fx)
            ay.append(fy)
        vx = vx + dt * torch.stack(ax)
        vy = vy + dt * torch.stack(ay)
        px = px + dt * vx
        py = py + dt * vy
    return (px ** 2 + py ** 2).sum()


def _bounce_jax(h0, e, steps, dt=0.02, g=9.81):
    def body(_, state):
        y, v = state
        v = v - g * dt
        y = y + v * dt
        hit = y < 0
        return jnp.where(hit, -y, y), jnp.where(hit, -e * v, v)

    return lax.fori_loop(0, steps, body, (h0, jnp.zeros_like(h0)))[0]


@case("physics", (0, 1), "traced if inside a loop", _bounce_jax,
      lambda rng, small: (_s(rng, 0.05, 0.2), _s(rng, 0.6, 0.9), _n(small, 10, 60)))
def bouncing_ball(h0, e, steps, dt=0.02, g=9.81):
    y, v = h0, torch.zeros_like(h0)
    for _ in range(steps):
        v = v - g * dt
        y = y + v * dt
        if y < 0:
            y = -y
            v = -e * v
    return y


def _verlet_jax(x, y, vx, vy, gm, steps, dt=0.01):
    def accel(x, y):
        r3 = (x * x + y * y) ** 1.5
        return -gm * x / r3, -gm * y / r3

    def body(_, state):
        x, y, vx, vy, ax, ay = state
        x = x + vx * dt + 0.5 * ax * dt ** 2
        y = y + vy * dt + 0.5 * ay * dt ** 2
        ax_new, ay_new = accel(x, y)
        return x, y, vx + 0.5 * (ax + ax_new) * dt, vy + 0.5 * (ay + ay_new) * dt, ax_new, ay_new

    x, y, vx, vy, _, _ = lax.fori_loop(0, steps, body, (x, y, vx, vy, *accel(x, y)))
    return 0.5 * (vx ** 2 + vy ** 2) - gm / jnp.sqrt(x * x + y * y)


@case("physics", (0, 1, 2, 3, 4), "velocity Verlet, four carried scalars + accelerations", _verlet_jax,
      lambda rng, small: (_s(rng, 0.9, 1.1), _s(rng, -0.1, 0.1), _s(rng, -0.1, 0.1), _s(rng, 0.9, 1.1),
                          _s(rng, 0.8, 1.2), _n(small, 4, 100)))
def verlet_orbit(x, y, vx, vy, gm, steps, dt=0.01):
    r3 = (x * x + y * y) ** 1.5
    ax, ay = -gm * x / r3, -gm * y / r3
    for _ in range(steps):
        x = x + vx * dt + 0.5 * ax * dt ** 2
        y = y + vy * dt + 0.5 * ay * dt ** 2
        r3 = (x * x + y * y) ** 1.5
        ax_new, ay_new = -gm * x / r3, -gm * y / r3
        vx = vx + 0.5 * (ax + ax_new) * dt
        vy = vy + 0.5 * (ay + ay_new) * dt
        ax, ay = ax_new, ay_new
    return 0.5 * (vx ** 2 + vy ** 2) - gm / torch.sqrt(x * x + y * y)


def _lotka_jax(params, x0, y0, steps, dt=0.02):
    a, b, c, d = params[0], params[1], params[2], params[3]

    def body(_, state):
        x, y = state
        return x + dt * (a * x - b * x * y), y + dt * (d * x * y - c * y)

    x, y = lax.fori_loop(0, steps, body, (x0, y0))
    return jnp.log(x) + jnp.log(y)


@case("ode", (0, 1, 2), "parameters unpacked from a vector by index", _lotka_jax,
      lambda rng, small: (np.array([1.0, 0.4, 0.8, 0.2]) * rng.uniform(0.8, 1.2, 4), _s(rng, 1, 3),
                          _s(rng, 1, 3), _n(small, 5, 100)))
def lotka_volterra(params, x0, y0, steps, dt=0.02):
    a, b, c, d = params[0], params[1], params[2], params[3]
    x, y = x0, y0
    for _ in range(steps):
        x, y = x + dt * (a * x - b * x * y), y + dt * (d * x * y - c * y)
    return torch.log(x) + torch.log(y)


def _sir_jax(beta, gamma, days, dt=0.5):
    def body(_, state):
        s, i, r, peak = state
        new_inf = beta * s * i
        new_rec = gamma * i
        i = i + dt * (new_inf - new_rec)
        return s - dt * new_inf, i, r + dt * new_rec, jnp.maximum(peak, i)

    like = jnp.ones_like(beta)
    _, _, r, peak = lax.fori_loop(0, days, body, (0.99 * like, 0.01 * like, 0.0 * like, 0.0 * like))
    return peak + 0.1 * r


@case("ode", (0, 1), "Python float state, torch.maximum running peak", _sir_jax,
      lambda rng, small: (_s(rng, 0.3, 0.6), _s(rng, 0.05, 0.15), _n(small, 6, 100)))
def sir_epidemic(beta, gamma, days, dt=0.5):
    s, i, r = 0.99, 0.01, 0.0
    peak = torch.tensor(0.0)
    for _ in range(days):
        new_inf = beta * s * i
        new_rec = gamma * i
        s = s - dt * new_inf
        i = i + dt * (new_inf - new_rec)
        r = r + dt * new_rec
        peak = torch.maximum(peak, i)
    return peak + 0.1 * r


def _rk4_vec_jax(y0, lam, steps, dt=0.05):
    def rhs(y):
        return -lam * y + 0.1 * jnp.sin(y)

    def body(_, y):
        k1 = rhs(y)
        k2 = rhs(y + dt / 2 * k1)
        k3 = rhs(y + dt / 2 * k2)
        k4 = rhs(y + dt * k3)
        return y + dt * (k1 + 2 * k2 + 2 * k3 + k4) / 6

    return jnp.mean(lax.fori_loop(0, steps, body, y0) ** 2)


@case("ode", (0, 1), "vector state, closure helper", _rk4_vec_jax,
      lambda rng, small: (_v(rng, 6, -1, 1), _v(rng, 6, 0.5, 2), _n(small, 3, 40)))
def rk4_vector_decay(y0, lam, steps, dt=0.05):
    def rhs(y):
        return -lam * y + 0.1 * torch.sin(y)

    y = y0
    for _ in range(steps):
        k1 = rhs(y)
        k2 = rhs(y + dt / 2 * k1)
        k3 = rhs(y + dt / 2 * k2)
        k4 = rhs(y + dt * k3)
        y = y + dt * (k1 + 2 * k2 + 2 * k3 + k4) / 6
    return (y ** 2).mean()


def _heun_jax(T0, k, steps, dt=0.1):
    def body(step, T):
        ambient = 20.0 + 5.0 * jnp.sin(0.1 * step)
        ambient_next = 20.0 + 5.0 * jnp.sin(0.1 * (step + 1))
        slope = -k * (T - ambient)
        guess = T + dt * slope
        return T + dt / 2 * (slope - k * (guess - ambient_next))

    return lax.fori_loop(0, steps, body, T0)


@case("ode", (0, 1), "math.sin of the loop counter", _heun_jax,
      lambda rng, small: (_s(rng, 60, 90), _s(rng, 0.05, 0.3), _n(small, 5, 60)))
def heun_cooling(T0, k, steps, dt=0.1):
    T = T0
    for step in range(steps):
        ambient = 20.0 + 5.0 * math.sin(0.1 * step)
        ambient_next = 20.0 + 5.0 * math.sin(0.1 * (step + 1))
        slope = -k * (T - ambient)
        guess = T + dt * slope
        T = T + dt / 2 * (slope - k * (guess - ambient_next))
    return T


def _langevin_jax(x0, a, noise, dt=0.01):
    def body(x, n):
        return x - dt * (4 * a * x ** 3 - 2 * x) + math.sqrt(2 * dt) * n, None

    return lax.scan(body, x0, noise)[0] ** 2


@case("physics", (0, 1), "fixed noise read by loop counter, len() trip count", _langevin_jax,
      lambda rng, small: (_s(rng, -1, 1), _s(rng, 0.5, 1.5), rng.standard_normal(_n(small, 5, 100))))
def langevin_fixed_noise(x0, a, noise, dt=0.01):
    x = x0
    for i in range(len(noise)):
        grad_u = 4 * a * x ** 3 - 2 * x
        x = x - dt * grad_u + math.sqrt(2 * dt) * noise[i]
    return x ** 2


def _spring_energy_jax(pos, k, rest):
    return jnp.sum(0.5 * k * (pos[1:] - pos[:-1] - rest) ** 2)


@case("physics", (0, 1, 2), "energy = 0.0 accumulated over x[i + 1] - x[i]", _spring_energy_jax,
      lambda rng, small: (np.cumsum(rng.uniform(0.5, 1.5, _n(small, 5, 40))), _s(rng, 1, 5), _s(rng, 0.8, 1.2)))
def spring_mass_energy(pos, k, rest):
    energy = 0.0
    for i in range(len(pos) - 1):
        energy += 0.5 * k * (pos[i + 1] - pos[i] - rest) ** 2
    return energy


# ===================================================================================== optimization

def _newton_sqrt_jax(a, iters):
    return lax.fori_loop(0, iters, lambda _, x: 0.5 * (x + a / x), a)


@case("optimization", 0, "Newton iteration, fixed count", _newton_sqrt_jax,
      lambda rng, small: (_s(rng, 1, 10), _n(small, 4, 20)))
def newton_sqrt(a, iters):
    x = a
    for _ in range(iters):
        x = 0.5 * (x + a / x)
    return x


def _newton_cbrt_jax(c, max_iter=50, tol=1e-12):
    def body(_, state):
        x, done = state
        step = (x ** 3 - c) / (3 * x ** 2)
        done = done | (jnp.abs(step) < tol)
        return jnp.where(done, x, x - step), done

    return lax.fori_loop(0, max_iter, body, (jnp.ones_like(c), jnp.array(False)))[0]


@case("optimization", 0, "Newton with break on |step| < tol", _newton_cbrt_jax,
      lambda rng, small: (_s(rng, 2, 30), _n(small, 50, 50)))
def newton_cube_root(c, max_iter=50, tol=1e-12):
    x = torch.ones_like(c)
    for _ in range(max_iter):
        step = (x ** 3 - c) / (3 * x ** 2)
        if torch.abs(step) < tol:
            break
        x = x - step
    return x


def _armijo_jax(x, d, alpha0, max_halvings=30, c=1e-4):
    def f(z):
        return jnp.sum((z - 1.0) ** 4 + z ** 2)

    slope = jnp.sum((4 * (x - 1.0) ** 3 + 2 * x) * d)
    fx = f(x)

    def body(_, state):
        t, done = state
        done = done | (f(x + t * d) <= fx + c * t * slope)
        return jnp.where(done, t, 0.5 * t), done

    t, _ = lax.fori_loop(0, max_halvings, body, (alpha0, jnp.array(False)))
    return f(x + t * d)


@case("optimization", (0, 2), "while loop line search with a counter, helper", _armijo_jax,
      lambda rng, small: (_v(rng, 4, -1, 2), -_v(rng, 4, 0.5, 2), _s(rng, 2, 8), 30))
def armijo_line_search(x, d, alpha0, max_halvings=30, c=1e-4):
    def f(z):
        return torch.sum((z - 1.0) ** 4 + z ** 2)

    g = 4 * (x - 1.0) ** 3 + 2 * x
    slope = torch.dot(g, d)
    fx = f(x)
    t = alpha0
    k = 0
    while f(x + t * d) > fx + c * t * slope and k < max_halvings:
        t = t * 0.5
        k += 1
    return f(x + t * d)


def _gd_early_jax(xs, ys, lr, max_steps=100, tol=1e-6):
    def body(_, state):
        w, done = state
        g = jnp.mean(2 * xs * (w * xs - ys))
        done = done | (jnp.abs(g) < tol)
        return jnp.where(done, w, w - lr * g), done

    w, _ = lax.fori_loop(0, max_steps, body, (jnp.zeros_like(lr), jnp.array(False)))
    return jnp.mean((w * xs - ys) ** 2)


@case("optimization", (1, 2), "w = 0.0, break on tolerance, .abs() method", _gd_early_jax,
      lambda rng, small: (_v(rng, 20, 0, 1), _v(rng, 20, 1, 2), _s(rng, 0.2, 0.5), _n(small, 8, 100)))
def gd_early_stop(xs, ys, lr, max_steps=100, tol=1e-6):
    w = 0.0
    for step in range(max_steps):
        g = (2 * xs * (w * xs - ys)).mean()
        if g.abs() < tol:
            break
        w = w - lr * g
    return ((w * xs - ys) ** 2).mean()


def _gd_vec_jax(a, b, lr, steps):
    w = lax.fori_loop(0, steps, lambda _, w: w - lr * (a * w - b), jnp.zeros_like(b))
    return jnp.sum(0.5 * a * w ** 2 - b * w)


@case("optimization", (0, 1, 2), "vector descent from zeros_like", _gd_vec_jax,
      lambda rng, small: (_v(rng, 5, 0.5, 2), _v(rng, 5, -1, 1), _s(rng, 0.1, 0.4), _n(small, 5, 50)))
def gd_vector_quadratic(a, b, lr, steps):
    w = torch.zeros_like(b)
    for _ in range(steps):
        grad = a * w - b
        w = w - lr * grad
    return (0.5 * a * w ** 2 - b * w).sum()


def _heavy_ball_jax(x0, y0, lr, beta, steps):
    def body(_, state):
        x, y, mx, my = state
        gx = -2 * (1 - x) - 400 * x * (y - x ** 2)
        gy = 200 * (y - x ** 2)
        mx = beta * mx + gx
        my = beta * my + gy
        return x - lr * mx, y - lr * my, mx, my

    zero = jnp.zeros_like(x0)
    x, y, _, _ = lax.fori_loop(0, steps, body, (x0, y0, zero, zero))
    return (1 - x) ** 2 + 100 * (y - x ** 2) ** 2


@case("optimization", (0, 1, 2, 3), "momentum on Rosenbrock, momentum starts at 0.0", _heavy_ball_jax,
      lambda rng, small: (_s(rng, -0.5, 0.5), _s(rng, -0.5, 0.5), _s(rng, 1e-4, 5e-4), _s(rng, 0.5, 0.9),
                          _n(small, 5, 60)))
def heavy_ball_rosenbrock(x0, y0, lr, beta, steps):
    x, y = x0, y0
    mx, my = 0.0, 0.0
    for _ in range(steps):
        gx = -2 * (1 - x) - 400 * x * (y - x ** 2)
        gy = 200 * (y - x ** 2)
        mx = beta * mx + gx
        my = beta * my + gy
        x = x - lr * mx
        y = y - lr * my
    return (1 - x) ** 2 + 100 * (y - x ** 2) ** 2


def _adam_jax(w0, target, lr, steps, b1=0.9, b2=0.999, eps=1e-8):
    def body(t, state):
        w, m, v = state
        g = 2 * (w - target) + jnp.cos(w)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1 ** (t + 1))
        v_hat = v / (1 - b2 ** (t + 1))
        return w - lr * m_hat / (jnp.sqrt(v_hat) + eps), m, v

    zero = jnp.zeros_like(w0)
    w, _, _ = lax.fori_loop(0, steps, body, (w0, zero, zero))
    return (w - target) ** 2 + jnp.sin(w)


@case("optimization", (0, 1, 2), "Adam with bias correction b1 ** (t + 1)", _adam_jax,
      lambda rng, small: (_s(rng, -2, 2), _s(rng, -1, 1), _s(rng, 0.01, 0.1), _n(small, 4, 50)))
def adam_scalar(w0, target, lr, steps, b1=0.9, b2=0.999, eps=1e-8):
    w = w0
    m = 0.0
    v = 0.0
    for t in range(steps):
        g = 2 * (w - target) + torch.cos(w)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1 ** (t + 1))
        v_hat = v / (1 - b2 ** (t + 1))
        w = w - lr * m_hat / (torch.sqrt(v_hat) + eps)
    return (w - target) ** 2 + torch.sin(w)


def _fixed_point_jax(a, iters):
    return lax.fori_loop(0, iters, lambda _, x: jnp.cos(a * x), jnp.ones_like(a))


@case("optimization", 0, "x = torch.tensor(1.0) then a fixed-point map", _fixed_point_jax,
      lambda rng, small: (_s(rng, 0.3, 0.9), _n(small, 5, 60)))
def fixed_point_cos(a, iters):
    x = torch.tensor(1.0, dtype=torch.float64)
    for _ in range(iters):
        x = torch.cos(a * x)
    return x


def _clipped_gd_jax(w0, xs, ys, lr, clip, steps):
    def body(_, w):
        g = jnp.mean((w * xs - ys) * xs)
        return w - lr * jnp.clip(g, -clip, clip)

    w = lax.fori_loop(0, steps, body, w0)
    return jnp.mean((w * xs - ys) ** 2)


@case("optimization", (0, 3), "torch.clamp with Python bounds inside a loop", _clipped_gd_jax,
      lambda rng, small: (_s(rng, -3, 3), _v(rng, 15, 0, 2), _v(rng, 15, 0, 4), _s(rng, 0.1, 0.3), 0.5,
                          _n(small, 5, 50)))
def clipped_gradient_descent(w0, xs, ys, lr, clip, steps):
    w = w0
    for _ in range(steps):
        g = ((w * xs - ys) * xs).mean()
        w = w - lr * torch.clamp(g, -clip, clip)
    return ((w * xs - ys) ** 2).mean()


def _secant_jax(x0, a, steps):
    # secant (1-D quasi-Newton) minimisation of a*x^4/4 - x + x^2/2; converged steps are masked
    def g(x):
        return a * x ** 3 - 1 + x

    def body(_, state):
        x_prev, x, done = state
        denom = g(x) - g(x_prev)
        done = done | (jnp.abs(denom) < 1e-13)
        safe = jnp.where(done, 1.0, denom)
        x_new = x - g(x) * (x - x_prev) / safe
        return jnp.where(done, x_prev, x), jnp.where(done, x, x_new), done

    return lax.fori_loop(0, steps, body, (x0, x0 + 0.1, jnp.array(False)))[1]


@case("optimization", (0, 1), "secant method, two carried iterates, break when converged", _secant_jax,
      lambda rng, small: (_s(rng, 0.5, 1.0), _s(rng, 0.5, 2), _n(small, 4, 12)))
def secant_minimize(x0, a, steps):
    def g(x):
        return a * x ** 3 - 1 + x

    x_prev, x = x0, x0 + 0.1
    for _ in range(steps):
        denom = g(x) - g(x_prev)
        if torch.abs(denom) < 1e-13:
            break
        x_new = x - g(x) * (x - x_prev) / denom
        x_prev, x = x, x_new
    return x


# ===================================================================================== RNN cells

def _rnn_tanh_jax(xs, w_h, w_x, b, target):
    h, _ = lax.scan(lambda h, x: (jnp.tanh(w_h * h + w_x * x + b), None), jnp.zeros_like(w_h), xs)
    return (h - target) ** 2


@case("rnn", (1, 2, 3), "h = torch.tensor(0.), scalar RNN over a sequence", _rnn_tanh_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 5, 50)), _s(rng, -1, 1), _s(rng, -1, 1),
                          _s(rng, -0.5, 0.5), _s(rng, -0.5, 0.5)))
def rnn_scalar_tanh(xs, w_h, w_x, b, target):
    h = torch.tensor(0.)
    for t in range(len(xs)):
        h = torch.tanh(w_h * h + w_x * xs[t] + b)
    return (h - target) ** 2


def _gru_jax(xs, p):
    def cell(h, x):
        z = jax.nn.sigmoid(p[0] * x + p[1] * h + p[2])
        r = jax.nn.sigmoid(p[3] * x + p[4] * h + p[5])
        cand = jnp.tanh(p[6] * x + p[7] * (r * h) + p[8])
        return (1 - z) * h + z * cand, None

    h, _ = lax.scan(cell, jnp.zeros(()), xs)
    return h ** 2


@case("rnn", 1, "GRU cell, for x in xs over a tensor, params by index", _gru_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 4, 40)), rng.uniform(-1, 1, 9)))
def gru_scalar(xs, p):
    h = 0.0
    for x in xs:
        z = torch.sigmoid(p[0] * x + p[1] * h + p[2])
        r = torch.sigmoid(p[3] * x + p[4] * h + p[5])
        cand = torch.tanh(p[6] * x + p[7] * (r * h) + p[8])
        h = (1 - z) * h + z * cand
    return h ** 2


def _lstm_jax(xs, w, u, b):
    def cell(state, x):
        h, c = state
        gates = w * x + u * h + b
        i, f, o, g = jax.nn.sigmoid(gates[0]), jax.nn.sigmoid(gates[1]), jax.nn.sigmoid(gates[2]), jnp.tanh(gates[3])
        c = f * c + i * g
        return (o * jnp.tanh(c), c), None

    (h, _), _ = lax.scan(cell, (jnp.zeros(()), jnp.zeros(())), xs)
    return h


@case("rnn", (1, 2, 3), "LSTM cell, gate vector unpacked, torch.zeros(()) state", _lstm_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 4, 30)), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4),
                          rng.uniform(-0.5, 0.5, 4)))
def lstm_scalar(xs, w, u, b):
    h = torch.zeros((), dtype=xs.dtype)
    c = torch.zeros((), dtype=xs.dtype)
    for t in range(xs.shape[0]):
        gates = w * xs[t] + u * h + b
        i, f, o, g = torch.sigmoid(gates[0]), torch.sigmoid(gates[1]), torch.sigmoid(gates[2]), torch.tanh(gates[3])
        c = f * c + i * g
        h = o * torch.tanh(c)
    return h


def _rnn_diag_jax(xs, ys, w, u):
    def cell(state, xy):
        h, loss = state
        x, y = xy
        h = jnp.tanh(w * h + u * x)
        return (h, loss + (jnp.sum(h) - y) ** 2), None

    (_, loss), _ = lax.scan(cell, (jnp.zeros_like(w), jnp.zeros(())), (xs, ys))
    return loss


@case("rnn", (2, 3), "zip over two tensors, zeros_like hidden vector", _rnn_diag_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 4, 30)), rng.standard_normal(_n(small, 4, 30)),
                          rng.uniform(-0.9, 0.9, 4), rng.uniform(-1, 1, 4)))
def rnn_diag_vector(xs, ys, w, u):
    h = torch.zeros_like(w)
    loss = 0.0
    for x, y in zip(xs, ys):
        h = torch.tanh(w * h + u * x)
        loss = loss + (h.sum() - y) ** 2
    return loss


def _rnn_stack_jax(xs, w_h, w_x):
    def cell(h, x):
        h = jnp.tanh(w_h * h + w_x * x)
        return h, h

    _, out = lax.scan(cell, jnp.zeros_like(w_h), xs)
    return jnp.mean(out ** 2)


@case("rnn", (1, 2), "outputs appended to a list, torch.stack(outs).pow(2).mean()", _rnn_stack_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 5, 40)), _s(rng, -1, 1), _s(rng, -1, 1)))
def rnn_outputs_stack(xs, w_h, w_x):
    h = torch.zeros(())
    outs = []
    for t in range(xs.shape[0]):
        h = torch.tanh(w_h * h + w_x * xs[t])
        outs.append(h)
    out = torch.stack(outs)
    return out.pow(2).mean()


def _rnn_enum_jax(xs, a, b):
    def cell(state, tx):
        h, loss = state
        t, x = tx
        h = jnp.tanh(a * h + b * x)
        return (h, loss + (0.9 ** t) * h ** 2), None

    zero = jnp.zeros_like(a)
    (_, loss), _ = lax.scan(cell, (zero, zero), (jnp.arange(xs.shape[0]), xs))
    return loss


@case("rnn", (1, 2), "enumerate, discount 0.9 ** t", _rnn_enum_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 4, 40)), _s(rng, -1, 1), _s(rng, -1, 1)))
def rnn_enumerate_loss(xs, a, b):
    h = 0.0
    loss = 0.0
    for t, x in enumerate(xs):
        h = torch.tanh(a * h + b * x)
        loss = loss + (0.9 ** t) * h ** 2
    return loss


class TinyRNN:
    """A user's model class: parameters as attributes, the loss as a method."""

    def __init__(self, decay: float = 0.5):
        self.decay = decay

    def loss(self, xs, w, b):
        h = 0.0
        for t in range(len(xs)):
            h = self.decay * h + torch.tanh(w * xs[t] + b)
        return h ** 2


def _tiny_rnn_jax(xs, w, b, decay=0.5):
    h, _ = lax.scan(lambda h, x: (decay * h + jnp.tanh(w * x + b), None), jnp.zeros_like(w), xs)
    return h ** 2


case("rnn", (1, 2), "bound method reading self.decay", _tiny_rnn_jax,
     lambda rng, small: (rng.standard_normal(_n(small, 4, 40)), _s(rng, -1, 1), _s(rng, -1, 1)),
     name="tiny_rnn_method", fn=TinyRNN(0.5).loss)


# ===================================================================================== moving averages / recurrences

def _ema_iter_jax(xs, alpha):
    s, _ = lax.scan(lambda s, x: (alpha * x + (1 - alpha) * s, None), xs[0], xs[1:])
    return s


@case("recurrence", (0, 1), "for x in xs[1:]", _ema_iter_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 5, 60)), _s(rng, 0.1, 0.5)))
def ema_iterate_tensor(xs, alpha):
    s = xs[0]
    for x in xs[1:]:
        s = alpha * x + (1 - alpha) * s
    return s


def _ema_loss_jax(xs, alpha):
    def body(state, x):
        s, loss = state
        return (alpha * x + (1 - alpha) * s, loss + (x - s) ** 2), None

    zero = jnp.zeros_like(alpha)
    (_, loss), _ = lax.scan(body, (zero, zero), xs)
    return loss / xs.shape[0]


@case("recurrence", 1, "s = 0.0, prediction error of an EMA forecaster", _ema_loss_jax,
      lambda rng, small: (np.sin(np.arange(_n(small, 6, 80)) / 5) + 0.1 * rng.standard_normal(_n(small, 6, 80)),
                          _s(rng, 0.2, 0.8)))
def ema_forecast_loss(xs, alpha):
    s = 0.0
    loss = 0.0
    for i in range(len(xs)):
        loss += (xs[i] - s) ** 2
        s = alpha * xs[i] + (1 - alpha) * s
    return loss / len(xs)


def _holt_jax(xs, alpha, beta):
    def body(state, x):
        level, trend, sse = state
        sse = sse + (x - (level + trend)) ** 2
        new_level = alpha * x + (1 - alpha) * (level + trend)
        return (new_level, beta * (new_level - level) + (1 - beta) * trend, sse), None

    (_, _, sse), _ = lax.scan(body, (xs[0], xs[1] - xs[0], jnp.zeros(())), xs[1:])
    return sse


@case("recurrence", (1, 2), "Holt's linear trend, range(1, n)", _holt_jax,
      lambda rng, small: (np.arange(_n(small, 6, 60)) * 0.1 + rng.standard_normal(_n(small, 6, 60)) * 0.2,
                          _s(rng, 0.2, 0.8), _s(rng, 0.1, 0.5)))
def holt_linear_trend(xs, alpha, beta):
    level, trend = xs[0], xs[1] - xs[0]
    sse = 0.0
    for t in range(1, len(xs)):
        forecast = level + trend
        sse = sse + (xs[t] - forecast) ** 2
        new_level = alpha * xs[t] + (1 - alpha) * (level + trend)
        trend = beta * (new_level - level) + (1 - beta) * trend
        level = new_level
    return sse


def _cumsum_inplace_jax(x, w):
    return jnp.sum(w * jnp.cumsum(x) ** 2)


@case("recurrence", (0, 1), "zeros_like buffer filled in place", _cumsum_inplace_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 5, 50)), rng.uniform(0, 1, _n(small, 5, 50))))
def cumsum_inplace(x, w):
    cs = torch.zeros_like(x)
    cs[0] = x[0]
    for i in range(1, len(x)):
        cs[i] = cs[i - 1] + x[i]
    return (w * cs ** 2).sum()


def _cumsum_list_jax(x):
    return jnp.sum(jnp.sin(jnp.cumsum(x)))


@case("recurrence", 0, "running total appended to a list, torch.stack", _cumsum_list_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 5, 50)),))
def cumsum_list_stack(x):
    total = 0.0
    partial = []
    for v in x:
        total = total + v
        partial.append(total)
    return torch.sin(torch.stack(partial)).sum()


def _moving_avg_jax(x, target, window=3):
    smooth = jnp.convolve(x, jnp.ones(window) / window, mode="valid")
    return jnp.sum((smooth - target) ** 2)


@case("recurrence", (0, 1), "list comprehension of window means, torch.stack", _moving_avg_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 6, 60)), _s(rng, -0.5, 0.5)))
def moving_average_listcomp(x, target, window=3):
    smooth = torch.stack([x[i:i + window].mean() for i in range(len(x) - window + 1)])
    return ((smooth - target) ** 2).sum()


def _logistic_map_jax(r, x0, steps):
    return lax.fori_loop(0, steps, lambda _, x: r * x * (1 - x), x0)


@case("recurrence", (0, 1), "logistic map (no closed form)", _logistic_map_jax,
      lambda rng, small: (_s(rng, 2.5, 2.9), _s(rng, 0.2, 0.8), _n(small, 6, 100)))
def logistic_map(r, x0, steps):
    x = x0
    for _ in range(steps):
        x = r * x * (1 - x)
    return x


def _discounted_jax(rewards, gamma):
    G, _ = lax.scan(lambda G, r: (r + gamma * G, None), jnp.zeros_like(gamma), rewards, reverse=True)
    return G


@case("recurrence", (0, 1), "for r in reversed(rewards), G = 0.0", _discounted_jax,
      lambda rng, small: (rng.uniform(0, 1, _n(small, 5, 100)), _s(rng, 0.9, 0.99)))
def discounted_return(rewards, gamma):
    G = 0.0
    for r in reversed(rewards):
        G = r + gamma * G
    return G


def _gae_jax(rewards, values, gamma, lam):
    deltas = rewards + gamma * values[1:] - values[:-1]

    def body(state, delta):
        adv, total = state
        adv = delta + gamma * lam * adv
        return (adv, total + adv ** 2), None

    zero = jnp.zeros_like(gamma)
    (_, total), _ = lax.scan(body, (zero, zero), deltas, reverse=True)
    return total


@case("recurrence", (1, 2, 3), "range(T - 1, -1, -1), values[t + 1]", _gae_jax,
      lambda rng, small: (rng.uniform(0, 1, _n(small, 5, 60)), rng.uniform(0, 2, _n(small, 5, 60) + 1),
                          _s(rng, 0.9, 0.99), _s(rng, 0.8, 0.97)))
def gae_advantages(rewards, values, gamma, lam):
    T = len(rewards)
    adv = 0.0
    total = 0.0
    for t in range(T - 1, -1, -1):
        delta = rewards[t] + gamma * values[t + 1] - values[t]
        adv = delta + gamma * lam * adv
        total += adv ** 2
    return total


def _ar1_jax(x, phi, log_sigma):
    sigma2 = jnp.exp(2 * log_sigma)
    ll = -0.5 * jnp.log(2 * math.pi * sigma2 / (1 - phi ** 2)) - 0.5 * x[0] ** 2 * (1 - phi ** 2) / sigma2
    e = x[1:] - phi * x[:-1]
    ll = ll + jnp.sum(-0.5 * jnp.log(2 * math.pi * sigma2) - 0.5 * e ** 2 / sigma2)
    return -ll


@case("likelihood", (1, 2), "AR(1) exact log-likelihood, x[t] - phi * x[t - 1]", _ar1_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 6, 100)), _s(rng, -0.8, 0.8), _s(rng, -0.5, 0.5)))
def ar1_negloglik(x, phi, log_sigma):
    sigma2 = torch.exp(2 * log_sigma)
    ll = -0.5 * torch.log(2 * math.pi * sigma2 / (1 - phi ** 2)) - 0.5 * x[0] ** 2 * (1 - phi ** 2) / sigma2
    for t in range(1, len(x)):
        e = x[t] - phi * x[t - 1]
        ll = ll - 0.5 * torch.log(2 * math.pi * sigma2) - 0.5 * e ** 2 / sigma2
    return -ll


def _fib_jax(a, b, n):
    def body(_, state):
        prev, cur = state
        return cur, a * cur + b * prev

    _, cur = lax.fori_loop(0, n, body, (jnp.ones_like(a), jnp.ones_like(a)))
    return cur / 10.0 ** (n / 4)


@case("recurrence", (0, 1), "second-order linear recurrence", _fib_jax,
      lambda rng, small: (_s(rng, 0.5, 1.0), _s(rng, 0.2, 0.5), _n(small, 5, 40)))
def second_order_recurrence(a, b, n):
    prev, cur = torch.ones_like(a), torch.ones_like(a)
    for _ in range(n):
        prev, cur = cur, a * cur + b * prev
    return cur / 10.0 ** (n / 4)


def _compound_jax(principal, rate, deposits):
    balance, _ = lax.scan(lambda bal, d: (bal * (1 + rate / 12) + d, None), principal, deposits)
    return balance


@case("finance", (0, 1, 2), "affine recurrence over monthly deposits (C7-style)", _compound_jax,
      lambda rng, small: (_s(rng, 500, 1500), _s(rng, 0.01, 0.08), rng.uniform(50, 150, _n(small, 6, 100))))
def compound_savings(principal, rate, deposits):
    balance = principal
    for d in deposits:
        balance = balance * (1 + rate / 12) + d
    return balance


# ===================================================================================== finance

def norm_cdf(x):
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


def _ncdf_jax(x):
    return 0.5 * (1 + jax.scipy.special.erf(x / math.sqrt(2)))


def _bs_call_jax(S, K, T, r, sigma):
    d1 = (jnp.log(S / K) + (r + 0.5 * sigma ** 2) * T) / (sigma * jnp.sqrt(T))
    d2 = d1 - sigma * jnp.sqrt(T)
    return S * _ncdf_jax(d1) - K * jnp.exp(-r * T) * _ncdf_jax(d2)


@case("finance", (0, 2, 3, 4), "helper norm_cdf with torch.erf", _bs_call_jax,
      lambda rng, small: (_s(rng, 80, 120), _s(rng, 90, 110), _s(rng, 0.2, 2), _s(rng, 0.0, 0.05),
                          _s(rng, 0.1, 0.4)))
def black_scholes_call(S, K, T, r, sigma):
    d1 = (torch.log(S / K) + (r + 0.5 * sigma ** 2) * T) / (sigma * torch.sqrt(T))
    d2 = d1 - sigma * torch.sqrt(T)
    return S * norm_cdf(d1) - K * torch.exp(-r * T) * norm_cdf(d2)


def _bs_book_jax(spots, strikes, weights, sigma, T=1.0, r=0.02):
    d1 = (jnp.log(spots / strikes) + (r + sigma ** 2 / 2) * T) / (sigma * math.sqrt(T))
    d2 = d1 - sigma * math.sqrt(T)
    calls = spots * _ncdf_jax(d1) - strikes * math.exp(-r * T) * _ncdf_jax(d2)
    return jnp.sum(weights * calls)


@case("finance", (0, 2, 3), "vectorised Black-Scholes book, torch.distributions.Normal cdf", _bs_book_jax,
      lambda rng, small: (rng.uniform(80, 120, 8), rng.uniform(90, 110, 8), rng.uniform(-1, 1, 8),
                          _s(rng, 0.1, 0.4)))
def black_scholes_book(spots, strikes, weights, sigma, T=1.0, r=0.02):
    normal = torch.distributions.Normal(0.0, 1.0)
    d1 = (torch.log(spots / strikes) + (r + sigma ** 2 / 2) * T) / (sigma * math.sqrt(T))
    d2 = d1 - sigma * math.sqrt(T)
    calls = spots * normal.cdf(d1) - strikes * math.exp(-r * T) * normal.cdf(d2)
    return (weights * calls).sum()


def _binomial_eu_jax(S, K, r, sigma, T, n):
    dt = T / n
    u = jnp.exp(sigma * jnp.sqrt(dt))
    d = 1 / u
    p = (jnp.exp(r * dt) - d) / (u - d)
    disc = jnp.exp(-r * dt)
    j = jnp.arange(n + 1, dtype=jnp.float64)
    values = jnp.clip(S * u ** j * d ** (n - j) - K, 0.0)
    # fixed shape: at step i only entries 0..i are meaningful (roll instead of shrinking slices)
    values = lax.fori_loop(0, n, lambda _, v: disc * (p * jnp.roll(v, -1) + (1 - p) * v), values)
    return values[0]


@case("finance", (0, 2, 3), "arange(dtype=), shrinking slices, negative-step loop", _binomial_eu_jax,
      lambda rng, small: (_s(rng, 90, 110), _s(rng, 95, 105), _s(rng, 0.01, 0.05), _s(rng, 0.15, 0.35), 1.0,
                          _n(small, 4, 50)))
def binomial_tree_european(S, K, r, sigma, T, n):
    dt = T / n
    u = torch.exp(sigma * math.sqrt(dt))
    d = 1 / u
    p = (torch.exp(r * dt) - d) / (u - d)
    disc = torch.exp(-r * dt)
    j = torch.arange(n + 1, dtype=S.dtype)
    values = torch.clamp(S * u ** j * d ** (n - j) - K, min=0.0)
    for i in range(n - 1, -1, -1):
        values = disc * (p * values[1:] + (1 - p) * values[:-1])
    return values[0]


def _binomial_am_jax(S, K, r, sigma, T, n):
    dt = T / n
    u = jnp.exp(sigma * math.sqrt(dt))
    d = 1 / u
    p = (jnp.exp(r * dt) - d) / (u - d)
    disc = jnp.exp(-r * dt)
    k = jnp.arange(n + 1, dtype=jnp.float64)
    values = jnp.maximum(K - S * u ** k * d ** (n - k), 0.0)

    def body(step, v):
        i = n - 1 - step
        exercise = K - S * u ** k * d ** (i - k)
        return jnp.maximum(disc * (p * jnp.roll(v, -1) + (1 - p) * v), exercise)

    return lax.fori_loop(0, n, body, values)[0]


@case("finance", (0, 2, 3), "American put: list comprehensions inside a negative-step loop", _binomial_am_jax,
      lambda rng, small: (_s(rng, 90, 110), _s(rng, 95, 105), _s(rng, 0.01, 0.05), _s(rng, 0.15, 0.35), 1.0,
                          _n(small, 3, 25)))
def binomial_tree_american_put(S, K, r, sigma, T, n):
    dt = T / n
    u = torch.exp(sigma * math.sqrt(dt))
    d = 1 / u
    p = (torch.exp(r * dt) - d) / (u - d)
    disc = torch.exp(-r * dt)
    values = torch.stack([torch.clamp(K - S * u ** k * d ** (n - k), min=0.0) for k in range(n + 1)])
    for i in range(n - 1, -1, -1):
        exercise = torch.stack([K - S * u ** k * d ** (i - k) for k in range(i + 1)])
        values = torch.maximum(disc * (p * values[1:] + (1 - p) * values[:-1]), exercise)
    return values[0]


def _mc_call_jax(S0, sigma, r, z, K=100.0, T=1.0):
    ST = S0 * jnp.exp((r - 0.5 * sigma ** 2) * T + sigma * math.sqrt(T) * z)
    payoff = jnp.maximum(ST - K, 0.0)
    return jnp.exp(-r * T) * jnp.mean(payoff)


@case("finance", (0, 1, 2), "Monte-Carlo with fixed samples, torch.relu payoff", _mc_call_jax,
      lambda rng, small: (_s(rng, 90, 110), _s(rng, 0.15, 0.35), _s(rng, 0.01, 0.05),
                          rng.standard_normal(_n(small, 64, 2000))))
def monte_carlo_call(S0, sigma, r, z, K=100.0, T=1.0):
    ST = S0 * torch.exp((r - 0.5 * sigma ** 2) * T + sigma * math.sqrt(T) * z)
    payoff = torch.relu(ST - K)
    return torch.exp(-r * T) * payoff.mean()


def _asian_jax(S0, sigma, z, K=100.0, r=0.02, T=1.0):
    n_steps = z.shape[1]
    dt = T / n_steps

    def body(state, z_t):
        S, running = state
        S = S * jnp.exp((r - 0.5 * sigma ** 2) * dt + sigma * math.sqrt(dt) * z_t)
        return (S, running + S), None

    (_, running), _ = lax.scan(body, (S0 * jnp.ones(z.shape[0]), jnp.zeros(z.shape[0])), z.T)
    avg = running / n_steps
    return math.exp(-r * T) * jnp.mean(jnp.maximum(avg - K, 0.0))


@case("finance", (0, 1), "2-D samples read by column z[:, t], torch.ones(n) paths", _asian_jax,
      lambda rng, small: (_s(rng, 95, 110), _s(rng, 0.15, 0.35),
                          rng.standard_normal((_n(small, 16, 200), _n(small, 4, 24)))))
def asian_option_mc(S0, sigma, z, K=100.0, r=0.02, T=1.0):
    n_paths, n_steps = z.shape
    dt = T / n_steps
    S = S0 * torch.ones(n_paths, dtype=z.dtype)
    running = torch.zeros(n_paths, dtype=z.dtype)
    for t in range(n_steps):
        S = S * torch.exp((r - 0.5 * sigma ** 2) * dt + sigma * math.sqrt(dt) * z[:, t])
        running += S
    avg = running / n_steps
    return math.exp(-r * T) * torch.clamp(avg - K, min=0).mean()


def _bond_jax(y, coupons):
    t = jnp.arange(1, coupons.shape[0] + 1)
    return jnp.sum(coupons * jnp.exp(-y * t))


@case("finance", (0, 1), "enumerate(coupons) with a time index", _bond_jax,
      lambda rng, small: (_s(rng, 0.01, 0.06), np.r_[np.full(_n(small, 4, 30) - 1, 5.0), 105.0]))
def bond_price(y, coupons):
    price = 0.0
    for t, c in enumerate(coupons):
        price += c * torch.exp(-y * (t + 1))
    return price


def _implied_vol_jax(price, S, K, T, iters=20):
    def body(_, sigma):
        d1 = (jnp.log(S / K) + 0.5 * sigma ** 2 * T) / (sigma * jnp.sqrt(T))
        d2 = d1 - sigma * jnp.sqrt(T)
        model = S * _ncdf_jax(d1) - K * _ncdf_jax(d2)
        vega = S * jnp.exp(-0.5 * d1 ** 2) / math.sqrt(2 * math.pi) * jnp.sqrt(T)
        return sigma - (model - price) / vega

    return lax.fori_loop(0, iters, body, 0.3 * jnp.ones_like(price))


@case("finance", (0, 1), "Newton for implied volatility from torch.tensor(0.3)", _implied_vol_jax,
      lambda rng, small: (_s(rng, 8, 12), _s(rng, 95, 105), _s(rng, 98, 102), _s(rng, 0.5, 1.5), _n(small, 4, 20)))
def implied_vol_newton(price, S, K, T, iters=20):
    sigma = torch.tensor(0.3, dtype=price.dtype)
    for _ in range(iters):
        d1 = (torch.log(S / K) + 0.5 * sigma ** 2 * T) / (sigma * torch.sqrt(T))
        d2 = d1 - sigma * torch.sqrt(T)
        model = S * norm_cdf(d1) - K * norm_cdf(d2)
        vega = S * torch.exp(-0.5 * d1 ** 2) / math.sqrt(2 * math.pi) * torch.sqrt(T)
        sigma = sigma - (model - price) / vega
    return sigma


# ===================================================================================== likelihoods / losses

def _gauss_nll_jax(x, mu, log_sigma):
    sigma = jnp.exp(log_sigma)
    return jnp.sum(0.5 * ((x - mu) / sigma) ** 2 + log_sigma + 0.5 * math.log(2 * math.pi))


@case("likelihood", (1, 2), "vectorised, math.log constant", _gauss_nll_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 20, 500)), _s(rng, -1, 1), _s(rng, -0.5, 0.5)))
def gaussian_nll(x, mu, log_sigma):
    sigma = log_sigma.exp()
    return (0.5 * ((x - mu) / sigma) ** 2 + log_sigma + 0.5 * math.log(2 * math.pi)).sum()


def _logreg_jax(x, y, w, b):
    z = w * x + b
    return jnp.mean(jnp.log(1 + jnp.exp(z)) - y * z)


@case("likelihood", (2, 3), "log(1 + exp(z)) written out", _logreg_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 20, 400)), (rng.uniform(0, 1, _n(small, 20, 400)) < 0.5) * 1.0,
                          _s(rng, -1, 1), _s(rng, -1, 1)))
def logistic_regression_nll(x, y, w, b):
    z = w * x + b
    return (torch.log(1 + torch.exp(z)) - y * z).mean()


def _poisson_jax(counts, log_rate):
    rate = jnp.exp(log_rate)
    return -jnp.sum(counts * log_rate - rate - jax.scipy.special.gammaln(counts + 1))


@case("likelihood", 1, "torch.lgamma of data", _poisson_jax,
      lambda rng, small: (rng.poisson(3.0, _n(small, 10, 200)).astype(float), _s(rng, 0.5, 1.5)))
def poisson_nll(counts, log_rate):
    rate = torch.exp(log_rate)
    return -(counts * log_rate - rate - torch.lgamma(counts + 1)).sum()


def _gmm_jax(x, mus, log_sigmas, logits):
    log_w = logits - jax.scipy.special.logsumexp(logits)
    comps = []
    for k in range(mus.shape[0]):
        s = jnp.exp(log_sigmas[k])
        comps.append(log_w[k] - 0.5 * ((x - mus[k]) / s) ** 2 - log_sigmas[k] - 0.5 * math.log(2 * math.pi))
    return -jnp.sum(jax.scipy.special.logsumexp(jnp.stack(comps), axis=0))


@case("likelihood", (1, 2, 3), "torch.logsumexp over a stacked component axis", _gmm_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 10, 200)), np.array([-1.0, 0.0, 1.5]) + rng.uniform(-.2, .2, 3),
                          rng.uniform(-0.3, 0.3, 3), rng.uniform(-1, 1, 3)))
def gmm_negloglik(x, mus, log_sigmas, logits):
    log_w = logits - torch.logsumexp(logits, dim=0)
    comps = []
    for k in range(len(mus)):
        s = torch.exp(log_sigmas[k])
        comps.append(log_w[k] - 0.5 * ((x - mus[k]) / s) ** 2 - log_sigmas[k] - 0.5 * math.log(2 * math.pi))
    return -torch.logsumexp(torch.stack(comps), dim=0).sum()


def _student_jax(x, log_nu, log_scale):
    nu = jnp.exp(log_nu)
    scale = jnp.exp(log_scale)
    z = x / scale
    return jnp.sum((nu + 1) / 2 * jnp.log1p(z ** 2 / nu) + log_scale)


@case("likelihood", (1, 2), "log1p, parameters on log scale", _student_jax,
      lambda rng, small: (rng.standard_t(4, _n(small, 20, 300)), _s(rng, 0.5, 2), _s(rng, -0.5, 0.5)))
def student_t_nll(x, log_nu, log_scale):
    nu = torch.exp(log_nu)
    scale = torch.exp(log_scale)
    z = x / scale
    return ((nu + 1) / 2 * torch.log1p(z ** 2 / nu) + log_scale).sum()


def _huber_jax(pred, target, delta):
    r = jnp.abs(pred - target)
    return jnp.mean(jnp.where(r < delta, 0.5 * r ** 2, delta * (r - 0.5 * delta)))


@case("piecewise", (0, 2), "torch.where on an elementwise condition", _huber_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 10, 300)) * 2, rng.standard_normal(_n(small, 10, 300)),
                          _s(rng, 0.5, 1.5)))
def huber_loss(pred, target, delta):
    r = (pred - target).abs()
    return torch.where(r < delta, 0.5 * r ** 2, delta * (r - 0.5 * delta)).mean()


def _softmax_ce_jax(logits, temperature, target):
    p = jax.nn.softmax(logits / temperature)
    return -jnp.log(p[target])


@case("likelihood", (0, 1), "torch.softmax(dim=0), integer target index", _softmax_ce_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 5, 10)), _s(rng, 0.5, 2), 2))
def softmax_cross_entropy(logits, temperature, target):
    p = torch.softmax(logits / temperature, dim=0)
    return -torch.log(p[target])


def _lse_manual_jax(x, beta):
    m = jnp.max(beta * x)
    return (m + jnp.log(jnp.sum(jnp.exp(beta * x - m)))) / beta


@case("likelihood", (0, 1), "torch.max(x) for a stable logsumexp", _lse_manual_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 6, 50)) * 3, _s(rng, 0.5, 3)))
def soft_maximum(x, beta):
    m = torch.max(beta * x)
    return (m + torch.log(torch.sum(torch.exp(beta * x - m)))) / beta


def _kl_jax(p_logits, q_logits):
    log_p = jax.nn.log_softmax(p_logits)
    log_q = jax.nn.log_softmax(q_logits)
    return jnp.sum(jnp.exp(log_p) * (log_p - log_q))


@case("likelihood", (0, 1), "F.log_softmax keyword dim", _kl_jax,
      lambda rng, small: (rng.standard_normal(6), rng.standard_normal(6)))
def kl_categorical(p_logits, q_logits):
    log_p = torch.nn.functional.log_softmax(p_logits, dim=-1)
    log_q = torch.nn.functional.log_softmax(q_logits, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum()


def _kalman_jax(zs, log_q, log_r):
    q, r = jnp.exp(log_q), jnp.exp(log_r)

    def body(state, z):
        x, P, nll = state
        P = P + q
        S = P + r
        innov = z - x
        nll = nll + 0.5 * (jnp.log(2 * math.pi * S) + innov ** 2 / S)
        K = P / S
        return (x + K * innov, (1 - K) * P, nll), None

    like = jnp.ones_like(q)
    (_, _, nll), _ = lax.scan(body, (0.0 * like, like, 0.0 * like), zs)
    return nll


@case("likelihood", (1, 2), "1-D Kalman filter likelihood, x, P = 0.0, 1.0", _kalman_jax,
      lambda rng, small: (np.cumsum(rng.standard_normal(_n(small, 5, 60)) * 0.3), _s(rng, -3, -1), _s(rng, -2, 0)))
def kalman_filter_nll(zs, log_q, log_r):
    q, r = torch.exp(log_q), torch.exp(log_r)
    x, P = 0.0, 1.0
    nll = 0.0
    for z in zs:
        P = P + q
        S = P + r
        innov = z - x
        nll = nll + 0.5 * (torch.log(2 * math.pi * S) + innov ** 2 / S)
        K = P / S
        x = x + K * innov
        P = (1 - K) * P
    return nll


def _bce_jax(logits, labels):
    p = jax.nn.sigmoid(logits)
    eps = 1e-7
    return -jnp.mean(labels * jnp.log(p + eps) + (1 - labels) * jnp.log(1 - p + eps))


@case("likelihood", 0, "sigmoid then log(p + eps)", _bce_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 10, 300)), (rng.uniform(0, 1, _n(small, 10, 300)) < 0.3) * 1.0))
def binary_cross_entropy(logits, labels):
    p = torch.sigmoid(logits)
    eps = 1e-7
    return -(labels * torch.log(p + eps) + (1 - labels) * torch.log(1 - p + eps)).mean()


# ===================================================================================== control

def _lqr_jax(x0, v0, k1, k2, steps, dt=0.1):
    def body(_, state):
        x, v, cost = state
        u = -k1 * x - k2 * v
        return x + dt * v, v + dt * u, cost + x ** 2 + 0.1 * v ** 2 + 0.01 * u ** 2

    return lax.fori_loop(0, steps, body, (x0, v0, jnp.zeros_like(x0)))[2]


@case("control", (2, 3), "LQR rollout, cost = 0.0", _lqr_jax,
      lambda rng, small: (_s(rng, -1, 1), _s(rng, -1, 1), _s(rng, 0.5, 2), _s(rng, 0.5, 2), _n(small, 5, 60)))
def lqr_rollout(x0, v0, k1, k2, steps, dt=0.1):
    x, v = x0, v0
    cost = 0.0
    for _ in range(steps):
        u = -k1 * x - k2 * v
        cost = cost + x ** 2 + 0.1 * v ** 2 + 0.01 * u ** 2
        x, v = x + dt * v, v + dt * u
    return cost


def _lqr_vec_jax(state0, gains, steps, dt=0.05):
    def body(_, carry):
        s, cost = carry
        u = -jnp.dot(gains, s)
        s = jnp.stack([s[0] + dt * s[1], s[1] + dt * (u - 0.1 * s[1])])
        return s, cost + jnp.dot(s, s) + 0.01 * u ** 2

    return lax.fori_loop(0, steps, body, (state0, jnp.zeros(())))[1]


@case("control", (0, 1), "state vector rebuilt with torch.stack, torch.dot", _lqr_vec_jax,
      lambda rng, small: (rng.uniform(-1, 1, 2), rng.uniform(0.5, 2, 2), _n(small, 4, 50)))
def lqr_vector_state(state0, gains, steps, dt=0.05):
    s = state0
    cost = torch.tensor(0.0, dtype=state0.dtype)
    for t in range(steps):
        u = -torch.dot(gains, s)
        s = torch.stack([s[0] + dt * s[1], s[1] + dt * (u - 0.1 * s[1])])
        cost = cost + torch.dot(s, s) + 0.01 * u ** 2
    return cost


def _pid_jax(gains, setpoint, steps, dt=0.05):
    kp, ki, kd = gains[0], gains[1], gains[2]

    def body(_, state):
        y, integral, prev_err, cost = state
        err = setpoint - y
        integral = integral + err * dt
        u = kp * err + ki * integral + kd * (err - prev_err) / dt
        return y + dt * (-y + u), integral, err, cost + err ** 2 * dt

    zero = jnp.zeros_like(setpoint)
    return lax.fori_loop(0, steps, body, (zero, zero, setpoint, zero))[3]


@case("control", (0, 1), "PID loop, integral and previous error from Python floats", _pid_jax,
      lambda rng, small: (rng.uniform([0.5, 0.1, 0.0], [2.0, 0.5, 0.1]), _s(rng, 0.5, 1.5), _n(small, 5, 80)))
def pid_controller(gains, setpoint, steps, dt=0.05):
    kp, ki, kd = gains[0], gains[1], gains[2]
    y = 0.0
    integral = 0.0
    prev_err = setpoint - y
    cost = 0.0
    for _ in range(steps):
        err = setpoint - y
        integral = integral + err * dt
        deriv = (err - prev_err) / dt
        u = kp * err + ki * integral + kd * deriv
        y = y + dt * (-y + u)
        prev_err = err
        cost = cost + err ** 2 * dt
    return cost


def _mpc_jax(u, x0, limit, penalty=10.0, dt=0.1):
    def body(state, u_t):
        x, cost = state
        x = x + dt * (u_t - 0.5 * x)
        return (x, cost + 0.5 * u_t ** 2 + jnp.where(x > limit, penalty * (x - limit) ** 2, 0.0)), None

    (_, cost), _ = lax.scan(body, (x0, jnp.zeros_like(x0)), u)
    return cost


@case("control", (0, 1, 2), "if x > limit inside the loop adds a penalty", _mpc_jax,
      lambda rng, small: (rng.uniform(-1, 3, _n(small, 6, 40)), _s(rng, 0, 0.5), _s(rng, 0.6, 1.2)))
def mpc_soft_constraint(u, x0, limit, penalty=10.0, dt=0.1):
    x = x0
    cost = 0.0
    for t in range(len(u)):
        x = x + dt * (u[t] - 0.5 * x)
        cost = cost + 0.5 * u[t] ** 2
        if x > limit:
            cost = cost + penalty * (x - limit) ** 2
    return cost


def _cartpole_jax(force_seq, pole_len, dt=0.02, g=9.8, m_cart=1.0, m_pole=0.1):
    total = m_cart + m_pole

    def body(state, f):
        x, x_dot, th, th_dot = state
        cos_t, sin_t = jnp.cos(th), jnp.sin(th)
        temp = (f + m_pole * pole_len * th_dot ** 2 * sin_t) / total
        th_acc = (g * sin_t - cos_t * temp) / (pole_len * (4.0 / 3.0 - m_pole * cos_t ** 2 / total))
        x_acc = temp - m_pole * pole_len * th_acc * cos_t / total
        return (x + dt * x_dot, x_dot + dt * x_acc, th + dt * th_dot, th_dot + dt * th_acc), None

    zero = jnp.zeros_like(pole_len)
    (x, _, th, _), _ = lax.scan(body, (zero, zero, zero + 0.05, zero), force_seq)
    return th ** 2 + 0.1 * x ** 2


@case("control", (0, 1), "classic cart-pole equations over a force sequence", _cartpole_jax,
      lambda rng, small: (rng.uniform(-1, 1, _n(small, 4, 50)), _s(rng, 0.4, 0.6)))
def cartpole_rollout(force_seq, pole_len, dt=0.02, g=9.8, m_cart=1.0, m_pole=0.1):
    x, x_dot, th_dot = 0.0, 0.0, 0.0
    th = torch.tensor(0.05, dtype=torch.float64)
    total = m_cart + m_pole
    for f in force_seq:
        cos_t, sin_t = torch.cos(th), torch.sin(th)
        temp = (f + m_pole * pole_len * th_dot ** 2 * sin_t) / total
        th_acc = (g * sin_t - cos_t * temp) / (pole_len * (4.0 / 3.0 - m_pole * cos_t ** 2 / total))
        x_acc = temp - m_pole * pole_len * th_acc * cos_t / total
        x, x_dot = x + dt * x_dot, x_dot + dt * x_acc
        th, th_dot = th + dt * th_dot, th_dot + dt * th_acc
    return th ** 2 + 0.1 * x ** 2


# ============================================================================ piecewise / polynomials / Python forms

def _tax_jax(income, r1, r2, r3):
    return jnp.where(income < 10.0, r1 * income,
                     jnp.where(income < 40.0, 10.0 * r1 + r2 * (income - 10.0),
                               10.0 * r1 + 30.0 * r2 + r3 * (income - 40.0)))


@case("piecewise", (0, 1, 2, 3), "if / elif / else on a traced scalar", _tax_jax,
      lambda rng, small: (_s(rng, 0, 80), _s(rng, 0.05, 0.15), _s(rng, 0.15, 0.3), _s(rng, 0.3, 0.45)))
def piecewise_tax(income, r1, r2, r3):
    if income < 10.0:
        tax = r1 * income
    elif income < 40.0:
        tax = 10.0 * r1 + r2 * (income - 10.0)
    else:
        tax = 10.0 * r1 + 30.0 * r2 + r3 * (income - 40.0)
    return tax


def _piecewise_sum_jax(x, knot, slope):
    return jnp.sum(jnp.where(x > knot, slope * (x - knot) ** 2, jnp.abs(x - knot)))


@case("piecewise", (0, 1, 2), "traced if/else per element inside a loop", _piecewise_sum_jax,
      lambda rng, small: (rng.uniform(-2, 2, _n(small, 5, 40)), _s(rng, -0.5, 0.5), _s(rng, 0.5, 2)))
def piecewise_cost_loop(x, knot, slope):
    total = 0.0
    for i in range(len(x)):
        if x[i] > knot:
            total = total + slope * (x[i] - knot) ** 2
        else:
            total = total + torch.abs(x[i] - knot)
    return total


def _horner_rev_jax(coefs, x):
    return jnp.polyval(coefs[::-1], x)


@case("polynomial", (0, 1), "Horner: for c in reversed(coefs), result = 0.0", _horner_rev_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 5, 30)) / np.arange(1, _n(small, 5, 30) + 1),
                          _s(rng, -0.9, 0.9)))
def horner_reversed(coefs, x):
    result = 0.0
    for c in reversed(coefs):
        result = result * x + c
    return result


def _horner_idx_jax(coefs, x):
    return jnp.sum(jnp.polyval(coefs[::-1], x))


@case("polynomial", (0, 1), "coefs[n - 1 - i], vector x, zeros_like", _horner_idx_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 4, 20)) / 2.0 ** np.arange(_n(small, 4, 20)),
                          rng.uniform(-1, 1, 10)))
def horner_vector(coefs, x):
    n = len(coefs)
    result = torch.zeros_like(x)
    for i in range(n):
        result = result * x + coefs[n - 1 - i]
    return result.sum()


def _cheb_jax(coefs, x):
    def body(k, state):
        t_prev, t_cur, total = state
        t_prev, t_cur = t_cur, 2 * x * t_cur - t_prev
        return t_prev, t_cur, total + coefs[k] * t_cur

    init = (jnp.ones_like(x), x, coefs[0] + coefs[1] * x)
    return jnp.sum(lax.fori_loop(2, coefs.shape[0], body, init)[2] ** 2)


@case("polynomial", (0, 1), "Chebyshev three-term recurrence from k = 2", _cheb_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 5, 30)) / np.arange(1, _n(small, 5, 30) + 1),
                          rng.uniform(-1, 1, 8)))
def chebyshev_series(coefs, x):
    t_prev, t_cur = torch.ones_like(x), x
    total = coefs[0] * t_prev + coefs[1] * t_cur
    for k in range(2, len(coefs)):
        t_prev, t_cur = t_cur, 2 * x * t_cur - t_prev
        total = total + coefs[k] * t_cur
    return (total ** 2).sum()


def _taylor_jax(x, terms):
    def body(k, state):
        term, total = state
        term = term * x / (k + 1.0)
        return term, total + term

    return lax.fori_loop(0, terms, body, (jnp.ones_like(x), jnp.ones_like(x)))[1]


@case("polynomial", 0, "term * x / float(k + 1)", _taylor_jax,
      lambda rng, small: (_s(rng, -2, 2), _n(small, 5, 25)))
def taylor_exp(x, terms):
    term = torch.ones_like(x)
    total = torch.ones_like(x)
    for k in range(terms):
        term = term * x / float(k + 1)
        total = total + term
    return total


def _poly_feats_jax(x, w):
    out = 0.0
    for k in range(w.shape[0]):
        out = out + w[k] * jnp.sum(x ** k) / math.factorial(k)
    return out


@case("polynomial", (0, 1), "x ** k with the loop counter, math.factorial", _poly_feats_jax,
      lambda rng, small: (rng.uniform(-1, 1, 12), rng.standard_normal(_n(small, 4, 12))))
def polynomial_features(x, w):
    out = 0.0
    for k in range(len(w)):
        out = out + w[k] * (x ** k).sum() / math.factorial(k)
    return out


def _tri_jax(x):
    i = jnp.arange(x.shape[0])
    weights = jnp.tril(0.5 ** (i[:, None] - i[None, :]), -1)
    return jnp.sum(weights * x[:, None] * x[None, :])


@case("python", 0, "triangular bounds range(i)", _tri_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 4, 20)),))
def triangular_pairs(x):
    s = 0.0
    for i in range(len(x)):
        for j in range(i):
            s += x[i] * x[j] * 0.5 ** (i - j)
    return s


def _even_jax(x, scale):
    return jnp.sum(jnp.sin(scale * x[::2]))


@case("python", (0, 1), "continue on a Python condition", _even_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 6, 60)), _s(rng, 0.5, 2)))
def even_terms_continue(x, scale):
    s = 0.0
    for i in range(len(x)):
        if i % 2 == 1:
            continue
        s += torch.sin(scale * x[i])
    return s


def _repulsion_jax(pos, eps):
    i, j = jnp.triu_indices(pos.shape[0], 1)
    return jnp.sum(1.0 / (jnp.abs(pos[i] - pos[j]) + eps))


@case("physics", (0, 1), "pairs range(i + 1, n), abs", _repulsion_jax,
      lambda rng, small: (np.sort(rng.uniform(0, 5, _n(small, 4, 15))), _s(rng, 0.1, 0.5)))
def pairwise_repulsion(pos, eps):
    n = len(pos)
    energy = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            energy += 1.0 / (torch.abs(pos[i] - pos[j]) + eps)
    return energy


def _trap_jax(w, phase, n):
    h = math.pi / n
    t = jnp.arange(1, n) * h
    total = 0.5 * (jnp.sin(phase) + jnp.sin(w * math.pi + phase)) + jnp.sum(jnp.sin(w * t + phase))
    return total * h


@case("python", (0, 1), "t = i * h from the counter", _trap_jax,
      lambda rng, small: (_s(rng, 0.5, 2), _s(rng, 0, 1), _n(small, 6, 100)))
def trapezoid_integral(w, phase, n):
    h = math.pi / n
    total = 0.5 * (torch.sin(phase) + torch.sin(w * math.pi + phase))
    for i in range(1, n):
        t = i * h
        total += torch.sin(w * t + phase)
    return total * h


def _kw_helper_jax(x, v, k, steps):
    def step(x, v, dt, k, damping=0.1):
        a = -k * x - damping * v
        return x + dt * v, v + dt * a

    x, v = lax.fori_loop(0, steps, lambda _, s: step(*s, k=k, dt=0.05), (x, v))
    return x ** 2 + v ** 2


def damped_step(x, v, dt, k, damping=0.1):
    a = -k * x - damping * v
    return x + dt * v, v + dt * a


@case("python", (0, 1, 2), "module helper called with keyword arguments and a default", _kw_helper_jax,
      lambda rng, small: (_s(rng, -1, 1), _s(rng, -1, 1), _s(rng, 1, 4), _n(small, 4, 60)))
def helper_keyword_args(x, v, k, steps):
    for _ in range(steps):
        x, v = damped_step(x, v, k=k, dt=0.05)
    return x ** 2 + v ** 2


def _dtype_ctor_jax(x, scale):
    n = x.shape[0]
    weights = jnp.arange(n, dtype=x.dtype) / n
    return jnp.sum(weights * jnp.tanh(scale * x + 0.5))


@case("python", (0, 1), "torch.arange/zeros/full_like with dtype=x.dtype", _dtype_ctor_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 5, 50)), _s(rng, 0.5, 2)))
def dtype_constructors(x, scale):
    n = x.shape[0]
    weights = torch.arange(n, dtype=x.dtype) / n
    acc = torch.zeros((), dtype=x.dtype)
    bias = torch.full_like(x, 0.5)
    for i in range(n):
        acc = acc + weights[i] * torch.tanh(scale * x[i] + bias[i])
    return acc


def _clamp_where_jax(x, lo, hi):
    y = jnp.clip(x, lo, hi)
    z = jnp.where(y > 0, y ** 2, -0.5 * y)
    return jnp.sum(z) + jnp.max(jnp.abs(x))


@case("piecewise", (0, 1, 2), "clamp with tensor bounds, where, x.abs().max()", _clamp_where_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 10, 100)) * 2, _s(rng, -1.5, -0.5), _s(rng, 0.5, 1.5)))
def clamp_where_mix(x, lo, hi):
    y = torch.clamp(x, min=lo, max=hi)
    z = torch.where(y > 0, y ** 2, -0.5 * y)
    return z.sum() + x.abs().max()


def _mlp_jax(x, w1, b1, w2):
    h = jnp.tanh(w1 * x + b1)
    return jnp.sum(w2 * h) ** 2


@case("python", (1, 2, 3), "tiny one-input MLP on small vectors", _mlp_jax,
      lambda rng, small: (_s(rng, -1, 1), rng.standard_normal(8), rng.standard_normal(8), rng.standard_normal(8)))
def tiny_mlp(x, w1, b1, w2):
    h = torch.tanh(w1 * x + b1)
    return (w2 * h).sum() ** 2


def _softplus_barrier_jax(x, mu, steps, lr=0.05):
    x = lax.fori_loop(0, steps, lambda _, x: x - lr * (2 * (x - 2.0) - mu / x), x)
    return (x - 2.0) ** 2 - mu * jnp.log(x)


@case("optimization", (0, 1), "log-barrier descent, x reassigned from an argument", _softplus_barrier_jax,
      lambda rng, small: (_s(rng, 0.5, 1.5), _s(rng, 0.1, 0.5), _n(small, 5, 60)))
def log_barrier_descent(x, mu, steps, lr=0.05):
    for _ in range(steps):
        g = 2 * (x - 2.0) - mu / x
        x = x - lr * g
    return (x - 2.0) ** 2 - mu * torch.log(x)


def _item_branch_jax(x, a):
    scale = jnp.where(x[0] > 0, 2.0, 1.0)
    return jnp.sum(scale * a * x ** 2)


@case("python", (0, 1), "float(x[0]) decides a Python constant", _item_branch_jax,
      lambda rng, small: (rng.standard_normal(6), _s(rng, 0.5, 2)))
def item_branch(x, a):
    scale = 2.0 if float(x[0]) > 0 else 1.0
    return (scale * a * x ** 2).sum()


def _catmull_rom_jax(y, t):
    # uniform Catmull-Rom through y evaluated at fractional positions t
    i = jnp.floor(t).astype(jnp.int32)
    u = t - i
    p0, p1, p2, p3 = y[i - 1], y[i], y[i + 1], y[i + 2]
    return jnp.sum(0.5 * ((2 * p1) + (-p0 + p2) * u + (2 * p0 - 5 * p1 + 4 * p2 - p3) * u ** 2
                          + (-p0 + 3 * p1 - 3 * p2 + p3) * u ** 3))


@case("python", (0,), "int(t[k]) as an index (data-dependent gather)", _catmull_rom_jax,
      lambda rng, small: (rng.standard_normal(10), rng.uniform(1, 7.99, _n(small, 3, 20))))
def catmull_rom_eval(y, t):
    total = 0.0
    for k in range(len(t)):
        i = int(t[k])
        u = t[k] - i
        p0, p1, p2, p3 = y[i - 1], y[i], y[i + 1], y[i + 2]
        total = total + 0.5 * ((2 * p1) + (-p0 + p2) * u + (2 * p0 - 5 * p1 + 4 * p2 - p3) * u ** 2
                               + (-p0 + 3 * p1 - 3 * p2 + p3) * u ** 3)
    return total


def _while_counter_jax(a, b, tol=1e-10):
    # arithmetic-geometric mean; the while loop stops on a traced tolerance
    for _ in range(8):
        a, b = (a + b) / 2, jnp.sqrt(a * b)
    return a


@case("optimization", (0, 1), "while abs(a - b) > tol on traced values", _while_counter_jax,
      lambda rng, small: (_s(rng, 1, 3), _s(rng, 0.2, 1)))
def agm_while(a, b, tol=1e-10):
    while torch.abs(a - b) > tol:
        a, b = (a + b) / 2, torch.sqrt(a * b)
    return a


def _sum_generator_jax(x, c):
    return jnp.sum((x - c) ** 2) / x.shape[0]


@case("python", (0, 1), "builtin sum over a generator expression", _sum_generator_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 5, 40)), _s(rng, -1, 1)))
def sum_generator(x, c):
    return sum((x[i] - c) ** 2 for i in range(len(x))) / len(x)


def _matvec_jax(A, x, steps):
    def body(_, x):
        x = A @ x
        return x / jnp.linalg.norm(x)

    x = lax.fori_loop(0, steps, body, x)
    return jnp.dot(x, A @ x)


@case("python", (0, 1), "power iteration with a 3x3 matrix, @ and norm", _matvec_jax,
      lambda rng, small: (np.eye(3) * 2 + 0.3 * rng.standard_normal((3, 3)), rng.uniform(0.5, 1, 3), _n(small, 4, 30)))
def power_iteration(A, x, steps):
    for _ in range(steps):
        x = A @ x
        x = x / torch.linalg.norm(x)
    return x @ (A @ x)


def _inplace_acc_jax(x, a, steps):
    def body(_, state):
        y, acc = state
        y = y + a * jnp.sin(y)
        return y, acc + y ** 2

    return jnp.sum(lax.fori_loop(0, steps, body, (x, jnp.zeros_like(x)))[1])


@case("physics", (0, 1), "acc += ... into a zeros_like buffer", _inplace_acc_jax,
      lambda rng, small: (rng.standard_normal(4), _s(rng, 0.05, 0.2), _n(small, 4, 50)))
def inplace_accumulate(x, a, steps):
    acc = torch.zeros_like(x)
    y = x
    for _ in range(steps):
        y = y + a * torch.sin(y)
        acc += y ** 2
    return acc.sum()



# ====================================== nested loops, writes at the counter, lists grown in long loops

def _traj_list_jax(theta0, k, dt, steps):
    def body(state, _):
        theta, omega = state
        omega = omega - dt * k * jnp.sin(theta) - dt * 0.05 * omega
        theta = theta + dt * omega
        return (theta, omega), theta

    _, traj = lax.scan(body, (theta0, jnp.zeros_like(theta0)), None, length=steps)
    return jnp.mean((traj - 0.2) ** 2)


@case("physics", (0, 1), "list.append in a long loop, torch.stack after", _traj_list_jax,
      lambda rng, small: (_s(rng, 0.3, 1.2), _s(rng, 0.5, 2.0), 0.05, _n(small, 6, 120)))
def pendulum_trajectory_list(theta0, k, dt, steps):
    theta = theta0
    omega = torch.zeros_like(theta0)
    traj = []
    for _ in range(steps):
        omega = omega - dt * k * torch.sin(theta) - dt * 0.05 * omega
        theta = theta + dt * omega
        traj.append(theta)
    traj = torch.stack(traj)
    return torch.mean((traj - 0.2) ** 2)


def _ema_buffer_jax(x):
    def body(prev, xi):
        cur = 0.9 * prev + 0.1 * jnp.tanh(xi)
        return cur, cur

    _, rest = lax.scan(body, x[0], x[1:])
    out = jnp.concatenate([x[:1], rest])
    return jnp.sum((out - x) ** 2)


@case("recurrence", 0, "out[i] = ... out[i - 1] ... into a zeros_like buffer", _ema_buffer_jax,
      lambda rng, small: (rng.standard_normal(_n(small, 8, 200)),))
def ema_into_buffer(x):
    out = torch.zeros_like(x)
    out[0] = x[0]
    for i in range(1, len(x)):
        out[i] = 0.9 * out[i - 1] + 0.1 * torch.tanh(x[i])
    return ((out - x) ** 2).sum()


def _rnn_list_jax(w, u, b, xs, ys):
    def body(h, xy):
        h = jnp.tanh(w * h + u * xy[0] + b)
        return h, h

    _, hs = lax.scan(body, jnp.zeros_like(w), (xs, ys))
    return jnp.sum((hs - ys) ** 2)


@case("rnn", (0, 1, 2), "hidden states appended per step, stacked for the loss", _rnn_list_jax,
      lambda rng, small: (_s(rng, 0.2, 0.9), _s(rng, 0.5, 1.5), _s(rng, -0.2, 0.2),
                          rng.standard_normal(_n(small, 6, 100)), rng.uniform(-0.5, 0.5, _n(small, 6, 100))))
def rnn_hidden_states_list(w, u, b, xs, ys):
    h = torch.tensor(0.0, dtype=w.dtype)
    hs = []
    for t in range(len(xs)):
        h = torch.tanh(w * h + u * xs[t] + b)
        hs.append(h)
    hs = torch.stack(hs)
    return torch.sum((hs - ys) ** 2)


def _euler_states_jax(x0, k, steps, dt=0.02):
    def body(x, _):
        x = x + dt * (-k * x + jnp.cos(x))
        return x, x

    _, xs = lax.scan(body, x0, None, length=steps)
    return jnp.mean(jnp.concatenate([x0[None], xs]) ** 2)


@case("ode", (0, 1), "xs[i + 1] = x into a preallocated tensor", _euler_states_jax,
      lambda rng, small: (_s(rng, -1, 1), _s(rng, 0.5, 2.0), _n(small, 6, 150)))
def euler_states_buffer(x0, k, steps, dt=0.02):
    xs = torch.zeros(steps + 1, dtype=x0.dtype)
    xs[0] = x0
    x = x0
    for i in range(steps):
        x = x + dt * (-k * x + torch.cos(x))
        xs[i + 1] = x
    return (xs ** 2).mean()


def _implicit_steps_jax(y0, k, dt, steps, iters):
    def step(_, y):
        z = lax.fori_loop(0, iters, lambda _, z: y + dt * (-k * jnp.sin(z)), y)
        return z

    y = lax.fori_loop(0, steps, step, y0)
    return jnp.sum(y ** 2)


@case("ode", (0, 1, 2), "time loop over a fixed-point solve per step (nested loops)", _implicit_steps_jax,
      lambda rng, small: (rng.uniform(-1, 1, 3), _s(rng, 0.5, 2.0), _s(rng, 0.02, 0.08), _n(small, 3, 40),
                          _n(small, 3, 15)))
def implicit_euler_fixed_point(y0, k, dt, steps, iters):
    y = y0
    for n in range(steps):
        z = y
        for it in range(iters):    # solve z = y + dt * f(z) by fixed-point iteration
            z = y + dt * (-k * torch.sin(z))
        y = z
    return torch.sum(y ** 2)


def _particles_jax(p0, sources, dt, steps):
    def step(_, state):
        p, vel = state

        def pull(j, force):
            d = p - sources[j]
            return force - d / (d * d + 0.5) ** 1.5

        force = lax.fori_loop(0, sources.shape[0], pull, jnp.zeros_like(p))
        vel = vel + dt * force
        return p + dt * vel, vel

    p, vel = lax.fori_loop(0, steps, step, (p0, jnp.zeros_like(p0)))
    return jnp.sum(p * p) + jnp.sum(vel)


@case("physics", (0, 1), "particles pulled by every source each step (nested loops)", _particles_jax,
      lambda rng, small: (rng.uniform(-1, 1, 3), rng.uniform(-2, 2, _n(small, 4, 20)), 0.02, _n(small, 3, 30)))
def particles_in_source_field(p0, sources, dt, steps):
    p = p0.clone()
    vel = torch.zeros_like(p0)
    for step in range(steps):
        force = torch.zeros_like(p)
        for j in range(len(sources)):
            d = p - sources[j]
            force = force - d / (d * d + 0.5) ** 1.5
        vel = vel + dt * force
        p = p + dt * vel
    return (p * p).sum() + vel.sum()


def _sgd_epochs_jax(w, lr, xs, ys, epochs):
    def sample(i, w):
        return w - lr * (w * xs[i] - ys[i]) * xs[i]

    w = lax.fori_loop(0, epochs, lambda _, w: lax.fori_loop(0, xs.shape[0], sample, w), w)
    return jnp.mean((w * xs - ys) ** 2)


@case("optimization", (0, 1), "epochs of per-sample SGD (nested loops)", _sgd_epochs_jax,
      lambda rng, small: (_s(rng, -1, 1), _s(rng, 0.01, 0.05), rng.standard_normal(_n(small, 4, 50)),
                          rng.standard_normal(_n(small, 4, 50)), _n(small, 2, 20)))
def sgd_epochs(w, lr, xs, ys, epochs):
    for epoch in range(epochs):
        for i in range(len(xs)):
            err = w * xs[i] - ys[i]
            w = w - lr * err * xs[i]
    return ((w * xs - ys) ** 2).mean()


def _loss_history_jax(x0, lr, a, steps):
    def body(x, _):
        loss = jnp.sum(a * x ** 2 + jnp.cos(3.0 * x))
        x = x - lr * (2.0 * a * x - 3.0 * jnp.sin(3.0 * x))
        return x, loss

    _, losses = lax.scan(body, x0, None, length=steps)
    return jnp.mean(losses)


@case("optimization", (0, 1, 2), "losses.append(loss) per step of gradient descent, stacked", _loss_history_jax,
      lambda rng, small: (rng.uniform(-1, 1, 3), _s(rng, 0.01, 0.05), rng.uniform(0.5, 2.0, 3), _n(small, 5, 100)))
def loss_history_mean(x0, lr, a, steps):
    x = x0
    losses = []
    for step in range(steps):
        loss = torch.sum(a * x ** 2 + torch.cos(3.0 * x))
        losses.append(loss)
        x = x - lr * (2.0 * a * x - 3.0 * torch.sin(3.0 * x))
    return torch.stack(losses).mean()

CASES_BY_NAME: dict[str, Case] = {c.name: c for c in CASES}
assert len(CASES_BY_NAME) == len(CASES), "corpus names must be unique"
