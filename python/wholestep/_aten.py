"""ATen's elementwise, constant, shape and reduction ops as IR ops (the
table and the builder: _ir.py; products, convolutions, pooling,
normalization and losses: _aten_nn.py)."""

import math

from ._ir import (Transposed, Unsupported, aten, broadcast_shapes, ir_dtype, is_value, out_dtype,
                  out_shape)


# ---------------------------------------------------------------- elementwise


@aten("add.Tensor", "add_.Tensor", "add.Scalar")
def _add(b, node, x, y, alpha=1):
    return b.binary("add", x, _scaled(b, y, alpha), out_dtype(node))


@aten("sub.Tensor", "sub_.Tensor", "sub.Scalar")
def _sub(b, node, x, y, alpha=1):
    return b.binary("sub", x, _scaled(b, y, alpha), out_dtype(node))


def _scaled(b, y, alpha):
    if alpha == 1:
        return y
    return b.binary("mul", y, float(alpha)) if is_value(y) else y * alpha


@aten("rsub.Scalar", "rsub.Tensor")
def _rsub(b, node, x, y, alpha=1):
    return _sub(b, node, y, x, alpha)


@aten("mul.Tensor", "mul_.Tensor", "mul.Scalar", "mul_.Scalar")
def _mul(b, node, x, y):
    return b.binary("mul", x, y, out_dtype(node))


@aten("div.Tensor", "div_.Tensor", "div.Scalar", "div_.Scalar")
def _div(b, node, x, y):
    return b.binary("div", x, y, out_dtype(node))


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
    shape = broadcast_shapes(*[b.shape(v) for v in (cond, x, y) if is_value(v)])
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
    # The value. One a loss's gradient would flow through is refused before
    # the import (_grad_flow.py: the IR has no stop-gradient); any other
    # (a buffer's update, a mask, the forward of compile_forward, autograd's
    # unused saved values) is not differentiated.
    return x


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


# The in-place forms: torch's Linear on one unbatched example squeezes its
# product in place.
@aten("unsqueeze.default", "squeeze.dim", "squeeze.default", "flatten.using_ints",
      "unsqueeze_.default", "squeeze_.dim", "squeeze_.default")
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
