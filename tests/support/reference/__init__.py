"""Independent references for the tests: JAX dense autodiff and finite differences."""
