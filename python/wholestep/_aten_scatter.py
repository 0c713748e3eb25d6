"""Writes at integer positions: index_put (`x[i] = v`, `x[i] += v` with
accumulate), index_add, index_copy, scatter and scatter_add, as one IR
scatter_add into the written positions (its gradient a gather). A write
that does not accumulate takes a position's value from the one element
that goes there; a repeated position fails the step (torch leaves which of
the values it writes undefined)."""

import math

from ._aten_nn import _cumsum_rows
from ._aten_shape import _in_range, _poisoned, _positions
from ._ir import Unsupported, aten, out_dtype

_SCATTER = ('`x[i] = v` and `x[i] += v` with integer tensors (`index_put`), `index_add`, `put`, '
            '`index_copy`, `scatter`, `scatter_add`, `masked_scatter`')
_SCATTER_LIMITS = ('a write that does not accumulate fails the step at a repeated position '
                   '(torch does not define which value it keeps); `scatter` with `reduce` is '
                   'not translated')


def _write_rows(b, table, flat, values, accumulate):
    """table [n, rest...] with values [k, rest...] written at rows flat [k]:
    added, or in place of the row (each row written at most once). Integers
    and bools go through float64, which holds them to 2^53."""
    dtype = b.dtype(table)
    if dtype not in ("f32", "f64"):
        out = _write_rows(b, b.convert(table, "f64"), flat, b.convert(values, "f64"), accumulate)
        return b.convert(out, dtype)
    n = b.shape(table)[0]
    added = b.op("scatter_add", [flat, values], rows=n)
    if accumulate:
        return b.op("add", [table, added])
    counts = b.op("scatter_add", [flat, b.full(1.0, "f32", [b.shape(flat)[0]])], rows=n)
    counts = b.op("check", [counts, b.binary("le", counts, 1.0)],
                  message="a position written twice by a write that does not accumulate "
                          "(index_put, index_copy or scatter): torch does not define which "
                          "value it keeps")
    written = b.broadcast(b.reshape(b.binary("gt", counts, 0.0), [n] + [1] * (
        len(b.shape(table)) - 1)), b.shape(table))
    return b.select(written, added, table)


def _index_put(b, x, indices, values, accumulate):
    """x[indices] = values (or +=): the indexed dims merged into rows, as
    _aten_shape._index reads them."""
    shape = b.shape(x)
    indices = list(indices) + [None] * (len(shape) - len(indices))
    dims = [d for d, ix in enumerate(indices) if ix is not None]
    if not dims:
        raise Unsupported("index_put without an index tensor")
    flat, index_shape = _positions(b, shape, dims, indices)
    rest = [d for d in range(len(shape)) if d not in dims]
    # values broadcast to x[indices]'s shape, its index dims where torch puts
    # them (where the indexed dims were when adjacent, else first), moved first
    k = len(index_shape)
    lead = dims[0] if dims == list(range(dims[0], dims[-1] + 1)) else 0
    read_shape = [shape[d] for d in rest[:lead]] + index_shape + [shape[d] for d in rest[lead:]]
    v = b.broadcast(b.convert(values, b.dtype(x)), read_shape)
    v = b.transpose(v, list(range(lead, lead + k)) + list(range(lead))
                    + list(range(lead + k, len(read_shape))))
    count = math.prod(index_shape)
    v = b.reshape(v, [count] + [shape[d] for d in rest])
    table = b.reshape(b.transpose(x, dims + rest),
                      [math.prod(shape[d] for d in dims)] + [shape[d] for d in rest])
    out = _write_rows(b, table, b.reshape(flat, [count]), v, accumulate)
    out = b.reshape(out, [shape[d] for d in dims] + [shape[d] for d in rest])
    order = dims + rest
    return b.transpose(out, [order.index(d) for d in range(len(shape))])


@aten("index_put.default", "index_put_.default", torch=_SCATTER, limits=_SCATTER_LIMITS)
def _index_put_op(b, node, x, indices, values, accumulate=False):
    return _index_put(b, x, indices, values, accumulate)


@aten("index_add.default", "index_add_.default", torch=_SCATTER, limits=_SCATTER_LIMITS)
def _index_add(b, node, x, dim, index, source, alpha=1):
    dim = dim % len(b.shape(x))
    if alpha != 1:
        source = b.binary("mul", source, alpha)
    return _index_put(b, x, [None] * dim + [index], source, True)


@aten("index_copy.default", "index_copy_.default", torch=_SCATTER, limits=_SCATTER_LIMITS)
def _index_copy(b, node, x, dim, index, source):
    dim = dim % len(b.shape(x))
    return _index_put(b, x, [None] * dim + [index], source, False)


