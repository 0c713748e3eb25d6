"""Small combinations of ATen's: fused multiply-adds and interpolation
(addcmul, addcdiv, lerp), logaddexp, sinc, nansum, and rearrangements made
of others (rot90, take, block_diag, the triangle's indices). Each computes
as torch's CPU kernel does, in its order."""

import math

import torch

from ._aten_math import _flip, _scan
from ._aten_round import _abs_nograd
from ._aten_shape import _gather, _index
from ._ir import Unsupported, aten, is_value, out_dtype

_BLEND = '`torch.addcmul`, `addcdiv`, `lerp`, `logaddexp`, `sinc`, `nansum`'
_ARRANGE = '`torch.rot90`, `take`, `block_diag`, `tril_indices`, `triu_indices`'


def _full_like(b, value, x):
    return b.full(float(value), b.dtype(x), b.shape(x))


@aten("addcmul.default", "addcmul_.default", torch=_BLEND)
def _addcmul(b, node, x, t1, t2, value=1):
    """x + value t1 t2, the product taken (value t1) t2 as torch's kernel."""
    dtype = out_dtype(node)
    prod = b.binary("mul", b.binary("mul", t1, float(value), dtype), t2, dtype)
    return b.binary("add", x, prod, dtype)


@aten("addcdiv.default", "addcdiv_.default", torch=_BLEND)
def _addcdiv(b, node, x, t1, t2, value=1):
    dtype = out_dtype(node)
    quot = b.binary("div", b.binary("mul", t1, float(value), dtype), t2, dtype)
    return b.binary("add", x, quot, dtype)


@aten("lerp.Scalar", "lerp_.Scalar", "lerp.Tensor", "lerp_.Tensor", torch=_BLEND)
def _lerp(b, node, a, z, weight):
    """a + w (z - a) where |w| < 1/2, else z - (z - a) (1 - w): exact at
    both ends, as torch."""
    dtype = out_dtype(node)
    diff = b.binary("sub", z, a, dtype)
    low = b.binary("add", a, b.binary("mul", diff, weight, dtype), dtype)
    one_minus = b.binary("sub", 1.0, weight, dtype) if is_value(weight) else 1.0 - weight
    high = b.binary("sub", z, b.binary("mul", diff, one_minus, dtype), dtype)
    if not is_value(weight):
        return low if abs(weight) < 0.5 else high
    small = b.binary("lt", b.binary("mul", weight, weight, dtype), 0.25)
    shape = b.shape(low)
    return b.select(b.broadcast(small, shape), low, high)


@aten("logaddexp.default", torch=_BLEND)
def _logaddexp(b, node, x, y):
    """log(e^x + e^y): _log_add_exp in the result's dtype."""
    return _log_add_exp(b, x, y, out_dtype(node))


def _log_add_exp(b, x, y, dtype):
    """log(e^x + e^y): torch's value, m + log1p(e^-|x - y|) (x itself where
    both are the same infinity), and torch's gradient, e^(x - result) to x
    (a half each at x = y), through log(e^(x - m) + e^(y - m)) + m, m the
    larger held out of the gradient."""
    m = b.binary("maximum", x, y, dtype)
    shape = b.shape(m)
    xb, yb = b.broadcast(b.convert(x, dtype), shape), b.broadcast(b.convert(y, dtype), shape)
    d = b.op("sub", [xb, yb])
    gap = b.binary("maximum", d, b.unary("neg", d))
    value = b.op("add", [m, b.unary("log1p", b.unary("exp", b.unary("neg", gap)))])
    infinite = b.binary("ne", b.op("sub", [xb, xb]), 0.0)  # NaN for an infinity (and a NaN)
    same = b.op("mul", [b.convert(b.op("eq", [xb, yb]), "i64"), b.convert(infinite, "i64")])
    value = b.select(b.binary("ne", same, 0), xb, value)
    held = b.unary("stop_gradient", m)
    via = b.op("add", [b.unary("log", b.op("add", [b.unary("exp", b.op("sub", [xb, held])),
                                                  b.unary("exp", b.op("sub", [yb, held]))])),
                       held])
    return b.op("straight_through", [b.unary("stop_gradient", value), via])


