// fuse_residual_into_product: a residual added to a linear layer's output
// is accumulated by the product itself (oneDNN's sum post-op).
//
//   y = matmul_bias(a, b, bias)        r = matmul_bias_add(a, b, bias, x)
//   r = add(x, y)                 =>       (x + ((a @ b) + bias), in x's
//                                           block when x dies there)
//
// The add's kernel and its pass over the product disappear; where the
// residual dies at the add (a transformer's residual stream), the memory
// plan gives the result the residual's block and the product adds into it
// in place. The bits are the unfused ones: oneDNN adds the bias and then
// the destination, each a rounding, as matmul_bias then add do. The rewrite
// applies where the product is an f32 matmul_bias without an activation,
// read only by the add, and the residual has the product's type.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph fuse_residual_into_product(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
