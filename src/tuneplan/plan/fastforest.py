"""A faster evaluation of the calibration's boosted trees for the planner's large grids.

`tuneplan.estimators.trees.Forest.predict` walks every tree for every row with 2-D fancy indexing (an
n x trees gather per depth step): about 0.1 s per 1,000 rows for the shipped calibration (150
trees), so 100,000 candidates would spend over ten seconds in the residual correction alone.
`FastForest` evaluates only the distinct rows (as the trees see them) and compiles each tree to a
lookup table indexed by the rows' threshold ranks. Its predictions equal `Forest.predict` to
rounding (leaf values summed in another order; relative difference ~1e-15).

`accelerated(estimator)` returns a copy of a `TuneplanEstimator` whose residual forests use it, and the
estimator itself when its residual model is not the trees layout this module knows (so a change there
costs speed, never correctness). Candidate for moving into `learn/trees.py`.
"""

from __future__ import annotations

import copy
import hashlib
import zlib
from functools import lru_cache
from typing import Any

import numpy as np

_FOREST_ARRAYS = ("value", "feature", "threshold", "missing_left", "left", "right", "leaf", "roots", "baseline")


class FastForest:
    """Drop-in for `trees.Forest` (same `predict(X)`), built from its flat node arrays.

    A row's leaf in a tree depends only on where each feature falls among the thresholds the forest
    splits that feature on. So `predict` (1) ranks each feature column among its thresholds (one
    `searchsorted` per feature), (2) evaluates only the distinct rank-rows (planner grids repeat them
    a lot), and (3) per tree, turns a row's ranks into an index into a table of that tree's leaf
    values (built once per forest, when a grid is large enough to pay for it), or walks the tree node
    by node with whole-column comparisons (no 2-D gathers)."""

    TABLE_LIMIT = 1 << 18
    """Largest lookup table per tree (entries); bigger trees are walked node by node."""
    TABLE_MIN_ROWS = 5_000
    """Distinct rows from which building the lookup tables beats walking the trees."""
    SMALL = 64
    """Up to this many rows, the original forest's own predict is quicker (fewer numpy calls)."""

    def __init__(self, forest: Any) -> None:
        self._original = forest if callable(getattr(forest, "predict", None)) else None
        self.baseline = float(forest.baseline)
        self.value = np.asarray(forest.value, dtype=float)
        self.feature = np.asarray(forest.feature, dtype=np.int64)
        self.threshold = np.asarray(forest.threshold, dtype=float)
        self.missing_left = np.asarray(forest.missing_left, dtype=bool)
        self.left = np.asarray(forest.left, dtype=np.int64)
        self.right = np.asarray(forest.right, dtype=np.int64)
        self.leaf = np.asarray(forest.leaf, dtype=bool)
        self.roots = np.asarray(forest.roots, dtype=np.int64)
        bounds = list(self.roots) + [len(self.value)]
        self.trees: list[tuple[int, list[int]]] = []
        for t in range(len(self.roots)):
            lo, hi = int(bounds[t]), int(bounds[t + 1])
            internal = [i for i in range(lo, hi) if not self.leaf[i]]
            # children must come after their parent for one ascending pass to reach the leaves
            if any(self.left[i] <= i or self.right[i] <= i or not lo <= self.left[i] < hi
                   or not lo <= self.right[i] < hi for i in internal):
                raise ValueError("tree nodes are not in parent-before-child order")
            self.trees.append((lo, internal))
        internal_all = ~self.leaf
        self.features = sorted({int(f) for f in self.feature[internal_all]})
        # every threshold of a feature, sorted: a value's rank = how many are below it
        self.thresholds = {j: np.unique(self.threshold[internal_all & (self.feature == j)]) for j in self.features}
        self._tables: list | None = None
        self.key: str | None = None  # the forest's content hash (`fast_forest`): its shipped tables' key

    @classmethod
    def supports(cls, forest: Any) -> bool:
        return all(hasattr(forest, k) for k in _FOREST_ARRAYS)

    # -- lookup tables ---------------------------------------------------------------------------
    def _compile(self, root: int, internal: list[int]) -> tuple[list[tuple[int, np.ndarray]], np.ndarray] | None:
        if not internal:
            return [], np.array([self.value[root]])
        feats = sorted({int(self.feature[i]) for i in internal})
        parts = []
        reps = []
        size = 1
        for j in feats:
            local = np.unique(self.threshold[[i for i in internal if self.feature[i] == j]])
            # global rank m (thr[m-1] < x <= thr[m]) -> local rank (how many local thresholds are < x)
            lmap = np.concatenate([[0], np.searchsorted(local, self.thresholds[j], side="right")]).astype(np.int64)
            parts.append((j, lmap * size))
            reps.append((j, np.concatenate([local, [np.inf]]), size))
            size *= len(local) + 1
            if size > self.TABLE_LIMIT:
                return None
        return parts, self._grid(root, reps)

    def _grid(self, root: int, reps: list[tuple[int, np.ndarray, int]]) -> np.ndarray:
        """The tree's leaf value for every combination of its features' local ranks, flat (index = the
        ranks' mixed-radix code, the first feature fastest): the tree descended once, each node
        splitting its box of ranks along its feature (rank r goes left when its representative value,
        `rep[r]`, is <= the threshold), each leaf's value set on its box."""
        shape = tuple(len(rep) for _, rep, _ in reversed(reps))  # C order: the last axis varies fastest
        axis = {j: len(reps) - 1 - k for k, (j, _, _) in enumerate(reps)}
        rep_of = {j: rep for j, rep, _ in reps}
        grid = np.full(shape, np.nan)
        stack = [(root, tuple((0, n) for n in shape))]
        while stack:
            node, box = stack.pop()
            if self.leaf[node]:
                grid[tuple(slice(lo, hi) for lo, hi in box)] = self.value[node]
                continue
            f = int(self.feature[node])
            ax = axis[f]
            cut = int(np.searchsorted(rep_of[f], self.threshold[node], side="right"))
            lo, hi = box[ax]
            if lo < min(hi, cut):
                stack.append((int(self.left[node]), box[:ax] + ((lo, min(hi, cut)),) + box[ax + 1:]))
            if max(lo, cut) < hi:
                stack.append((int(self.right[node]), box[:ax] + ((max(lo, cut), hi),) + box[ax + 1:]))
        return grid.ravel()

    def tables(self) -> list:
        """Each tree's lookup table (None: walked node by node): the shipped ones when this forest is the
        default calibration's (`shipped_tables`), else compiled here."""
        if self._tables is None:
            packed = shipped_tables().get(self.key) if self.key else None
            if packed is not None and len(packed) == len(self.trees):
                self._tables = [_unpack(t) for t in packed]
            else:
                self._tables = [self._compile(root, internal) for root, internal in self.trees]
        return self._tables

    # -- prediction ------------------------------------------------------------------------------
    def _walk(self, cols: dict[int, np.ndarray] | list[np.ndarray], nans: dict[int, np.ndarray], root: int, internal: list[int],
              n: int) -> np.ndarray:
        """The leaf each row reaches, node by node."""
        cur = np.full(n, root, dtype=np.int64)
        for i in internal:
            f = int(self.feature[i])
            go_left = cols[f] <= self.threshold[i]
            if f in nans:
                go_left = np.where(nans[f], self.missing_left[i], go_left)
            nxt = np.where(go_left, self.left[i], self.right[i])
            cur = nxt if i == root else np.where(cur == i, nxt, cur)
        return cur

    def _ranks(self, cols: list[np.ndarray]) -> dict[int, np.ndarray]:
        """Each feature's rank among its thresholds; NaN gets a rank of its own (after the last)."""
        out = {}
        for j in self.features:
            r = np.searchsorted(self.thresholds[j], cols[j], side="left")
            nan = np.isnan(cols[j])
            if nan.any():
                r = np.where(nan, len(self.thresholds[j]) + 1, r)
            out[j] = r
        return out

    def _distinct(self, ranks: dict[int, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(first row of each distinct rank-row, inverse map) via a mixed-radix key, re-densified
        whenever it would overflow."""
        key = np.zeros(n, dtype=np.int64)
        span = 1
        for j in self.features:
            radix = len(self.thresholds[j]) + 2
            if span * radix >= 1 << 62:
                _, key = np.unique(key, return_inverse=True)
                key = key.reshape(-1).astype(np.int64)
                span = int(key.max()) + 1
            key = key * radix + ranks[j]
            span *= radix
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return first, np.asarray(inverse).reshape(-1)

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        n = X.shape[0]
        if len(self.roots) == 0 or n == 0:
            return np.full(n, self.baseline)
        if n <= self.SMALL and self._original is not None:
            return np.asarray(self._original.predict(X), dtype=float)
        cols = [np.ascontiguousarray(X[:, j]) for j in range(X.shape[1])]
        ranks = self._ranks(cols)
        first, inverse = self._distinct(ranks, n)
        m = len(first)
        ucols = [c[first] for c in cols]
        nans = {j: np.isnan(ucols[j]) for j in self.features}
        nans = {j: v for j, v in nans.items() if v.any()}
        use_tables = not nans and (self._tables is not None or m >= self.TABLE_MIN_ROWS)
        tables = self.tables() if use_tables else [None] * len(self.trees)
        uranks = {j: r[first] for j, r in ranks.items()} if use_tables else {}
        total = np.zeros(m)
        for (root, internal), table in zip(self.trees, tables, strict=True):
            if table is None:
                total += self.value[self._walk(ucols, nans, root, internal, m)]
                continue
            parts, values = table
            if not parts:
                total += values[0]
                continue
            code = parts[0][1][uranks[parts[0][0]]]
            for j, contrib in parts[1:]:
                code += contrib[uranks[j]]
            total += values[code]
        return (self.baseline + total)[inverse]


_CACHE: dict[str, FastForest] = {}
_CACHE_SIZE = 8


def forest_key(forest: Any) -> str:
    """A forest's content hash (its node arrays and baseline)."""
    h = hashlib.sha1()
    for k in _FOREST_ARRAYS:
        h.update(np.ascontiguousarray(np.asarray(getattr(forest, k), dtype=float)).tobytes())
    return h.hexdigest()


def fast_forest(forest: Any) -> FastForest:
    """A FastForest for a forest, cached by its content (the lookup tables are built once)."""
    key = forest_key(forest)
    ff = _CACHE.get(key)
    if ff is None:
        ff = FastForest(forest)
        ff.key = key
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = ff
    return ff


def accelerated(estimator: Any) -> Any:
    """A copy of `estimator` whose residual forests are FastForests (or `estimator` unchanged)."""
    corr = getattr(estimator, "residual", None)
    if corr is None:
        return estimator
    new_corr = copy.copy(corr)
    changed = False
    for attr in ("thr", "mem"):
        res = getattr(corr, attr, None)
        new_res = None
        for which in ("forest", "far_forest"):  # the near trees and, where they differ, the far ones
            forest = getattr(res, which, None)
            if forest is None or not FastForest.supports(forest):
                continue
            try:
                fast = fast_forest(forest)
            except ValueError:
                continue
            new_res = new_res or copy.copy(res)
            setattr(new_res, which, fast)
        if new_res is not None:
            setattr(new_corr, attr, new_res)
            changed = True
    if not changed:
        return estimator
    out = copy.copy(estimator)
    out.residual = new_corr
    return out


# -- the default calibration's lookup tables, shipped -----------------------------------------------
TABLES_NAME = "default.tables"
"""The shipped default calibration's forests' lookup tables (`data/calibration/default.tables`): compiling
them took ~0.35 s of every `predict` and `plan` run. Keyed by each forest's content hash, so a table
file of another calibration is never used (its forests compile as before)."""
TABLES_FORMAT = "tuneplan-forest-tables"
TABLES_MAGIC = b"tuneplan-forest-tables 1\n"
"""The file's first bytes; then its document in the marshal format (`TABLES_MARSHAL_VERSION`),
zlib-compressed (9.8 MB -> 0.22 MB; ~0.03 s to inflate)."""
TABLES_MARSHAL_VERSION = 4
"""The marshal format version the tables are written in (Python 3.4 and later read it)."""


def _pack(table: Any) -> Any:
    if table is None:
        return None
    parts, values = table
    return ([(int(j), np.ascontiguousarray(c, dtype=np.int64).tobytes()) for j, c in parts],
            np.ascontiguousarray(values, dtype=np.float64).tobytes())


def _unpack(packed: Any) -> Any:
    if packed is None:
        return None
    parts, values = packed
    return [(j, np.frombuffer(c, dtype=np.int64)) for j, c in parts], np.frombuffer(values, dtype=np.float64)


def estimator_forests(estimator: Any) -> list[FastForest]:
    """The FastForests `accelerated(estimator)` evaluates (near and far trees of both corrections)."""
    corr = getattr(accelerated(estimator), "residual", None)
    out = []
    for attr in ("thr", "mem"):
        for which in ("forest", "far_forest"):
            f = getattr(getattr(corr, attr, None), which, None)
            if isinstance(f, FastForest) and f.key and all(f is not g for g in out):
                out.append(f)
    return out


def render_tables(estimator: Any) -> bytes:
    """The tables file of an estimator's forests (each compiled here, whatever is shipped)."""
    import marshal

    tables = {}
    for f in estimator_forests(estimator):
        tables[f.key] = [_pack(f._compile(root, internal)) for root, internal in f.trees]
    doc = marshal.dumps({"format": TABLES_FORMAT, "version": 1, "tables": tables}, TABLES_MARSHAL_VERSION)
    return TABLES_MAGIC + zlib.compress(doc, 9)


def read_tables(blob: bytes) -> dict:
    """{forest key: packed tables} of a tables file ({} when it is not one)."""
    import marshal

    if not blob.startswith(TABLES_MAGIC):
        return {}
    try:
        doc = marshal.loads(zlib.decompress(blob[len(TABLES_MAGIC):]))
    except (EOFError, ValueError, TypeError, zlib.error):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != TABLES_FORMAT or doc.get("version") != 1:
        return {}
    tables = doc.get("tables")
    return tables if isinstance(tables, dict) else {}


def shipped_tables_path() -> str:
    import os

    from tuneplan.data import DIR

    return os.path.join(DIR, "calibration", TABLES_NAME)


@lru_cache(maxsize=1)
def shipped_tables() -> dict:
    """The shipped tables by forest key ({} when there are none)."""
    try:
        with open(shipped_tables_path(), "rb") as f:
            return read_tables(f.read())
    except OSError:
        return {}


def refresh_shipped_tables(path: str, estimator: Any) -> None:
    """After a calibration is saved over the shipped `default.json` (docs/learning.md's command), its
    forests' tables are written beside it (`scripts/build_data_twins.py` does it after any other edit)."""
    import os

    folder = os.path.dirname(shipped_tables_path())
    try:
        if not os.path.samefile(path, os.path.join(folder, "default.json")):
            return
        with open(shipped_tables_path(), "wb") as f:
            f.write(render_tables(estimator))
    except OSError:
        return
    shipped_tables.cache_clear()