@aten("hypot.default", "hypot_.default", torch="`torch.hypot`")
def _hypot(b, node, x, y):
    """sqrt(x^2 + y^2) without overflow, as std::hypot: float32 through
    float64 (the squares and their sum exact there, one rounding of the
    root, then float32's: torch's bits); float64 as that root where no
    square overflows or underflows, else m sqrt(1 + (n / m)^2), m the
    larger magnitude and n the smaller (0 where both are 0), each within an
    ulp of torch's; an infinity wins over a NaN. Its gradient torch's,
    g x / result, through 0.5 (x^2 + y^2) times 1 / result held out of the
    gradient (NaN where the result is 0 or infinite, as torch's)."""
    dtype = out_dtype(node)
    shape = [int(d) for d in node.meta["val"].shape]
    xb, yb = (b.broadcast(b.convert(v, dtype), shape) for v in (x, y))
    ax, ay = (_abs_nograd(b, v) for v in (xb, yb))
    if dtype == "f32":
        wide = [b.convert(v, "f64") for v in (ax, ay)]
        value = b.convert(b.unary("sqrt", b.op("add", [b.op("mul", [v, v]) for v in wide])), dtype)
    else:
        # the root of the sum of squares where neither overflows nor
        # underflows, else scaled by the larger
        m, n = b.op("maximum", [ax, ay]), b.select(b.op("lt", [ax, ay]), ax, ay)
        q = b.op("div", [n, m])
        scaled = b.op("mul", [m, b.unary("sqrt", b.binary("add", b.op("mul", [q, q]), 1.0))])
        plain = b.unary("sqrt", b.op("add", [b.op("mul", [ax, ax]), b.op("mul", [ay, ay])]))
        safe = b.select(b.binary("lt", m, 1e150), b.binary("gt", n, 1e-150),
                        b.binary("eq", m, -1.0))
        value = b.select(safe, plain, b.select(b.binary("eq", m, 0.0), 0.0, scaled))
    infinite = b.binary("eq", b.op("maximum", [b.select(b.op("ne", [ax, ax]), 0.0, ax),
                                                b.select(b.op("ne", [ay, ay]), 0.0, ay)]),
                        math.inf)
    value = b.select(infinite, math.inf, value)
    squares = b.op("add", [b.op("mul", [xb, xb]), b.op("mul", [yb, yb])])
    via = b.op("mul", [b.binary("mul", squares, 0.5),
                       b.binary("div", 1.0, b.unary("stop_gradient", value))])
    return b.op("straight_through", [value, via])


# d sinc(t) / dt = sum over k >= 1 of (-1)^k 2k t^(2k-1) / (2k+1)!: eight
# terms are within 1e-20 of it for |t| < 1/2, where (cos t - sinc t) / t
# cancels (float32's gradient 8 ulps off at t = 0.08).
_SINC_SLOPE = [(-1) ** k * 2 * k / math.factorial(2 * k + 1) for k in range(1, 9)]


@aten("sinc.default", "sinc_.default", torch=_BLEND)
def _sinc(b, node, x):
    """sin(pi x) / (pi x), 1 at 0, in float64 (float32 rounded once from
    it); its gradient pi (cos t - sinc t) / t at t = pi x, from the series
    above for |t| < 1/2 (0 at 0, as torch's)."""
    dtype = out_dtype(node)
    wide = b.convert(b.convert(x, dtype), "f64")
    t = b.binary("mul", wide, math.pi)
    zero, one = b.binary("eq", wide, 0.0), _full_like(b, 1.0, wide)
    safe = b.select(zero, one, t)
    value = b.select(zero, one, b.op("div", [b.unary("sin", safe), safe]))
    direct = b.op("div", [b.op("sub", [b.unary("cos", safe), value]), safe])
    t2 = b.op("mul", [t, t])
    series = _full_like(b, _SINC_SLOPE[-1], wide)
    for c in reversed(_SINC_SLOPE[:-1]):
        series = b.binary("add", b.op("mul", [series, t2]), c)
    series = b.op("mul", [series, t])
    small = b.binary("lt", _abs_nograd(b, t), 0.5)
    slope = b.binary("mul", b.select(small, series, direct), math.pi)
    via = b.op("mul", [wide, b.unary("stop_gradient", slope)])
    return b.convert(b.op("straight_through", [value, via]), dtype)


