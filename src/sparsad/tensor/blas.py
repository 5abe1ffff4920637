"""One BLAS thread for small work.

A multi-threaded BLAS call wakes a worker thread; on a small matrix product that costs more than
the second core saves, and on a busy machine (the worker waiting for a core) it can cost
milliseconds for a product worth microseconds: a DMRG local matrix-vector product ran 10-100x
slower with two OpenBLAS threads than with one on a loaded 2-core machine. So the executor runs
graphs whose estimated cost is small under `one_blas_thread()`. threadpoolctl switches the
thread count of the BLAS libraries loaded at first use (NumPy's, which the executor calls); without
threadpoolctl this is a no-op. Nested and concurrent uses share one switch: the first entrant sets
one thread, the last to leave restores the count it found.
"""
from __future__ import annotations

import threading

_lock = threading.Lock()
_state = {"libraries": None, "depth": 0, "saved": []}


def _libraries() -> list:
    if _state["libraries"] is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _state["libraries"] = []
        else:
            _state["libraries"] = list(ThreadpoolController().select(user_api="blas").lib_controllers)
    return _state["libraries"]


class _OneBlasThread:
    """The context manager itself: a plain class, cheaper per use than a generator's."""

    def __enter__(self) -> None:
        with _lock:
            if _state["depth"] == 0:
                libraries = _libraries()
                _state["saved"] = [lib.num_threads for lib in libraries]
                for lib, count in zip(libraries, _state["saved"]):
                    if count != 1:
                        lib.set_num_threads(1)
            _state["depth"] += 1

    def __exit__(self, *exc_info) -> None:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0:
                for lib, count in zip(_libraries(), _state["saved"]):
                    if count != 1:
                        lib.set_num_threads(count)


_ONE_BLAS_THREAD = _OneBlasThread()


def one_blas_thread() -> _OneBlasThread:
    """A context manager: the body runs with one BLAS thread, then the thread counts are restored.

    >>> import numpy as np
    >>> with one_blas_thread():
    ...     float(np.ones((2, 2)) @ np.ones(2) @ np.ones(2))
    4.0
    """
    return _ONE_BLAS_THREAD
