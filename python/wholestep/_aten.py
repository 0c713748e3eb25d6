"""ATen's elementwise, constant and reduction ops as IR ops (the table and
the builder: _ir.py; shapes and indexing: _aten_shape.py; products,
convolutions, pooling and normalization: _aten_nn.py; losses:
_aten_loss.py; embeddings and bags: _aten_lookup.py; padding, resizing
and 3-d ops: _aten_space.py)."""

import math

from ._ir import Unsupported, aten, broadcast_shapes, ir_dtype, is_value, out_dtype, out_shape


# What each translation covers, for the support table (_support.py).
_ARITHMETIC = (
    '`+`, `-`, `*`, `/`, `torch.add`, `torch.sub`, `torch.mul`, `torch.div`, their in-place forms')
_REDUCTIONS = '`sum`, `mean`, `amax`'
_SOFTMAX = '`nn.Softmax`, `nn.LogSoftmax`, `F.softmax`, `F.log_softmax`'
_DROPOUT = '`nn.Dropout`, `nn.Dropout2d`, `F.dropout`'
_DROPOUT_LIMITS = "the masks are wholestep's (below)"
_FILLS = '`torch.zeros`, `ones`, `full`, `zeros_like`, `ones_like`, `full_like`'
_COPIES = '`clone`, `contiguous`, `detach()`'
_ELU = '`nn.ELU`, `nn.SELU`, `nn.CELU`'
_HARD = '`nn.Hardsigmoid`, `nn.Hardswish`'
_SOFTPLUS = '`nn.Softplus`, `nn.Mish`'
_MATH = (
    '`torch.neg`, `exp`, `log`, `sqrt`, `rsqrt`, `tanh`, `sigmoid`, `erf`, `expm1`, `log1p`, '
    '`tan`, `asin`, `acos`, `atan`, `sinh`, `cosh`, `asinh`, `acosh`, `atanh`; `nn.Tanh`, '
    '`nn.Sigmoid`')
_COMPARISONS = 'comparisons (`==`, `!=`, `<`, `<=`, `>`, `>=`)'
_MASKED_FILL = '`masked_fill` (a causal mask buffer)'


def _opname(node):
    """The ATen op's name without its namespace and overload ("zeros_like")."""
    return node.target._schema.name.split("::")[-1]


# ---------------------------------------------------------------- elementwise


@aten("add.Tensor", "add_.Tensor", "add.Scalar", torch=_ARITHMETIC)
def _add(b, node, x, y, alpha=1):
    return b.binary("add", x, _scaled(b, y, alpha), out_dtype(node))


@aten("sub.Tensor", "sub_.Tensor", "sub.Scalar", torch=_ARITHMETIC)
def _sub(b, node, x, y, alpha=1):
    return b.binary("sub", x, _scaled(b, y, alpha), out_dtype(node))


def _scaled(b, y, alpha):
    if alpha == 1:
        return y
    return b.binary("mul", y, float(alpha)) if is_value(y) else y * alpha


@aten("rsub.Scalar", "rsub.Tensor", torch=_ARITHMETIC)
def _rsub(b, node, x, y, alpha=1):
    return _sub(b, node, y, x, alpha)


@aten("mul.Tensor", "mul_.Tensor", "mul.Scalar", "mul_.Scalar", torch=_ARITHMETIC)
def _mul(b, node, x, y):
    if out_dtype(node) == "bool":  # a product of masks (isfinite's decomposition): and
        shape = [int(d) for d in node.meta["val"].shape]
        x, y = b.operand(x, "bool", shape), b.operand(y, "bool", shape)
        return b.select(x, y, b.full(0, "bool", shape))
    return b.binary("mul", x, y, out_dtype(node))


@aten("div.Tensor", "div_.Tensor", "div.Scalar", "div_.Scalar", torch=_ARITHMETIC)
def _div(b, node, x, y):
    return b.binary("div", x, y, out_dtype(node))


@aten("pow.Tensor_Scalar", torch='`x ** c`, `torch.pow` with a number exponent')
def _pow(b, node, x, y):
    if y == 2:
        return b.op("mul", [x, x])
    if y == 0.5:
        return b.unary("sqrt", x)
    return b.binary("pow", x, float(y))


for _name in ["neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "expm1", "log1p",
              "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"]:
    aten(f"{_name}.default", f"{_name}_.default", torch=_MATH)(
        lambda b, node, x, _ir=_name: b.unary(_ir, x))


_GAMMA = ('`torch.lgamma`, `digamma`, `polygamma` (n 0 and 1; n 1 not differentiated), '
          '`mvlgamma`, `erfinv` (and their `torch.special` names)')
