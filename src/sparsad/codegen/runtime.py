"""Small Numba helpers that generated kernels call (imported as `rt`).

Their semantics follow `sparsad.lang.functions` (arguments are read as floats) and the
language's rule that a missing key reads as zero.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

_JIT = dict(cache=True, error_model="numpy", inline="always")


@njit(**_JIT)
def load(array, index):
    """array[index], or zero outside 0..len-1 (a missing key)."""
    if 0 <= index < array.shape[0]:
        return array[index]
    return array.dtype.type(0)


@njit(**_JIT)
def sort_prefix(keys, n):
    """Sort keys[:n] in place: insertion sort for the short rows of sparse matrices
    (a slice sort costs more than the sorting itself there)."""
    if n > 32:
        keys[:n].sort()
        return
    for i in range(1, n):
        key = keys[i]
        j = i - 1
        while j >= 0 and keys[j] > key:
            keys[j + 1] = keys[j]
            j -= 1
        keys[j + 1] = key


@njit(**_JIT)
def sort_pairs(keys, values, start, end):
    """Sort keys[start:end], carrying values along (insertion sort for short rows)."""
    if end - start > 32:
        order = np.argsort(keys[start:end])
        sorted_keys = keys[start:end][order]
        sorted_values = values[start:end][order]
        keys[start:end] = sorted_keys
        values[start:end] = sorted_values
        return
    for i in range(start + 1, end):
        key, value = keys[i], values[i]
        j = i - 1
        while j >= start and keys[j] > key:
            keys[j + 1] = keys[j]
            values[j + 1] = values[j]
            j -= 1
        keys[j + 1] = key
        values[j + 1] = value


# ---- tries: nested local containers {k0 -> {k1 -> ... -> number}} without typed dicts ----
# One pool of nodes per container: node 0 is the container itself, every other node an entry
# (a row, or a number at the last level) with its key, its parent, its first and last child and
# its next sibling (children in insertion order, as a dict iterates); one open-addressing table
# finds the child of (parent, key). The arrays are reserved once at their largest size and only
# their used part is ever written (untouched pages cost no memory), so they are never replaced:
# a kernel passing arrays it may reassign pays reference counting on every call (15x slower).
# The table's used part doubles, rehashed in place, when it is half full; a fill resets only
# the slots its nodes used.

TRIE_KEY, TRIE_NEXT, TRIE_FIRST, TRIE_LAST, TRIE_PARENT, TRIE_SLOT = 0, 1, 2, 3, 4, 5
# the most entries (at every level) one fill may hold: 37 MB reserved (an allocation glibc serves
# from its heap after the first call, ~1 us; a reservation above 32 MB is an mmap, ~50-100 us)
TRIE_NODES = 1 << 19
_TRIE_START = 256     # the table's first used part


@njit(cache=True, nogil=True)
def trie_new(capacity):
    """(nodes, table, state) of an empty trie of at most `capacity` nodes (a power of two; the
    kernels pass TRIE_NODES, written into their source); state = [node count, table mask]. Its
    numbers: np.empty(capacity, dtype) (each is set when its node is made). A fill making more
    nodes raises MemoryError (the kernel's caller then runs the program interpreted)."""
    nodes = np.empty((capacity, 6), np.int64)
    table = np.empty(2 * capacity, np.int64)
    start = min(_TRIE_START, 2 * capacity)
    table[:start] = -1
    state = np.empty(2, np.int64)
    state[0] = 1
    state[1] = start - 1
    nodes[0, TRIE_KEY] = 0
    nodes[0, TRIE_NEXT] = -1
    nodes[0, TRIE_FIRST] = -1
    nodes[0, TRIE_LAST] = -1
    nodes[0, TRIE_PARENT] = -2  # never a parent's index: lookups never find the container
    nodes[0, TRIE_SLOT] = -1
    return nodes, table, state


@njit(cache=True, nogil=True)
def trie_reset(nodes, table, state):
    """Empty the trie (a fill): free the slots of its nodes (the whole used table at once when they
    fill more than a sixteenth of it: a memset costs less than scattered writes)."""
    if 16 * state[0] > state[1]:
        table[:state[1] + 1] = -1
    else:
        for node in range(1, state[0]):
            table[nodes[node, TRIE_SLOT]] = -1
    state[0] = 1
    nodes[0, TRIE_FIRST] = -1
    nodes[0, TRIE_LAST] = -1


@njit(**_JIT)
def _trie_hash(parent, key, mask):
    h = parent * -7046029254386353131 + key * -4417276706812531889
    h ^= h >> 29
    return h & mask


@njit(cache=True, nogil=True)
def trie_find(nodes, table, state, parent, key):
    """The node of key under parent, or -1 (also when parent is -1: no such row)."""
    if parent < 0:
        return -1
    mask = state[1]
    h = _trie_hash(parent, key, mask)
    while True:
        node = table[h]
        if node < 0:
            return -1
        if nodes[node, TRIE_KEY] == key and nodes[node, TRIE_PARENT] == parent:
            return node
        h = (h + 1) & mask


@njit(cache=True, nogil=True)
def trie_get(nodes, values, table, state, parent, key, zero):
    """The number at key under parent, or zero when absent."""
    node = trie_find(nodes, table, state, parent, key)
    return values[node] if node >= 0 else zero


@njit(cache=True, nogil=True)
def _trie_widen(nodes, table, state):
    """Twice the table's used part, every node's slot found again."""
    mask = 2 * state[1] + 1
    table[:mask + 1] = -1
    for node in range(1, state[0]):
        h = _trie_hash(nodes[node, TRIE_PARENT], nodes[node, TRIE_KEY], mask)
        while table[h] >= 0:
            h = (h + 1) & mask
        table[h] = node
        nodes[node, TRIE_SLOT] = h
    state[1] = mask


@njit(cache=True, nogil=True)
def trie_child(nodes, values, table, state, parent, key):
    """The node of key under parent, made (last of its siblings, number zero) when absent."""
    mask = state[1]
    h = _trie_hash(parent, key, mask)
    while True:
        node = table[h]
        if node < 0:
            break
        if nodes[node, TRIE_KEY] == key and nodes[node, TRIE_PARENT] == parent:
            return node
        h = (h + 1) & mask
    node = state[0]
    if node == nodes.shape[0]:
        raise MemoryError("sparsad: a local container of the kernel outgrew its reserved nodes")
    if 2 * (node + 1) > mask + 1:  # half full: widen, then find the free slot again
        _trie_widen(nodes, table, state)
        mask = state[1]
        h = _trie_hash(parent, key, mask)
        while table[h] >= 0:
            h = (h + 1) & mask
    state[0] = node + 1
    table[h] = node
    nodes[node, TRIE_KEY] = key
    nodes[node, TRIE_NEXT] = -1
    nodes[node, TRIE_FIRST] = -1
    nodes[node, TRIE_LAST] = -1
    nodes[node, TRIE_PARENT] = parent
    nodes[node, TRIE_SLOT] = h
    values[node] = 0
    last = nodes[parent, TRIE_LAST]
    if last < 0:
        nodes[parent, TRIE_FIRST] = node
    else:
        nodes[last, TRIE_NEXT] = node
    nodes[parent, TRIE_LAST] = node
    return node


@njit(cache=True, error_model="numpy", nogil=True)
def flush_tensor_row(row, keys, n, val, mark, extents, level_keys, level_counts, level_marks, offsets,
                     out_crd, out_v, out_n):
    """Append the n cells keys[:n] of row `row`'s n-d workspace (linear index over `extents`, the
    modes after the first) to the coordinates out_crd[:, out_n:] (one row per mode, the first
    mode `row`) and the values out_v[out_n:] in ascending order, and clear them.

    level_keys[offsets[l]:][:level_counts[l]] holds the distinct keys of mode l among the
    cells (marked in level_marks as the kernel wrote them). When the block they span (the
    product of the counts) holds at most 32 cells per entry (a Jacobian row dense in some modes,
    a few keys in the others), the block is read in order off the marks, with no sort, and each
    cell's coordinates are the block's keys (no division); otherwise the cells are sorted and
    their coordinates divided out. The counts and marks are cleared for the next row."""
    modes = extents.shape[0]
    cells = 1.0
    for m in range(modes):
        start = offsets[m]
        count = level_counts[m]
        cells *= count
        sort_prefix(level_keys[start:start + count], count)
        for t in range(count):
            level_marks[start + level_keys[start + t]] = False
    t = out_n
    if cells <= 32.0 * n:
        position = np.zeros(modes, np.int64)
        last = offsets[modes - 1]
        while True:
            base = 0
            for m in range(modes - 1):
                base = base * extents[m] + level_keys[offsets[m] + position[m]]
            base *= extents[modes - 1]
            for u in range(level_counts[modes - 1]):
                key = level_keys[last + u]
                c = base + key
                if mark[c]:
                    out_crd[0, t] = row
                    for m in range(modes - 1):
                        out_crd[m + 1, t] = level_keys[offsets[m] + position[m]]
                    out_crd[modes, t] = key
                    out_v[t] = val[c]
                    val[c] = 0
                    mark[c] = False
                    t += 1
            m = modes - 2
            while m >= 0:
                position[m] += 1
                if position[m] < level_counts[m]:
                    break
                position[m] = 0
                m -= 1
            if m < 0:
                break
    else:
        sort_prefix(keys, n)
        for u in range(n):
            c = keys[u]
            out_crd[0, t] = row
            rest = c
            for m in range(modes - 1, -1, -1):
                out_crd[m + 1, t] = rest % extents[m]
                rest //= extents[m]
            out_v[t] = val[c]
            val[c] = 0
            mark[c] = False
            t += 1
    for m in range(modes):
        level_counts[m] = 0
    if t != out_n + n:
        raise AssertionError("sparsad: a row workspace's cells and its modes' keys disagree")


@njit(cache=True, nogil=True)
def coo_to_csr(count, rows, cols, values, nrows, ncols):
    """CSR (indptr, indices, data) of the first `count` triplets, duplicates summed, columns
    sorted: a counting sort by row, then one dense pass per row (O(count + nrows + ncols))."""
    indptr = np.zeros(nrows + 1, np.int64)
    for e in range(count):
        indptr[rows[e] + 1] += 1
    for i in range(nrows):
        indptr[i + 1] += indptr[i]
    fill = indptr[:-1].copy()
    by_row_cols = np.empty(count, np.int64)
    by_row_values = np.empty(count, values.dtype)
    for e in range(count):
        at = fill[rows[e]]
        by_row_cols[at] = cols[e]
        by_row_values[at] = values[e]
        fill[rows[e]] += 1
    slot = np.full(ncols, -1, np.int64)  # where column c sits in the current row's output
    indices = np.empty(count, np.int64)
    data = np.empty(count, values.dtype)
    out_ptr = np.zeros(nrows + 1, np.int64)
    n = 0
    for i in range(nrows):
        start = n
        for e in range(indptr[i], indptr[i + 1]):
            c = by_row_cols[e]
            if slot[c] < start:
                slot[c] = n
                indices[n] = c
                data[n] = by_row_values[e]
                n += 1
            else:
                data[slot[c]] += by_row_values[e]
        sort_pairs(indices, data, start, n)
        out_ptr[i + 1] = n
    return out_ptr, indices[:n].copy(), data[:n].copy()


@njit(**_JIT)
def sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + np.exp(-x))
    z = np.exp(x)
    return z / (1.0 + z)


