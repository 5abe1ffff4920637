"""Review of coarsening's layout calls (coarsen/frontend/layouts.py): torch's reshape/view/flatten/
squeeze/unsqueeze return views, so a write into the view changes its base and a write into the base
changes the view. The tracer took them as copies: the write was lost, and the gradient was wrong
wherever the write changed a value. The check against autograd at the first call did not catch it
when the write changed nothing there (a clamp inactive at that point)."""
from __future__ import annotations

import warnings

import pytest
import torch

import sparsad.coarsen as coarsen

f64 = torch.float64
S = 4


def write_into_the_view(u):
    h = u * 2
    g = h.reshape(S, S)
    g[0] = torch.clamp(u[:S] * 2, max=1.0)  # changes h[:S] where 2u > 1
    return h * u


def write_into_the_base(u):
    h = u * 2
    g = h.view(S, S)
    h[:S] = torch.clamp(u[:S] * 2, max=1.0)  # g sees it
    return g.flatten() * u


def add_into_a_flattened_view(u):
    h = (u * 3).reshape(S, S)
    k = h.flatten()
    k += torch.clamp(u, min=1.0) - 1.0  # in place: h too
    return h.reshape(-1) * u


def write_into_a_reshaped_constant(u):
    z = torch.zeros(S * S, dtype=u.dtype)
    g = z.reshape(S, S)  # (a constant's reshape was a new constant: no view of z at all)
    g[0] = torch.clamp(u[:S], min=1.0) - 1.0
    return z * u + u


def _weighted(f):
    def weighted(x, w):
        return torch.sum(w * f(x))
    return weighted


@pytest.mark.parametrize("f", [write_into_the_view, write_into_the_base, add_into_a_flattened_view,
                                       write_into_a_reshaped_constant],
                         ids=lambda f: f.__name__)
def test_writes_through_reshape_views_are_seen_or_refused(f):
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(S * S, dtype=f64, generator=generator)
    quiet = torch.rand(S * S, dtype=f64, generator=generator) * 0.4  # the clamps change nothing here
    active = quiet + 2.0  # ... and everything here
    weighted = _weighted(f)
    gradient = coarsen.grad(coarsen.symbolic(weighted, numba=False), argnums=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", coarsen.CoarsenFallbackWarning)
        for x in (quiet, active, active):
            leaf = x.clone().requires_grad_(True)
            want = torch.autograd.grad(weighted(leaf * 1, w), leaf)[0]
            torch.testing.assert_close(gradient(x, w), want, rtol=1e-12, atol=1e-12)
