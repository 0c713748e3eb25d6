"""A spatial transformer's ops: F.affine_grid (2-d) and F.grid_sample
(2-d; bilinear or nearest, zeros or border padding), each a few IR ops
with torch's formulas and gradients (the table and the builder: _ir.py)."""

import numpy as np

from ._aten_round import _floor, _round
from ._aten_reduce import linspace_values
from ._ir import Unsupported, aten

_SAMPLE = ('`F.affine_grid` (2-d), `F.grid_sample` (2-d: `bilinear` or `nearest`, padding '
           '`zeros` or `border`, `align_corners` both ways)')
_SAMPLE_LIMITS = "bicubic sampling and reflection padding refused"
# From this many channels grid_sample reads a corner as a row of channels.
_CHANNEL_ROWS = 16


def _base_axis(n, align_corners, dtype):
    """torch's base grid along one axis, computed as torch computes it in
    the grid's dtype (the bits decide which side of a pixel a sample on
    it reads): linspace(-1, 1, n), times (n - 1) then over n unless
    align_corners."""
    t = np.float32 if dtype == "f32" else np.float64
    values = [t(v) for v in linspace_values(-1.0, 1.0, n, dtype)]
    if not align_corners:
        values = [v * t(n - 1) / t(n) for v in values]
    return [float(v) for v in values]


@aten("affine_grid_generator.default", torch=_SAMPLE, limits=_SAMPLE_LIMITS)
def _affine_grid(b, node, theta, size, align_corners):
    """[N, H, W, 2]: each pixel's (x, y, 1) times theta [N, 2, 3] transposed
    (torch's base grid; its product, three terms each, summed in order)."""
    if len(size) != 4:
        raise Unsupported(f"affine_grid of size {list(size)} (2-d: [N, C, H, W])")
    n, _, h, w = size
    dtype = b.dtype(theta)
    xs, ys = _base_axis(w, align_corners, dtype), _base_axis(h, align_corners, dtype)
    bx = b.broadcast(b.constant(xs, dtype, [1, 1, w]), [n, h, w])
    by = b.broadcast(b.constant(ys, dtype, [1, h, 1]), [n, h, w])

    def entry(r, k):  # theta[:, r, k] over [N, H, W]
        t = b.op("slice", [b.op("slice", [theta], axis=1, start=r, end=r + 1)], axis=2, start=k,
                 end=k + 1)
        return b.broadcast(t, [n, h, w])

    # (x t[r, 0] + y t[r, 1]) + t[r, 2], each step rounded (torch's bits)
    rows = [b.op("add", [b.op("add", [b.op("mul", [bx, entry(r, 0)]),
                                      b.op("mul", [by, entry(r, 1)])]), entry(r, 2)])
            for r in (0, 1)]
    return b.op("concat", [b.reshape(v, [n, h, w, 1]) for v in rows], axis=3)


def _unnormalize(b, coord, size, align_corners):
    """[-1, 1] to pixel coordinates as torch's CPU kernel computes them:
    (c + 1) (size - 1) / 2, or (c + 1) size / 2 - 1/2."""
    if align_corners:
        return b.binary("mul", b.binary("add", coord, 1.0), (size - 1) / 2)
    return b.binary("sub", b.binary("mul", b.binary("add", coord, 1.0), size / 2), 0.5)


def _clip(b, v, top):
    """v clipped into [0, top], its gradient 1 strictly inside only (torch's
    border padding: a coordinate on the border is out of bounds there)."""
    inside = b.binary("gt", b.binary("mul", b.convert(b.binary("gt", v, 0.0), b.dtype(v)),
                                     b.convert(b.binary("lt", v, float(top)), b.dtype(v))), 0.5)
    clipped = b.unary("stop_gradient", b.composite("clamp", v, min=0.0, max=float(top)))
    return b.select(inside, v, clipped)


