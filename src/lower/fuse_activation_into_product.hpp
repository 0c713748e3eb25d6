// fuse_activation_into_product: a relu of a linear layer's output becomes
// the product's own epilogue (oneDNN applies it as the product is written).
//
//   y = matmul_bias(a, b, bias)        y' = matmul_bias(a, b, bias)
//   m = gt(y, 0)                  =>             {activation="relu"}
//   r = select(m, y, 0)                m  = gt(y', 0);  r = y'
//
// The relu's loop kernel and its pass over the product disappear: the
// product is written once, already rectified. The mask the backward pass
// reads is gt(y', 0), the same bits as gt(y, 0) (relu(x) > 0 exactly when
// x > 0); it now fuses into the backward loop that reads it, so no mask is
// stored. oneDNN's relu with slope 0 is max(x, +0), which is select(x > 0,
// x, +0) for every x (-0 and NaN give +0): the same bits. The rewrite
// applies where the product is an f32 matmul_bias read only by the
// comparison and the select, both against a zero `full`.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph fuse_activation_into_product(const ir::Graph& g);

}  // namespace ws::lower