_GAMMA_LIMITS = ('polygamma of order 2 and more; digamma\'s gradient is the exact trigamma, '
                 'where torch 1.13\'s float64 one is up to 5e-10 off')


def _floating(b, node, x):
    """x converted to the result's dtype (an integer tensor's lgamma is a
    float tensor, as in torch)."""
    return b.convert(x, out_dtype(node))


for _name in ["lgamma", "digamma", "erfinv"]:
    aten(f"{_name}.default", f"{_name}_.default", torch=_GAMMA, limits=_GAMMA_LIMITS)(
        lambda b, node, x, _ir=_name: b.unary(_ir, _floating(b, node, x)))


@aten("polygamma.default", torch=_GAMMA, limits=_GAMMA_LIMITS)
def _polygamma(b, node, n, x):
    if n == 0:
        return b.unary("digamma", _floating(b, node, x))
    if n == 1:
        return b.unary("trigamma", _floating(b, node, x))
    raise Unsupported(f"polygamma of order {n} (orders 0 and 1 are)")


@aten("polygamma_.default", torch=_GAMMA, limits=_GAMMA_LIMITS)
def _polygamma_(b, node, x, n):
    return _polygamma(b, node, n, x)


@aten("mvlgamma.default", "mvlgamma_.default", torch=_GAMMA, limits=_GAMMA_LIMITS)
def _mvlgamma(b, node, x, p):
    """The multivariate log-gamma: p (p - 1) / 4 log(pi) + sum over j < p
    of lgamma(x - j / 2), in torch's order (j from p - 1 down, then the
    constant). Below (p - 1) / 2, where it is not the density's
    normalizer, it is still that sum, as torch 1.13 computes it."""
    x = _floating(b, node, x)
    terms = [b.unary("lgamma", b.binary("sub", x, j / 2) if j else x)
             for j in range(p - 1, -1, -1)]
    total = terms[0]
    for t in terms[1:]:
        total = b.op("add", [total, t])
    return b.binary("add", total, p * (p - 1) / 4 * math.log(math.pi))


# The activations are the C++ library's composites (src/nn/activations.cpp):
# each computes what torch computes, with torch's gradient at its kinks.
@aten("relu.default", "relu_.default", torch='`nn.ReLU`, `F.relu`')
def _relu(b, node, x):
    return b.composite("relu", x)


@aten("hardtanh.default", "hardtanh_.default", torch='`nn.Hardtanh`, `nn.ReLU6`')
def _hardtanh(b, node, x, lo=-1.0, hi=1.0):
    return b.composite("hardtanh", x, min_value=float(lo), max_value=float(hi))


@aten("clamp.default", "clamp_.default", "clamp_min.default", "clamp_max.default",
      "clamp_min_.default", "clamp_max_.default",
      torch='`torch.clamp`, `clamp_min`, `clamp_max`',
      limits='number bounds')
def _clamp(b, node, x, lo=None, hi=None):
    name = str(node.target)
    if "clamp_max" in name:
        lo, hi = None, lo
    attrs = {}
    if lo is not None:
        attrs["min"] = float(lo)
    if hi is not None:
        attrs["max"] = float(hi)
    return b.composite("clamp", x, **attrs)


@aten("gelu.default", "gelu_.default", torch='`nn.GELU` (`approximate="none"` or `"tanh"`)')
def _gelu(b, node, x, approximate="none"):
    return b.composite("gelu", x, approximate=approximate)


@aten("silu.default", "silu_.default", torch='`nn.SiLU`, `F.silu`')
def _silu(b, node, x):
    return b.composite("silu", x)


@aten("leaky_relu.default", "leaky_relu_.default", torch='`nn.LeakyReLU`, `F.leaky_relu`')
def _leaky_relu(b, node, x, negative_slope=0.01):
    return b.composite("leaky_relu", x, negative_slope=float(negative_slope))


