"""Layout calls in coarsened code (reshape/view/flatten, constant pads, 2-D slices, roll, cat): stencil
programs written the way users write them, differentiated by coarsening and compared with PyTorch
autograd in float64; the layout maps' transposes; what stays refused."""
from __future__ import annotations

import math
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import sparsad.coarsen as coarsen
from sparsad.coarsen import CoarsenFallbackWarning
from sparsad.coarsen.layouts import LayoutMap, torch_helper, transpose

f64 = torch.float64


def _side(u):
    return math.isqrt(u.shape[0])  # (a Python int while tracing: each size is a signature of its own)


def laplace5(u):
    side = _side(u)
    grid = u.reshape(side, side)
    padded = F.pad(grid, (1, 1, 1, 1))
    lap = 4 * grid - padded[:-2, 1:-1] - padded[2:, 1:-1] - padded[1:-1, :-2] - padded[1:-1, 2:]
    return (lap + 0.1 * grid ** 3).reshape(-1)


def laplace9(u):
    side = _side(u)
    g = u.view(side, side)
    p = torch.nn.functional.pad(g, [1, 1, 1, 1], value=0.5)  # a Dirichlet value other than zero
    edge = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:]
    corner = p[:-2, :-2] + p[:-2, 2:] + p[2:, :-2] + p[2:, 2:]
    return (20 * g - 4 * edge - corner).flatten() / 6 + torch.cos(u)


def upwind_1d(u):
    left = F.pad(u, (1, 0), value=1.0)  # inflow value at the left end
    return 0.7 * (u - left[:-1]) + 0.05 * u ** 2


def upwind_2d(u):
    side = _side(u)
    g = u.reshape(side, side)
    west = torch.cat([torch.zeros(side, 1, dtype=u.dtype), g[:, :-1]], dim=1)
    south = torch.cat([torch.ones(1, side, dtype=u.dtype), g[:-1, :]], dim=0)
    return (g * (g - west) + 0.3 * (g - south)).ravel()


def periodic_roll(u):
    side = _side(u)
    g = u.reshape(side, side)
    lap = torch.roll(g, 1, 0) + torch.roll(g, -1, 0) + g.roll(1, dims=1) + g.roll(shifts=-1, dims=1) - 4 * g
    return lap.reshape(-1) + torch.sin(u)


def reaction_diffusion(u):
    side = _side(u)
    g = u.reshape(side, side)
    p = F.pad(g, (1, 1, 1, 1))
    lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * g
    return (0.1 * lap + g * (1 - g) * (g - 0.3) - torch.exp(-g ** 2)).reshape(-1)


def periodic_cat_1d(u):
    p = torch.cat([u[-1:], u, u[:1]])
    return p[2:] - 2 * p[1:-1] + p[:-2] + torch.tanh(u)


def unsqueezed(u):
    h = F.pad(u.unsqueeze(0), (2, 1))
    return (h[:, 3:] * h[:, :-3]).squeeze(0) + u


STENCILS = [laplace5, laplace9, upwind_1d, upwind_2d, periodic_roll, reaction_diffusion, periodic_cat_1d, unsqueezed]


def _weighted(f):
    def weighted(x, w):
        return torch.sum(w * f(x))
    weighted.__name__ = f"weighted_{f.__name__}"
    return weighted


def _autograd(fn, x, w):
    leaf = x.detach().clone().requires_grad_(True)
    return torch.autograd.grad(fn(leaf, w), leaf)[0]


