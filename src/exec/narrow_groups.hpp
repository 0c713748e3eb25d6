// The weight gradient of a convolution in narrow groups over NHWC images
// (narrow_groups.cpp).
#pragma once

#include <memory>

#include "exec/dnnl_backend.hpp"
#include "exec/nn_kernels.hpp"

namespace ws::exec {

// Whether conv2d_weight_grad of `g` runs as make_narrow_group_weight_grad:
// a 2-d convolution over NHWC images in groups of 1, 2, 4 or 8 channels to
// as many (depthwise, resnext's groups of 4), windows up to 7 wide.
bool narrow_group_weight_grad(const Conv2dGeom& g);

// That weight gradient: each weight's sum over the output positions in a
// fixed order, the same bits on any team.
std::shared_ptr<const BackendOp> make_narrow_group_weight_grad(const Conv2dGeom& g);

// Whether conv2d or conv2d_input_grad (`op`) of `g` can run as
// make_narrow_group_conv: NHWC images in groups of 2 or 4 channels to as
// many (resnext's), windows up to 7x7, the input gradient at stride 1.
bool narrow_group_conv(ir::Op op, const Conv2dGeom& g);

// That convolution or input gradient: each result element's sum over the
// taps in a fixed order, the same bits on any team.
std::shared_ptr<const BackendOp> make_narrow_group_conv(ir::Op op, const Conv2dGeom& g);

}  // namespace ws::exec
