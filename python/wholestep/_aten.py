"""ATen ops as wholestep IR ops: one translation per op, over the graph the
extension module builds (wholestep._C.Graph).

Each translation receives the node's arguments with graph values in place
of fx nodes (an ``int``: a value of the IR graph) and returns the value,
or a tuple for ops with several results. Ops without an IR counterpart are
compositions of IR ops, written as wholestep's own C++ layers write them
(src/nn/layers.cpp), so that lowering fuses them alike. An op not in the
table is an error naming it, raised before any step runs.
"""

import math
import torch

from . import _C

_DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "bool"}

TABLE = {}


def ir_dtype(dtype):
    return _DTYPES.get(dtype)


def aten(*names):
    """Registers a translation for the ATen overloads `names`
    ("convolution.default")."""

    def register(fn):
        for name in names:
            TABLE["aten." + name] = fn
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

    def __init__(self, graph, assign):
        self.g = graph
        # assign(input value, new value): a buffer input holds the new value
        # after the step.
        self.assign = assign

    def op(self, name, args, **attrs):
        return Value(self.g.op(name, list(args), attrs))

    def constant(self, values, dtype, shape):
        return Value(self.g.constant([float(v) for v in values], dtype, list(shape)))

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
            dtype = next(self.dtype(x) for x in (a, b) if _is_value(x))
        return self.op(name, [self.operand(a, dtype, shape), self.operand(b, dtype, shape)])

    def unary(self, name, x):
        return self.op(name, [x])

    def select(self, cond, a, b):
        shape = self.shape(cond)
        dtype = next((self.dtype(x) for x in (a, b) if _is_value(x)), "f32")
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
        count = math.prod(shape[a] for a in axes)
        return self.binary("div", self.sum(x, axes, keepdim), float(count))

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

    def transpose(self, x, perm):
        if list(perm) == list(range(len(perm))):
            return x
        return self.op("transpose", [x], perm=list(perm))


def _is_value(x):
    return isinstance(x, Value)


def broadcast_shapes(*shapes):
    if not shapes:
        return []
    return list(torch.broadcast_shapes(*[tuple(s) for s in shapes]))


def _along(b, vec, shape, axis):
    return b.op("broadcast", [vec], dims=[axis], shape=list(shape))


# ---------------------------------------------------------------- elementwise


@aten("add.Tensor", "add_.Tensor", "add.Scalar")
def _add(b, node, x, y, alpha=1):
    return b.binary("add", x, _scaled(b, y, alpha))


@aten("sub.Tensor", "sub_.Tensor", "sub.Scalar")
def _sub(b, node, x, y, alpha=1):
    return b.binary("sub", x, _scaled(b, y, alpha))


def _scaled(b, y, alpha):
    if alpha == 1:
        return y
    return b.binary("mul", y, float(alpha)) if _is_value(y) else y * alpha


@aten("rsub.Scalar", "rsub.Tensor")
def _rsub(b, node, x, y, alpha=1):
    return _sub(b, node, y, x, alpha)


@aten("mul.Tensor", "mul_.Tensor", "mul.Scalar", "mul_.Scalar")
def _mul(b, node, x, y):
    return b.binary("mul", x, y)


@aten("div.Tensor", "div_.Tensor", "div.Scalar", "div_.Scalar")
def _div(b, node, x, y):
    return b.binary("div", x, y)


@aten("pow.Tensor_Scalar")
def _pow(b, node, x, y):
    if y == 2:
        return b.op("mul", [x, x])
    if y == 0.5:
        return b.unary("sqrt", x)
    return b.binary("pow", x, float(y))


for _name, _ir in [("neg", "neg"), ("exp", "exp"), ("log", "log"), ("sqrt", "sqrt"),
                   ("rsqrt", "rsqrt"), ("tanh", "tanh"), ("sigmoid", "sigmoid"), ("erf", "erf")]:
    aten(f"{_name}.default", f"{_name}_.default")(
        lambda b, node, x, _ir=_ir: b.unary(_ir, x))


@aten("relu.default", "relu_.default")
def _relu(b, node, x):
    # select, not maximum: torch's threshold_backward gives 0 at x = 0,
    # maximum's rule would give one half.
    return b.select(b.binary("le", x, 0.0), 0.0, x)


