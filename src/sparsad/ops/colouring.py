"""Column colourings for compressed derivative matrices (front-end free: NumPy and Numba only).

Jacobians use a distance-1 colouring of the column intersection graph (columns sharing a row get
different colours): one JVP per colour gives every column of that colour, read off directly.
The colouring is DSATUR's or greedy's in natural order, whichever has fewer colours.

Hessians are symmetric, so fewer products suffice: a *star colouring* of the adjacency graph of
the pattern (a distance-1 colouring in which every path on four vertices uses at least three
colours) lets every entry H[i, j] be read directly from one of the two compressed products,
B[i, colour(j)] or B[j, colour(i)], where B = H S (Gebremedhin, Manne and Pothen, "What colour
is your Jacobian?", SIAM Review 2005). `star_recovery` says which one for each stored entry.

Example:
    >>> import numpy as np, scipy.sparse as sp
    >>> path = sp.diags([np.ones(5), np.ones(6), np.ones(5)], [-1, 0, 1]).tocsr()
    >>> pattern = CSRPattern(path.indptr, path.indices, path.shape)
    >>> int(colour_columns(pattern).max()) + 1, int(star_colouring(pattern).max()) + 1
    (3, 3)
"""
from __future__ import annotations

import numpy as np
from numba import njit

from sparsad.errors import InputError
from sparsad.ops.pattern import CSRPattern


@njit(cache=True, nogil=True)
def _greedy_colouring(indptr, indices, t_indptr, t_indices, n_cols):  # pragma: no cover - compiled
    """Distance-1 colouring of the column intersection graph: columns sharing a row differ."""
    colour = np.full(n_cols, -1, dtype=np.int64)
    forbidden = np.full(n_cols + 1, -1, dtype=np.int64)  # forbidden[c] == j: colour c taken near j
    for j in range(n_cols):
        for p in range(t_indptr[j], t_indptr[j + 1]):
            i = t_indices[p]
            for q in range(indptr[i], indptr[i + 1]):
                other = colour[indices[q]]
                if other >= 0:
                    forbidden[other] = j
        c = 0
        while forbidden[c] == j:
            c += 1
        colour[j] = c
    return colour


@njit(cache=True, nogil=True)
def _saturation_colouring(indptr, indices, t_indptr, t_indices, n_cols):  # pragma: no cover - compiled
    """Distance-1 colouring of the column intersection graph by DSATUR (Brelaz 1979): the next
    column is one whose neighbours already show the most distinct colours (ties: the latest to
    reach that count, then the lowest index), and takes the smallest colour they do not show. The
    colours of a column's neighbours are kept as a 64-bit set; (colours, False) if 64 do not do.
    Columns wait in one doubly linked list per saturation, so each step is O(its neighbours)."""
    colour = np.full(n_cols, -1, dtype=np.int64)
    seen = np.zeros(n_cols, dtype=np.uint64)  # bit c set: a neighbour has colour c
    saturation = np.zeros(n_cols, dtype=np.int64)
    head = np.full(66, -1, dtype=np.int64)
    following = np.full(n_cols, -1, dtype=np.int64)
    preceding = np.full(n_cols, -1, dtype=np.int64)
    for v in range(n_cols - 1, -1, -1):  # saturation 0: every column, lowest index first
        following[v] = head[0]
        if head[0] >= 0:
            preceding[head[0]] = v
        head[0] = v
    top = 0
    for _ in range(n_cols):
        while head[top] < 0:
            top -= 1
        v = head[top]
        head[top] = following[v]
        if following[v] >= 0:
            preceding[following[v]] = -1
        free = ~seen[v]
        if free == 0:
            return colour, False
        c = 0
        while (free >> np.uint64(c)) & np.uint64(1) == 0:
            c += 1
        colour[v] = c
        bit = np.uint64(1) << np.uint64(c)
        for p in range(t_indptr[v], t_indptr[v + 1]):
            i = t_indices[p]
            for q in range(indptr[i], indptr[i + 1]):
                w = indices[q]
                if colour[w] >= 0 or (seen[w] & bit) != 0:
                    continue
                seen[w] |= bit
                s = saturation[w]
                if preceding[w] >= 0:  # unlink w from list s, push it on list s + 1
                    following[preceding[w]] = following[w]
                else:
                    head[s] = following[w]
                if following[w] >= 0:
                    preceding[following[w]] = preceding[w]
                s += 1
                saturation[w] = s
                preceding[w] = -1
                following[w] = head[s]
                if head[s] >= 0:
                    preceding[head[s]] = w
                head[s] = w
                if s > top:
                    top = s
    return colour, True


