// Convolution and pooling geometry: the attributes of conv2d, its two
// gradients and the 2-d poolings, with their defaults, the checks shape
// inference makes of them, and the sizes they give. Shape inference and the
// kernels all take sizes from here, so they cannot disagree.
//
// Layouts are PyTorch's: activations NCHW (NCDHW for a 3-d convolution),
// conv weights [O, C/groups, KH, KW] ([O, C/groups, KD, KH, KW]). stride,
// padding and dilation are one value for every spatial dim or one per dim
// (H, W; D, H, W); a convolution's default to stride 1, padding 0, dilation 1,
// groups 1 (ops.def), a pooling's stride to its kernel, its padding to 0.
#pragma once

#include <cstdint>
#include <span>

#include "ir/graph.hpp"

namespace ws::ir {

// How a 2-d convolution's images (x, y and their gradients) are stored, its
// `layout` attribute: NCHW (the default); NHWC, [N, H, W, C]; or oneDNN's
// blocked layouts, channels in blocks of 8 or 16 innermost, [N, C/8, H, W,
// 8] and [N, C/16, H, W, 16], for channel counts the block divides. The
// weight is [O, C/groups, KH, KW] in every layout. A 3-d convolution is
// NCDHW only.
enum class ImageLayout : uint8_t { nchw, nhwc, nChw8c, nChw16c };
// "nchw", "nhwc", "nChw8c", "nChw16c": the attribute's spelling.
const char* layout_name(ImageLayout l);
// Channels per block: 8 or 16 (1 for nchw and nhwc).
int64_t channel_block(ImageLayout l);
// The stored shape of an [n, c, h, w] image batch in layout l.
Shape stored_image(ImageLayout l, int64_t n, int64_t c, int64_t h, int64_t w);

// A 2-d or 3-d convolution's sizes; a 2-d one has a depth of 1 (d, kd and
// od 1, sd and dd 1, pd 0). Output size per spatial dim:
//   oh = (h + 2*ph - dh*(kh-1) - 1) / sh + 1
struct Conv2dGeom {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input [n, c, (d,) h, w]
  int64_t o = 0, kh = 0, kw = 0;       // weight [o, c/groups, (kd,) kh, kw]
  int64_t oh = 0, ow = 0;              // output [n, o, (od,) oh, ow]
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t groups = 1;
  bool volume = false;                     // 3-d: operands [N, C, D, H, W]
  ImageLayout layout = ImageLayout::nchw;  // how x and y are stored (2-d only)
  int64_t d = 1, kd = 1, od = 1, sd = 1, pd = 0, dd = 1;
  // Elements of one input image, of one output image, of the weight.
  int64_t in_image() const { return c * d * h * w; }
  int64_t out_image() const { return o * od * oh * ow; }
  int64_t weight_numel() const { return o * (c / groups) * kd * kh * kw; }
};

// 2-d pooling over [n, c, h, w] -> [n, c, oh, ow]. Padding counts as -inf
// for max; for avg it counts as zeros in the divisor when count_include_pad
// (PyTorch's default), else the divisor is the number of in-bounds elements.
struct Pool2dGeom {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t kh = 1, kw = 1, oh = 0, ow = 0;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0;
  bool count_include_pad = true;
  // Max pooling: nchw, or nhwc ([n, h, w, c] in, [n, oh, ow, c] out).
  ImageLayout layout = ImageLayout::nchw;
};

// The geometry of convolution `op` (conv2d, conv2d_input_grad or
// conv2d_weight_grad) of input x and weight w, both 4-d or both 5-d (a 3-d
// convolution), x stored in the layout its attribute names: its attributes or
// their defaults and the output size. Throws ws::Error naming the op and
// `loc` when they do not fit: groups not dividing both channel counts, w
// not C/groups channels deep, a stride or dilation below 1 or a negative
// padding, a window larger than the padded input, sizes overflowing, an
// unknown layout, x not stored as its layout says, channels of x or y that
// the layout's block does not divide, a layout other than nchw for a 3-d
// convolution.
Conv2dGeom conv2d_geom(Op op, const Attrs& attrs, const Type& x, const Type& w,
                       const SourceLoc& loc = {});
// The geometry of a convolution node of operand types `in` and result type
// `out` (x and w are operands or the result, by op).
Conv2dGeom conv2d_node_geom(Op op, const Attrs& attrs, std::span<const Type> in, const Type& out);

// The geometry of pooling `op` (max_pool2d, avg_pool2d or their gradients)
// of x [N, C, H, W]. Throws ws::Error as conv2d_geom does, and when the
// padding is more than half the kernel.
Pool2dGeom pool2d_geom(Op op, const Attrs& attrs, const Shape& x, const SourceLoc& loc = {});
// The geometry of a pooling node of operand types `in` and result type
// `out` (x is the operand, or a gradient's result).
Pool2dGeom pool2d_node_geom(Op op, const Attrs& attrs, std::span<const Type> in, const Type& out);

}  // namespace ws::ir