@aten("hardtanh.default", "hardtanh_.default")
def _hardtanh(b, node, x, lo=-1.0, hi=1.0):
    inner = b.select(b.binary("ge", x, float(hi)), float(hi), x)
    return b.select(b.binary("le", x, float(lo)), float(lo), inner)


@aten("clamp.default", "clamp_.default", "clamp_min.default", "clamp_max.default")
def _clamp(b, node, x, lo=None, hi=None):
    name = str(node.target)
    if "clamp_max" in name:
        lo, hi = None, lo
    out = x
    if hi is not None:
        out = b.select(b.binary("ge", x, float(hi)), float(hi), out)
    if lo is not None:
        out = b.select(b.binary("le", x, float(lo)), float(lo), out)
    return out


@aten("gelu.default", "gelu_.default")
def _gelu(b, node, x, approximate="none"):
    half = b.binary("mul", x, 0.5)
    if approximate == "tanh":
        cube = b.binary("mul", b.op("mul", [b.op("mul", [x, x]), x]), 0.044715)
        inner = b.binary("mul", b.binary("add", x, cube), math.sqrt(2.0 / math.pi))
        return b.op("mul", [half, b.binary("add", b.unary("tanh", inner), 1.0)])
    return b.op("mul", [half, b.binary("add", b.unary("erf", b.binary("mul", x, math.sqrt(0.5))),
                                       1.0)])


@aten("silu.default", "silu_.default")
def _silu(b, node, x):
    return b.op("mul", [x, b.unary("sigmoid", x)])


@aten("where.self")
def _where(b, node, cond, x, y):
    shape = broadcast_shapes(*[b.shape(v) for v in (cond, x, y) if _is_value(v)])
    return b.select(b.broadcast(cond, shape), b.operand(x, out_dtype(node), shape),
                    b.operand(y, out_dtype(node), shape))


for _name, _ir in [("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"),
                   ("ge", "ge")]:
    aten(f"{_name}.Tensor", f"{_name}.Scalar")(
        lambda b, node, x, y, _ir=_ir: b.binary(_ir, x, y))


@aten("maximum.default")
def _maximum(b, node, x, y):
    return b.binary("maximum", x, y)


@aten("_to_copy.default")
def _to_copy(b, node, x, dtype=None, **kwargs):
    return b.convert(x, ir_dtype(dtype)) if dtype is not None else x


@aten("clone.default", "contiguous.default", "alias.default", "lift_fresh_copy.default")
def _identity(b, node, x, **kwargs):
    return x


@aten("detach.default")
def _detach(b, node, x):
    # Unused detaches (autograd's saved values) are dropped before
    # translation. One of a value no gradient flows through (a constant,
    # an index) is the value; any other would need to stop the gradient.
    source = node.args[0].meta.get("val")
    if isinstance(source, torch.Tensor) and not source.requires_grad:
        return x
    raise Unsupported("a detach() of a value that depends on parameters (the IR has no "
                      "stop-gradient)")


@aten("dropout.default", "native_dropout.default")
def _dropout(b, node, x, p, train):
    if not train or p == 0:
        return (x, None) if "native" in str(node.target) else x
    keep = b.binary("lt", b.random_uniform(b.dtype(x), b.shape(x)), 1.0 - p)
    out = b.select(keep, b.binary("div", x, 1.0 - p), 0.0)
    return (out, keep) if "native" in str(node.target) else out


# The dropout of F.dropout in training, as ATen composes it:
# empty_like -> bernoulli_(p_keep) -> div_(p_keep) -> mul(x, mask).
@aten("empty_like.default")
def _empty_like(b, node, x, **kwargs):
    return b.full(0.0, b.dtype(x), b.shape(x))


@aten("bernoulli_.float")
def _bernoulli(b, node, x, p=0.5, generator=None):
    if generator is not None:
        raise Unsupported("bernoulli_ with a generator (wholestep draws from its own stream)")
    u = b.random_uniform("f32", b.shape(x))
    return b.convert(b.binary("lt", u, float(p)), b.dtype(x))


@aten("zeros_like.default", "ones_like.default", "full_like.default")
def _like(b, node, x, *args, **kwargs):
    value = {"zeros_like": 0.0, "ones_like": 1.0}.get(node.target._opname, args[0] if args else 0)
    return b.full(value, out_dtype(node), out_shape(node))


