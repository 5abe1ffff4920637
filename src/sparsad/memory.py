"""The memory guard: every output or intermediate is sized before it is allocated.

Over the limit (default: half of the memory available when sparsad is first asked, settable with
`set_memory_limit` or the environment variable SPARSAD_MEMORY_LIMIT, e.g. "4GB" or "0.25" for a
fraction of the available memory) the allocation is refused with MemoryLimitError naming the size
and the fix; above the warning threshold (default an eighth of the limit) it goes ahead with a
DensifyWarning.

>>> from sparsad.memory import check_allocation, memory_limit
>>> check_allocation(1024, "a test buffer")  # small: silent
>>> memory_limit() > 0
True
"""
from __future__ import annotations

import os
import warnings

from sparsad.errors import DensifyWarning, MemoryLimitError, OptionError

DEFAULT_FRACTION = 0.5
WARN_FRACTION = 1 / 8

_limit: int | None = None
_warn: int | None = None


def available_memory() -> int:
    """Bytes the system can still give (MemAvailable on Linux; physical memory elsewhere)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 8 << 30


_UNITS = {"": 1, "B": 1, "KB": 1 << 10, "KIB": 1 << 10, "MB": 1 << 20, "MIB": 1 << 20,
          "GB": 1 << 30, "GIB": 1 << 30, "TB": 1 << 40, "TIB": 1 << 40}


def parse_size(text: "str | int | float", what: str = "memory limit") -> int:
    """Bytes from 1e9, "512MB", "4 GiB", or a fraction of available memory ("0.25", 0.25)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        stripped = str(text).strip().upper().replace(" ", "")
        number = stripped.rstrip("KMGTIB")
        unit = stripped[len(number):]
        try:
            value = float(number)
        except ValueError:
            value = float("nan")
        if unit not in _UNITS:
            value = float("nan")
    if not value > 0 or value == float("inf"):
        raise OptionError(f"{what} {text!r} is not a size; give bytes (4e9), a size with a unit "
                          f"('4GB', '512MiB') or a fraction of available memory (0.25)")
    if value < 1 and unit == "":
        return int(value * available_memory())
    return int(value * _UNITS[unit])


def memory_limit() -> int:
    """Bytes one allocation may take (see the module docstring)."""
    global _limit
    if _limit is None:
        configured = os.environ.get("SPARSAD_MEMORY_LIMIT")
        _limit = parse_size(configured, "SPARSAD_MEMORY_LIMIT") if configured else \
            int(DEFAULT_FRACTION * available_memory())
    return _limit


def warn_threshold() -> int:
    return _warn if _warn is not None else int(memory_limit() * WARN_FRACTION)


def set_memory_limit(limit: "str | int | float | None", warn: "str | int | float | None" = None) -> None:
    """Set the limit (bytes, '4GB', or a fraction of available memory); None restores the default.

    >>> set_memory_limit("2GB"); memory_limit() == 2 << 30
    True
    >>> set_memory_limit(None)
    """
    global _limit, _warn
    _limit = None if limit is None else parse_size(limit)
    _warn = None if warn is None else parse_size(warn, "warning threshold")


def format_size(nbytes: float) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"  # pragma: no cover


def check_allocation(nbytes: float, what: str, fix: str = "use a sparse output format or a smaller "
                     "problem", stacklevel: int = 3) -> None:
    """Refuse (MemoryLimitError) or warn (DensifyWarning) before allocating `nbytes` for `what`."""
    limit = memory_limit()
    if nbytes > limit:
        raise MemoryLimitError(f"{what} would take {format_size(nbytes)}, over the memory limit of "
                               f"{format_size(limit)}; {fix} (or raise the limit with "
                               f"sparsad.memory.set_memory_limit / SPARSAD_MEMORY_LIMIT)")
    if nbytes > warn_threshold():
        warnings.warn(f"{what} takes {format_size(nbytes)}; {fix} to avoid it", DensifyWarning,
                      stacklevel=stacklevel)


def dense_bytes(shape, itemsize: int = 8) -> float:
    """Bytes of a dense array of `shape` (a float: no overflow for absurd shapes)."""
    count = float(itemsize)
    for extent in shape:
        count *= float(extent)
    return count
