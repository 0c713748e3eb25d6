"""The IR graph the importer builds (wholestep._C.Graph) as the ATen
translations see it: graph values told apart from Python numbers, a
builder with numpy-style broadcasting, and the table the translations
register in (_aten.py, _aten_nn.py).

Each translation receives the node's arguments with graph values (Value)
in place of fx nodes and returns a Value, or a tuple for ops with several
results. Ops without an IR counterpart are compositions of IR ops, written
as wholestep's own C++ layers write them (src/nn/layers.cpp), so that
lowering fuses them alike. An op not in the table is an error naming it,
raised before any step runs.
"""

import operator

import torch

_DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "bool"}

TABLE = {}
# The support table's rows, in registration order: (torch, ATen overloads,
# limits); docs/pytorch.md shows them (_support.py).
SUPPORT = []
# Rows for what is rewritten while tracing (_traceable.py), after the
# translations' rows whatever the order the modules were imported in.
TRACED = []


def ir_dtype(dtype):
    return _DTYPES.get(dtype)


def aten(*names, torch, limits=""):
    """Registers a translation for the ATen overloads `names`
    ("convolution.default"): `torch` names what users write that becomes
    them, `limits` what of it is not translated (an error when met)."""

    def register(fn):
        for name in names:
            TABLE["aten." + name] = fn
        SUPPORT.append((torch, list(names), limits))
        return fn

    return register


class Unsupported(Exception):
    """An op or argument the importer does not translate: the message says
    which; the importer adds the module and the line."""


class Value(int):
    """A value of the IR graph (its id), told apart from a Python number."""


class Transposed:
    """A swap of the last two dims not yet materialized: a matrix product
    reads its source with a transpose flag instead (a transposed view would
    leave oneDNN only its reference kernel for batched products)."""

    def __init__(self, source):
        self.source = source


