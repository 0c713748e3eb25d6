"""Rounding (floor, ceil, trunc, round, sign, frac) and remainders (fmod,
remainder, floor division, div with a rounding mode), as torch's CPU
kernels compute them: the rounded values through integers, a zero keeping
its sign, no gradient through a rounding (the table and the builder:
_ir.py)."""

from ._aten_loss import _abs
from ._ir import aten, broadcast_shapes, is_value, out_dtype

_ROUNDING = '`torch.floor`, `ceil`, `trunc`, `round`, `sign`, `frac`'
_ROUNDING_LIMITS = 'no gradient through the rounding (as torch: zero)'
_REMAINDERS = ('`torch.fmod`, `torch.remainder` (`%`), `torch.floor_divide` (`//`), '
               '`torch.div` with `rounding_mode`')
_REMAINDERS_LIMITS = "a rounded quotient has no gradient (as torch)"


def _exact(b, x):
    """Where x's float type holds every integer: beyond, a float is whole."""
    return float(1 << 52) if b.dtype(x) == "f64" else float(1 << 23)



# ---------------------------------------------------------------- rounding


def _signed_zero(b, t, x):
    """t, a zero taking x's sign (torch's floor(-0.0) and round(-0.3) are
    -0.0; a zero through an integer is +0.0)."""
    return b.select(b.binary("eq", t, 0.0), b.binary("mul", b.unary("stop_gradient", x), 0.0), t)


def _floor(b, x):
    """floor(x): truncated through an integer, one less where that rose
    above x, a zero with x's sign; a number past 2^23 (2^52 in float64) is
    already whole (and a NaN or inf stays)."""
    t = b.convert(b.convert(b.unary("stop_gradient", x), "i64"), b.dtype(x))
    t = _signed_zero(b, b.binary("sub", t, b.convert(b.binary("gt", t, x), b.dtype(x))), x)
    big = b.binary("ge", _abs_nograd(b, x), _exact(b, x))
    return b.select(b.op("ne", [x, x]), x, b.select(big, b.unary("stop_gradient", x), t))


def _abs_nograd(b, x):
    return _abs(b, b.unary("stop_gradient", x))


def _exact_f64(b, x, what):
    """x's values in float64: exact for every integer type but int64, whose
    values of 2^53 or more in magnitude fail the step (`what` names the use)."""
    wide = b.convert(x, "f64")
    if b.dtype(x) != "i64":
        return wide
    return b.op("check", [wide, b.binary("lt", _abs_nograd(b, wide), 2.0 ** 53)],
                message=f"{what} int64 values of 2^53 or more in magnitude (they go through "
                        f"their float64 values)")


def _frozen(b, y):
    return b.unary("stop_gradient", y)


@aten("floor.default", torch=_ROUNDING, limits=_ROUNDING_LIMITS)
def _floor_op(b, node, x):
    return _frozen(b, _floor(b, x))


@aten("ceil.default", torch=_ROUNDING, limits=_ROUNDING_LIMITS)
def _ceil(b, node, x):
    return _frozen(b, b.unary("neg", _floor(b, b.unary("neg", x))))


@aten("trunc.default", torch=_ROUNDING, limits=_ROUNDING_LIMITS)
def _trunc(b, node, x):
    down = _floor(b, x)
    up = b.unary("neg", _floor(b, b.unary("neg", x)))
    return _frozen(b, b.select(b.binary("lt", x, 0.0), up, down))


@aten("frac.default", torch=_ROUNDING, limits="the gradient passes (as torch: x - trunc(x))")
def _frac(b, node, x):
    return b.op("sub", [x, _trunc(b, node, x)])


@aten("round.default", torch=_ROUNDING, limits=_ROUNDING_LIMITS)
def _round(b, node, x):
    """Halves to even, as torch: floor(x + 1/2), one less where x was a half
    and that is odd."""
    f = _floor(b, b.binary("add", x, 0.5))
    half = b.op("eq", [b.op("sub", [f, x]), b.full(0.5, b.dtype(x), b.shape(x))])
    odd = b.op("ne", [_floor(b, b.binary("mul", f, 0.5)), b.binary("mul", f, 0.5)])
    tie_odd = b.op("mul", [b.convert(half, "i64"), b.convert(odd, "i64")])
    r = _signed_zero(b, b.binary("sub", f, b.convert(tie_odd, b.dtype(x))), x)
    big = b.binary("ge", _abs_nograd(b, x), _exact(b, x))
    return _frozen(b, b.select(big, x, r))