@pytest.mark.parametrize("f", STENCILS, ids=lambda f: f.__name__)
@settings(max_examples=3, deadline=None)
@given(side=st.integers(3, 9), seed=st.integers(0, 2**31))
def test_stencils_coarsen_to_generated_torch_code_equal_to_autograd(f, side, seed):
    """Each program is coarsened (no fallback) and its generated torch gradient equals autograd's."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(side * side, dtype=f64, generator=generator)
    w = torch.randn(side * side, dtype=f64, generator=generator)
    weighted = _weighted(f)
    coarse = coarsen.symbolic(weighted, numba=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoarsenFallbackWarning)
        got = coarsen.grad(coarse, argnums=0)(x, w)
    assert not coarse._disabled
    torch.testing.assert_close(got, _autograd(weighted, x, w), rtol=1e-12, atol=1e-12)


def test_stencils_compiled_by_numba_equal_autograd_without_it(monkeypatch):
    """The Numba adjoints (layout helpers compiled) serve the calls alone once ready."""
    from sparsad.coarsen import tiers

    side = 7
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(side * side, dtype=f64, generator=generator)
    w = torch.randn(side * side, dtype=f64, generator=generator)
    programs = [(f, coarsen.grad(coarsen.symbolic(_weighted(f)), argnums=0))
                for f in (laplace9, upwind_2d, periodic_roll)]  # (pad with a value, flatten, cat, roll)
    for _, gradient in programs:
        gradient(x, w)
    tiers.wait()
    for _, gradient in programs:
        gradient(x, w)  # (the first call after the compile checks the compiled code)
    for f, gradient in programs:
        with monkeypatch.context() as patch:
            patch.setattr(torch.autograd, "grad", None)
            got = gradient(x, w)
        torch.testing.assert_close(got, _autograd(_weighted(f), x, w), rtol=1e-12, atol=1e-12)


def test_a_new_shape_is_traced_again_never_stale():
    """The layout keys come from the shape: a call with another size gets its own trace."""
    gradient = coarsen.grad(coarsen.symbolic(_weighted(laplace5), numba=False), argnums=0)
    for side in (4, 6, 4):
        x = torch.randn(side * side, dtype=f64)
        w = torch.randn(side * side, dtype=f64)
        torch.testing.assert_close(gradient(x, w), _autograd(_weighted(laplace5), x, w), rtol=1e-12, atol=1e-12)


def _flat_pad(u):
    return F.pad(u[None], (1, 1), mode="reflect")[0]


def _negative_pad(u):
    return F.pad(u, (-1, 1))


def _circular_pad(u):
    return F.pad(u[None, None], (2, 1), mode="circular")[0, 0]


@pytest.mark.parametrize("f, reason", [(_flat_pad, "reflect"), (_negative_pad, "negative pad"),
                                       (_circular_pad, "circular")])
def test_unsupported_layouts_fall_back_with_the_reason(f, reason):
    """Pads coarsening does not generate: plain autograd, after a warning that says why."""
    x = torch.randn(8, dtype=f64)
    weighted = _weighted(f)
    w = torch.randn(f(x).shape[0], dtype=f64)
    with pytest.warns(CoarsenFallbackWarning, match=reason):
        got = coarsen.grad(coarsen.symbolic(weighted, numba=False), argnums=0)(x, w)
    torch.testing.assert_close(got, _autograd(weighted, x, w))


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 5), before=st.integers(0, 2), after=st.integers(0, 2),
       seed=st.integers(0, 2**31))
def test_layout_maps_and_their_transposes_are_adjoint(rows, cols, before, after, seed):
    """<L v, y> = <v, L^T y> for reshape, pad and crop maps (the adjoint the generated code uses)."""
    generator = torch.Generator().manual_seed(seed)
    key = (slice(before, before + rows), slice(after, after + cols))
    maps = [LayoutMap("reshape", None, (rows, cols), (rows * cols,)),
            LayoutMap("pad", key, (rows, cols), (rows + before + after, cols + after + before))]
    maps.append(transpose(maps[1]))
    for layout in maps:
        forward = torch_helper(layout, f64, torch.device("cpu"))
        backward = torch_helper(transpose(layout), f64, torch.device("cpu"))
        v = torch.randn(layout.in_shape, dtype=f64, generator=generator)
        y = torch.randn(layout.out_shape, dtype=f64, generator=generator)
        assert tuple(forward(v).shape) == tuple(layout.out_shape)
        torch.testing.assert_close((forward(v) * y).sum(), (v * backward(y)).sum(), rtol=1e-12, atol=1e-12)
        assert transpose(transpose(layout)) == layout
        torch.testing.assert_close(forward(2.5), forward(torch.full(layout.in_shape, 2.5, dtype=f64)))


def test_jax_pad_roll_and_concatenate():
    """The same maps in the JAX backend (np-style pad widths per axis, `constant_values`)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    with jax.enable_x64(True):
        side = 5

        def loss(u, w):
            g = u.reshape(side, side)
            p = jnp.pad(g, 1)
            r = 4 * g - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:] + jnp.roll(g, 1, axis=0) ** 2
            q = jnp.pad(g, ((0, 1), (2, 0)), constant_values=0.5)
            return jnp.sum(w * r.reshape(-1)) + jnp.sum(q ** 3) + jnp.sum(jnp.concatenate([g, g[:, :2]], axis=1) ** 2)

        rng = np.random.default_rng(3)
        u, w = jnp.asarray(rng.standard_normal(side * side)), jnp.asarray(rng.standard_normal(side * side))
        coarse = coarsen.symbolic(loss)
        gradient = coarsen.grad(coarse, argnums=0)
        expected = np.asarray(jax.grad(loss)(u, w))
        np.testing.assert_allclose(np.asarray(gradient(u, w)), expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(jax.jit(gradient)(u, w)), expected, rtol=1e-12, atol=1e-12)
        assert not coarse._disabled


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