class Builder:
    """The IR graph being built, with numpy-style helpers."""

    def __init__(self, graph, assign, world_size=1):
        self.g = graph
        # assign(input value, new value): a buffer input holds the new value
        # after the step.
        self.assign = assign
        # Above 1: batch statistics are averaged over this many ranks
        # (synchronized BatchNorm).
        self.world_size = world_size
        # The traced nodes the result or a buffer's mutation depends on
        # (None: every node); see reads_result.
        self.live = None

    def reads_result(self, node, indices):
        """Whether the step reads any of results `indices` of multi-result
        node `node` (a getitem of it that the result depends on, not one
        only dead code reads, as make_fx leaves max_pool1d's indices)."""
        return any(u.target is operator.getitem and u.args[1] in indices
                   and (u.users if self.live is None else u in self.live)
                   for u in node.users)

    def all_reduce_mean(self, v):
        return Value(self.g.all_reduce(int(v), "mean"))

    def op(self, name, args, **attrs):
        return Value(self.g.op(name, list(args), attrs))

    def composite(self, name, *args, **attrs):
        """Composite op `name` of wholestep's C++ library (the one the C++
        API's layers call) on values `args`, None for an optional operand
        absent: its result, or the tuple of its results (None for one it
        does not give)."""
        out = self.g.composite(name, [None if a is None else int(a) for a in args], attrs)
        out = tuple(None if v is None else Value(v) for v in out)
        return out[0] if len(out) == 1 else out

    def constant(self, values, dtype, shape):
        return Value(self.g.constant([float(v) for v in values], dtype, list(shape)))

    def iota(self, dtype, shape, axis):
        """Each element's index along `axis`."""
        return Value(self.g.iota(dtype, list(shape), axis))

    def random_uniform(self, dtype, shape):
        return Value(self.g.random_uniform(dtype, list(shape)))

    def type(self, v):
        dtype, shape = self.g.type(v)
        return dtype, list(shape)

    def shape(self, v):
        return self.type(v)[1]

    def dtype(self, v):
        return self.type(v)[0]

    def full(self, value, dtype, shape):
        return Value(self.g.full(float(value), dtype, list(shape)))

    def convert(self, v, dtype):
        return v if self.dtype(v) == dtype else self.op("convert", [v], dtype=dtype)

    def broadcast(self, v, shape):
        shape = list(shape)
        have = self.shape(v)
        if have == shape:
            return v
        if len(have) > len(shape):
            raise Unsupported(f"cannot broadcast {have} to {shape}")
        if len(have) == 0:
            return self.op("broadcast", [v], dims=[], shape=shape)
        lead = len(shape) - len(have)
        for i, d in enumerate(have):
            if d != 1 and d != shape[lead + i]:
                raise Unsupported(f"cannot broadcast {have} to {shape}")
        return self.op("broadcast", [v], dims=list(range(lead, len(shape))), shape=shape)

    def reshape(self, v, shape):
        shape = list(shape)
        return v if self.shape(v) == shape else self.op("reshape", [v], shape=shape)

    def operand(self, x, dtype, shape):
        """A tensor operand or a Python number, as a value of `dtype` and
        `shape`."""
        if not isinstance(x, Value):
            return self.full(x, dtype, shape)
        return self.broadcast(self.convert(x, dtype), shape)

    def binary(self, name, a, b, dtype=None):
        """`name`(a, b) with numpy broadcasting; numbers take the tensor's
        dtype (torch's rule for Python scalars)."""
        shapes = [self.shape(x) for x in (a, b) if isinstance(x, Value)]
        shape = broadcast_shapes(*shapes)
        if dtype is None:
            dtype = next(self.dtype(x) for x in (a, b) if is_value(x))
        return self.op(name, [self.operand(a, dtype, shape), self.operand(b, dtype, shape)])

    def unary(self, name, x):
        return self.op(name, [x])

    def select(self, cond, a, b):
        shape = self.shape(cond)
        dtype = next((self.dtype(x) for x in (a, b) if is_value(x)), "f32")
        return self.op("select", [cond, self.operand(a, dtype, shape), self.operand(b, dtype, shape)])

    def sum(self, x, axes, keepdim=False):
        shape = self.shape(x)
        axes = sorted(a % len(shape) for a in axes) if shape else []
        if not axes:
            return x
        out = self.op("reduce_sum", [x], axes=axes)
        if keepdim:
            out = self.reshape(out, [1 if i in axes else d for i, d in enumerate(shape)])
        return out

    def mean(self, x, axes, keepdim=False):
        shape = self.shape(x)
        axes = sorted(a % len(shape) for a in axes) if shape else []
        if not axes:
            return x
        return self.composite("mean", x, axes=axes, keepdim=int(keepdim))

    def max(self, x, axes, keepdim=False):
        shape = self.shape(x)
        axes = sorted(a % len(shape) for a in axes)
        out = self.op("reduce_max", [x], axes=axes)
        if keepdim:
            out = self.reshape(out, [1 if i in axes else d for i, d in enumerate(shape)])
        return out

    def matmul(self, a, b):
        ta = isinstance(a, Transposed)
        tb = isinstance(b, Transposed)
        a = a.source if ta else a
        b = b.source if tb else b
        return self.op("matmul", [a, b], transpose_a=int(ta), transpose_b=int(tb))

    def diagonal_offsets(self, rows, cols):
        """i64 [rows, cols] holding j - i at (i, j): masks of triangles."""
        row = self.broadcast(self.constant(range(rows), "i64", [rows, 1]), [rows, cols])
        col = self.broadcast(self.constant(range(cols), "i64", [1, cols]), [rows, cols])
        return self.binary("sub", col, row)

    def take(self, x, dim, index):
        """x's elements at positions `index` (a list) along dim: the C++
        library's composite (one gather with a constant index)."""
        return self.composite("take", x, dim=int(dim), index=[int(i) for i in index])

    def transpose(self, x, perm):
        if list(perm) == list(range(len(perm))):
            return x
        return self.op("transpose", [x], perm=list(perm))


def is_value(x):
    return isinstance(x, Value)


def broadcast_shapes(*shapes):
    if not shapes:
        return []
    return list(torch.broadcast_shapes(*[tuple(s) for s in shapes]))


def along(b, vec, shape, axis):
    return b.op("broadcast", [vec], dims=[axis], shape=list(shape))


def out_shape(node):
    return list(node.meta["val"].shape)


def out_dtype(node):
    dtype = ir_dtype(node.meta["val"].dtype)
    if dtype is None:
        raise Unsupported(f"a result of dtype {node.meta['val'].dtype}")
    return dtype
