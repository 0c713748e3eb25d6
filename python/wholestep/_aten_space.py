"""ATen's padding and resizing (the C++ library's pad and interpolate
composites) and sliding windows as IR ops (the table and the builder:
_ir.py)."""

import math

import numpy as np

from ._ir import Unsupported, aten

# What each translation covers, for the support table (_support.py).
_PADDING = (
    '`F.pad` (`constant`, `reflect`, `replicate`, `circular`), `nn.ZeroPad2d`, '
    '`nn.ReflectionPad2d`, `nn.ReplicationPad2d`')
_RESIZE = (
    '`nn.Upsample`, `F.interpolate` (`nearest`, `nearest-exact`, `linear`, `bilinear`, `bicubic`, '
    '`align_corners`, `size` or `scale_factor`)')


@aten("constant_pad_nd.default", torch=_PADDING)
def _constant_pad(b, node, x, pad, value=0):
    return b.composite("pad", x, pads=list(pad), mode="constant", value=float(value))


def _index_pad(mode):
    def translate(b, node, x, pad):
        return b.composite("pad", x, pads=list(pad), mode=mode)
    return translate


for _name in ("reflection_pad1d", "reflection_pad2d", "reflection_pad3d"):
    aten(f"{_name}.default", torch=_PADDING)(_index_pad("reflect"))
for _name in ("replication_pad1d", "replication_pad2d", "replication_pad3d"):
    aten(f"{_name}.default", torch=_PADDING)(_index_pad("replicate"))


def _resize(b, node, x, mode, align_corners, scales):
    """x [N, C, spatial...] resized to the node's output: the C++ library's
    interpolate composite."""
    sizes = list(node.meta["val"].shape)[2:]
    scales = [float(s) if s else 0.0 for s in (scales or [None] * len(sizes))]
    return b.composite("interpolate", x, sizes=sizes, mode=mode,
                       align_corners=int(bool(align_corners)), scales=scales)


@aten("upsample_nearest1d.vec", "upsample_nearest2d.vec", "upsample_nearest3d.vec", torch=_RESIZE)
def _upsample_nearest_vec(b, node, x, output_size, scale_factors):
    return _resize(b, node, x, "nearest", False, scale_factors)


@aten("upsample_nearest2d.default", torch=_RESIZE)
def _upsample_nearest2d(b, node, x, output_size, scales_h=None, scales_w=None):
    return _resize(b, node, x, "nearest", False, [scales_h, scales_w])


@aten("_upsample_nearest_exact1d.vec", "_upsample_nearest_exact2d.vec",
      "_upsample_nearest_exact3d.vec", torch=_RESIZE)
def _upsample_nearest_exact_vec(b, node, x, output_size, scale_factors):
    return _resize(b, node, x, "nearest_exact", False, scale_factors)


@aten("upsample_linear1d.vec", "upsample_bilinear2d.vec", "upsample_trilinear3d.vec", torch=_RESIZE)
def _upsample_linear_vec(b, node, x, output_size, align_corners, scale_factors):
    return _resize(b, node, x, "linear", align_corners, scale_factors)


@aten("upsample_bilinear2d.default", torch=_RESIZE)
def _upsample_bilinear2d(b, node, x, output_size, align_corners, scales_h=None, scales_w=None):
    return _resize(b, node, x, "linear", align_corners, [scales_h, scales_w])


@aten("upsample_bicubic2d.vec", torch=_RESIZE)
def _upsample_bicubic_vec(b, node, x, output_size, align_corners, scale_factors):
    return _resize(b, node, x, "cubic", align_corners, scale_factors)


@aten("upsample_bicubic2d.default", torch=_RESIZE)
def _upsample_bicubic2d(b, node, x, output_size, align_corners, scales_h=None, scales_w=None):
    return _resize(b, node, x, "cubic", align_corners, [scales_h, scales_w])


# ---------------------------------------------------------------- sliding windows as columns

_COLUMNS = '`nn.Unfold`, `F.unfold`, `nn.Fold`, `F.fold` (any kernel, dilation, padding, stride)'


def _window_positions(padded, kernel, dilation, stride):
    """For each tap (ki, kj) of the kernel and each window (oi, oj), row
    major, the flat position in the padded image it reads; and the windows'
    count."""
    (hp, wp), (kh, kw), (dh, dw), (sh, sw) = padded, kernel, dilation, stride
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise Unsupported(f"a {kh}x{kw} kernel (dilation {dh}x{dw}) over a padded "
                          f"{hp}x{wp} image, which has no window")
    return [(oi * sh + ki * dh) * wp + oj * sw + kj * dw for ki in range(kh) for kj in range(kw)
            for oi in range(oh) for oj in range(ow)], oh * ow


