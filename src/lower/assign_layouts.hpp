// channels_last and blocked_layouts (step option `layouts`): the images of
// convolutions, and every value that flows between convolutions through
// ops that work in any layout, stored NHWC, or with their channels in
// blocks (geometry.hpp: nChw16c, or nChw8c where a channel count of the
// group is a multiple of 8 but not of 16), so that oneDNN's convolutions
// read and write them as they lie and nothing reorders them between one
// convolution and the next.
//
// Groups of images are joined by
//  - the convolutions oneDNN's primitive runs in the layout (2-d, f32; for
//    blocks, input and output channels multiples of 8): x and y, dy and dx,
//    x and dy. A convolution that runs faster as kernels of our own over
//    NCHW images (products over small maps; blocked, a weight gradient in
//    parts of the weight, which NHWC slices serve: dnnl_backend.hpp) keeps
//    NCHW;
//  - elementwise ops of [N, C, H, W] values (BatchNorm's arithmetic,
//    activations, their gradients, a residual's add), which compute the
//    same elements in any layout;
//  - concatenations and slices of images (along the channels only in NHWC);
//  - in NHWC, max pooling and its gradient (kernels of their own), and a
//    pointwise convolution (1x1, stride 1, no padding or groups) of any
//    map size, which becomes a product of [N*H*W, C] rows and the weight;
// and the values made at the stored shape are broadcasts to [N, C, H, W]
// of per-channel, per-image, per-row or 0-d values (BatchNorm's statistics,
// a scale) and `full` values. Reductions of a stored image over H and W
// (and N) (BatchNorm's statistics, global average pooling) run over it and
// give the same elements in the same order. A group without a convolution
// keeps NCHW. Where a value of a group meets an op outside it (a pooling, a
// reshape to a matrix, a graph output) or comes from one (a graph input, a
// pooling's result), one conversion (a transpose; with a reshape for
// blocks) converts it, once for all its readers: conversions are at the
// groups' edges only, and the values the graph's interface holds are NCHW.
//
// Every element is computed from the same elements by the same op as
// before, and a reduction sees its elements in the same order; what changes
// bits is only how a convolution sums (oneDNN's primitive in the stored
// layout), within rounding.
#pragma once

#include <string_view>

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph channels_last(const ir::Graph& g, bool* changed);
ir::Graph blocked_layouts(const ir::Graph& g, bool* changed);
// Blocks of 8 channels only: what convolutions read on CPUs without AVX-512.
ir::Graph blocked_layouts_of_8(const ir::Graph& g, bool* changed);
// The one of the two whose blocks this CPU's convolutions read
// (exec::native_channel_block): the step option `blocked`; and its pass name.
ir::Graph blocked_layouts_for_this_cpu(const ir::Graph& g, bool* changed);
std::string_view blocked_layouts_pass_for_this_cpu();

}  // namespace ws::lower
