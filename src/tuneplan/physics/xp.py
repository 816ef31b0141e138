"""The array namespace of the physics: the subset of numpy the vectorised formulas use, dispatched on
what they are given.

numpy arrays (predict's, plan's grids) go to numpy itself, unchanged. `Vec`, a small list-backed
vector (and `Mat`, a list of rows, for the residual correction's feature matrices), carries one
estimate's few configurations without importing numpy at all: `tuneplan estimate` starts ~40 ms
sooner. The formulas are written once, against this module; the two backends give the same floats
for the arithmetic (IEEE double either way); exp / log may differ from numpy's vectorised ones in
the last bit. Plain Python scalars are computed with `math` when no numpy array is involved and
numpy is not loaded, else by numpy (as before this module).

Elementwise functions broadcast as numpy does for the shapes the physics uses: a vector with a
scalar, two vectors of one length (or one of them of length 1), and a `Mat` with a vector along
its last axis (the residual's per-feature bounds).
"""

from __future__ import annotations

import builtins
import math
import operator
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

nan = math.nan
inf = math.inf

Array = Any
"""An array of the physics: a numpy array, a `Vec`, or a scalar (the type hints' name for all three)."""


def _div(x: Any, y: Any) -> Any:
    """x / y with IEEE semantics (numpy's): a zero divisor gives +-inf or nan, not ZeroDivisionError."""
    if y:
        return x / y
    if x != x or x == 0:
        return nan
    return math.copysign(inf, x) * math.copysign(1.0, y)


def _floordiv(x: Any, y: Any) -> Any:
    return x // y if y else _div(x, y)


def _pow(x: Any, y: Any) -> Any:
    try:
        r = x ** y
    except ZeroDivisionError:
        return inf
    except OverflowError:
        return inf
    return nan if isinstance(r, complex) else r


def _max(x: Any, y: Any) -> Any:
    """numpy.maximum of two scalars: NaN wins."""
    return x if (x >= y or x != x) else y


def _min(x: Any, y: Any) -> Any:
    return x if (x <= y or x != x) else y


def _invert(x: Any) -> Any:
    return (not x) if x.__class__ is bool else ~x


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return inf


def _log(x: float) -> float:
    if x > 0:
        return math.log(x) if x != inf else inf
    return -inf if x == 0 else nan


def _log2(x: float) -> float:
    if x > 0:
        return math.log2(x) if x != inf else inf
    return -inf if x == 0 else nan


def _floor(x: float) -> float:
    return float(math.floor(x)) if math.isfinite(x) else float(x)


def _ceil(x: float) -> float:
    return float(math.ceil(x)) if math.isfinite(x) else float(x)


def _isnan(x: float) -> bool:
    return x != x


def _isinf(x: float) -> bool:
    return x in (inf, -inf)


def _cast(dtype: Any) -> Callable[[Any], Any]:
    """The element conversion of a dtype given as a Python type or a numpy-style name."""
    name = getattr(dtype, "__name__", str(dtype))
    if name in ("float", "float64", "double"):
        return float
    if name in ("int", "int64", "intp", "int32"):
        return int
    if name in ("bool", "bool_"):
        return bool
    return lambda x: x  # object


def _bcast(x: list, y: list) -> tuple[list, list]:
    if len(x) == len(y):
        return x, y
    if len(x) == 1:
        return x * len(y), y
    if len(y) == 1:
        return x, y * len(x)
    raise ValueError(f"operands could not be broadcast together with shapes ({len(x)},) ({len(y)},)")


_NUMBERS = frozenset((float, int, bool))


