// fuse_activation_into_product: a relu of a linear layer's output becomes
// the product's own epilogue.
//
//   y = matmul_bias(a, b, bias)        y' = matmul_bias(a, b, bias)
//   m = le(y, 0)                  =>             {activation="relu"}
//   r = select(m, 0, y)                m  = le(y', 0);  r = y'
//
// The relu's loop kernel disappears: the product kernel rectifies its rows
// right after writing them, while they are in cache. The mask the backward
// pass reads is le(y', 0), the same bits as le(y, 0) (relu(x) <= 0 exactly
// when x <= 0, and NaN stays NaN); it now fuses into the backward loop that
// reads it, so no mask is stored. The relu is the kernel's own loop,
// select(y <= 0, +0, y), not oneDNN's relu post-op: that one is max(x, +0),
// which maps NaN to 0, where PyTorch's relu (and ours) keeps it. The
// rewrite applies where the product is an f32 matmul_bias read only by the
// comparison and the select, both against a zero `full`.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph fuse_activation_into_product(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
