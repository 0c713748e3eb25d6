"""More of ATen's reductions and rearrangements: amin, any, all,
count_nonzero, std_mean, dist, diagonal and trace, windows of a dim
(Tensor.unfold), writes of a slice or of index positions (select_scatter,
index_fill), clamp between tensors, linspace and RReLU in eval mode; each a
few IR ops with torch's gradient (the table and the builder: _ir.py)."""

import numpy as np

from ._aten_math import _dims
from ._ir import Unsupported, aten, is_value, out_dtype, out_shape

_REDUCE = ('`torch.amin`, `any`, `all`, `count_nonzero`, `std_mean`, `dist`, `diagonal`, '
           '`trace`')
_WRITES = '`Tensor.unfold`, `select_scatter`, `index_fill`, `torch.clamp` between tensors'


def _kept(b, x, axes, keepdim, out):
    """A reduction's result over `axes` as keepdim asks (`out` reduced with
    its axes kept)."""
    if keepdim:
        return out
    return b.reshape(out, [d for i, d in enumerate(b.shape(x)) if i not in axes])


@aten("amin.default", torch=_REDUCE)
def _amin(b, node, x, dims=(), keepdim=False):
    """-amax(-x): its gradient split evenly among equal minima, as torch's."""
    return b.unary("neg", b.max(b.unary("neg", x), _dims(b, x, dims), keepdim))


@aten("any.dim", "any.default", "all.dim", "all.default", torch=_REDUCE)
def _any_all(b, node, x, dim=None, keepdim=False):
    """Whether any (all) element along dim is nonzero: the largest (the
    smallest) of the flags x != 0."""
    axes = _dims(b, x, dim)
    nonzero = x if b.dtype(x) == "bool" else b.binary("ne", x, 0)
    flags = b.convert(nonzero, "f32")
    if "any" in str(node.target):
        return b.binary("gt", b.max(flags, axes, keepdim), 0.0)
    return b.binary("eq", b.max(b.unary("neg", flags), axes, keepdim), -1.0)


@aten("count_nonzero.dim_IntList", "count_nonzero.default", torch=_REDUCE)
def _count_nonzero(b, node, x, dims=None):
    return b.sum(b.convert(b.binary("ne", x, 0), "i64"), _dims(b, x, dims))


@aten("std_mean.correction", torch=_REDUCE)
def _std_mean(b, node, x, dims=None, correction=None, keepdim=False):
    axes = _dims(b, x, dims)
    c = 1 if correction is None else correction
    var = b.composite("var", x, axes=axes, correction=float(c), keepdim=int(keepdim))
    return b.unary("sqrt", var), _kept(b, x, axes, keepdim, b.mean(x, axes, keepdim=True))


@aten("dist.default", torch=_REDUCE, limits="dist: p = 0, p >= 1 or ±inf, as torch.norm")
def _dist(b, node, x, y, p=2):
    from ._aten_nn import _norm
    return _norm(b, node, b.binary("sub", x, y), p)


def _diagonal_positions(n, m, offset):
    """Flat positions of an n x m matrix's diagonal `offset` (above the main
    one when positive)."""
    rows = range(max(0, -offset), min(n, m - offset))
    return [i * m + i + offset for i in rows]


@aten("diagonal.default", torch=_REDUCE)
def _diagonal(b, node, x, offset=0, dim1=0, dim2=1):
    """The diagonal of dims dim1 and dim2 as the last dim: both moved last,
    flattened, the diagonal's positions taken (a gather)."""
    shape = b.shape(x)
    d1, d2 = dim1 % len(shape), dim2 % len(shape)
    rest = [d for d in range(len(shape)) if d not in (d1, d2)]
    moved = b.transpose(x, rest + [d1, d2])
    n, m = shape[d1], shape[d2]
    flat = b.reshape(moved, [shape[d] for d in rest] + [n * m])
    return b.take(flat, len(rest), _diagonal_positions(n, m, offset))


@aten("diag_embed.default", torch="`torch.diag_embed` (a batch of diagonal matrices)",
      limits="its vectors along the last dim, the matrices in the last two")
def _diag_embed(b, node, x, offset=0, dim1=-2, dim2=-1):
    """Matrices [..., n + |offset|, n + |offset|] with x's last dim on their
    diagonal `offset`: x spread over the rows by a product with the identity,
    then padded on the side the offset names."""
    shape = b.shape(x)
    rank = len(shape) + 1
    if (dim1 % rank, dim2 % rank) != (rank - 2, rank - 1):
        raise Unsupported(f"diag_embed into dims {dim1} and {dim2} (the last two are)")
    n, k, lead = shape[-1], abs(int(offset)), shape[:-1]
    eye = b.constant([1.0 if i == j else 0.0 for i in range(n) for j in range(n)],
                     b.dtype(x), [n, n])
    square = b.op("mul", [b.broadcast(b.reshape(x, shape + [1]), lead + [n, n]),
                          b.broadcast(eye, lead + [n, n])])
    if not k:
        return square
    cols = b.full(0.0, b.dtype(x), lead + [n, k])
    rows = b.full(0.0, b.dtype(x), lead + [k, n + k])
    wide = b.op("concat", [cols, square] if offset > 0 else [square, cols], axis=len(shape))
    return b.op("concat", [wide, rows] if offset > 0 else [rows, wide], axis=len(shape) - 1)


@aten("trace.default", torch=_REDUCE)
def _trace(b, node, x):
    n, m = b.shape(x)
    return b.sum(b.take(b.reshape(x, [n * m]), 0, _diagonal_positions(n, m, 0)), [0])