@aten("im2col.default", torch=_COLUMNS)
def _im2col(b, node, x, kernel_size, dilation, padding, stride):
    """Each window's elements as a column [N, C*kh*kw, L]: one gather of the
    zero-padded image at constant positions (its gradient sums the columns
    back, as col2im)."""
    shape = b.shape(x)
    batched = len(shape) == 4
    n, c, h, w = shape if batched else [1] + shape
    (ph, pw), kernel = padding, list(kernel_size)
    x = _constant_pad(b, node, b.reshape(x, [n, c, h, w]), [pw, pw, ph, ph])
    index, windows = _window_positions((h + 2 * ph, w + 2 * pw), kernel, dilation, stride)
    cols = b.take(b.reshape(x, [n, c, (h + 2 * ph) * (w + 2 * pw)]), 2, index)
    rows = c * kernel[0] * kernel[1]
    return b.reshape(cols, [n, rows, windows] if batched else [rows, windows])


@aten("col2im.default", torch=_COLUMNS)
def _col2im(b, node, cols, output_size, kernel_size, dilation, padding, stride):
    """The columns summed into the image they were read from (a scatter-add
    at im2col's positions, its gradient im2col), the padding cut off."""
    shape = b.shape(cols)
    batched = len(shape) == 3
    n, rows, windows = shape if batched else [1] + shape
    (h, w), (ph, pw), (kh, kw) = output_size, padding, kernel_size
    hp, wp = h + 2 * ph, w + 2 * pw
    index, count = _window_positions((hp, wp), (kh, kw), dilation, stride)
    if rows % (kh * kw) or count != windows:
        raise Unsupported(f"fold of columns {shape} into {h}x{w} with a {kh}x{kw} kernel: "
                          f"{count} windows, {kh * kw} taps a channel")
    c = rows // (kh * kw)
    values = b.transpose(b.reshape(cols, [n, c, kh * kw * windows]), [2, 0, 1])
    image = b.op("scatter_add", [b.constant(index, "i64", [len(index)]), values], rows=hp * wp)
    image = b.reshape(b.transpose(image, [1, 2, 0]), [n, c, hp, wp])
    image = b.op("slice", [b.op("slice", [image], axis=2, start=ph, end=ph + h)], axis=3,
                 start=pw, end=pw + w)
    return image if batched else b.reshape(image, [c, h, w])


# ---------------------------------------------------------------- 3-d pooling
#
# Over [N, C, D, H, W], as 2-d ops over depth slices: the depth offsets of
# a kernel are gathered (the input padded in depth first), each becomes a
# batch of 2-d planes [N*D', C, H, W], and the per-offset results combine:
# max pooling keeps the first maximum (torch's window order), average
# pooling sums and divides. (3-d convolutions are conv2d of 5-d operands.)

_VOLUME = ('`nn.MaxPool3d`, `nn.AvgPool3d`, `nn.AdaptiveAvgPool3d` (video models), '
           '`nn.LocalResponseNorm`')