@njit(**_JIT)
def softplus(x):
    return max(x, 0.0) + np.log1p(np.exp(-abs(x)))


@njit(**_JIT)
def relu(x):
    return x if x > 0 else 0.0


@njit(**_JIT)
def step(x):
    return 1.0 if x > 0 else 0.0


@njit(**_JIT)
def sign(x):
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return 0.0


@njit(**_JIT)
def power(x, y):
    if x == 0.0 and y < 0:  # IEEE: +-inf for an odd integer exponent (the zero's sign), else +inf
        if y == np.floor(y) and 0.5 * y != np.floor(0.5 * y):
            return np.copysign(np.inf, x)
        return np.inf
    if x < 0 and y != np.floor(y):
        return np.nan  # a real power of a negative base (numba would go complex)
    return x ** y


# language function -> code template ({0}, {1} are the float arguments)
FUNCTION_CODE = {
    "exp": "np.exp({0})", "log": "np.log({0})", "sin": "np.sin({0})", "cos": "np.cos({0})",
    "tan": "np.tan({0})", "tanh": "np.tanh({0})", "sinh": "np.sinh({0})", "cosh": "np.cosh({0})",
    "atan": "np.arctan({0})", "sqrt": "np.sqrt({0})", "abs": "abs({0})",
    "log1p": "np.log1p({0})", "expm1": "np.expm1({0})", "pow": "rt.power({0}, {1})",
    "sigmoid": "rt.sigmoid({0})", "relu": "rt.relu({0})", "softplus": "rt.softplus({0})",
    "step": "rt.step({0})", "sign": "rt.sign({0})",
}


