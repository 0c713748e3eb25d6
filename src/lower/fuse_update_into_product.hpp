// fuse_update_into_product: plain SGD on a weight whose gradient is a
// matrix product becomes one product accumulated into the weight.
//
//   g = matmul(a, b)            W' = matmul_add(a, b, W, -lr)
//   W' = W - g * lr       =>        (W + (-lr) * (a @ b), in W's storage)
//
// oneDNN runs it as the product with a runtime output scale (-lr) and a sum
// post-op (beta = 1): the gradient never exists as a buffer, and the update
// costs no pass of its own. Only a graph holding both the product and the
// update (the single graph) has the pattern; it is also what lets the
// optimizer be in the graph at all.
//
// The rewrite applies where the product is f32, read only by the scaling,
// whose result is read only by the update, and the update is an output that
// overwrites the weight. Weight decay (W' = (1 - lr·wd)·W - lr·g) and
// momentum (buf' = m·buf + g) would need a runtime scale on the accumulator
// too, which oneDNN 2.6's sum post-op takes only when the primitive is
// created: they stay one product plus one fused update loop.
//
// Bits: the product is the same primitive's; oneDNN may contract the scaling
// and the addition into one fused multiply-add, so the result can differ
// from the unfused W - lr·g in the last bit.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph fuse_update_into_product(const ir::Graph& g);

}  // namespace ws::lower