def _triple(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 3 if len(v) == 1 else v


def _pool_size(n, k, s, p, dilation=1, ceil_mode=False):
    """torch's pooled size along one dim: the last window starts inside the
    input or its left padding."""
    span = n + 2 * p - dilation * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    return out - 1 if ceil_mode and (out - 1) * s >= n + p else out


def _depth_slices(b, x, kernel, stride, pad, dilation, fill, out=None):
    """For each kernel offset along depth: x's planes it reads for every
    output depth, as [N*D', C, H, W]; and D' (floor mode unless `out` is
    given; the input padded with `fill`, past its end as far as the last
    window reads)."""
    n, c, d, h, w = b.shape(x)
    if out is None:
        out = _pool_size(d, kernel, stride, pad, dilation)
    right = max(pad, (out - 1) * stride + dilation * (kernel - 1) + 1 - d - pad)
    if pad or right:
        sides = [b.full(fill, b.dtype(x), [n, c, m, h, w]) for m in (pad, right)]
        x = b.op("concat", [v for v in (sides[0], x, sides[1]) if b.shape(v)[2]], axis=2)
    planes = []
    for k in range(kernel):
        index = [o * stride + k * dilation for o in range(out)]
        taken = b.take(x, 2, index)  # [N, C, D', H, W]
        moved = b.transpose(taken, [0, 2, 1, 3, 4])
        planes.append(b.reshape(moved, [n * out, c, h, w]))
    return planes, out


def _from_planes(b, y, n, out_d):
    """[N*D', C', H', W'] back to [N, C', D', H', W']."""
    _, c, h, w = b.shape(y)
    return b.transpose(b.reshape(y, [n, out_d, c, h, w]), [0, 2, 1, 3, 4])


@aten("max_pool3d_with_indices.default", torch=_VOLUME)
def _max_pool3d(b, node, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    kernel = _triple(kernel)
    stride = _triple(stride) if stride else kernel
    padding, dilation = _triple(padding), _triple(dilation)
    out_d = _pool_size(b.shape(x)[2], kernel[0], stride[0], padding[0], dilation[0], ceil_mode)
    planes, _ = _depth_slices(b, x, kernel[0], stride[0], padding[0], dilation[0], -math.inf,
                              out_d)
    best = None
    for plane in planes:
        y = b.composite("max_pool2d", plane, kernel=kernel[1:], stride=stride[1:],
                        padding=padding[1:], dilation=dilation[1:], ceil_mode=int(ceil_mode))
        # a later offset wins only when strictly larger: the first maximum
        best = y if best is None else b.select(b.op("gt", [y, best]), y, best)
    return _from_planes(b, best, b.shape(x)[0], out_d), None


def _window_sizes(n, k, s, p, out, count_include_pad):
    """Each window's element count along one dim as torch's average pooling
    counts it: clipped to the padded input, or to the input itself."""
    sizes = []
    for o in range(out):
        lo = o * s - p
        hi = min(lo + k, n + p)
        if not count_include_pad:
            lo, hi = max(lo, 0), min(hi, n)
        sizes.append(hi - lo)
    return sizes


@aten("avg_pool3d.default", torch=_VOLUME)
def _avg_pool3d(b, node, x, kernel, stride=(), padding=(0,), ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    kernel = _triple(kernel)
    stride = _triple(stride) if stride else kernel
    padding = _triple(padding)
    dims = b.shape(x)[2:]
    out = [_pool_size(n, k, s, p, 1, ceil_mode)
           for n, k, s, p in zip(dims, kernel, stride, padding)]
    floor_out = [_pool_size(n, k, s, p) for n, k, s, p in zip(dims, kernel, stride, padding)]
    plain = (out == floor_out and not divisor_override
             and (count_include_pad or not any(padding)))
    planes, _ = _depth_slices(b, x, kernel[0], stride[0], padding[0], 1, 0.0, out[0])
    total = None
    for plane in planes:
        # plain: each a mean over its 2-d window, their mean the 3-d mean;
        # else each window's sum, divided below by torch's divisor
        y = b.composite("avg_pool2d", plane, kernel=kernel[1:], stride=stride[1:],
                        padding=padding[1:], ceil_mode=int(ceil_mode),
                        **({} if plain else {"divisor_override": 1}))
        total = y if total is None else b.op("add", [total, y])
    n = b.shape(x)[0]
    if plain:
        mean = total if kernel[0] == 1 else b.binary("div", total, float(kernel[0]))
        return _from_planes(b, mean, n, out[0])
    if divisor_override:
        return _from_planes(b, b.binary("div", total, float(divisor_override)), n, out[0])
    sizes = [_window_sizes(*a, count_include_pad)
             for a in zip(dims, kernel, stride, padding, out)]
    divisor = np.einsum("i,j,k->ijk", *[np.array(v, dtype=np.float64) for v in sizes])
    sums = _from_planes(b, total, n, out[0])  # [N, C, D', H', W']
    div = b.constant(divisor.ravel().tolist(), b.dtype(x), out)
    return b.op("div", [sums, b.broadcast(div, b.shape(sums))])


@aten("_adaptive_avg_pool3d.default", torch=_VOLUME)
def _adaptive_avg_pool3d(b, node, x, output_size):
    n, c, d, h, w = b.shape(x)
    out = _triple(output_size)
    if out == [1, 1, 1]:
        return b.mean(x, [2, 3, 4], keepdim=True)
    if all(s % o == 0 for s, o in zip((d, h, w), out)):
        k = [s // o for s, o in zip((d, h, w), out)]
        return _avg_pool3d(b, node, x, k, k)
    # Uneven windows: depth by an averaging matrix, then height and width as
    # 2-d adaptive pooling of the [N, C*D', H, W] planes.
    from ._aten_nn import _adaptive_avg_pool2d, _averaging
    depth = b.constant(_averaging(d, out[0]), b.dtype(x), [out[0], d])
    y = b.op("matmul", [b.op("broadcast", [depth], dims=[2, 3], shape=[n, c, out[0], d]),
                        b.reshape(x, [n, c, d, h * w])])
    y = _adaptive_avg_pool2d(b, node, b.reshape(y, [n, c * out[0], h, w]), out[1:])
    return b.reshape(y, [n, c, *out])