@aten("nansum.default", torch=_BLEND)
def _nansum(b, node, x, dim=None, keepdim=False, dtype=None):
    shape = b.shape(x)
    clean = b.select(b.op("ne", [x, x]), _full_like(b, 0.0, x), x)
    dims = list(range(len(shape))) if dim is None or dim == [] else \
        [d % len(shape) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    return b.sum(clean, dims, keepdim)


@aten("rot90.default", torch=_ARRANGE)
def _rot90(b, node, x, k=1, dims=(0, 1)):
    """k quarter turns from dims[0] towards dims[1]: flips and a swap."""
    rank = len(b.shape(x))
    d0, d1 = dims[0] % rank, dims[1] % rank
    perm = list(range(rank))
    perm[d0], perm[d1] = d1, d0
    k %= 4
    if k == 1:
        return b.transpose(_flip(b, node, x, [d1]), perm)
    if k == 2:
        return _flip(b, node, x, [d0, d1])
    if k == 3:
        return b.transpose(_flip(b, node, x, [d0]), perm)
    return x


@aten("take.default", torch=_ARRANGE)
def _take(b, node, x, index):
    return _index(b, node, b.reshape(x, [math.prod(b.shape(x))]), [index])


@aten("block_diag.default", torch=_ARRANGE)
def _block_diag(b, node, xs):
    dtype = out_dtype(node)
    parts = [b.reshape(x, [1, 1] if not b.shape(x) else
                       [1, b.shape(x)[0]] if len(b.shape(x)) == 1 else b.shape(x))
             for x in xs]
    cols = sum(b.shape(p)[1] for p in parts)
    rows, at = [], 0
    for p in parts:
        h, w = b.shape(p)
        pieces = [b.full(0.0, dtype, [h, at]) if at else None, b.convert(p, dtype),
                  b.full(0.0, dtype, [h, cols - at - w]) if cols - at - w else None]
        pieces = [q for q in pieces if q is not None]
        rows.append(pieces[0] if len(pieces) == 1 else b.op("concat", pieces, axis=1))
        at += w
    return rows[0] if len(rows) == 1 else b.op("concat", rows, axis=0)


@aten("tril_indices.default", "triu_indices.default", torch=_ARRANGE)
def _triangle_indices(b, node, row, col, offset=0, **_):
    """Numbers known when tracing: torch's own, as a constant."""
    make = torch.tril_indices if "tril" in str(node.target) else torch.triu_indices
    t = make(row, col, offset)
    return b.constant(t.flatten().tolist(), "i64", list(t.shape))


_TESTS = ('`torch.isnan`, `isinf`, `isfinite`, `isposinf`, `isneginf`, `logical_and`, '
          '`logical_or`, `logical_xor`')


def _truth(b, x):
    """x != 0 as a bool tensor (a NaN is true, as torch's logical ops)."""
    return x if b.dtype(x) == "bool" else b.binary("ne", x, 0)


@aten("isnan.default", torch=_TESTS)
def _isnan(b, node, x):
    return b.op("ne", [x, x])


def _infinite(b, x):
    """x is +-inf: x - x is NaN (for a NaN too) and x is not."""
    return b.select(b.op("ne", [x, x]), b.full(0, "bool", b.shape(x)),
                    b.binary("ne", b.op("sub", [x, x]), 0.0))


@aten("isinf.default", torch=_TESTS)
def _isinf(b, node, x):
    if b.dtype(x) not in ("f32", "f64"):
        return b.full(0, "bool", b.shape(x))
    return _infinite(b, x)


@aten("isposinf.default", "isneginf.default", torch=_TESTS)
def _isposneginf(b, node, x):
    if b.dtype(x) not in ("f32", "f64"):
        return b.full(0, "bool", b.shape(x))
    side = b.binary("gt" if "posinf" in str(node.target) else "lt", x, 0.0)
    return b.select(side, _infinite(b, x), b.full(0, "bool", b.shape(x)))


@aten("isfinite.default", torch=_TESTS)
def _isfinite(b, node, x):
    if b.dtype(x) not in ("f32", "f64"):
        return b.full(1, "bool", b.shape(x))
    return b.binary("eq", b.op("sub", [x, x]), 0.0)  # NaN for a NaN or an infinity


@aten("logical_and.default", "logical_or.default", "logical_xor.default", torch=_TESTS)
def _logical(b, node, x, y):
    """x and y, or, xor, each taken as true where not 0."""
    shape = [int(d) for d in node.meta["val"].shape]
    p, q = b.broadcast(_truth(b, x), shape), b.broadcast(_truth(b, y), shape)
    name = str(node.target)
    if "xor" in name:
        return b.op("ne", [p, q])
    f, t = b.full(0, "bool", shape), b.full(1, "bool", shape)
    return b.select(p, q, f) if "and" in name else b.select(p, t, q)


@aten("bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor", "bitwise_and.Scalar",
      "bitwise_or.Scalar", "bitwise_xor.Scalar", "bitwise_and_.Tensor", "bitwise_or_.Tensor",
      "bitwise_xor_.Tensor", torch="`mask1 & mask2`, `torch.bitwise_or`, `mask1 ^ mask2`",
      limits="bool tensors (and numbers)")
def _bitwise(b, node, x, y):
    """Of bools, the logical op (_logical), in the result's dtype (torch
    gives `mask & True` as int64)."""
    for v in (x, y):
        if is_value(v) and b.dtype(v) != "bool" or not is_value(v) and not isinstance(v, bool):
            kind = b.dtype(v) if is_value(v) else type(v).__name__
            raise Unsupported(f"{node.target} of {kind} (only of bool tensors)")
    if not is_value(y):
        y = b.full(int(y), "bool", [])
    return b.convert(_logical(b, node, x, y), out_dtype(node))


@aten("linalg_cross.default", torch='`torch.cross`, `torch.linalg.cross`')
def _cross(b, node, x, y, dim=-1):
    """The cross product along a dim of 3: (x1 y2 - x2 y1, x2 y0 - x0 y2,
    x0 y1 - x1 y0), as torch's kernel orders it."""
    dtype = out_dtype(node)
    shape = [int(d) for d in node.meta["val"].shape]
    dim %= len(shape)
    x, y = b.operand(x, dtype, shape), b.operand(y, dtype, shape)

    def part(v, i):
        return b.op("slice", [v], axis=dim, start=i, end=i + 1)

    def term(i, j):
        return b.op("sub", [b.op("mul", [part(x, i), part(y, j)]),
                            b.op("mul", [part(x, j), part(y, i)])])

    return b.op("concat", [term(1, 2), term(2, 0), term(0, 1)], axis=dim)


def _running(b, x, dim, fill):
    """The running maximum along dim (_scan: a NaN carried on)."""
    return _scan(b, x, dim, fill, lambda u, v: b.op("maximum", [u, v]))


@aten("logcumsumexp.default", torch="`torch.logcumsumexp`")
def _logcumsumexp(b, node, x, dim):
    """The running log(sum(e^x)) along dim by doubling spans (log2(n)
    steps, each the log-add-exp of the values and those 2^s places before,
    -inf before the start), with log-add-exp's value and gradient; torch's
    kernel adds one element at a time, so the roundings differ, each within
    a few of the value (and a start of -inf gets NaN gradients, as torch's)."""
    if b.dtype(x) not in ("f32", "f64"):
        raise Unsupported(f"logcumsumexp of {b.dtype(x)} (only of floating-point tensors)")
    shape = b.shape(x)
    if not shape:
        return x
    return _scan(b, x, dim % len(shape), -math.inf,
                 lambda u, v: _log_add_exp(b, u, v, b.dtype(x)))


@aten("cummax.default", "cummin.default", torch='`torch.cummax`, `torch.cummin`')
def _cummax(b, node, x, dim):
    """(values, indices) as torch's kernel: the running extreme, its index
    the last position at or before that holds it (a tie takes the later
    one), a NaN carried on from where it is (at the last NaN); values read
    at the indices, so the gradient goes there, as torch's."""
    shape = b.shape(x)
    dim %= len(shape)
    if b.dtype(x) not in ("f32", "f64"):
        raise Unsupported(f"{node.target} of {b.dtype(x)} (only of floating-point tensors)")
    low = "cummin" in str(node.target)
    held = b.unary("stop_gradient", x)
    signed = b.unary("neg", held) if low else held
    run = _running(b, signed, dim, -math.inf)
    record = b.op("eq", [signed, run])
    record = b.select(b.op("ne", [signed, signed]), b.full(1, "bool", shape), record)
    position = b.iota("i64", shape, dim)
    at = _running(b, b.select(record, position, b.full(-1, "i64", shape)), dim, -1)
    return _gather(b, None, x, dim, at), at