@aten("grid_sampler_2d.default", torch=_SAMPLE, limits=_SAMPLE_LIMITS)
def _grid_sample(b, node, x, grid, interpolation_mode, padding_mode, align_corners):
    """x [N, C, H, W] read at grid [N, Ho, Wo, 2] (x, y in [-1, 1]): each
    output pixel's corners gathered from x (rows of channels, or elements
    of each plane when there are few), weighted by torch's bilinear weights
    (the corners outside x weigh 0: zeros padding), or the nearest pixel
    (rounded half to even, as torch)."""
    if interpolation_mode not in (0, 1):
        raise Unsupported("grid_sample with mode='bicubic' (bilinear or nearest)")
    if padding_mode not in (0, 1):
        raise Unsupported("grid_sample with padding_mode='reflection' (zeros or border)")
    n, c, h, w = b.shape(x)
    _, ho, wo, _ = b.shape(grid)
    dtype = b.dtype(x)
    gx, gy = (b.reshape(b.op("slice", [grid], axis=3, start=k, end=k + 1), [n, ho * wo])
              for k in (0, 1))
    ix, iy = _unnormalize(b, gx, w, align_corners), _unnormalize(b, gy, h, align_corners)
    if padding_mode == 1:  # border: coordinates clipped into the image
        ix, iy = _clip(b, ix, w - 1), _clip(b, iy, h - 1)
    if c >= _CHANNEL_ROWS:
        # x laid out [N*H*W, C]: a corner is one row of C channels.
        table = b.reshape(b.transpose(x, [0, 2, 3, 1]), [n * h * w, c])
        image = b.binary("mul", b.iota("i64", [n, 1], 0), h * w)
        spread = [n, ho * wo, c]

        def expand(v):  # [N, Ho*Wo] over the channels
            return b.broadcast(b.reshape(v, [n, ho * wo, 1]), spread)

        def read(pixel):  # [N, Ho*Wo, C]
            return b.op("gather", [table, b.binary("add", pixel, image)])

        def layout(out):  # [N, Ho*Wo, C] as [N, C, Ho, Wo]
            return b.transpose(b.reshape(out, [n, ho, wo, c]), [0, 3, 1, 2])
    else:
        # Few channels: x as it lies, a corner one element of each plane (a
        # row of C would repeat each output pixel's weight along rows too
        # short for a fused loop, and move x and the result through
        # transposes).
        table = b.reshape(x, [n * c * h * w, 1])
        plane = b.broadcast(b.binary("mul", b.reshape(b.iota("i64", [n * c, 1], 0), [n, c, 1]),
                                     h * w), [n, c, ho * wo])
        spread = [n, c, ho * wo]

        def expand(v):  # [N, Ho*Wo] over the channels
            return b.broadcast(b.reshape(v, [n, 1, ho * wo]), spread)

        def read(pixel):  # [N, C, Ho*Wo]
            return b.reshape(b.op("gather", [table, b.binary("add", expand(pixel), plane)]),
                             spread)

        def layout(out):  # [N, C, Ho*Wo] as [N, C, Ho, Wo]
            return b.reshape(out, [n, c, ho, wo])

    def within(v, hi):
        return b.binary("mul", b.convert(b.binary("ge", v, 0.0), dtype),
                        b.convert(b.binary("le", v, float(hi)), dtype))

    def corner(cx, cy):
        """x at integer corners (cx, cy) [N, Ho*Wo] of the output pixels, 0
        outside x, spread over the channels."""
        inside = b.binary("gt", b.binary("mul", within(cx, w - 1), within(cy, h - 1)), 0.5)
        px = b.convert(b.composite("clamp", cx, min=0.0, max=float(w - 1)), "i64")
        py = b.convert(b.composite("clamp", cy, min=0.0, max=float(h - 1)), "i64")
        return b.select(expand(inside), read(b.binary("add", b.binary("mul", py, w), px)), 0.0)

    if interpolation_mode == 1:  # nearest, halves to even; no gradient to the grid
        return layout(corner(_round(b, node, ix), _round(b, node, iy)))
    x0 = b.unary("stop_gradient", _floor(b, ix))
    y0 = b.unary("stop_gradient", _floor(b, iy))
    x1, y1 = b.binary("add", x0, 1.0), b.binary("add", y0, 1.0)
    # torch's weights: w = ix - x0, e = 1 - w, n = iy - y0, s = 1 - n;
    # nw = s e, ne = s w, sw = n e, se = n w; summed in that order
    wx1, wy1 = b.binary("sub", ix, x0), b.binary("sub", iy, y0)
    wx0, wy0 = b.binary("sub", 1.0, wx1), b.binary("sub", 1.0, wy1)
    out = None
    for cx, cy, wgt in ((x0, y0, b.op("mul", [wy0, wx0])), (x1, y0, b.op("mul", [wy0, wx1])),
                        (x0, y1, b.op("mul", [wy1, wx0])), (x1, y1, b.op("mul", [wy1, wx1]))):
        term = b.op("mul", [corner(cx, cy), expand(wgt)])
        out = term if out is None else b.op("add", [out, term])
    return layout(out)
