"""torch's backward ops, met in a trace when a forward takes a gradient
itself: torch.autograd.grad(..., create_graph=True) for a gradient
penalty (WGAN-GP, R1) or a physics-informed loss (u_x, u_xx of a network
u). Each is the elementwise formula torch's kernel computes, in IR ops
that wholestep differentiates again (the step's own backward goes
through them)."""

import math

from ._ir import Unsupported, aten

_BACKWARD = ('`torch.autograd.grad(..., create_graph=True)` in a forward, through tanh, '
             'sigmoid, ReLU, LeakyReLU, Hardtanh, ELU, Softplus, SiLU, GELU')
_BACKWARD_LIMITS = "convolutions, pooling and normalization inside the differentiated part"


@aten("tanh_backward.default", torch=_BACKWARD, limits=_BACKWARD_LIMITS)
def _tanh_backward(b, node, g, y):
    """g (1 - y^2), y the tanh."""
    one_minus = b.binary("sub", 1.0, b.op("mul", [y, y]))
    return b.op("mul", [g, one_minus])


@aten("sigmoid_backward.default", torch=_BACKWARD, limits=_BACKWARD_LIMITS)
def _sigmoid_backward(b, node, g, y):
    """g (1 - y) y, y the sigmoid."""
    return b.op("mul", [g, b.op("mul", [b.binary("sub", 1.0, y), y])])


@aten("threshold_backward.default", torch=_BACKWARD, limits=_BACKWARD_LIMITS)
def _threshold_backward(b, node, g, x, threshold):
    """0 where x <= threshold, else g (ReLU's, x its input or output)."""
    return b.select(b.binary("le", x, float(threshold)), 0.0, g)


@aten("leaky_relu_backward.default", torch=_BACKWARD, limits=_BACKWARD_LIMITS)
def _leaky_relu_backward(b, node, g, x, negative_slope, self_is_result):
    return b.select(b.binary("gt", x, 0.0), g, b.binary("mul", g, float(negative_slope)))


@aten("hardtanh_backward.default", torch=_BACKWARD, limits=_BACKWARD_LIMITS)
def _hardtanh_backward(b, node, g, x, lo, hi):
    """0 where x <= lo or x >= hi, else g."""
    inside = b.select(b.binary("le", x, float(lo)), False, b.binary("lt", x, float(hi)))
    return b.select(inside, g, 0.0)


@aten("elu_backward.default", torch=_BACKWARD, limits=_BACKWARD_LIMITS)
def _elu_backward(b, node, g, alpha, scale, input_scale, is_result, v):
    """ELU's (and SELU's, CELU's): g scale where v > 0, else g input_scale
    times (v + alpha scale) when v is the result, alpha scale e^(input_scale
    v) when it is the input."""
    alpha, scale, input_scale = float(alpha), float(scale), float(input_scale)
    if alpha and abs(input_scale * alpha - 1) < 2.0 ** -23:
        # CELU's: torch passes 1 / alpha rounded to float32 (its forward
        # divides in double); the derivative of the forward is 1 / alpha's
        input_scale = 1 / alpha
    if is_result:
        slope = b.binary("mul", b.binary("add", v, alpha * scale), input_scale)
    else:
        slope = b.binary("mul", b.unary("exp", b.binary("mul", v, input_scale)),
                         alpha * scale * input_scale)
    return b.op("mul", [g, b.select(b.binary("gt", v, 0.0), scale, slope)])


@aten("softplus_backward.default", torch=_BACKWARD, limits=_BACKWARD_LIMITS)
def _softplus_backward(b, node, g, x, beta, threshold):
    """g where beta x > threshold, else g z / (z + 1), z = e^(beta x)."""
    bx = b.binary("mul", x, float(beta))
    z = b.unary("exp", bx)
    smooth = b.op("mul", [g, b.op("div", [z, b.binary("add", z, 1.0)])])
    return b.select(b.binary("gt", bx, float(threshold)), g, smooth)


