// fuse_product_into_loop: a matrix product over a short contraction whose
// one reader is a loop fusion becomes part of that loop (a fusion of kind
// "product"): the kernel computes the product a tile at a time and runs the
// loop over the tile, so the product is never stored.
//
//   g = matmul(dy, x) {transpose_a}       W', buf' = fusion "product" (dy, x, W, buf, lr, ...)
//   W', buf' = fusion "loop" (g, W, buf, lr, ...)   =>  { g = matmul(dy, x); the loop }
//
// The weight gradient of a layer over a batch of a few rows and its
// optimizer's update (SGD with momentum and weight decay reads the
// gradient, the weight and the buffer, and writes both) then take one pass
// over the weight and its state instead of a product writing the gradient
// and a loop reading it back: vgg16's [4096, 25088] classifier weight moves
// 1.6 GB a step instead of 2.5. The product is short_products.hpp's, the
// same bits wherever it is computed, and the loop runs the steps it ran, so
// the fused program computes the unfused program's bits.
//
// The rewrite applies where the product is 2-d f32 over a contraction of at
// most kShortK, read only by the loop (not a graph output), of the loop's
// shape, and the loop draws no random numbers and reads every other
// operand whole at its shape or as one value.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph fuse_product_into_loop(const ir::Graph& g, bool* changed = nullptr);

// Whether a product node is one this pass takes into its reader's loop
// (its contraction short enough): fuse_update_into_product leaves those
// to it.
bool product_fits_a_loop(const ir::Graph& g, ir::ValueId product);

}  // namespace ws::lower