class Vec:
    """A 1-D array of Python numbers (or objects) with numpy's elementwise operators."""

    __slots__ = ("v",)
    __array_ufunc__ = None  # numpy operands defer to Vec's reflected operators
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, values: list) -> None:
        self.v = values

    def _op(self, other: Any, op: Callable[[Any, Any], Any]) -> Vec | Mat:
        if type(other) is Vec:
            x, y = self.v, other.v
            if len(x) != len(y):
                x, y = _bcast(x, y)
            return Vec(list(map(op, x, y)))
        if type(other) is Mat:
            return Mat([Vec(r)._op(Vec(self.v), _swap(op)).v for r in other.rows])
        if getattr(other, "ndim", 0):
            raise TypeError("a Vec does not mix with numpy arrays: build both from one backend")
        return Vec([op(e, other) for e in self.v])

    def _rop(self, other: Any, op: Callable[[Any, Any], Any]) -> Vec:
        if getattr(other, "ndim", 0):
            raise TypeError("a Vec does not mix with numpy arrays: build both from one backend")
        return Vec([op(other, e) for e in self.v])

    # the commonest operations with a Python number, written out (no call per element)
    def __add__(self, o: Any) -> Any:
        return Vec([e + o for e in self.v]) if type(o) in _NUMBERS else self._op(o, operator.add)

    def __radd__(self, o: Any) -> Any:
        return Vec([o + e for e in self.v]) if type(o) in _NUMBERS else self._rop(o, operator.add)

    def __sub__(self, o: Any) -> Any:
        return Vec([e - o for e in self.v]) if type(o) in _NUMBERS else self._op(o, operator.sub)

    def __rsub__(self, o: Any) -> Any:
        return Vec([o - e for e in self.v]) if type(o) in _NUMBERS else self._rop(o, operator.sub)

    def __mul__(self, o: Any) -> Any:
        return Vec([e * o for e in self.v]) if type(o) in _NUMBERS else self._op(o, operator.mul)

    def __rmul__(self, o: Any) -> Any:
        return Vec([o * e for e in self.v]) if type(o) in _NUMBERS else self._rop(o, operator.mul)

    def __truediv__(self, o: Any) -> Any: return self._op(o, _div)
    def __rtruediv__(self, o: Any) -> Any: return self._rop(o, _div)
    def __floordiv__(self, o: Any) -> Any: return self._op(o, _floordiv)
    def __rfloordiv__(self, o: Any) -> Any: return self._rop(o, _floordiv)
    def __pow__(self, o: Any) -> Any: return self._op(o, _pow)
    def __rpow__(self, o: Any) -> Any: return self._rop(o, _pow)
    def __lt__(self, o: Any) -> Any: return self._op(o, operator.lt)
    def __le__(self, o: Any) -> Any: return self._op(o, operator.le)
    def __gt__(self, o: Any) -> Any: return self._op(o, operator.gt)
    def __ge__(self, o: Any) -> Any: return self._op(o, operator.ge)
    def __eq__(self, o: Any) -> Any: return self._op(o, operator.eq)  # type: ignore[override]
    def __ne__(self, o: Any) -> Any: return self._op(o, operator.ne)  # type: ignore[override]
    def __and__(self, o: Any) -> Any: return self._op(o, operator.and_)
    def __rand__(self, o: Any) -> Any: return self._rop(o, operator.and_)
    def __or__(self, o: Any) -> Any: return self._op(o, operator.or_)
    def __ror__(self, o: Any) -> Any: return self._rop(o, operator.or_)
    def __neg__(self) -> Vec: return Vec([-e for e in self.v])
    def __pos__(self) -> Vec: return self
    def __abs__(self) -> Vec: return Vec([operator.abs(e) for e in self.v])
    def __invert__(self) -> Vec: return Vec([_invert(e) for e in self.v])

    def __len__(self) -> int:
        return len(self.v)

    def __iter__(self):
        return iter(self.v)

    def __getitem__(self, i: Any) -> Any:
        if type(i) is Vec:  # a gather (integer vector) or a mask (boolean vector)
            if i.v and i.v[0].__class__ is bool:
                return Vec([e for e, keep in zip(self.v, i.v, strict=False) if keep])
            return Vec([self.v[j] for j in i.v])
        if isinstance(i, slice):
            return Vec(self.v[i])
        return self.v[i]

    def __bool__(self) -> bool:
        if len(self.v) != 1:
            raise ValueError("the truth value of a vector of more than one element is ambiguous")
        return bool(self.v[0])

    def __repr__(self) -> str:
        return f"Vec({self.v!r})"

    @property
    def shape(self) -> tuple[int]:
        return (len(self.v),)

    @property
    def ndim(self) -> int:
        return 1

    @property
    def size(self) -> int:
        return len(self.v)

    def astype(self, dtype: Any) -> Vec:
        cast = _cast(dtype)
        return Vec([cast(e) for e in self.v])

    def tolist(self) -> list:
        return list(self.v)

    def copy(self) -> Vec:
        return Vec(list(self.v))

    def any(self) -> bool:
        return builtins.any(self.v)

    def all(self) -> bool:
        return builtins.all(self.v)

    def min(self) -> Any:
        return builtins.min(self.v)

    def max(self) -> Any:
        return builtins.max(self.v)

    def sum(self) -> Any:
        return pairwise_sum(self.v)


