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

}  // namespace ws::exec