@aten("zeros.default", "ones.default", "full.default", "scalar_tensor.default")
def _full(b, node, *args, **kwargs):
    name = node.target._opname
    value = {"zeros": 0.0, "ones": 1.0}.get(name)
    if value is None:
        value = args[1] if name == "full" else args[0]
    return b.full(value, out_dtype(node), out_shape(node))


@aten("arange.default", "arange.start", "arange.start_step")
def _arange(b, node, *args, **kwargs):
    val = node.meta["val"]
    n = val.numel()
    if n > 1 << 16:
        raise Unsupported(f"an arange of {n} elements")
    start = args[0] if len(args) > 1 else 0
    step = args[2] if len(args) > 2 else 1
    return b.constant([start + i * step for i in range(n)], out_dtype(node), [n])


# ---------------------------------------------------------------- shapes


@aten("view.default", "_reshape_alias.default", "_unsafe_view.default", "reshape.default")
def _view(b, node, x, *args):
    return b.reshape(x, out_shape(node))


@aten("expand.default")
def _expand(b, node, x, size, implicit=False):
    return b.broadcast(x, out_shape(node))


@aten("t.default")
def _t(b, node, x):
    if len(b.shape(x)) < 2:
        return x
    return Transposed(x)


@aten("permute.default")
def _permute(b, node, x, dims):
    rank = len(b.shape(x))
    return b.transpose(x, [d % rank for d in dims])


@aten("transpose.int")
def _transpose(b, node, x, d0, d1):
    rank = len(b.shape(x))
    perm = list(range(rank))
    d0, d1 = d0 % rank, d1 % rank
    if d0 != d1 and {d0, d1} == {rank - 2, rank - 1}:
        return Transposed(x)  # a matrix product reads it with its transpose flag
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.transpose(x, perm)


@aten("unsqueeze.default", "squeeze.dim", "squeeze.default", "flatten.using_ints")
def _reshape_like(b, node, x, *args):
    return b.reshape(x, out_shape(node))


@aten("cat.default")
def _cat(b, node, xs, dim=0):
    xs = [x for x in xs if math.prod(b.shape(x)) > 0 or len(xs) == 1]
    if len(xs) == 1:
        return xs[0]
    return b.op("concat", xs, axis=dim % len(b.shape(xs[0])))


@aten("split.Tensor", "split_with_sizes.default")
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


@aten("slice.Tensor")
def _slice(b, node, x, dim=0, start=None, end=None, step=1):
    shape = b.shape(x)
    dim = dim % len(shape)
    n = shape[dim]
    start = 0 if start is None else (start + n if start < 0 else start)
    end = n if end is None else (end + n if end < 0 else end)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    if step != 1:
        raise Unsupported(f"a slice with step {step} (only step 1)")
    if start == 0 and end == n:
        return x
    return b.op("slice", [x], axis=dim, start=start, end=end)


@aten("select.int")
def _select_int(b, node, x, dim, index):
    shape = b.shape(x)
    dim = dim % len(shape)
    index = index % shape[dim]
    s = b.op("slice", [x], axis=dim, start=index, end=index + 1)
    return b.reshape(s, out_shape(node))


# ---------------------------------------------------------------- reductions


@aten("sum.dim_IntList")
def _sum(b, node, x, dims, keepdim=False, dtype=None):
    return b.sum(x, dims if dims else range(len(b.shape(x))), keepdim)


@aten("sum.default")
def _sum_all(b, node, x, dtype=None):
    return b.sum(x, range(len(b.shape(x))))


@aten("mean.dim")
def _mean(b, node, x, dims, keepdim=False, dtype=None):
    return b.mean(x, dims if dims else range(len(b.shape(x))), keepdim)


@aten("mean.default")
def _mean_all(b, node, x, dtype=None):
    return b.mean(x, range(len(b.shape(x))))


@aten("amax.default")
def _amax(b, node, x, dims=(), keepdim=False):
    return b.max(x, dims if dims else range(len(b.shape(x))), keepdim)


@aten("_softmax.default")
def _softmax(b, node, x, dim, half_to_float=False):
    e = b.unary("exp", b.binary("sub", x, b.max(x, [dim], keepdim=True)))
    return b.binary("div", e, b.sum(e, [dim], keepdim=True))