def _swap(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda x, y: op(y, x)


class Mat:
    """A 2-D array as a list of rows (the residual correction's configurations x features): the
    elementwise operators with a scalar, a `Mat` of the same shape, or a `Vec` along the last axis."""

    __slots__ = ("rows",)
    __array_ufunc__ = None
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, rows: list[list]) -> None:
        self.rows = rows

    def _op(self, other: Any, op: Callable[[Any, Any], Any]) -> Mat:
        if type(other) is Mat:
            return Mat([list(map(op, r, s)) for r, s in zip(self.rows, other.rows, strict=False)])
        if type(other) is Vec:
            return Mat([Vec(r)._op(other, op).v for r in self.rows])
        return Mat([[op(e, other) for e in r] for r in self.rows])

    def _rop(self, other: Any, op: Callable[[Any, Any], Any]) -> Mat:
        if type(other) is Vec:
            return Mat([other._op(Vec(r), op).v for r in self.rows])
        return Mat([[op(other, e) for e in r] for r in self.rows])

    def __add__(self, o: Any) -> Mat: return self._op(o, operator.add)
    def __radd__(self, o: Any) -> Mat: return self._rop(o, operator.add)
    def __sub__(self, o: Any) -> Mat: return self._op(o, operator.sub)
    def __rsub__(self, o: Any) -> Mat: return self._rop(o, operator.sub)
    def __mul__(self, o: Any) -> Mat: return self._op(o, operator.mul)
    def __rmul__(self, o: Any) -> Mat: return self._rop(o, operator.mul)
    def __truediv__(self, o: Any) -> Mat: return self._op(o, _div)
    def __rtruediv__(self, o: Any) -> Mat: return self._rop(o, _div)
    def __neg__(self) -> Mat: return Mat([[-e for e in r] for r in self.rows])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: Any) -> Any:
        """`m[i]` a row (Vec); `m[:, cols]` the columns `cols` (a list of indices)."""
        if isinstance(key, tuple):
            rows, cols = key
            return Mat([[r[j] for j in cols] for r in self.rows[rows]])
        return Vec(self.rows[key])

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.rows), len(self.rows[0]) if self.rows else 0)

    @property
    def ndim(self) -> int:
        return 2

    def tolist(self) -> list[list]:
        return [list(r) for r in self.rows]


def pairwise_sum(x: Sequence[float]) -> float:
    """The sum of `x` in numpy's order (pairwise summation: eight accumulators over blocks of up to
    128, halves above), so a sum over a row gives numpy's `sum(axis=-1)` bits."""
    n = len(x)
    if n < 8:
        res = -0.0
        for e in x:
            res += e
        return res
    if n < 24:  # one or two blocks of eight (the residual correction's 15 or 16 features): written out
        r = x[:8] if n < 16 else [x[0] + x[8], x[1] + x[9], x[2] + x[10], x[3] + x[11], x[4] + x[12],
                                  x[5] + x[13], x[6] + x[14], x[7] + x[15]]
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for k in range(16 if n >= 16 else 8, n):
            res += x[k]
        return res
    if n <= 128:
        m = n - n % 8
        r = x[:8]
        for i in range(8, m, 8):
            r = list(map(operator.add, r, x[i:i + 8]))
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for e in x[m:]:
            res += e
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return pairwise_sum(x[:n2]) + pairwise_sum(x[n2:])


def numpy_or_none(*xs: Any) -> Any:
    """numpy, when it is loaded and none of `xs` is a Vec or Mat (then numpy computes, as the
    vectorised paths always did); None for the pure-Python backend."""
    for x in xs:
        t = type(x)
        if t is Vec or t is Mat:
            return None
    return sys.modules.get("numpy")


