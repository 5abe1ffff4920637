"""The language core: syntax (immutable nodes), types, parser, printer, type inference, interpreter.

It imports no front end (no torch, jax or dask).
"""
