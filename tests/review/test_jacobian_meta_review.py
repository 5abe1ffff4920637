"""Review of sparsad.torch.jacobian / hessian on meta tensors (the torch.compile work made meta and
fake tensors reach the bridge's ops): a meta x raised torch's RuntimeError ("Tensor on device meta
is not on the expected device cpu"), not our error."""
from __future__ import annotations

import pytest
import scipy.sparse as sp
import torch

import sparsad.torch as st
from sparsad.errors import SparsadError

f64 = torch.float64


@pytest.mark.parametrize("pattern", [None, sp.eye(5, format="csr")])
@pytest.mark.parametrize("mode", ["auto", "forward", "reverse", "coarsen"])
def test_a_meta_x_raises_our_error(pattern, mode):
    x = torch.empty(5, dtype=f64, device="meta")
    with pytest.raises(SparsadError, match="meta"):
        st.jacobian(lambda z: z * z, x, pattern=pattern, mode=mode)


def test_a_meta_x_of_hessian_raises_our_error():
    with pytest.raises(SparsadError, match="meta"):
        st.hessian(lambda z: (z ** 3).sum(), torch.empty(4, dtype=f64, device="meta"))
