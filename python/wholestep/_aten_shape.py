"""ATen's shape and indexing ops as IR ops: views, transposes (a pair of
last dims left for a product to read with its flag), concatenation,
splitting, slicing, rolling, and indexing with integer tensors by gathers
(the table and the builder: _ir.py)."""

import math

from ._aten_round import _exact_f64
from ._ir import Transposed, Unsupported, aten, broadcast_shapes, out_shape

# What each translation covers, for the support table (_support.py).
_VIEWS = (
    '`view`, `reshape`, `expand`, `permute`, `transpose`, `t`, `squeeze`, `unsqueeze`, '
    '`nn.Flatten` (and in-place forms)')
_RECURRENT = ('`torch.stack`, `unbind`; `nn.LSTM`, `nn.GRU`, `nn.RNN` (layers, '
              '`batch_first`, `bidirectional`, dropout between layers), which become them and '
              'products')
_SLICES = '`torch.cat`, `split`, `chunk`, indexing with slices and integers'
_INDEXING = (
    'indexing with integer tensors (`table[index]`, `x[i, :, j]`), `index_select`, '
    '`torch.gather` along any dim')
_INDEXING_LIMITS = 'no boolean masks (a result whose shape depends on the values)'


@aten("view.default", "_reshape_alias.default", "_unsafe_view.default", "reshape.default",
      torch=_VIEWS)
def _view(b, node, x, *args):
    return b.reshape(x, out_shape(node))


@aten("expand.default", torch=_VIEWS)
def _expand(b, node, x, size, implicit=False):
    return b.broadcast(x, out_shape(node))


@aten("as_strided.default", "as_strided_.default", torch="`as_strided` that keeps the order",
      limits="only strides that read the elements in their order (a memory-format change of "
             "size-1 dims)")
def _as_strided(b, node, x, size, stride, storage_offset=None):
    size, stride = list(size), list(stride)
    expected, step = [0] * len(size), 1
    for d in reversed(range(len(size))):
        expected[d] = step
        step *= size[d]
    same = all(s == e for n, s, e in zip(size, stride, expected) if n > 1)
    if not same or storage_offset not in (None, 0) or math.prod(size) != math.prod(b.shape(x)):
        raise Unsupported(f"as_strided of {b.dtype(x)}{b.shape(x)} to size {size}, stride "
                          f"{stride}: only strides that read the elements in their order")
    return b.reshape(x, size)


@aten("t.default", torch=_VIEWS)
def _t(b, node, x):
    if len(b.shape(x)) < 2:
        return x
    return Transposed(x)


@aten("permute.default", torch=_VIEWS)
def _permute(b, node, x, dims):
    rank = len(b.shape(x))
    return b.transpose(x, [d % rank for d in dims])


@aten("transpose.int", "transpose_.default", torch=_VIEWS)
def _transpose(b, node, x, d0, d1):
    rank = len(b.shape(x))
    perm = list(range(rank))
    d0, d1 = d0 % rank, d1 % rank
    if d0 != d1 and {d0, d1} == {rank - 2, rank - 1}:
        return Transposed(x)  # a matrix product reads it with its transpose flag
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.transpose(x, perm)


# The in-place forms: torch's Linear on one unbatched example squeezes its
# product in place.
@aten("unsqueeze.default", "squeeze.dim", "squeeze.default", "flatten.using_ints",
      "unsqueeze_.default", "squeeze_.dim", "squeeze_.default", torch=_VIEWS)
def _reshape_like(b, node, x, *args):
    return b.reshape(x, out_shape(node))


@aten("cat.default", torch=_SLICES)
def _cat(b, node, xs, dim=0):
    xs = [x for x in xs if math.prod(b.shape(x)) > 0 or len(xs) == 1]
    if len(xs) == 1:
        return xs[0]
    return b.op("concat", xs, axis=dim % len(b.shape(xs[0])))


@aten("stack.default", torch=_RECURRENT)
def _stack(b, node, xs, dim=0):
    rank = len(b.shape(xs[0])) + 1
    dim = dim % rank
    parts = []
    for x in xs:
        shape = b.shape(x)
        parts.append(b.reshape(x, shape[:dim] + [1] + shape[dim:]))
    return parts[0] if len(parts) == 1 else b.op("concat", parts, axis=dim)


@aten("unbind.int", torch=_RECURRENT)
def _unbind(b, node, x, dim=0):
    shape = b.shape(x)
    dim = dim % len(shape)
    rest = shape[:dim] + shape[dim + 1:]
    return tuple(b.reshape(b.op("slice", [x], axis=dim, start=i, end=i + 1), rest)
                 for i in range(shape[dim]))


@aten("split.Tensor", "split_with_sizes.default", "unsafe_split.Tensor",
      "unsafe_split_with_sizes.default", torch=_SLICES)
def _split(b, node, x, sizes, dim=0):
    shape = b.shape(x)
    dim = dim % len(shape)
    if isinstance(sizes, int):
        sizes = [min(sizes, shape[dim] - s) for s in range(0, shape[dim], sizes)]
    out, start = [], 0
    for s in sizes:
        out.append(b.op("slice", [x], axis=dim, start=start, end=start + s))
        start += s
    return tuple(out)


@aten("roll.default", torch="`torch.roll`")
def _roll(b, node, x, shifts, dims=()):
    shape = b.shape(x)
    if not dims:  # over the flattened tensor
        flat = b.reshape(x, [math.prod(shape)])
        return b.reshape(_roll(b, node, flat, shifts, [0]), shape)
    for shift, dim in zip(shifts, dims):
        dim = dim % len(shape)
        n = shape[dim]
        k = shift % n if n else 0
        if k:
            tail = b.op("slice", [x], axis=dim, start=n - k, end=n)
            head = b.op("slice", [x], axis=dim, start=0, end=n - k)
            x = b.op("concat", [tail, head], axis=dim)
    return x


