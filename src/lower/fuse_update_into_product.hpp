// fuse_update_into_product: an optimizer update of a weight whose gradient
// is a matrix product becomes one product accumulated where the update
// writes.
//
//   g = matmul(a, b)               W' = matmul_add(a, b, W, -lr, 1)
//   W' = W - g * lr          =>         (1 * W + (-lr) * (a @ b), in W)
//
//   W' = W - (g + W * wd) * lr  =>  W' = matmul_add(a, b, W, -lr, 1 - lr * wd)
//
//   g = matmul(a, b)               buf' = matmul_add(a, b, buf, 1 - d, m)
//   buf' = buf * m + g * (1 - d)  =>      (m * buf + (1 - d) * (a @ b))
//
// Plain SGD (with weight decay or not) writes the weight; SGD with momentum
// writes the momentum buffer (the weight's own update then reads the
// buffer, as before). oneDNN runs it as the product with two post-ops, a
// multiply by alpha (read where it lies at run time) and a sum (scale 1):
// the gradient never exists as a buffer. Only a graph holding both the
// product and the update (the single graph) has the pattern; it is also
// what lets the optimizer be in the graph at all. oneDNN 2.6 takes a
// sum's scale only when the primitive is created, while beta is a value of
// the step (a schedule changes 1 - lr * wd every step), so a beta other
// than 1 scales the accumulator in place before the product adds to it
// (dnnl_backend.cpp's AccumulateOp): one pass over W or the buffer, none
// over a gradient, and no primitive made per step.
//
// The rewrite applies where the product is f32 over a contraction too long
// for fuse_product_into_loop (which takes the update's whole loop), read
// only by the scaling, whose result is read only by the update, and the update is an
// output that overwrites its input. SGD with both momentum and weight decay
// (its buffer takes g + W * wd, a second array beside the product) stays a
// product plus one fused update loop.
//
// Bits: the product is the plain product's kernel (brgemm, not the gemm:jit
// a runtime output scale selects, which sums a single row or column and a
// long contraction otherwise), and (beta * c) + (alpha * (a @ b)) rounds
// each product and the sum as the unfused update does, so plain SGD and SGD
// with momentum give the unfused bits at every shape (tested). Plain SGD
// with weight decay is another expression of the unfused W - (g + W * wd) *
// lr: equal within roundings.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph fuse_update_into_product(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