@aten("unfold.default", torch=_WRITES)
def _unfold(b, node, x, dim, size, step):
    """Windows of `size` elements `step` apart along dim, as a new last dim:
    one take of every window's positions."""
    shape = b.shape(x)
    dim = dim % len(shape) if shape else 0
    if not shape:
        return b.reshape(x, [1])
    count = (shape[dim] - size) // step + 1
    picked = b.take(x, dim, [w * step + j for w in range(count) for j in range(size)])
    y = b.reshape(picked, shape[:dim] + [count, size] + shape[dim + 1:])
    k = len(shape)
    return b.transpose(y, list(range(dim + 1)) + list(range(dim + 2, k + 1)) + [dim + 1])


def _positions_mask(b, shape, dim, picked):
    """bool [shape] true at the positions along dim that `picked` (an i64
    value of positions, or a list) names, the other dims broadcast."""
    dim = dim % len(shape)
    along = b.iota("i64", [shape[dim]], 0)
    if is_value(picked):
        k = b.shape(picked)[0] if b.shape(picked) else 1
        idx = b.reshape(picked, [1, k])
        n = shape[dim]
        idx = b.select(b.binary("lt", idx, 0), b.binary("add", idx, n), idx)
        hit = b.max(b.convert(b.binary("eq", b.reshape(along, [n, 1]), idx), "f32"), [1])
        mask = b.binary("gt", hit, 0.5)
    else:
        mask = b.binary("eq", along, picked % shape[dim])
    return b.broadcast(b.reshape(mask, [shape[dim]] + [1] * (len(shape) - dim - 1)), shape)


@aten("select_scatter.default", torch=_WRITES)
def _select_scatter(b, node, x, src, dim, index):
    """x with its slice at `index` along dim replaced by src."""
    shape = b.shape(x)
    dim = dim % len(shape)
    spread = b.broadcast(b.reshape(src, shape[:dim] + [1] + shape[dim + 1:]), shape)
    return b.select(_positions_mask(b, shape, dim, index), spread, x)


@aten("index_fill.int_Scalar", "index_fill_.int_Scalar", "index_fill.int_Tensor",
      "index_fill_.int_Tensor", torch=_WRITES,
      limits="index_fill: a number or 0-d tensor as the value")
def _index_fill(b, node, x, dim, index, value):
    shape = b.shape(x)
    if is_value(value) and b.shape(value):
        raise Unsupported(f"index_fill with a value of shape {b.shape(value)} (a number or a "
                          f"0-d tensor, as torch)")
    fill = b.broadcast(b.convert(value, b.dtype(x)), shape) if is_value(value) else value
    return b.select(_positions_mask(b, shape, dim, index), fill, x)


@aten("clamp.Tensor", "clamp_.Tensor", "clamp_min.Tensor", "clamp_max.Tensor",
      torch=_WRITES, limits="clamp: each bound a tensor, a number or None")
def _clamp_tensor(b, node, x, lo=None, hi=None):
    """min(max(x, lo), hi) with torch's gradient: x's where lo <= x <= hi,
    a bound's where it is the result."""
    name = str(node.target)
    if "clamp_max" in name:
        lo, hi = None, lo
    dtype, shape = out_dtype(node), out_shape(node)
    y = b.broadcast(b.convert(x, dtype), shape)
    if lo is not None:
        y = b.select(b.broadcast(b.binary("lt", y, lo, dtype), shape), lo, y)
    if hi is not None:
        y = b.select(b.broadcast(b.binary("gt", y, hi, dtype), shape), hi, y)
    return y


@aten("linspace.default", torch='`torch.linspace`')
def _linspace(b, node, start, end, steps, dtype=None, layout=None, device=None,
              pin_memory=None):
    """torch's values: start + i step in the first half, end - (n - 1 - i)
    step in the second."""
    if is_value(start) or is_value(end):
        raise Unsupported("linspace between tensors (numbers only)")
    dtype = out_dtype(node)
    return b.constant(linspace_values(start, end, int(steps), dtype), dtype, [int(steps)])


def linspace_values(start, end, n, dtype):
    """torch.linspace's n values computed as torch computes them in `dtype`
    (f32 or f64 arithmetic): start + i step in the first half, end - (n - 1
    - i) step in the second."""
    t = np.float32 if dtype == "f32" else np.float64
    if n == 1:
        return [float(t(start))]
    step = (t(end) - t(start)) / t(n - 1)
    return [float(t(start) + step * t(i) if i < n // 2 else t(end) - step * t(n - 1 - i))
            for i in range(n)]


@aten("rrelu_with_noise.default", torch='`nn.RReLU`, `F.rrelu` in eval mode',
      limits="eval mode (training draws a random slope per element: refused)")
def _rrelu(b, node, x, noise, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    if training:
        raise Unsupported("RReLU in training mode (a random slope per element)")
    return b.composite("leaky_relu", x, negative_slope=(lower + upper) / 2)


@aten("_weight_norm_interface.default", torch="`nn.utils.weight_norm` (its pre-hook traced)",
      limits="its `weight` attribute set at each call from the parameters the call starts "
             "from, as eager's forward sets it (without gradient)")
def _weight_norm(b, node, v, g, dim=0):
    """v g / |v|, the 2-norm over every dim but `dim` (torch's kernel), and
    that norm."""
    shape = b.shape(v)
    dim = dim % len(shape)
    axes = [a for a in range(len(shape)) if a != dim]
    norm = b.unary("sqrt", b.sum(b.op("mul", [v, v]), axes, keepdim=True))
    return b.binary("mul", v, b.binary("div", g, norm)), norm