@njit(**_JIT)
def load2(array, row, column):
    """array[row, column], or zero outside the array (a missing key of a dense grid)."""
    if 0 <= row < array.shape[0] and 0 <= column < array.shape[1]:
        return array[row, column]
    return array.dtype.type(0)


@njit(**_JIT)
def has_row(rows, row):
    """Whether a marked grid has a written row at `row` (False outside the grid)."""
    return 0 <= row < rows.shape[0] and rows[row]


def _dot_slices(a, a0, b, b0, n):  # typed by the overload below (Numba only)
    raise NotImplementedError


@overload(_dot_slices, jit_options=dict(cache=True, nogil=True))
def _dot_slices_typed(a, a0, b, b0, n):
    """BLAS ddot on contiguous float64 slices; any other pair (float32, mixed dtypes, strided
    views) a scalar loop accumulating in float64."""
    blas = (isinstance(a, types.Array) and isinstance(b, types.Array) and a.dtype == b.dtype == types.float64
            and a.layout == "C" and b.layout == "C")
    if blas:
        def through_blas(a, a0, b, b0, n):
            return np.dot(a[a0:a0 + n], b[b0:b0 + n])
        return through_blas

    def scalar(a, a0, b, b0, n):
        total = 0.0
        for t in range(n):
            total += float(a[a0 + t]) * float(b[b0 + t])
        return total
    return scalar