@njit(cache=True, nogil=True)
def _star_colouring(indptr, indices, n):  # pragma: no cover - compiled
    """Greedy star colouring of the graph with adjacency lists indptr/indices (no self loops).

    Vertex v takes the smallest colour that is (1) not on a neighbour and (2) closes no two-coloured
    path on four vertices through v: as an end, v-w-x-y with colour(y) == colour(w) forbids
    colour(x); inside, a-v-w-x with colour(a) == colour(w) forbids colour(x)."""
    colour = np.full(n, -1, dtype=np.int64)
    forbidden = np.full(n + 1, -1, dtype=np.int64)
    seen = np.zeros(n + 1, dtype=np.int64)  # how many neighbours of v carry each colour
    for v in range(n):
        for p in range(indptr[v], indptr[v + 1]):
            cw = colour[indices[p]]
            if cw >= 0:
                forbidden[cw] = v
                seen[cw] += 1
        for p in range(indptr[v], indptr[v + 1]):
            w = indices[p]
            cw = colour[w]
            if cw < 0:
                continue
            repeated = seen[cw] > 1  # another neighbour a of v has w's colour: a-v-w-x
            for q in range(indptr[w], indptr[w + 1]):
                x = indices[q]
                cx = colour[x]
                if x == v or cx < 0 or forbidden[cx] == v:
                    continue
                if repeated:
                    forbidden[cx] = v
                    continue
                for r in range(indptr[x], indptr[x + 1]):  # v-w-x-y with colour(y) == colour(w)
                    y = indices[r]
                    if y != w and colour[y] == cw:
                        forbidden[cx] = v
                        break
        for p in range(indptr[v], indptr[v + 1]):
            cw = colour[indices[p]]
            if cw >= 0:
                seen[cw] = 0
        c = 0
        while forbidden[c] == v:
            c += 1
        colour[v] = c
    return colour


@njit(cache=True, nogil=True)
def _star_sources(indptr, indices, rows, colour, n_colours):  # pragma: no cover - compiled
    """For each stored entry (rows[e], indices[e]): the row and colour of the compressed product
    that holds it alone, or row -1 when neither side is unique (not a star colouring)."""
    nnz = indices.shape[0]
    source_row = np.empty(nnz, dtype=np.int64)
    source_colour = np.empty(nnz, dtype=np.int64)
    tally = np.zeros(n_colours, dtype=np.int64)
    unique_in_row = np.zeros(nnz, dtype=np.bool_)  # entry e's column is its row's only one of its colour
    for i in range(indptr.shape[0] - 1):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j != i:
                tally[colour[j]] += 1
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            unique_in_row[p] = j == i or tally[colour[j]] == 1
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j != i:
                tally[colour[j]] = 0
    for e in range(nnz):
        i, j = rows[e], indices[e]
        if unique_in_row[e]:
            source_row[e], source_colour[e] = i, colour[j]
        else:
            # the mirror entry (j, i): its row j must hold i alone among i's colour
            lo, hi = indptr[j], indptr[j + 1]
            while lo < hi:
                mid = (lo + hi) // 2
                if indices[mid] < i:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < indptr[j + 1] and indices[lo] == i and unique_in_row[lo]:
                source_row[e], source_colour[e] = j, colour[i]
            else:
                source_row[e], source_colour[e] = -1, -1
    return source_row, source_colour


@njit(cache=True, nogil=True)
def _entry_positions(indptr, indices, colour, by_row, width):  # pragma: no cover - compiled
    """For each stored entry (i, j), its flat position in the compressed products laid out as
    (colours, width): colour(j) * width + i (by_row False: column colours, products of m rows) or
    colour(i) * width + j (by_row True: row colours, products of n columns). One pass, no COO."""
    positions = np.empty(indices.shape[0], dtype=np.int64)
    for i in range(indptr.shape[0] - 1):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if by_row:
                positions[p] = colour[i] * width + j
            else:
                positions[p] = colour[j] * width + i
    return positions


def _int64(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a, dtype=np.int64) for a in arrays)