def _unary(name: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def f(x: Any) -> Any:
        t = type(x)
        if t is Vec:
            return Vec([fn(e) for e in x.v])
        if t is Mat:
            return Mat([[fn(e) for e in r] for r in x.rows])
        np = sys.modules.get("numpy")
        return getattr(np, name)(x) if np is not None else fn(x)
    f.__name__ = name
    f.__doc__ = f"numpy.{name}, elementwise."
    return f


exp = _unary("exp", _exp)
log = _unary("log", _log)
log2 = _unary("log2", _log2)
floor = _unary("floor", _floor)
ceil = _unary("ceil", _ceil)
abs = _unary("abs", operator.abs)  # noqa: A001 - numpy's name
isnan = _unary("isnan", _isnan)
isinf = _unary("isinf", _isinf)
isfinite = _unary("isfinite", math.isfinite)


def _binary(name: str, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def f(x: Any, y: Any) -> Any:
        tx, ty = type(x), type(y)
        if tx is Vec or tx is Mat:
            return x._op(y, fn)
        if ty is Vec or ty is Mat:
            return y._rop(x, fn)
        np = sys.modules.get("numpy")
        return getattr(np, name)(x, y) if np is not None else fn(x, y)
    f.__name__ = name
    f.__doc__ = f"numpy.{name}, elementwise."
    return f


maximum = _binary("maximum", _max)
minimum = _binary("minimum", _min)


def clip(x: Array, lo: Any, hi: Any) -> Array:
    np = numpy_or_none(x, lo, hi)
    return np.clip(x, lo, hi) if np is not None else minimum(maximum(x, lo), hi)


def _length(xs: Iterable[Any]) -> int | None:
    """The length the Vec arguments broadcast to (None: no Vec among them)."""
    n = None
    for x in xs:
        if type(x) is Vec and (n is None or n == 1):
            n = len(x.v)
    return n


def _elements(x: Any, n: int) -> list:
    if type(x) is Vec:
        return x.v if len(x.v) == n else x.v * n
    return [x] * n


def where(cond: Any, x: Any, y: Any) -> Array:
    """numpy.where(cond, x, y)."""
    if type(cond) is Vec and len(cond.v) == 1:  # one configuration: one of the two, when neither is longer
        pick, other = (x, y) if cond.v[0] else (y, x)
        if type(other) is not Vec or len(other.v) == 1:
            if type(pick) is not Vec:
                return Vec([pick])
            if len(pick.v) == 1:
                return pick
    np = numpy_or_none(cond, x, y)
    if np is not None:
        return np.where(cond, x, y)
    n = _length((cond, x, y))
    if n is None:
        return x if cond else y
    return Vec([a if c else b for c, a, b in zip(_elements(cond, n), _elements(x, n), _elements(y, n), strict=False)])


def select(condlist: Sequence[Any], choicelist: Sequence[Any], default: Any = 0) -> Array:
    """numpy.select: each element from the first choice whose condition holds, else `default`."""
    np = numpy_or_none(*condlist, *choicelist, default)
    if np is not None:
        return np.select(condlist, choicelist, default=default)
    out = default
    for cond, choice in zip(reversed(condlist), reversed(choicelist), strict=False):
        out = where(cond, choice, out)
    return out


def isin(x: Array, values: Sequence[Any]) -> Array:
    np = numpy_or_none(x)
    if np is not None:
        return np.isin(x, values)
    s = set(values)
    return Vec([e in s for e in x.v]) if type(x) is Vec else x in s


def any(x: Any) -> bool:  # noqa: A001 - numpy's name
    np = numpy_or_none(x)
    if np is not None:
        return bool(np.any(x))
    return builtins.any(x.v) if type(x) is Vec else bool(x)


def all(x: Any) -> bool:  # noqa: A001 - numpy's name
    np = numpy_or_none(x)
    if np is not None:
        return bool(np.all(x))
    return builtins.all(x.v) if type(x) is Vec else bool(x)


def nansum(x: Mat | Any, axis: int = -1) -> Array:
    """numpy.nansum over the last axis of a 2-D array (NaN counted 0), in numpy's summation order."""
    np = numpy_or_none(x)
    if np is not None:
        return np.nansum(x, axis=axis)
    return Vec([pairwise_sum([0.0 if e != e else e for e in r]) for r in x.rows])


def asarray(x: Any, dtype: Any = None) -> Array:
    """numpy.asarray for numpy input (or any input while numpy is loaded and no Vec is given);
    a Vec stays a Vec (cast to `dtype`), a scalar a scalar."""
    t = type(x)
    if t is Vec:
        if dtype is None:
            return x
        cast = _cast(dtype)
        return x if cast is float and (not x.v or x.v[0].__class__ is float) else Vec([cast(e) for e in x.v])
    if t is Mat:
        return x
    np = sys.modules.get("numpy")
    if np is not None:
        return np.asarray(x, dtype=dtype)
    if isinstance(x, (list, tuple)):
        return Vec([_cast(dtype)(e) for e in x] if dtype is not None else list(x))
    return _cast(dtype)(x) if dtype is not None else x


def vector(values: Sequence[Any], dtype: Any = float, backend: str = "numpy", like: Any = None) -> Array:
    """A new 1-D array of `values`: numpy's (backend "numpy") or a Vec ("python", or `like` a Vec)."""
    if backend == "python" or type(like) is Vec or type(like) is Mat:
        if dtype is float:
            return Vec([float(e) for e in values])
        cast = _cast(dtype)
        return Vec([cast(e) for e in values])
    import numpy as np

    return np.asarray(values, dtype=dtype)


def full(n: int, value: Any, like: Any = None) -> Array:
    """An array of n copies of `value`: a Vec when `like` is one, else numpy's."""
    if type(like) is Vec or type(like) is Mat:
        return Vec([value] * n)
    import numpy as np

    return np.full(n, value, dtype=float if isinstance(value, (int, float)) and not isinstance(value, bool)
                   else None)


def zeros(n: int, like: Any = None) -> Array:
    return full(n, 0.0, like)


def ones(n: int, like: Any = None) -> Array:
    return full(n, 1.0, like)


def full_like(x: Array, value: Any) -> Array:
    """An array of `value` with x's length (a float array, as numpy.full_like of a float array)."""
    if type(x) is Vec:
        return Vec([value] * len(x.v))
    np = sys.modules.get("numpy")
    if np is None:
        return value
    return np.full_like(np.asarray(x, dtype=float), value)


def zeros_like(x: Array) -> Array:
    return full_like(x, 0.0)


def ones_like(x: Array) -> Array:
    return full_like(x, 1.0)


def length(x: Array) -> int:
    """len(numpy.atleast_1d(x))."""
    if type(x) is Vec:
        return len(x.v)
    np = sys.modules.get("numpy")
    if np is None:
        return 1
    return len(np.atleast_1d(x))


def take(table: Sequence[float], codes: Array) -> Array:
    """table[codes] elementwise: the entry of a small table (per optimizer, per quantisation kind...)
    at each row's integer code."""
    if type(codes) is Vec:
        return Vec([table[int(c)] for c in codes.v])
    np = sys.modules.get("numpy")
    if np is None:
        return table[int(codes)]
    return np.asarray(table, dtype=float)[np.asarray(codes).astype(np.intp)]


def is_vec(x: Any) -> bool:
    """Whether `x` is the pure-Python backend's (a Vec or Mat)."""
    return type(x) is Vec or type(x) is Mat


def first(x: Any) -> Any:
    """x[0] of a 1-D array, a scalar itself (numpy.asarray(x)[0] where x is at least 1-D)."""
    t = type(x)
    if t is Vec:
        return x.v[0]
    np = sys.modules.get("numpy")
    return np.asarray(x).reshape(-1)[0] if np is not None else x


def concatenate(xs: Sequence[Array]) -> Array:
    """numpy.concatenate of 1-D arrays."""
    if builtins.any(type(x) is Vec for x in xs):
        return Vec([e for x in xs for e in (x.v if type(x) is Vec else list(x))])
    import numpy as np

    return np.concatenate(xs)


def arange(n: int, like: Any = None) -> Array:
    """0, 1, ..., n-1 (integers): a Vec when `like` is one, else numpy's."""
    if type(like) is Vec:
        return Vec(list(range(n)))
    import numpy as np

    return np.arange(n)


def tile(x: Array, reps: int) -> Array:
    """A 1-D array repeated `reps` times end to end (numpy.tile; a numpy vector is gathered at the
    repeated row numbers, the same values with less overhead)."""
    if type(x) is Vec:
        return Vec(x.v * reps)
    import numpy as np

    return x[np.tile(np.arange(len(x)), reps)] if x.ndim == 1 else np.tile(x, reps)


def column_stack(columns: Sequence[Array]) -> Array:
    """numpy.column_stack of 1-D arrays: rows x columns (a Mat for Vec columns)."""
    if builtins.any(type(c) is Vec for c in columns):
        n = builtins.max(len(c) for c in columns if type(c) is Vec)
        return Mat([list(r) for r in zip(*(_elements(c, n) for c in columns), strict=False)])
    import numpy as np

    return np.column_stack(columns)