@aten("sign.default", "sgn.default", torch=_ROUNDING, limits=_ROUNDING_LIMITS)
def _sign(b, node, x):
    one = b.full(1.0, b.dtype(x), b.shape(x))
    s = b.select(b.binary("gt", x, 0.0), one,
                 b.select(b.binary("lt", x, 0.0), b.unary("neg", one), b.binary("mul", x, 0.0)))
    return _frozen(b, s)


# ---------------------------------------------------------------- remainders


def _operands(b, node, x, y):
    """x and y as values of the result's dtype and shape (torch's
    promotion: a number takes the tensor's dtype)."""
    dtype = out_dtype(node)
    shape = broadcast_shapes(*[b.shape(v) for v in (x, y) if is_value(v)])
    return b.operand(x, dtype, shape), b.operand(y, dtype, shape), dtype


def _signs_differ(b, m, y):
    """m != 0 and m's sign not y's: where fmod's remainder is not
    remainder's."""
    zero = 0.0 if b.dtype(m) in ("f32", "f64") else 0
    differ = b.op("ne", [b.binary("lt", m, zero), b.binary("lt", y, zero)])
    return b.select(b.binary("ne", m, zero), differ, b.full(0.0, "bool", b.shape(m)))


def _remainder(b, x, y, dtype):
    """x - floor(x / y) y, with y's sign (torch.remainder): fmod, plus y
    where the signs differ."""
    m = b.op("fmod", [x, y])
    return b.select(_signs_differ(b, m, y), b.op("add", [m, y]), m)


@aten("fmod.Tensor", "fmod.Scalar", "fmod_.Tensor", "fmod_.Scalar", torch=_REMAINDERS,
      limits=_REMAINDERS_LIMITS)
def _fmod(b, node, x, y):
    x, y, _ = _operands(b, node, x, y)
    return b.op("fmod", [x, y])


@aten("remainder.Tensor", "remainder.Scalar", "remainder_.Tensor", "remainder_.Scalar",
      torch=_REMAINDERS, limits=_REMAINDERS_LIMITS)
def _remainder_op(b, node, x, y):
    x, y, dtype = _operands(b, node, x, y)
    return _remainder(b, x, y, dtype)


def _floor_divide(b, x, y, dtype):
    """floor(x / y) as torch computes it: for integers (x - remainder) / y,
    exact; for floats (x - fmod) / y, one less where the signs differ,
    rounded to the nearer whole number, a zero with x / y's sign, and x / y
    itself for y = 0."""
    if dtype not in ("f32", "f64"):
        return b.op("div", [b.op("sub", [x, _remainder(b, x, y, dtype)]), y])
    x, y = b.unary("stop_gradient", x), b.unary("stop_gradient", y)
    m = b.op("fmod", [x, y])
    d = b.op("div", [b.op("sub", [x, m]), y])
    d = b.select(_signs_differ(b, m, y), b.binary("sub", d, 1.0), d)
    f = _floor(b, d)
    f = b.select(b.binary("gt", b.op("sub", [d, f]), 0.5), b.binary("add", f, 1.0), f)
    q = b.op("div", [x, y])
    f = b.select(b.binary("ne", d, 0.0), f, b.binary("mul", q, 0.0))
    return _frozen(b, b.select(b.binary("eq", y, 0.0), q, f))


@aten("floor_divide.default", "floor_divide.Scalar", "floor_divide_.Tensor",
      torch=_REMAINDERS, limits=_REMAINDERS_LIMITS)
def _floor_divide_op(b, node, x, y):
    x, y, dtype = _operands(b, node, x, y)
    return _floor_divide(b, x, y, dtype)


@aten("div.Tensor_mode", "div_.Tensor_mode", "div.Scalar_mode", "div_.Scalar_mode",
      torch=_REMAINDERS, limits=_REMAINDERS_LIMITS)
def _div_mode(b, node, x, y, rounding_mode=None):
    x, y, dtype = _operands(b, node, x, y)
    if rounding_mode == "floor":
        return _floor_divide(b, x, y, dtype)
    q = b.op("div", [x, y])  # integers: truncated
    if rounding_mode is None or dtype not in ("f32", "f64"):
        return q
    return _trunc(b, node, q)
