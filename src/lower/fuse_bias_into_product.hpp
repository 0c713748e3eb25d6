// fuse_bias_into_product: a bias added along the rows of a matrix product
// becomes the product's own bias (oneDNN adds it as the product is written).
//
//   p = matmul(a, b)               y = matmul_bias(a, b, bias)
//   y = add(p, broadcast(bias))  =>
//
// Linear layers end this way. The sum is one f32 addition of the bias to
// each product element either way. The add's kernel and its pass over the
// product disappear; what followed it (an activation) fuses as before. The
// rewrite applies where the product is 2-d f32 and read only by the add, and
// the bias is a vector broadcast along its last dim.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph fuse_bias_into_product(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
