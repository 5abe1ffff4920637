"""Compilation in another process: a call never waits for Numba.

The first calls of a signature run the generated torch code (tier 0: Python source compiled by
``exec`` in milliseconds, checked against autograd).  The Numba adjoint (tier 1, seconds to
compile) is written as a module file (``numba_backend.numba_module``) and compiled by a child
Python process, which leaves Numba's on-disk cache beside the file; a later call of this process
loads the compiled code from that cache (milliseconds) and checks it against tier 0 on the same
inputs before any call uses it.  So a call gets the verified tier-0 result or the verified tier-1
result, never an unchecked one; the compiler never runs inside the user's process (no GIL held
for seconds, no warnings filters swapped under the user's feet, a crash of the compiler is a
failed compilation) and the next process finds the cache.

Loading the compiled code from the cache still costs seconds in a fresh process (Numba imports
and types its target registries on first use), so once a child has succeeded a thread of this
process imports the module and calls the function once with the same arguments (``warm``); the
compilation counts as done only then, and the call that adopts it finds it loaded.

At most ``SPARSAD_COARSEN_CHILDREN`` children (default: half the CPUs, at least one) compile at
once; later ones wait in a queue and start as earlier ones finish, so a program (or a test suite)
that coarsens many functions never starts dozens of compilers side by side.

``SPARSAD_COARSEN_BACKGROUND=0`` compiles in the calling process instead, at the first call.
``wait()`` blocks until every child has finished (benchmarks and tests use it).

>>> from sparsad.coarsen import tiers
>>> tiers.background() in (True, False)
True
"""
from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
import time

CHILD_LIMIT_S = 900  # a child still compiling after this long gives up
_lock = threading.Lock()
_children: list["Compilation"] = []

# the child: import the module by path under its name, call the function once (Numba compiles it
# with cache=True and writes the cache), exit 0; anything else exits non-zero
_CHILD = r"""
import importlib.util, os, pickle, signal, sys, threading, time
path, module_name, function, arguments, limit = sys.argv[1:6]
signal.alarm(int(limit))  # a compilation that long is abandoned (the torch code stays)
parent = os.getppid()

def orphaned():  # the parent died (killed, say): nobody will load the result
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)

threading.Thread(target=orphaned, daemon=True).start()
spec = importlib.util.spec_from_file_location(module_name, path)
module = importlib.util.module_from_spec(spec)
sys.modules[module_name] = module
spec.loader.exec_module(module)
with open(arguments, "rb") as handle:
    values = pickle.load(handle)
getattr(module, function)(*values)
"""


def max_running() -> int:
    """How many children may compile at once (``SPARSAD_COARSEN_CHILDREN``; half the CPUs by default)."""
    try:
        return max(1, int(os.environ.get("SPARSAD_COARSEN_CHILDREN", "")))
    except ValueError:
        return max(1, (os.cpu_count() or 2) // 2)


def background() -> bool:
    """Whether tier 1 compiles in a child process (``SPARSAD_COARSEN_BACKGROUND``, default on)."""
    return os.environ.get("SPARSAD_COARSEN_BACKGROUND", "1").strip().lower() not in ("0", "false", "no", "off")


class Compilation:
    """One child process compiling ``function`` of the module at ``path`` for ``values``' types;
    queued until fewer than ``max_running()`` children run (``launch``)."""

    def __init__(self, path: str, module_name: str, function: str, values: list):
        self.arguments = f"{path}.{os.getpid()}.{id(self)}.args"
        with open(self.arguments, "wb") as handle:
            pickle.dump(values, handle)
        self.command = [sys.executable, "-c", _CHILD, path, module_name, function, self.arguments,
                        str(CHILD_LIMIT_S)]
        self.process: subprocess.Popen | None = None
        self.cancelled = False
        self.target = (path, module_name, function, values)
        self.warmed: threading.Event | None = None   # set once this process has loaded the compiled code
        self.warm_failed = False

    def launch(self) -> None:
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, env=env)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def done(self) -> bool:
        if self.cancelled:
            return True
        if self.process is None:
            _launch_queued()
        return self.done_without_launch()

    def done_without_launch(self) -> bool:
        """Whether the child has exited and, if it succeeded, this process has loaded its code."""
        if self.cancelled:
            return True
        if self.process is None or self.process.poll() is None:
            return False
        if self.process.returncode != 0:
            return True
        if self.warmed is None:
            self.warmed = threading.Event()
            threading.Thread(target=self._warm, name="sparsad-coarsen-load", daemon=True).start()
        return self.warmed.is_set()

    def _warm(self) -> None:
        """Load the compiled code from Numba's cache and call it once (off the calling thread)."""
        try:
            from sparsad.coarsen.numba_backend import load_module

            path, module_name, function, values = self.target
            getattr(load_module(path, module_name), function)(*values)
        except BaseException:  # (the caller loads it again and sees the error itself)
            self.warm_failed = True
        finally:
            self.target = None
            self.warmed.set()

    def succeeded(self) -> bool:
        return self.done() and self.process is not None and self.process.returncode == 0

    def finish(self) -> None:
        """Forget the arguments file once the child has exited."""
        try:
            os.remove(self.arguments)
        except OSError:
            pass

    def stop(self) -> None:
        if self.process is None:
            self.cancelled = True
        elif self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.finish()


def _launch_queued() -> None:
    """Start queued children, oldest first, while fewer than ``max_running()`` run."""
    with _lock:
        _children[:] = [c for c in _children if not c.cancelled and (c.process is None or not c.done_without_launch())]
        free = max_running() - sum(1 for c in _children if c.running())
        for child in _children:
            if free <= 0:
                break
            if child.process is None:
                child.launch()
                free -= 1


def start(path: str, module_name: str, function: str, values: list) -> Compilation:
    """A child process compiling ``function`` (see ``Compilation``), started now or queued."""
    child = Compilation(path, module_name, function, values)
    with _lock:
        _children.append(child)
    _launch_queued()
    return child


def wait(timeout: float | None = None) -> bool:
    """Block until every symbolic step running in the background (``budget.in_background``) and
    every child, queued ones included, has finished (True) or ``timeout`` seconds passed (False)."""
    from sparsad.coarsen import budget

    deadline = None if timeout is None else time.monotonic() + timeout
    if not budget.wait_background(timeout):
        return False
    while True:
        _launch_queued()
        with _lock:
            waiting = [c for c in _children if not c.done_without_launch()]
        if not waiting:
            return True
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        running = [c for c in waiting if c.process is not None]
        if running:
            child = running[0]
            step = 1.0 if left is None else min(left, 1.0)
            if child.warmed is not None:  # exited; its code is loading in this process
                child.warmed.wait(step)
                continue
            try:
                child.process.wait(timeout=step)
            except subprocess.TimeoutExpired:
                pass


@atexit.register
def _stop_children() -> None:
    """Children still compiling when the interpreter exits are stopped (their cache is not needed)."""
    with _lock:
        children = list(_children)
    for child in children:
        child.stop()