def _scatter(b, node, x, dim, index, src, accumulate):
    """out[p with p[dim] = index[p]] = src[p] for p over index's shape: one
    write into x flattened, at each element's flat position (as
    _aten_shape._gather reads)."""
    shape, ishape = b.shape(x), b.shape(index)
    dim = dim % max(len(shape), 1)
    if len(ishape) != len(shape) or any(i > s for d, (i, s) in enumerate(zip(ishape, shape))
                                        if d != dim):
        raise Unsupported(f"{node.target} with index {ishape} into {shape}: the index must "
                          f"have the input's rank and no larger dims but along dim {dim}")
    if not isinstance(src, type(x)):  # scatter.value: a number
        src = b.full(float(src), b.dtype(x), ishape)
    sshape = b.shape(src)
    if sshape != ishape:
        if len(sshape) != len(ishape) or any(i > s for i, s in zip(ishape, sshape)):
            raise Unsupported(f"scatter with index {ishape} and src {sshape}")
        for d, (i, s) in enumerate(zip(ishape, sshape)):
            if i < s:
                src = b.op("slice", [src], axis=d, start=0, end=i)
    ix = b.select(b.binary("lt", index, 0), b.binary("add", index, shape[dim]), index)
    valid = _in_range(b, ix, shape[dim])
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    flat = b.binary("mul", ix, strides[dim]) if strides[dim] != 1 else ix
    for d in range(len(shape)):
        if d != dim:
            at = b.iota("i64", ishape, d)
            flat = b.binary("add", flat, b.binary("mul", at, strides[d]) if strides[d] != 1
                            else at)
    n = math.prod(ishape)
    flat = b.reshape(_poisoned(b, flat, valid), [n])
    table = b.reshape(b.convert(x, out_dtype(node)), [math.prod(shape)])
    out = _write_rows(b, table, flat, b.reshape(b.convert(src, out_dtype(node)), [n]),
                      accumulate)
    return b.reshape(out, shape)


@aten("scatter_add.default", "scatter_add_.default", torch=_SCATTER, limits=_SCATTER_LIMITS)
def _scatter_add(b, node, x, dim, index, src):
    return _scatter(b, node, x, dim, index, src, True)


@aten("scatter.src", "scatter_.src", "scatter.value", "scatter_.value", torch=_SCATTER,
      limits=_SCATTER_LIMITS)
def _scatter_op(b, node, x, dim, index, src):
    return _scatter(b, node, x, dim, index, src, False)


@aten("put.default", "put_.default", torch=_SCATTER, limits=_SCATTER_LIMITS)
def _put(b, node, x, index, source, accumulate=False):
    """x flattened, source's elements written at index's (take's inverse)."""
    shape = b.shape(x)
    flat = _index_put(b, b.reshape(x, [math.prod(shape)]), [b.reshape(index, [
        math.prod(b.shape(index))])], b.reshape(source, [math.prod(b.shape(source))]),
        accumulate)
    return b.reshape(flat, shape)


@aten("masked_scatter.default", "masked_scatter_.default", torch=_SCATTER,
      limits=_SCATTER_LIMITS)
def _masked_scatter(b, node, x, mask, source):
    """Where mask is true, source's elements in order: the k-th true element
    takes source's k-th (a running count of the mask, then a gather; more
    true elements than source has fail the step, as torch)."""
    shape = b.shape(x)
    n, count = math.prod(shape), math.prod(b.shape(source))
    if count == 0:
        return x
    m = b.reshape(b.broadcast(mask, shape), [n])
    taken = _cumsum_rows(b, b.reshape(b.convert(m, "f32"), [1, n]))
    at = b.convert(b.binary("sub", b.reshape(taken, [n]), 1.0), "i64")
    at = b.select(m, at, b.full(0, "i64", [n]))
    values = b.op("gather", [b.reshape(b.convert(source, b.dtype(x)), [count]), at])
    return b.reshape(b.select(m, values, b.reshape(x, [n])), shape)


@aten("max_unpool2d.default", torch="`nn.MaxUnpool2d`, `F.max_unpool2d`",
      limits="[N, C, H, W] input; a position written twice fails the step (torch keeps one "
             "value it does not define)")
def _max_unpool2d(b, node, x, indices, output_size):
    """Zeros of output_size per plane, each value written at its index in
    its plane (an index outside the plane fails the step, as torch raises);
    its gradient read back at the indices."""
    shape = b.shape(x)
    if len(shape) != 4:
        raise Unsupported(f"max_unpool2d of {shape} (only [N, C, H, W])")
    n, c, h, w = shape
    oh, ow = [int(v) for v in output_size]
    planes, size = n * c, oh * ow
    at = b.reshape(indices, [planes, h * w])
    offsets = b.binary("mul", b.iota("i64", [planes, h * w], 0), size)
    flat = _poisoned(b, b.reshape(b.op("add", [at, offsets]), [planes * h * w]),
                     b.reshape(_in_range(b, at, size), [planes * h * w]))
    table = b.full(0.0, b.dtype(x), [planes * size])
    out = _write_rows(b, table, flat, b.reshape(x, [planes * h * w]), accumulate=False)
    return b.reshape(out, [n, c, oh, ow])