@aten("silu_backward.default", torch=_BACKWARD, limits=_BACKWARD_LIMITS)
def _silu_backward(b, node, g, x):
    """g s (1 + x (1 - s)), s = sigmoid(x)."""
    s = b.unary("sigmoid", x)
    inner = b.binary("add", b.op("mul", [x, b.binary("sub", 1.0, s)]), 1.0)
    return b.op("mul", [g, b.op("mul", [s, inner])])


@aten("gelu_backward.default", torch=_BACKWARD, limits=_BACKWARD_LIMITS)
def _gelu_backward(b, node, g, x, approximate="none"):
    """The exact GELU's: g (Phi(x) + x phi(x)); tanh's: torch's formula,
    g (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)), t = tanh(k (x + c
    x^3)), k = sqrt(2 / pi), c = 0.044715."""
    if approximate == "none":
        cdf = b.binary("mul", b.binary("add", b.unary("erf", b.binary("mul", x, math.sqrt(0.5))),
                                       1.0), 0.5)
        pdf = b.binary("mul", b.unary("exp", b.binary("mul", b.op("mul", [x, x]), -0.5)),
                       1 / math.sqrt(2 * math.pi))
        return b.op("mul", [g, b.op("add", [cdf, b.op("mul", [x, pdf])])])
    if approximate != "tanh":
        raise Unsupported(f"gelu_backward with approximate={approximate!r}")
    k, c = math.sqrt(2 / math.pi), 0.044715
    x2 = b.op("mul", [x, x])
    inner = b.binary("mul", b.op("mul", [x, b.binary("add", b.binary("mul", x2, c), 1.0)]), k)
    t = b.unary("tanh", inner)
    left = b.binary("mul", b.binary("add", t, 1.0), 0.5)
    dinner = b.binary("mul", b.binary("add", b.binary("mul", x2, 3 * c), 1.0), k)
    right = b.op("mul", [b.binary("mul", x, 0.5),
                         b.op("mul", [b.binary("sub", 1.0, b.op("mul", [t, t])), dinner])])
    return b.op("mul", [g, b.op("add", [left, right])])


_SOFTMAX = '`torch.autograd.grad(..., create_graph=True)` through softmax and log_softmax'


@aten("_softmax_backward_data.default", torch=_SOFTMAX, limits=_BACKWARD_LIMITS)
def _softmax_backward(b, node, g, y, dim, input_dtype):
    """y (g - sum(g y)) along dim, y the softmax."""
    total = b.broadcast(b.sum(b.op("mul", [g, y]), [dim], keepdim=True), b.shape(y))
    return b.op("mul", [y, b.op("sub", [g, total])])


@aten("_log_softmax_backward_data.default", torch=_SOFTMAX, limits=_BACKWARD_LIMITS)
def _log_softmax_backward(b, node, g, y, dim, input_dtype):
    """g - e^y sum(g) along dim, y the log_softmax."""
    total = b.broadcast(b.sum(g, [dim], keepdim=True), b.shape(y))
    return b.op("sub", [g, b.op("mul", [b.unary("exp", y), total])])


_VIEWS = '`torch.autograd.grad(..., create_graph=True)` through indexing and slicing'


def _placed(b, g, sizes, dim, start, end):
    """Zeros of `sizes` with g along dim at [start, end)."""
    sizes = [int(s) for s in sizes]
    dim %= len(sizes)
    dtype = b.dtype(g)
    parts = []
    if start > 0:
        parts.append(b.full(0.0, dtype, sizes[:dim] + [start] + sizes[dim + 1:]))
    parts.append(g)
    if end < sizes[dim]:
        parts.append(b.full(0.0, dtype, sizes[:dim] + [sizes[dim] - end] + sizes[dim + 1:]))
    return parts[0] if len(parts) == 1 else b.op("concat", parts, axis=dim)


