"""More of ATen's elementwise functions, the reductions that also give
indices, and two rearrangements: each a few IR ops with torch's gradient
(the table and the builder: _ir.py)."""

import math

from ._aten_round import _abs_nograd, _exact_f64, _frozen
from ._aten_shape import _gather
from ._ir import Unsupported, aten, out_dtype, out_shape

_LOGS = '`torch.log2`, `log10`, `exp2`, `reciprocal`, `logit`, `nan_to_num`'
_SHRINK = '`nn.Hardshrink`, `nn.Softshrink`, `nn.Threshold`, `nn.GLU`'
_INDEXED = '`torch.max(x, dim)`, `min(x, dim)`, `argmax`, `argmin`'
_INDEXED_LIMITS = "a NaN is not preferred as torch's is"
_SHUFFLE = '`nn.PixelShuffle`, `nn.PixelUnshuffle`, `torch.flip`'
_TRIG = '`torch.sin`, `cos`, `atan2`'
_PRODUCTS = '`torch.prod` (of all elements or along a dim), `torch.cumprod`'
_SORTING = '`torch.sort`, `argsort`, `msort`, `topk`'
_SORTING_LIMITS = ("numbers (integers up to 2^53); equal elements in their order, as "
                   "`sort(stable=True)` (torch's default sort and topk order them their own "
                   "way, so a tie's gradient may go to another of the equal elements)")


def _dims(b, x, dims):
    shape = b.shape(x)
    return list(range(len(shape))) if dims is None or dims == [] else \
        sorted(d % len(shape) for d in (dims if isinstance(dims, (list, tuple)) else [dims]))


# ---------------------------------------------------------------- logs and friends


@aten("log2.default", torch=_LOGS)
def _log2(b, node, x):
    return b.binary("div", b.unary("log", x), math.log(2.0))


@aten("log10.default", torch=_LOGS)
def _log10(b, node, x):
    return b.binary("div", b.unary("log", x), math.log(10.0))


@aten("exp2.default", torch=_LOGS)
def _exp2(b, node, x):
    return b.unary("exp", b.binary("mul", x, math.log(2.0)))


@aten("reciprocal.default", "reciprocal_.default", torch=_LOGS)
def _reciprocal(b, node, x):
    return b.op("div", [b.full(1.0, b.dtype(x), b.shape(x)), x])


@aten("logit.default", torch=_LOGS)
def _logit(b, node, x, eps=None):
    """log(z / (1 - z)), z = x clamped to [eps, 1 - eps] when eps is given
    (no gradient where the clamp holds, as torch)."""
    z = x
    if eps is not None:
        lo = b.binary("lt", x, float(eps))
        hi = b.binary("gt", x, 1.0 - float(eps))
        z = b.select(lo, b.full(float(eps), b.dtype(x), b.shape(x)),
                     b.select(hi, b.full(1.0 - float(eps), b.dtype(x), b.shape(x)), x))
    one_minus = b.op("sub", [b.full(1.0, b.dtype(x), b.shape(x)), z])
    return b.unary("log", b.op("div", [z, one_minus]))


@aten("nan_to_num.default", torch=_LOGS)
def _nan_to_num(b, node, x, nan=None, posinf=None, neginf=None):
    big = 3.4028234663852886e38  # float32's largest
    dt, shape = b.dtype(x), b.shape(x)
    y = b.select(b.op("ne", [x, x]), b.full(0.0 if nan is None else nan, dt, shape), x)
    y = b.select(b.binary("eq", x, math.inf), b.full(big if posinf is None else posinf, dt, shape),
                 y)
    return b.select(b.binary("eq", x, -math.inf),
                    b.full(-big if neginf is None else neginf, dt, shape), y)


# ---------------------------------------------------------------- trigonometry


@aten("sin.default", "sin_.default", torch=_TRIG)
def _sin(b, node, x):
    return b.unary("sin", x)


@aten("cos.default", "cos_.default", torch=_TRIG)
def _cos(b, node, x):
    return b.unary("cos", x)


@aten("atan2.default", "atan2_.default", torch=_TRIG)
def _atan2(b, node, y, x):
    return b.binary("atan2", y, x, out_dtype(node))


# ---------------------------------------------------------------- products