@njit(cache=True, nogil=True)
def dot(a, a0, b, b0, n):
    """sum(a[a0 + t] * b[b0 + t] for t < n) (codegen.dense_loops: long dot products)."""
    if n <= 0:
        return 0.0
    return _dot_slices(a, a0, b, b0, n)


@njit(**_JIT)
def _rows_scalar(a, a0, rows, cols, stride, x, x0):
    y = np.zeros(rows, np.float64)
    for r in range(rows):
        total = 0.0
        row = a0 + r * stride
        for t in range(cols):
            total += float(a[row + t]) * float(x[x0 + t])
        y[r] = total
    return y


@njit(**_JIT)
def _columns_scalar(x, x0, a, a0, rows, cols, stride):
    z = np.zeros(cols, np.float64)
    for r in range(rows):
        weight = float(x[x0 + r])
        row = a0 + r * stride
        for t in range(cols):
            z[t] += weight * float(a[row + t])
    return z


def _product_rows(a, a0, rows, cols, stride, x, x0):  # typed by the overload below (Numba only)
    raise NotImplementedError


def _product_columns(x, x0, a, a0, rows, cols, stride):  # typed by the overload below (Numba only)
    raise NotImplementedError


def _blas_ready(a, x) -> bool:
    return (isinstance(a, types.Array) and isinstance(x, types.Array) and a.dtype == x.dtype == types.float64
            and a.layout == "C" and x.layout == "C")


@overload(_product_rows, jit_options=dict(cache=True, nogil=True))
def _product_rows_typed(a, a0, rows, cols, stride, x, x0):
    """BLAS dgemv on a C-contiguous float64 block whose rows follow each other (stride == cols);
    any other case (float32, mixed dtypes, gaps between rows) a scalar loop summing in float64
    (products in the operands' type, as in the loops it replaces)."""
    if not _blas_ready(a, x):
        return lambda a, a0, rows, cols, stride, x, x0: _rows_scalar(a, a0, rows, cols, stride, x, x0)

    def through_blas(a, a0, rows, cols, stride, x, x0):
        if stride != cols:
            return _rows_scalar(a, a0, rows, cols, stride, x, x0)
        return np.dot(a[a0:a0 + rows * cols].reshape((rows, cols)), x[x0:x0 + cols])
    return through_blas


@overload(_product_columns, jit_options=dict(cache=True, nogil=True))
def _product_columns_typed(x, x0, a, a0, rows, cols, stride):
    """x[x0:x0+rows] @ block, as `_product_rows`: BLAS dgemv (transposed) on contiguous float64."""
    if not _blas_ready(a, x):
        return lambda x, x0, a, a0, rows, cols, stride: _columns_scalar(x, x0, a, a0, rows, cols, stride)

    def through_blas(x, x0, a, a0, rows, cols, stride):
        if stride != cols:
            return _columns_scalar(x, x0, a, a0, rows, cols, stride)
        return np.dot(x[x0:x0 + rows], a[a0:a0 + rows * cols].reshape((rows, cols)))
    return through_blas