@aten("slice.Tensor", torch=_SLICES)
def _slice(b, node, x, dim=0, start=None, end=None, step=1):
    shape = b.shape(x)
    dim = dim % len(shape)
    n = shape[dim]
    start = 0 if start is None else (start + n if start < 0 else start)
    end = n if end is None else (end + n if end < 0 else end)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    if step != 1:  # every step-th element: a gather
        return b.take(x, dim, list(range(start, end, step)))
    if start == 0 and end == n:
        return x
    return b.op("slice", [x], axis=dim, start=start, end=end)


@aten("select.int", torch=_SLICES)
def _select_int(b, node, x, dim, index):
    shape = b.shape(x)
    dim = dim % len(shape)
    index = index % shape[dim]
    s = b.op("slice", [x], axis=dim, start=index, end=index + 1)
    return b.reshape(s, out_shape(node))


def _gather_rows(b, table, index):
    """The IR's gather of table's rows; an integer or bool table through its
    float64 values (_exact_f64), then converted back."""
    dtype = b.dtype(table)
    if dtype in ("f32", "f64"):
        return b.op("gather", [table, index])
    return b.convert(b.op("gather", [_exact_f64(b, table, "indexing"), index]), dtype)


@aten("index.Tensor", torch=_INDEXING, limits=_INDEXING_LIMITS)
def _index(b, node, x, indices):
    """x[..., i, j, ...] with integer tensors i, j: one gather of rows of x
    with those dims merged (its gradient a scatter-add), the index dims where
    torch puts them."""
    shape = b.shape(x)
    dims = [d for d, ix in enumerate(indices) if ix is not None]
    if not dims:
        return x
    flat, index_shape = _positions(b, shape, dims, indices)
    rest = [d for d in range(len(shape)) if d not in dims]
    table = b.reshape(b.transpose(x, dims + rest),
                      [math.prod(shape[d] for d in dims)] + [shape[d] for d in rest])
    rows = _gather_rows(b, table, flat)  # [index_shape..., rest...]
    # torch puts the index dims where the indexed ones were when those are
    # adjacent, else first
    k = len(index_shape)
    lead = dims[0] if dims == list(range(dims[0], dims[-1] + 1)) else 0
    perm = list(range(k, k + lead)) + list(range(k)) + list(range(k + lead, k + len(rest)))
    return b.transpose(rows, perm)


def _positions(b, shape, dims, indices):
    """The positions, in x's `dims` merged row-major, that the integer
    tensors indices[d] (broadcast together; negative ones wrapped) name, -1
    where one of several is out of its dim's range; and their shape. A
    gather or scatter at a position out of range fails as torch does."""
    for d in dims:
        if b.dtype(indices[d]) != "i64":
            raise Unsupported(f"indexing with a {b.dtype(indices[d])} tensor: only integer "
                              f"indices (a boolean mask gives a shape that depends on its values)")
    index_shape = broadcast_shapes(*[b.shape(indices[d]) for d in dims])
    flat, valid = None, None
    for d in dims:  # row-major over the indexed dims, negative indices wrapped
        ix = b.broadcast(indices[d], index_shape)
        ix = b.select(b.binary("lt", ix, 0), b.binary("add", ix, shape[d]), ix)
        valid = _and(b, valid, _in_range(b, ix, shape[d]))
        flat = ix if flat is None else b.binary("add", b.binary("mul", flat, shape[d]), ix)
    if len(dims) > 1:
        flat = _poisoned(b, flat, valid)
    return flat, index_shape


def _in_range(b, ix, n):
    return b.op("mul", [b.convert(b.binary("ge", ix, 0), "i64"),
                        b.convert(b.binary("lt", ix, n), "i64")])


def _and(b, a, c):
    return c if a is None else b.op("mul", [a, c])


def _poisoned(b, flat, valid):
    """A position merged from several dims' indices, -1 where one of them is
    out of its dim's range: the gather then fails as torch does (a merged
    position could land inside the table at another element)."""
    return b.select(b.binary("eq", valid, 0), b.full(-1, "i64", b.shape(flat)), flat)


@aten("index_select.default", torch=_INDEXING, limits=_INDEXING_LIMITS)
def _index_select(b, node, x, dim, index):
    dim = dim % len(b.shape(x))
    return _index(b, node, x, [None] * dim + [index])


@aten("gather.default", torch=_INDEXING, limits=_INDEXING_LIMITS)
def _gather(b, node, x, dim, index, sparse_grad=False):
    """out[p] = x[p with p[dim] = index[p]]: one gather from x flattened, at
    each element's flat position (its gradient a scatter-add)."""
    shape = b.shape(x)
    if len(shape) <= 1:
        return _index(b, node, x, [index])
    dim = dim % len(shape)
    ishape = b.shape(index)
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    flat = b.binary("mul", index, strides[dim]) if strides[dim] != 1 else index
    for d in range(len(shape)):
        if d != dim and ishape[d] > 1:
            at = b.iota("i64", ishape, d)
            flat = b.binary("add", flat, b.binary("mul", at, strides[d]) if strides[d] != 1
                            else at)
    flat = _poisoned(b, flat, _in_range(b, index, shape[dim]))
    return _gather_rows(b, b.reshape(x, [math.prod(shape)]), flat)