def _by_column(pattern: CSRPattern) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of the pattern stored by column (the rows of each column), by one
    counting sort (SciPy's csr_tocsc, O(nnz)); kept on the pattern with its colourings."""
    cache = pattern.__dict__.setdefault("_compression_plans", {})
    if "_by_column" not in cache:
        import scipy.sparse

        structure = scipy.sparse.csr_matrix((np.ones(pattern.nnz, dtype=np.int8), pattern.indices, pattern.indptr),
                                            shape=pattern.shape)
        by_column = structure.tocsc()
        # row pointers int64, indices in the pattern's own dtype: two compiled variants, no copy of indices
        cache["_by_column"] = (by_column.indptr.astype(np.int64), by_column.indices.astype(pattern.indices.dtype))
    return cache["_by_column"]


def _by_row(pattern: CSRPattern) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(pattern.indptr, dtype=np.int64), pattern.indices


def _fewer_colours(by_row: tuple, by_column: tuple, n: int) -> np.ndarray:
    """The better of DSATUR and greedy in natural order (DSATUR is optimal on stencils, e.g. 5
    colours for the 5-point Laplacian against greedy's 7, and rarely worse; greedy also when more
    than 64 colours are needed). DSATUR is skipped when greedy meets the lower bound, the
    longest row."""
    greedy = _greedy_colouring(*by_row, *by_column, n)
    clique = int(np.diff(by_row[0]).max()) if by_row[0].shape[0] > 1 else 0  # a row's columns all differ
    if n == 0 or greedy.max() + 1 <= clique:  # greedy is optimal already
        return greedy
    saturation, fits = _saturation_colouring(*by_row, *by_column, n)
    return saturation if fits and saturation.max() <= greedy.max() else greedy


def colour_columns(pattern: CSRPattern) -> np.ndarray:
    """A colour per column such that no two columns of one colour share a row (see `_fewer_colours`)."""
    return _fewer_colours(_by_row(pattern), _by_column(pattern), pattern.shape[1])


def colour_rows(pattern: CSRPattern) -> np.ndarray:
    """A colour per row such that no two rows of one colour share a column: the column colouring
    of the transpose, read off the pattern stored by column."""
    return _fewer_colours(_by_column(pattern), _by_row(pattern), pattern.shape[0])


def symmetric_pattern(pattern: CSRPattern) -> CSRPattern:
    """The union of a square pattern and its transpose (a Hessian's structure is symmetric)."""
    if pattern.shape[0] != pattern.shape[1]:
        raise InputError(f"a Hessian pattern must be square, got shape {pattern.shape}")
    transposed, _ = pattern.transpose
    if np.array_equal(transposed.indptr, pattern.indptr) and np.array_equal(transposed.indices, pattern.indices):
        return pattern
    keys = np.union1d(pattern.keys, transposed.keys)
    n = pattern.shape[0]
    rows, cols = np.divmod(keys, n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return CSRPattern(indptr, cols, pattern.shape, check=False)


def star_colouring(pattern: CSRPattern) -> np.ndarray:
    """A star colouring of the adjacency graph of a structurally symmetric square pattern."""
    indptr, indices = _int64(pattern.indptr, pattern.indices)
    rows = np.repeat(np.arange(pattern.shape[0], dtype=np.int64), np.diff(indptr))
    off = indices != rows  # the graph has no self loops
    graph_ptr = np.zeros(pattern.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[off], minlength=pattern.shape[0]), out=graph_ptr[1:])
    return _star_colouring(graph_ptr, indices[off], pattern.shape[0])


def star_recovery(pattern: CSRPattern, colours: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, colour) of the compressed Hessian-vector product B = H S holding each stored entry of
    the symmetric `pattern`: H[i, j] = B[row, colour]. Raises if `colours` is not a star colouring."""
    n_colours = int(colours.max()) + 1 if colours.size else 0
    indptr, indices, rows = _int64(pattern.indptr, pattern.indices, pattern.rows)
    source_row, source_colour = _star_sources(indptr, indices, rows, np.asarray(colours, dtype=np.int64),
                                              max(n_colours, 1))
    if (source_row < 0).any():
        e = int(np.argmax(source_row < 0))
        raise InputError(f"the colouring is not a star colouring: entry ({rows[e]}, {indices[e]}) cannot be "
                         "recovered from the compressed products")
    return source_row, source_colour


def compression_plan(pattern: CSRPattern, kind: str = "jacobian") -> tuple[np.ndarray, np.ndarray]:
    """(colours, gather): the column colours, and for each stored entry its flat position
    colour * rows + row in the compressed products laid out as (colours, rows).

    kind: "jacobian" or "distance1" (distance-1 colouring, entry (i, j) at (colour(j), i)) or
    "star" (star colouring of a symmetric pattern, each entry where it sits alone) or "reverse"
    (a colour per ROW such that rows sharing a column differ, for compressed vector-Jacobian
    products laid out as (colours, columns): entry (i, j) at colour(i) * columns + j). Kept on
    the pattern: a pattern reused for new points is coloured once."""
    if kind not in ("jacobian", "distance1", "star", "reverse"):
        raise InputError(f"unknown colouring {kind!r}; use 'star', 'distance1', 'jacobian' or 'reverse'")
    cache = pattern.__dict__.setdefault("_compression_plans", {})
    if kind == "distance1":
        kind = "jacobian"  # the same colouring and layout
    if kind not in cache:
        if kind == "reverse":
            t_indptr, t_indices = _by_column(pattern)
            indptr, indices = _by_row(pattern)
            symmetric = (pattern.shape[0] == pattern.shape[1] and np.array_equal(t_indptr, indptr)
                         and np.array_equal(t_indices, indices))
            # a structurally symmetric pattern: rows and columns have the same intersection graph
            colours = compression_plan(pattern, "jacobian")[0] if symmetric else colour_rows(pattern)
            gather = _entry_positions(indptr, indices, colours, True, pattern.shape[1])
        elif kind == "jacobian":
            colours = colour_columns(pattern)
            gather = _entry_positions(*_by_row(pattern), colours, False, pattern.shape[0])
        else:
            colours = star_colouring(pattern)
            source_row, source_colour = star_recovery(pattern, colours)
            gather = source_colour * pattern.shape[0] + source_row
        cache[kind] = (colours, gather)
    return cache[kind]