@njit(cache=True, nogil=True)
def matvec(a, a0, rows, cols, stride, x, x0):
    """y[r] = sum(a[a0 + r * stride + t] * x[x0 + t] for t < cols), r < rows: a new float64 array
    (codegen.matvec: a dense matrix-vector product of a loop nest)."""
    if rows <= 0:
        return np.zeros(0, np.float64)
    if cols <= 0:
        return np.zeros(rows, np.float64)
    return _product_rows(a, a0, rows, cols, stride, x, x0)


@njit(cache=True, nogil=True)
def vecmat(x, x0, a, a0, rows, cols, stride):
    """z[t] = sum(x[x0 + r] * a[a0 + r * stride + t] for r < rows), t < cols: a new float64 array
    (codegen.matvec: a vector-matrix product of a loop nest)."""
    if cols <= 0:
        return np.zeros(0, np.float64)
    if rows <= 0:
        return np.zeros(cols, np.float64)
    return _product_columns(x, x0, a, a0, rows, cols, stride)


@njit(**_JIT)
def _block_at(a, a0, rows, cols, stride, r, t):
    return float(a[a0 + r * stride + t])


@njit(**_JIT)
def _matmat_scalar(a, a0, a_rows, a_cols, a_stride, a_t, b, b0, b_rows, b_cols, b_stride, b_t):
    m = a_cols if a_t else a_rows
    k = a_rows if a_t else a_cols
    n = b_rows if b_t else b_cols
    c = np.zeros(m * n, np.float64)
    for p in range(m):
        for s in range(k):
            left = _block_at(a, a0, a_rows, a_cols, a_stride, s, p) if a_t else _block_at(a, a0, a_rows, a_cols, a_stride, p, s)
            for q in range(n):
                right = _block_at(b, b0, b_rows, b_cols, b_stride, q, s) if b_t else _block_at(b, b0, b_rows, b_cols, b_stride, s, q)
                c[p * n + q] += left * right
    return c


def _product_blocks(a, a0, a_rows, a_cols, a_stride, a_t, b, b0, b_rows, b_cols, b_stride, b_t):  # Numba only
    raise NotImplementedError


@overload(_product_blocks, jit_options=dict(cache=True, nogil=True))
def _product_blocks_typed(a, a0, a_rows, a_cols, a_stride, a_t, b, b0, b_rows, b_cols, b_stride, b_t):
    """BLAS dgemm on C-contiguous float64 blocks whose rows follow each other (either transposed);
    any other case a float64 scalar loop."""
    if not _blas_ready(a, b):
        return (lambda a, a0, a_rows, a_cols, a_stride, a_t, b, b0, b_rows, b_cols, b_stride, b_t:
                _matmat_scalar(a, a0, a_rows, a_cols, a_stride, a_t, b, b0, b_rows, b_cols, b_stride, b_t))

    def through_blas(a, a0, a_rows, a_cols, a_stride, a_t, b, b0, b_rows, b_cols, b_stride, b_t):
        if a_stride != a_cols or b_stride != b_cols:
            return _matmat_scalar(a, a0, a_rows, a_cols, a_stride, a_t, b, b0, b_rows, b_cols, b_stride, b_t)
        left = a[a0:a0 + a_rows * a_cols].reshape((a_rows, a_cols))
        right = b[b0:b0 + b_rows * b_cols].reshape((b_rows, b_cols))
        if a_t and b_t:
            return np.dot(left.T, right.T).reshape(-1)
        if a_t:
            return np.dot(left.T, right).reshape(-1)
        if b_t:
            return np.dot(left, right.T).reshape(-1)
        return np.dot(left, right).reshape(-1)
    return through_blas


@njit(cache=True, nogil=True)
def matmat(a, a0, a_rows, a_cols, a_stride, a_t, b, b0, b_rows, b_cols, b_stride, b_t):
    """op(A) @ op(B) as a new flat row-major float64 array, where A[r, t] = a[a0 + r * a_stride + t]
    (a_rows x a_cols), op transposes when the flag is set, and B likewise (codegen.matvec: a dense
    matrix-matrix product of a loop nest)."""
    m = a_cols if a_t else a_rows
    k = a_rows if a_t else a_cols
    n = b_rows if b_t else b_cols
    if m <= 0 or n <= 0:
        return np.zeros(max(m, 0) * max(n, 0), np.float64)
    if k <= 0:
        return np.zeros(m * n, np.float64)
    return _product_blocks(a, a0, a_rows, a_cols, a_stride, a_t, b, b0, b_rows, b_cols, b_stride, b_t)