@aten("elu.default", "elu_.default", torch=_ELU)
def _elu(b, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    return b.composite("elu", x, alpha=float(alpha), scale=float(scale),
                       input_scale=float(input_scale))


@aten("celu.default", "celu_.default", torch=_ELU)
def _celu(b, node, x, alpha=1.0):
    return b.composite("elu", x, alpha=float(alpha), input_scale=1.0 / float(alpha))


@aten("hardsigmoid.default", "hardsigmoid_.default", torch=_HARD)
def _hardsigmoid(b, node, x):
    return b.composite("hardsigmoid", x)


@aten("hardswish.default", "hardswish_.default", torch=_HARD)
def _hardswish(b, node, x):
    return b.composite("hardswish", x)


@aten("softplus.default", torch=_SOFTPLUS)
def _softplus(b, node, x, beta=1.0, threshold=20.0):
    return b.composite("softplus", x, beta=float(beta), threshold=float(threshold))


@aten("mish.default", "mish_.default", torch=_SOFTPLUS)
def _mish(b, node, x):
    return b.composite("mish", x)


@aten("log_sigmoid_forward.default", torch="`nn.LogSigmoid`, `F.logsigmoid`")
def _log_sigmoid(b, node, x):
    return b.composite("log_sigmoid", x), None


@aten("_prelu_kernel.default", "prelu.default", torch='`nn.PReLU`, `F.prelu`')
def _prelu(b, node, x, weight):
    return b.composite("prelu", x, weight)


@aten("masked_fill.Scalar", "masked_fill_.Scalar", "masked_fill.Tensor", "masked_fill_.Tensor",
      torch=_MASKED_FILL,
      limits='the value a number or a 0-d tensor')
def _masked_fill(b, node, x, mask, value):
    if is_value(value):
        if b.shape(value):
            raise Unsupported(f"masked_fill with a value of shape {b.shape(value)} (a number or a "
                              f"0-d tensor)")
        value = b.broadcast(b.convert(value, b.dtype(x)), b.shape(x))
    return b.select(b.broadcast(mask, b.shape(x)), value, x)


@aten("zero_.default", torch="`x[a:b] = v`, `x[i] = v`, `fill_`, `zero_`, `copy_`")
def _zero(b, node, x):
    return b.full(0.0, b.dtype(x), b.shape(x))


@aten("fill_.Scalar", "fill_.Tensor", "copy_.default",
      torch="`x[a:b] = v`, `x[i] = v`, `fill_`, `zero_`, `copy_`",
      limits="into slices of step 1, selections, reshapes and permutations of a tensor the "
             "forward made, a buffer or an argument")
def _fill(b, node, x, value, non_blocking=False):
    if is_value(value):
        return b.broadcast(b.convert(value, b.dtype(x)), b.shape(x))
    return b.full(value, b.dtype(x), b.shape(x))


@aten("where.self", torch='`torch.where`')
def _where(b, node, cond, x, y):
    shape = broadcast_shapes(*[b.shape(v) for v in (cond, x, y) if is_value(v)])
    return b.select(b.broadcast(cond, shape), b.operand(x, out_dtype(node), shape),
                    b.operand(y, out_dtype(node), shape))


for _name, _ir in [("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"),
                   ("ge", "ge")]:
    aten(f"{_name}.Tensor", f"{_name}.Scalar", torch=_COMPARISONS)(
        lambda b, node, x, y, _ir=_ir: b.binary(_ir, x, y))


@aten("maximum.default", torch='`torch.maximum`, `torch.minimum`')
def _maximum(b, node, x, y):
    return b.binary("maximum", x, y)


@aten("minimum.default", torch='`torch.maximum`, `torch.minimum`')
def _minimum(b, node, x, y):
    """-max(-x, -y): ties split the gradient as maximum's do (torch's)."""
    return b.unary("neg", b.binary("maximum", b.unary("neg", x), b.unary("neg", y)))


@aten("_to_copy.default",
      torch='`.to(dtype)`, `.float()`, `.double()`',
      limits='float32, float64, int64 and bool')
def _to_copy(b, node, x, dtype=None, **kwargs):
    return b.convert(x, ir_dtype(dtype)) if dtype is not None else x


@aten("clone.default", "contiguous.default", "alias.default", "lift_fresh_copy.default",
      torch=_COPIES)
def _identity(b, node, x, **kwargs):
    return x


@aten("detach.default", torch=_COPIES)
def _detach(b, node, x):
    # The value: the importer makes every value torch computed from tracked
    # values without tracking it (a detach, a torch.no_grad() block) a
    # stop_gradient.
    return x


@aten("dropout.default", "native_dropout.default", torch=_DROPOUT, limits=_DROPOUT_LIMITS)
def _dropout(b, node, x, p, train):
    out = b.composite("dropout", x, p=float(p), training=int(bool(train)))
    return (out, None) if "native" in str(node.target) else out


# The dropout of F.dropout in training, as ATen composes it:
# empty_like -> bernoulli_(p_keep) -> div_(p_keep) -> mul(x, mask).
@aten("empty_like.default", torch=_DROPOUT, limits=_DROPOUT_LIMITS)
def _empty_like(b, node, x, **kwargs):
    return b.full(0.0, b.dtype(x), b.shape(x))


@aten("empty.memory_format", torch="`torch.empty` (as stochastic depth's mask)",
      limits="its values are zeros; only writes of the whole tensor give it meaning")
def _empty(b, node, *args, **kwargs):
    return b.full(0.0, out_dtype(node), out_shape(node))


@aten("bernoulli_.float", torch=_DROPOUT, limits=_DROPOUT_LIMITS)
def _bernoulli(b, node, x, p=0.5, generator=None):
    if generator is not None:
        raise Unsupported("bernoulli_ with a generator (wholestep draws from its own stream)")
    u = b.random_uniform("f32", b.shape(x))
    return b.convert(b.binary("lt", u, float(p)), b.dtype(x))


@aten("zeros_like.default", "ones_like.default", "full_like.default", torch=_FILLS)
def _like(b, node, x, *args, **kwargs):
    value = {"zeros_like": 0.0, "ones_like": 1.0}.get(_opname(node), args[0] if args else 0)
    return b.full(value, out_dtype(node), out_shape(node))


@aten("new_zeros.default", "new_ones.default", "new_full.default", "new_empty.default",
      torch=_FILLS)
def _new_fill(b, node, x, size, *args, **kwargs):
    value = {"new_zeros": 0.0, "new_ones": 1.0, "new_empty": 0.0}.get(_opname(node))
    return b.full(args[0] if value is None else value, out_dtype(node), out_shape(node))


@aten("zeros.default", "ones.default", "full.default", "scalar_tensor.default", torch=_FILLS)
def _full(b, node, *args, **kwargs):
    name = _opname(node)
    value = {"zeros": 0.0, "ones": 1.0}.get(name)
    if value is None:
        value = args[1] if name == "full" else args[0]
    return b.full(value, out_dtype(node), out_shape(node))


@aten("arange.default", "arange.start", "arange.start_step",
      torch='`torch.arange` (position ids)',
      limits='a constant of at most 65536 elements')
def _arange(b, node, *args, **kwargs):
    val = node.meta["val"]
    n = val.numel()
    if n > 1 << 16:
        raise Unsupported(f"an arange of {n} elements")
    start = args[0] if len(args) > 1 else 0
    step = args[2] if len(args) > 2 else 1
    return b.constant([start + i * step for i in range(n)], out_dtype(node), [n])


# ---------------------------------------------------------------- reductions


@aten("sum.dim_IntList", torch=_REDUCTIONS)
def _sum(b, node, x, dims, keepdim=False, dtype=None):
    x = b.convert(x, out_dtype(node))  # a bool sum counts in int64
    return b.sum(x, dims if dims else range(len(b.shape(x))), keepdim)


@aten("sum.default", torch=_REDUCTIONS)
def _sum_all(b, node, x, dtype=None):
    return b.sum(b.convert(x, out_dtype(node)), range(len(b.shape(x))))


@aten("bitwise_not.default", "logical_not.default", "logical_not_.default",
      torch="`~mask`, `logical_not`",
      limits="`~` of bool tensors; `logical_not` of any (true where 0)")
def _not(b, node, x):
    shape = b.shape(x)
    if b.dtype(x) != "bool":
        if "logical" not in str(node.target):
            raise Unsupported(f"bitwise_not of {b.dtype(x)}{shape} (only of bool tensors)")
        return b.binary("eq", x, 0)
    return b.select(x, b.full(0, "bool", shape), b.full(1, "bool", shape))


@aten("tril.default", "triu.default", "tril_.default", "triu_.default",
      torch="`torch.tril`, `torch.triu` (a causal mask)")
def _triangle(b, node, x, diagonal=0):
    shape = b.shape(x)
    offset = b.diagonal_offsets(shape[-2], shape[-1])
    lower = "tril" in _opname(node)
    keep = b.binary("le" if lower else "ge", offset, diagonal)
    return b.select(b.broadcast(keep, shape), x, b.full(0, b.dtype(x), shape))


@aten("mean.dim", torch=_REDUCTIONS)
def _mean(b, node, x, dims, keepdim=False, dtype=None):
    return b.mean(x, dims if dims else range(len(b.shape(x))), keepdim)


@aten("mean.default", torch=_REDUCTIONS)
def _mean_all(b, node, x, dtype=None):
    return b.mean(x, range(len(b.shape(x))))


@aten("amax.default", torch=_REDUCTIONS)
def _amax(b, node, x, dims=(), keepdim=False):
    return b.max(x, dims if dims else range(len(b.shape(x))), keepdim)


@aten("_softmax.default", torch=_SOFTMAX)
def _softmax(b, node, x, dim, half_to_float=False):
    return b.composite("softmax", x, axis=dim)


@aten("_log_softmax.default", torch=_SOFTMAX)
def _log_softmax(b, node, x, dim, half_to_float=False):
    return b.composite("log_softmax", x, axis=dim)