@aten("select_backward.default", torch=_VIEWS, limits=_BACKWARD_LIMITS)
def _select_backward(b, node, g, sizes, dim, index):
    """g at position index along dim of zeros of the input's size."""
    dim %= len(sizes)
    index %= int(sizes[dim])
    shape = b.shape(g)
    return _placed(b, b.reshape(g, shape[:dim] + [1] + shape[dim:]), sizes, dim, index,
                   index + 1)


@aten("slice_backward.default", torch=_VIEWS, limits=_BACKWARD_LIMITS)
def _slice_backward(b, node, g, sizes, dim, start, end, step):
    """g at [start, end) along dim of zeros of the input's size (step 1)."""
    dim %= len(sizes)
    n = int(sizes[dim])
    start = min(max(start + n if start < 0 else start, 0), n)
    if step != 1:
        raise Unsupported(f"slice_backward with step {step}")
    return _placed(b, g, sizes, dim, start, start + b.shape(g)[dim])


_CONV = '`torch.autograd.grad(..., create_graph=True)` through a convolution, to its input'


@aten("convolution_backward.default", torch=_CONV,
      limits="the input's gradient of a 1-, 2- or 3-d convolution (a gradient penalty's); "
             "not its weight's or bias's, nor a transposed convolution's")
def _convolution_backward(b, node, g, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):
    """(grad_input, None, None): conv2d's input gradient, which wholestep
    differentiates again (to g, and to w: a convolution of the two)."""
    if transposed or output_mask[1] or output_mask[2]:
        raise Unsupported("convolution_backward inside a forward for a transposed convolution "
                          "or for a weight's or bias's gradient (an input's is translated)")
    shape = b.shape(x)
    if len(shape) not in (3, 4, 5):
        raise Unsupported(f"convolution_backward of a {len(shape) - 2}-d convolution")
    attrs = dict(stride=list(stride), padding=list(padding), dilation=list(dilation),
                 groups=groups)
    if len(shape) == 3:  # [N, C, L] as [N, C, 1, L]
        g = b.reshape(g, b.shape(g)[:2] + [1] + b.shape(g)[2:])
        w = b.reshape(w, b.shape(w)[:2] + [1] + b.shape(w)[2:])
        attrs.update(stride=[1] + attrs["stride"], padding=[0] + attrs["padding"],
                     dilation=[1] + attrs["dilation"])
        gi = b.op("conv2d_input_grad", [g, w], input_shape=shape[:2] + [1] + shape[2:], **attrs)
        return b.reshape(gi, shape), None, None
    return b.op("conv2d_input_grad", [g, w], input_shape=shape, **attrs), None, None


@aten("native_layer_norm_backward.default", torch='`torch.autograd.grad(..., create_graph=True)` '
      'through a LayerNorm, to its input', limits="the input's gradient")
def _layer_norm_backward(b, node, g, x, normalized_shape, mean, rstd, weight, bias,
                         output_mask):
    """(grad_input, None, None): rstd (h - mean(h) - xhat mean(h xhat)) over
    the normalized dims, h = g weight, xhat = (x - mean) rstd."""
    if output_mask[1] or output_mask[2]:
        raise Unsupported("native_layer_norm_backward inside a forward for a weight's or "
                          "bias's gradient (an input's is translated)")
    shape = b.shape(x)
    axes = list(range(len(shape) - len(normalized_shape), len(shape)))
    count = 1
    for d in axes:
        count *= shape[d]

    def mean_of(v):
        return b.broadcast(b.binary("mul", b.sum(v, axes, keepdim=True), 1.0 / count), shape)

    rstd = b.broadcast(rstd, shape)
    xhat = b.op("mul", [b.op("sub", [x, b.broadcast(mean, shape)]), rstd])
    h = g if weight is None else b.op("mul", [g, b.broadcast(weight, shape)])
    inner = b.op("sub", [b.op("sub", [h, mean_of(h)]), b.op("mul", [xhat, mean_of(
        b.op("mul", [h, xhat]))])])
    return b.op("mul", [rstd, inner]), None, None