def _product(b, x, axis):
    """x's product along axis, kept as a dim of 1: the halves multiplied
    pairwise, level after level (a 1 appended to an odd length). Only
    multiplications: each element's gradient is the product of the others,
    exact with zeros and negatives (torch's rule), no division by x."""
    shape = b.shape(x)
    if shape[axis] == 0:
        return b.full(1.0, b.dtype(x), shape[:axis] + [1] + shape[axis + 1:])
    while b.shape(x)[axis] > 1:
        n = b.shape(x)[axis]
        if n % 2:
            one = b.shape(x)
            one[axis] = 1
            x = b.op("concat", [x, b.full(1.0, b.dtype(x), one)], axis=axis)
            n += 1
        x = b.op("mul", [b.op("slice", [x], axis=axis, start=0, end=n // 2),
                         b.op("slice", [x], axis=axis, start=n // 2, end=n)])
    return x


@aten("prod.default", torch=_PRODUCTS)
def _prod(b, node, x, dtype=None):
    x = b.convert(x, out_dtype(node))
    return b.reshape(_product(b, b.reshape(x, [math.prod(b.shape(x))]), 0), [])


@aten("prod.dim_int", torch=_PRODUCTS)
def _prod_dim(b, node, x, dim, keepdim=False, dtype=None):
    x = b.convert(x, out_dtype(node))
    if not b.shape(x):
        return x
    dim %= len(b.shape(x))
    y = _product(b, x, dim)
    return y if keepdim else b.reshape(y, out_shape(node))


def _shifted(b, x, dim, k, fill):
    """x moved k places along dim, the first k filled with `fill`."""
    shape = b.shape(x)
    pad = list(shape)
    pad[dim] = k
    head = b.full(fill, b.dtype(x), pad)
    body = b.op("slice", [x], axis=dim, start=0, end=shape[dim] - k)
    return b.op("concat", [head, body], axis=dim)


def _scan(b, x, dim, fill, combine):
    """A running combination along dim by doubling spans (Hillis-Steele):
    log2(n) steps, each combine(values, the values 2^s places before,
    `fill` before the start), so that each element combines every element
    up to it."""
    n, k = b.shape(x)[dim], 1
    while k < n:
        x = combine(x, _shifted(b, x, dim, k, fill))
        k *= 2
    return x


@aten("cumprod.default", torch=_PRODUCTS)
def _cumprod(b, node, x, dim, dtype=None):
    """Running products (_scan). Only multiplications, so the gradient is
    exact with zeros (torch's)."""
    x = b.convert(x, out_dtype(node))
    shape = b.shape(x)
    if not shape:
        return x
    return _scan(b, x, dim % len(shape), 1.0, lambda u, v: b.op("mul", [u, v]))


# ---------------------------------------------------------------- sorting


def _sort_keys(b, x):
    """x as the sort reads it: integers as their float64 values, exact up to
    2^53 in magnitude (a larger int64 fails the step, naming it)."""
    dtype = b.dtype(x)
    if dtype == "b8":
        raise Unsupported("sorting a bool tensor")
    if dtype in ("f32", "f64"):
        return x
    return _exact_f64(b, x, "sorting")


def _positions(b, x, dim, descending):
    """The positions along dim that sort x stably (NaN above every number)."""
    return b.op("argsort", [_sort_keys(b, x)], axis=dim, descending=int(bool(descending)))


@aten("sort.default", "sort.stable", torch=_SORTING, limits=_SORTING_LIMITS)
def _sort(b, node, x, dim=-1, descending=False, stable=None):
    """The values through a gather at the positions: its gradient a
    scatter-add, each value's gradient to the element it came from
    (integers gathered as their float64 keys, then converted back)."""
    shape = b.shape(x)
    if not shape:
        return x, b.full(0, "i64", [])
    dim %= len(shape)
    keys = _sort_keys(b, x)
    positions = b.op("argsort", [keys], axis=dim, descending=int(bool(descending)))
    return b.convert(_gather(b, node, keys, dim, positions), b.dtype(x)), positions


@aten("argsort.default", "argsort.stable", torch=_SORTING, limits=_SORTING_LIMITS)
def _argsort(b, node, x, dim=-1, descending=False, stable=None):
    return _sort(b, node, x, dim, descending)[1]


@aten("topk.default", torch=_SORTING, limits=_SORTING_LIMITS)
def _topk(b, node, x, k, dim=-1, largest=True, sorted=True):
    """The first k positions of the sort (sorted=False gives them sorted
    too: torch leaves that order open)."""
    shape = b.shape(x)
    if not shape:
        return x, b.full(0, "i64", [])
    dim %= len(shape)
    positions = b.op("slice", [_positions(b, x, dim, largest)], axis=dim, start=0, end=k)
    return _gather(b, node, x, dim, positions), positions


_SELECTING = '`torch.median` (of all elements or along a dim), `torch.kthvalue`'
_SELECTING_LIMITS = ("floating-point tensors; a NaN is the median of a row that has one, as "
                     "torch's; along a dim, of equal elements the first in their order (torch "
                     "picks one its own way, so a tie's gradient may go to another of them); "
                     "no gradient reaches an infinite or NaN median of all elements")


def _drop(b, v, dim, keepdim):
    shape = b.shape(v)
    return v if keepdim else b.reshape(v, shape[:dim] + shape[dim + 1:])


def _at_rank(b, node, x, dim, rank, keepdim):
    """The element of rank `rank` (i64, x's shape with dim of size 1) along
    dim and its position there: a gather at that place of the sort (its
    gradient to the element it came from)."""
    # positions gathered as f64 (every one exact), then i64 again
    exact = b.convert(_positions(b, x, dim, False), "f64")
    position = b.convert(_gather(b, node, exact, dim, rank), "i64")
    return (_drop(b, _gather(b, node, x, dim, position), dim, keepdim),
            _drop(b, position, dim, keepdim))


def _median_rank(b, x, dim):
    """The lower median's rank along dim, or the first NaN's where the row
    has one (NaNs sort last, in their order)."""
    n = b.shape(x)[dim]
    nans = b.sum(b.convert(b.op("ne", [x, x]), "i64"), [dim], keepdim=True)
    return b.select(b.binary("gt", nans, 0), b.binary("sub", n, nans, dtype="i64"),
                    b.full((n - 1) // 2, "i64", b.shape(nans)))


@aten("median.dim", torch=_SELECTING, limits=_SELECTING_LIMITS)
def _median_dim(b, node, x, dim=-1, keepdim=False):
    shape = b.shape(x)
    if not shape:
        return x, b.full(0, "i64", [])
    dim %= len(shape)
    if shape[dim] == 0:
        raise Unsupported(f"median along dim {dim} of {shape}, which is empty")
    return _at_rank(b, node, x, dim, _median_rank(b, x, dim), keepdim)


@aten("median.default", torch=_SELECTING, limits=_SELECTING_LIMITS)
def _median(b, node, x):
    """The lower median of all elements, its gradient split evenly among
    the elements equal to it, as torch's: the value itself plus a sum of
    zeros, x - x at those elements, that carries the gradient (none where
    the median is infinite or NaN, whose x - x is NaN)."""
    n = math.prod(b.shape(x))
    if n == 0:
        raise Unsupported(f"median of {b.shape(x)}, which is empty")
    flat = b.reshape(x, [n])
    value = _frozen(b, _at_rank(b, node, flat, 0, _median_rank(b, flat, 0), False)[0])
    nan = b.broadcast(b.op("ne", [value, value]), [n])
    chosen = b.select(nan, b.op("ne", [flat, flat]), b.op("eq", [flat, b.broadcast(value, [n])]))
    finite = b.binary("lt", _abs_nograd(b, flat), math.inf)
    zeros = b.select(finite, b.select(chosen, b.op("sub", [flat, _frozen(b, flat)]), 0.0), 0.0)
    count = b.sum(b.convert(chosen, b.dtype(x)), [0])
    return b.op("add", [value, b.op("div", [b.sum(zeros, [0]), count])])


@aten("kthvalue.default", torch=_SELECTING, limits=_SELECTING_LIMITS)
def _kthvalue(b, node, x, k, dim=-1, keepdim=False):
    shape = b.shape(x)
    n = shape[dim % len(shape)] if shape else 1
    if not 1 <= k <= n:
        raise Unsupported(f"kthvalue with k={k} of {n} elements along dim {dim} of {shape}")
    if not shape:
        return x, b.full(0, "i64", [])
    dim %= len(shape)
    rank = b.full(k - 1, "i64", shape[:dim] + [1] + shape[dim + 1:])
    return _at_rank(b, node, x, dim, rank, keepdim)


# ---------------------------------------------------------------- shrinking and gating


@aten("hardshrink.default", torch=_SHRINK)
def _hardshrink(b, node, x, lambd=0.5):
    keep = b.binary("gt", _abs_nograd(b, x), float(lambd))
    return b.select(keep, x, b.full(0.0, b.dtype(x), b.shape(x)))


@aten("softshrink.default", torch=_SHRINK)
def _softshrink(b, node, x, lambd=0.5):
    zero = b.full(0.0, b.dtype(x), b.shape(x))
    return b.select(b.binary("gt", x, float(lambd)), b.binary("sub", x, float(lambd)),
                    b.select(b.binary("lt", x, -float(lambd)), b.binary("add", x, float(lambd)),
                             zero))


@aten("threshold.default", "threshold_.default", torch=_SHRINK)
def _threshold(b, node, x, threshold, value):
    return b.select(b.binary("gt", x, float(threshold)), x,
                    b.full(float(value), b.dtype(x), b.shape(x)))


@aten("glu.default", torch=_SHRINK)
def _glu(b, node, x, dim=-1):
    shape = b.shape(x)
    dim %= len(shape)
    half = shape[dim] // 2
    a = b.op("slice", [x], axis=dim, start=0, end=half)
    gate = b.op("slice", [x], axis=dim, start=half, end=shape[dim])
    return b.op("mul", [a, b.unary("sigmoid", gate)])


# ---------------------------------------------------------------- reductions with indices


def _first_extreme(b, x, dim, keepdim, largest):
    """(values, indices) of torch.max/min along dim: the first extreme
    element's index; its value read there, so that the gradient goes to it
    alone (amax's is split among ties)."""
    shape = b.shape(x)
    dim %= len(shape)
    n = shape[dim]
    y = x if largest else b.unary("neg", x)
    top = b.broadcast(b.max(b.unary("stop_gradient", y), [dim], keepdim=True), shape)
    at_top = b.op("eq", [y, top])
    # the first: the largest reversed position among the extremes
    back = b.binary("sub", b.full(float(n - 1), b.dtype(x), shape),
                    b.convert(b.iota("i64", shape, dim), b.dtype(x)))
    best = b.max(b.select(at_top, back, b.full(-1.0, b.dtype(x), shape)), [dim], keepdim=True)
    index = b.convert(b.binary("sub", b.full(float(n - 1), b.dtype(x), b.shape(best)), best),
                      "i64")
    values = _gather(b, None, x, dim, index)
    if not keepdim:
        kept = [d for i, d in enumerate(shape) if i != dim]
        values, index = b.reshape(values, kept), b.reshape(index, kept)
    return values, index


@aten("max.dim", torch=_INDEXED, limits=_INDEXED_LIMITS)
def _max_dim(b, node, x, dim, keepdim=False):
    return _first_extreme(b, x, dim, keepdim, True)


@aten("min.dim", torch=_INDEXED, limits=_INDEXED_LIMITS)
def _min_dim(b, node, x, dim, keepdim=False):
    return _first_extreme(b, x, dim, keepdim, False)


@aten("argmax.default", "argmin.default", torch=_INDEXED, limits=_INDEXED_LIMITS)
def _argmax(b, node, x, dim=None, keepdim=False):
    if dim is None:
        if keepdim:
            raise Unsupported("argmax over every dim with keepdim")
        x, dim = b.reshape(x, [math.prod(b.shape(x))]), 0
    largest = "argmax" in str(node.target)
    return _first_extreme(b, b.unary("stop_gradient", x), dim, keepdim, largest)[1]


@aten("logsumexp.default", torch="`torch.logsumexp`")
def _logsumexp(b, node, x, dims, keepdim=False):
    """log(sum(exp(x - m))) + m, m the maximum (0 where it is infinite), as
    torch; the gradient is the softmax."""
    axes = _dims(b, x, dims)
    m = b.max(b.unary("stop_gradient", x), axes, keepdim=True)
    m = b.select(b.binary("eq", _abs_nograd(b, m), math.inf), b.full(0.0, b.dtype(x), b.shape(m)),
                 m)
    shifted = b.op("sub", [x, b.broadcast(m, b.shape(x))])
    total = b.unary("log", b.sum(b.unary("exp", shifted), axes, keepdim=True))
    out = b.op("add", [total, m])
    if not keepdim:
        out = b.reshape(out, [d for i, d in enumerate(b.shape(x)) if i not in axes])
    return out


@aten("var_mean.correction", torch="`torch.var_mean`")
def _var_mean(b, node, x, dims=None, correction=None, keepdim=False):
    axes = _dims(b, x, dims)
    c = 1 if correction is None else correction
    mean = b.mean(x, axes, keepdim=True)
    var = b.composite("var", x, axes=axes, correction=float(c), keepdim=int(keepdim))
    if not keepdim:
        mean = b.reshape(mean, [d for i, d in enumerate(b.shape(x)) if i not in axes])
    return var, mean


# ---------------------------------------------------------------- rearrangements


@aten("flip.default", torch=_SHUFFLE)
def _flip(b, node, x, dims):
    for d in _dims(b, x, dims):
        x = b.take(x, d, list(range(b.shape(x)[d] - 1, -1, -1)))
    return x


@aten("pixel_shuffle.default", torch=_SHUFFLE)
def _pixel_shuffle(b, node, x, r):
    *lead, c, h, w = b.shape(x)
    y = b.reshape(x, lead + [c // (r * r), r, r, h, w])
    k = len(lead)
    y = b.transpose(y, list(range(k)) + [k, k + 3, k + 1, k + 4, k + 2])
    return b.reshape(y, lead + [c // (r * r), h * r, w * r])


@aten("pixel_unshuffle.default", torch=_SHUFFLE)
def _pixel_unshuffle(b, node, x, r):
    *lead, c, h, w = b.shape(x)
    y = b.reshape(x, lead + [c, h // r, r, w // r, r])
    k = len(lead)
    y = b.transpose(y, list(range(k)) + [k, k + 2, k + 4, k + 1, k + 3])
    return b.reshape(y, lead + [c * r * r, h // r, w // r])
