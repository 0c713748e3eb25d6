"""Lookups as IR ops: nn.Embedding and nn.EmbeddingBag (sum, mean and max
bags over offsets or a 2-d input), their offsets checked as torch checks
them, and positions among sorted boundaries (bucketize, searchsorted) (the
table and the builder: _ir.py; the rest of the nn ops:
_aten_nn.py)."""

import math

from ._aten_nn import _cumsum_rows
from ._ir import Unsupported, Value, along, aten


# ---------------------------------------------------------------- lookups


@aten("embedding.default", torch='`nn.Embedding` (`padding_idx`, `scale_grad_by_freq`)')
def _embedding(b, node, table, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    rows = b.op("gather", [table, indices])
    shape, ishape = b.shape(rows), b.shape(indices)

    def per_row(v):  # a value per index, broadcast over its row
        return b.broadcast(b.reshape(v, ishape + [1] * (len(shape) - len(ishape))), shape)

    if scale_grad_by_freq:
        # each row's gradient divided by how often its index occurs in the
        # batch: rows + (rows - rows) * scale has the value of rows exactly
        # and the gradient scale
        flat = b.reshape(indices, [math.prod(ishape)])
        ones = b.full(1.0, b.dtype(table), [math.prod(ishape), 1])
        counts = b.op("scatter_add", [flat, ones], rows=b.shape(table)[0])
        scale = b.op("div", [b.full(1.0, b.dtype(table), ishape),
                             b.reshape(b.op("gather", [counts, flat]), ishape)])
        frozen = b.unary("stop_gradient", rows)
        rows = b.op("add", [frozen, b.op("mul", [b.op("sub", [rows, frozen]), per_row(scale)])])
    if padding_idx is not None and padding_idx >= 0:
        # the padding row is read, but no gradient reaches it
        at_pad = per_row(b.binary("eq", indices, padding_idx))
        rows = b.select(at_pad, b.unary("stop_gradient", rows), rows)
    return rows


_BAGS = ('`nn.EmbeddingBag`, `F.embedding_bag` (`mode="sum"`, `"mean"` or `"max"`, offsets '
         'or 2-d input, `per_sample_weights`, `padding_idx`, `include_last_offset`)')
_BAGS_LIMITS = ('`scale_grad_by_freq` refused; offsets that do not start '
                'at 0, decrease or pass the end fail the step, as torch raises')


def _checked_offsets(b, offsets, n):
    """The offsets, once they are what torch accepts (the first 0, none
    decreasing, none past the n indices); else the step fails as torch's
    call raises."""
    k = b.shape(offsets)[0]
    first = b.op("slice", [offsets], axis=0, start=0, end=1)
    offsets = b.op("check", [offsets, b.binary("eq", first, 0)],
                   message="offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                           "has to start from position 0")
    if k > 1:
        rises = b.binary("ge", b.op("slice", [offsets], axis=0, start=1, end=k),
                         b.op("slice", [offsets], axis=0, start=0, end=k - 1))
        offsets = b.op("check", [offsets, rises],
                       message="offsets must not decrease: offsets[i + 1] is below offsets[i] "
                               "at the position i given")
    return b.op("check", [offsets, b.binary("le", offsets, n)],
                message=f"offsets can not be greater than the input's length {n}")


def _bag_ids(b, offsets, n):
    """Each position's bag: the running count of the bags started at or
    before it, less one (a product with a triangle of ones, exact: f32 holds
    every count below 2^24)."""
    starts = b.op("scatter_add", [offsets, b.full(1.0, "f32", [b.shape(offsets)[0], 1])],
                  rows=n + 1)
    count = _cumsum_rows(b, b.reshape(starts, [1, n + 1]))
    return b.binary("sub", b.convert(b.reshape(b.op("slice", [count], axis=1, start=0, end=n),
                                               [n]), "i64"), 1)


def _bag_max(b, rows, ids, offsets, n, bags, keep, ones):
    """Each bag's largest rows element by element, the positions `keep`
    (not padding; `ones` its count of each position [n, 1]) alone, 0 for a
    bag without one: a running maximum within
    each bag (log2 n doubling steps) read at the bag's last position. The
    gradient goes to the rows the maxima came from, split among ties (equal
    rows of one index sum back to torch's)."""
    d = b.shape(rows)[1:]
    dtype = b.dtype(rows)
    wide = [n] + d

    def per_position(v):
        return b.broadcast(b.reshape(v, [n] + [1] * len(d)), wide)

    if keep is not None:
        rows = b.select(per_position(keep), rows, b.full(-math.inf, dtype, wide))
    k = 1
    while k < n:
        before = b.op("concat", [b.full(-math.inf, dtype, [k] + d),
                                 b.op("slice", [rows], axis=0, start=0, end=n - k)], axis=0)
        earlier = b.op("concat", [b.full(-1, "i64", [k]),
                                  b.op("slice", [ids], axis=0, start=0, end=n - k)], axis=0)
        rows = b.select(per_position(b.binary("eq", ids, earlier)),
                        b.binary("maximum", rows, before), rows)
        k *= 2
    k = b.shape(offsets)[0]
    ends = b.op("slice", [offsets], axis=0, start=1, end=k) if k > 1 else None
    if bags == k:  # the last bag ends at the last index
        end = b.full(n, "i64", [1])
        ends = end if ends is None else b.op("concat", [ends, end], axis=0)
    counts = b.reshape(b.op("scatter_add", [ids, ones], rows=bags + 1), [bags + 1])
    counts = b.op("slice", [counts], axis=0, start=0, end=bags)  # past the last offset: left out
    last = b.binary("sub", ends, 1)
    last = b.select(b.binary("ge", last, 0), last, b.full(0, "i64", [bags]))
    top = b.op("gather", [rows, last])
    found = b.broadcast(b.reshape(b.binary("gt", counts, 0.0), [bags] + [1] * len(d)),
                        [bags] + d)
    return b.select(found, top, b.full(0.0, dtype, [bags] + d))


def _fixed_bags(node, n):
    """The bag length of offsets arange(0, n, length), as torch makes them
    for a 2-d input, or None."""
    source = node.args[2]
    if getattr(source, "target", None) is not None and str(source.target) == \
            "aten.arange.start_step" and source.args[0] == 0 and source.args[1] == n and \
            isinstance(source.args[2], int) and n % source.args[2] == 0:
        return source.args[2]
    return None


@aten("_embedding_bag.default", "_embedding_bag_forward_only.default", torch=_BAGS,
      limits=_BAGS_LIMITS)
def _embedding_bag(b, node, table, indices, offsets, scale_grad_by_freq=False, mode=0,
                   sparse=False, per_sample_weights=None, include_last_offset=False,
                   padding_idx=-1):
    """The rows of the table at the indices, weighted, summed into their
    bags (a scatter-add: its gradient a gather), a mean divided by the bag's
    count of indices that are not padding, an empty bag zero as torch's."""
    if mode == 2 and per_sample_weights is not None:
        raise Unsupported("EmbeddingBag with mode='max' and per_sample_weights (torch takes "
                          "them with mode='sum' alone)")
    if scale_grad_by_freq:
        # this torch's kernel scales the rows' gradients by no count of
        # theirs (an index met once may get half its gradient): refused
        # rather than given a gradient eager does not give
        raise Unsupported("EmbeddingBag with scale_grad_by_freq=True (torch's own gradients "
                          "there are not the inverse frequencies it documents)")
    n = b.shape(indices)[0]
    if n >= 1 << 24:
        raise Unsupported(f"EmbeddingBag of {n} indices (at most 2^24)")
    bags = b.shape(offsets)[0] - int(bool(include_last_offset))
    rows = b.op("gather", [table, indices])
    d = b.shape(rows)[1:]
    if per_sample_weights is not None:
        rows = b.op("mul", [rows, along(b, per_sample_weights, b.shape(rows), 0)])
    keep = None
    if padding_idx is not None and padding_idx >= 0:
        keep = b.binary("ne", indices, padding_idx)
        rows = b.select(along(b, keep, b.shape(rows), 0), rows,
                        b.full(0.0, b.dtype(rows), b.shape(rows)))
    ones = b.full(1.0, b.dtype(rows), [n, 1]) if keep is None else \
        b.reshape(b.convert(keep, b.dtype(rows)), [n, 1])
    if mode == 2:
        checked = _checked_offsets(b, offsets, n)
        return _bag_max(b, rows, _bag_ids(b, checked, n), checked, n, bags, keep, ones), None, \
            None, None
    length = _fixed_bags(node, n)
    if length is not None and n // length == bags:
        out = b.sum(b.reshape(rows, [bags, length] + d), [1])
        count = b.sum(b.reshape(ones, [bags, length]), [1], keepdim=True)
    else:
        ids = _bag_ids(b, _checked_offsets(b, offsets, n), n)
        extra = int(bool(include_last_offset))  # positions past the last offset: dropped
        out = b.op("scatter_add", [ids, rows], rows=bags + extra)
        count = b.op("scatter_add", [ids, ones], rows=bags + extra)
        if extra:
            out = b.op("slice", [out], axis=0, start=0, end=bags)
            count = b.op("slice", [count], axis=0, start=0, end=bags)
    if mode == 1:
        count = b.reshape(b.composite("clamp", count, min=1.0), [bags] + [1] * len(d))
        out = b.binary("div", out, b.broadcast(count, b.shape(out)))
    return out, None, None, None


# ---------------------------------------------------------------- bucketing

_BUCKETS = '`torch.bucketize`, `torch.searchsorted` (`right`, `side`)'
_BUCKETS_LIMITS = ('int64 results (not `out_int32`), no `sorter`; work and memory of the '
                   'values times the boundaries')


def _common(b, *values):
    kinds = [b.dtype(v) for v in values]
    return "f64" if "f64" in kinds else "f32" if "f32" in kinds else "i64"


def _positions_in(b, values, boundaries, right, what):
    """Each value's position among sorted boundaries along their last dim
    as torch's binary search finds it: the count of boundaries b with
    not (b >= v) (right: not (b > v)), so a NaN value goes past them all.
    values [..., M] and boundaries [..., B] (leading dims equal), or 1-d
    boundaries for any values."""
    dtype = _common(b, values, boundaries)
    values, boundaries = b.convert(values, dtype), b.convert(boundaries, dtype)
    vs, bs = b.shape(values), b.shape(boundaries)
    if not bs:
        raise Unsupported(f"{what} with 0-d boundaries")
    if len(bs) > 1 and vs[:-1] != bs[:-1]:
        raise Unsupported(f"{what}: the sorted sequence {bs} and the values {vs} differ in "
                          f"their leading dims")
    shape = vs + [bs[-1]]
    v = b.broadcast(b.reshape(values, vs + [1]), shape)
    if len(bs) == 1:
        s = b.broadcast(boundaries, shape)
    else:
        s = b.broadcast(b.reshape(boundaries, bs[:-1] + [1, bs[-1]]), shape)
    above = b.convert(b.op("gt" if right else "ge", [s, v]), "i64")
    return b.binary("sub", bs[-1], b.sum(above, [len(shape) - 1]))


def _refuse_options(out_int32, sorter, what):
    if out_int32:
        raise Unsupported(f"{what} with out_int32=True (int32 results)")
    if sorter is not None:
        raise Unsupported(f"{what} with a sorter")


@aten("bucketize.Tensor", "bucketize.Scalar", torch=_BUCKETS, limits=_BUCKETS_LIMITS)
def _bucketize(b, node, x, boundaries, out_int32=False, right=False):
    _refuse_options(out_int32, None, "bucketize")
    if not isinstance(x, Value):
        x = b.full(x, b.dtype(boundaries), [])
    if len(b.shape(boundaries)) != 1:
        raise Unsupported(f"bucketize with boundaries {b.shape(boundaries)} (1-d only, as torch)")
    return _positions_in(b, x, boundaries, right, "bucketize")


@aten("searchsorted.Tensor", "searchsorted.Scalar", torch=_BUCKETS, limits=_BUCKETS_LIMITS)
def _searchsorted(b, node, sequence, values, out_int32=False, right=False, side=None,
                  sorter=None):
    _refuse_options(out_int32, sorter, "searchsorted")
    right = right or side == "right"
    if not isinstance(values, Value):
        values = b.full(values, b.dtype(sequence), [])
    if len(b.shape(sequence)) > 1 and not b.shape(values):
        raise Unsupported("searchsorted of a number in a sequence of more than one dim")
    return _positions_in(b, values, sequence, right, "searchsorted")