@aten("_log_softmax.default")
def _log_softmax(b, node, x, dim, half_to_float=False):
    s = b.binary("sub", x, b.max(x, [dim], keepdim=True))
    lse = b.unary("log", b.sum(b.unary("exp", s), [dim], keepdim=True))
    return b.binary("sub", s, lse)


# ---------------------------------------------------------------- products


@aten("mm.default", "bmm.default")
def _mm(b, node, x, y):
    return b.matmul(x, y)


@aten("addmm.default")
def _addmm(b, node, bias, x, y, beta=1, alpha=1):
    prod = b.matmul(x, y)
    if alpha != 1:
        prod = b.binary("mul", prod, float(alpha))
    if beta != 1:
        bias = b.binary("mul", bias, float(beta))
    return b.binary("add", prod, bias)


@aten("convolution.default")
def _convolution(b, node, x, w, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
    if transposed:
        raise Unsupported("a transposed convolution")
    if len(b.shape(x)) != 4:
        raise Unsupported(f"a {len(b.shape(x)) - 2}-d convolution (only 2-d)")
    if len(set(padding)) > 1 and len(padding) != 2:
        raise Unsupported(f"convolution padding {padding}")
    y = b.op("conv2d", [x, w], stride=list(stride), padding=list(padding),
             dilation=list(dilation), groups=groups)
    if bias is not None:
        y = b.op("add", [y, _along(b, bias, b.shape(y), 1)])
    return y


# ---------------------------------------------------------------- pooling


def _pool_out(n, k, s, p, ceil):
    span = n + 2 * p - k
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


@aten("max_pool2d_with_indices.default")
def _max_pool2d(b, node, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    kernel = _pair(kernel)
    stride = _pair(stride) if stride else kernel
    padding = _pair(padding)
    if _pair(dilation) != [1, 1]:
        raise Unsupported(f"max_pool2d with dilation {list(dilation)}")
    h, w = b.shape(x)[2:]
    if ceil_mode and any(_pool_out(n, k, s, p, True) != _pool_out(n, k, s, p, False)
                         for n, k, s, p in zip((h, w), kernel, stride, padding)):
        raise Unsupported(f"max_pool2d with ceil_mode=True where it adds a window "
                          f"(input {h}x{w}, kernel {kernel}, stride {stride}); "
                          f"choose an input size where it does not")
    out = b.op("max_pool2d", [x], kernel=kernel, stride=stride, padding=padding)
    return out, None


@aten("avg_pool2d.default")
def _avg_pool2d(b, node, x, kernel, stride=(), padding=(0,), ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    kernel = _pair(kernel)
    stride = _pair(stride) if stride else kernel
    padding = _pair(padding)
    h, w = b.shape(x)[2:]
    if ceil_mode and any(_pool_out(n, k, s, p, True) != _pool_out(n, k, s, p, False)
                         for n, k, s, p in zip((h, w), kernel, stride, padding)):
        raise Unsupported("avg_pool2d with ceil_mode=True where it adds a window")
    if divisor_override is not None:
        raise Unsupported("avg_pool2d with divisor_override")
    return b.op("avg_pool2d", [x], kernel=kernel, stride=stride, padding=padding,
                count_include_pad=int(count_include_pad))


@aten("_adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(b, node, x, output_size):
    n, c, h, w = b.shape(x)
    oh, ow = _pair(output_size)
    if (oh, ow) == (h, w):
        return x
    if h % oh == 0 and w % ow == 0:
        k = [h // oh, w // ow]
        return b.op("avg_pool2d", [x], kernel=k, stride=k)
    # Uneven windows [floor(i*H/O), ceil((i+1)*H/O)): an averaging matrix
    # per axis, exact and differentiable: A_h @ x @ A_w^T.
    rows = b.constant(_averaging(h, oh), "f32", [oh, h])
    cols = b.constant(_averaging(w, ow), "f32", [ow, w])
    left = b.op("broadcast", [rows], dims=[2, 3], shape=[n, c, oh, h])
    right = b.op("broadcast", [cols], dims=[2, 3], shape=[n, c, ow, w])
    y = b.op("matmul", [left, x])
    return b.op("matmul", [y, right], transpose_b=1)


def _averaging(n, out):
    m = [0.0] * (out * n)
    for i in range(out):
        lo, hi = (i * n) // out, -(-((i + 1) * n) // out)
        for j in range(lo, hi):
            m[i * n + j] = 1.0 / (hi - lo)
    return m


def _pair(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 2 if len(v) == 1 else v


# ---------------------------------------------------------------- normalization


@aten("native_batch_norm.default")
def _batch_norm(b, node, x, weight, bias, running_mean, running_var, training, momentum, eps):
    shape = b.shape(x)
    axes = [a for a in range(len(shape)) if a != 1]
    count = math.prod(shape[a] for a in axes)
    if training:
        if count < 2:
            raise Unsupported(f"batch_norm training on input {shape}: more than one value per "
                              f"channel is needed")
        mu = b.mean(x, axes)
        xc = b.op("sub", [x, _along(b, mu, shape, 1)])
        var = b.mean(b.op("mul", [xc, xc]), axes)
        if running_mean is not None:
            if momentum is None:
                raise Unsupported("BatchNorm with momentum=None (a cumulative average)")
            m = float(momentum)
            b.assign(running_mean, b.binary(
                "add", b.binary("mul", running_mean, 1.0 - m), b.binary("mul", mu, m)))
            unbiased = b.binary("mul", var, count / (count - 1))
            b.assign(running_var, b.binary(
                "add", b.binary("mul", running_var, 1.0 - m), b.binary("mul", unbiased, m)))
        inv = b.unary("rsqrt", b.binary("add", var, float(eps)))
        y = b.op("mul", [xc, _along(b, inv, shape, 1)])
    else:
        inv = b.unary("rsqrt", b.binary("add", running_var, float(eps)))
        y = b.op("mul", [b.op("sub", [x, _along(b, running_mean, shape, 1)]),
                         _along(b, inv, shape, 1)])
    if weight is not None:
        y = b.op("mul", [y, _along(b, weight, shape, 1)])
    if bias is not None:
        y = b.op("add", [y, _along(b, bias, shape, 1)])
    return y, None, None


@aten("native_layer_norm.default")
def _layer_norm(b, node, x, normalized_shape, weight, bias, eps):
    shape = b.shape(x)
    k = len(normalized_shape)
    axes = list(range(len(shape) - k, len(shape)))
    xc = b.binary("sub", x, b.mean(x, axes, keepdim=True))
    var = b.mean(b.op("mul", [xc, xc]), axes, keepdim=True)
    y = b.binary("mul", xc, b.unary("rsqrt", b.binary("add", var, float(eps))))
    if weight is not None:
        y = b.binary("mul", y, weight)
    if bias is not None:
        y = b.binary("add", y, bias)
    return y, None, None


# ---------------------------------------------------------------- losses, lookups


@aten("nll_loss_forward.default")
def _nll_loss(b, node, logp, target, weight, reduction, ignore_index):
    if weight is not None:
        raise Unsupported("nll_loss / cross_entropy with class weights")
    shape = b.shape(logp)
    if len(shape) != 2:
        raise Unsupported(f"nll_loss over input {shape} (only [N, C])")
    # A label equal to ignore_index (-100) is outside [0, C): the step
    # reports it before running instead of ignoring it.
    hot = b.op("one_hot", [target], dtype=b.dtype(logp), num_classes=shape[1])
    picked = b.sum(b.op("mul", [logp, hot]), [1])
    if reduction == 0:
        return b.unary("neg", picked), None
    total = b.sum(picked, [0])
    if reduction == 1:
        total = b.binary("div", total, float(shape[0]))
    return b.unary("neg", total), None


@aten("mse_loss.default")
def _mse_loss(b, node, x, y, reduction=1):
    d = b.binary("sub", x, y)
    sq = b.op("mul", [d, d])
    if reduction == 0:
        return sq
    axes = range(len(b.shape(sq)))
    return b.mean(sq, axes) if reduction == 1 else b.sum(sq, axes)


@aten("embedding.default")
def _embedding(b, node, table, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if padding_idx is not None and padding_idx >= 0:
        raise Unsupported("an Embedding with padding_idx")
    if scale_grad_by_freq:
        raise Unsupported("an Embedding with scale_grad_by_freq")
    return b.op("gather", [table, indices])


def out_shape(node):
    return list(node.meta["val"].shape)


def out_dtype(node):
    dtype = ir_dtype(node.meta["val"].dtype)
    if dtype is None:
        raise Unsupported(f"a result of dtype {node.meta['val'].dtype}")
    return dtype

