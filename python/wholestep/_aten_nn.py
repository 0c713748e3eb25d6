"""ATen's matrix products, convolutions, pooling, normalization, losses
and lookups as IR ops (the table and the builder: _ir.py)."""

import math

from ._ir import Unsupported, along, aten


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
        y = b.op("add", [y, along(b, bias, b.shape(y), 1)])
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
        # Synchronized: the global batch's statistics, each mean averaged
        # over the ranks' equal parts.
        sync = b.world_size > 1
        # Summed in double, as torch sums it (layers.cpp says why).
        mu = b.convert(b.mean(b.convert(x, "f64"), axes), b.dtype(x))
        if sync:
            mu = b.all_reduce_mean(mu)
        xc = b.op("sub", [x, along(b, mu, shape, 1)])
        var = b.mean(b.op("mul", [xc, xc]), axes)
        if sync:
            var = b.all_reduce_mean(var)
            count *= b.world_size
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
        y = b.op("mul", [xc, along(b, inv, shape, 1)])
    else:
        inv = b.unary("rsqrt", b.binary("add", running_var, float(eps)))
        y = b.op("mul", [b.op("sub", [x, along(b, running_mean, shape, 1)]),
                         along(b, inv, shape, 1)])
    if weight is not None:
        y = b.op("mul", [y, along(b, weight, shape, 1)])
    if bias is not None:
        y = b.op("add", [y, along(b, bias, shape, 1)])
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
    if b.dtype(x) != b.dtype(y):
        # torch computes the loss in the wider dtype but its backward then
        # fails ("Found dtype Double but expected Float"): refused alike.
        raise Unsupported(f"mse_loss of {b.dtype(x)}{b.shape(x)} and {b.dtype(y)}{b.shape(y)}: "
                          f"eager torch cannot differentiate it either; give both one dtype "
                          f"(a float32 target: .float())")
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
