// lower: Graph -> Program, as a readable sequence of passes.
#pragma once

#include "exec/program.hpp"
#include "ir/geometry.hpp"
#include "ir/graph.hpp"

namespace ws::lower {

struct LowerOptions {
  // Write in-place updates into their inputs' storage. Off only for
  // comparison: then every update is computed aside and copied.
  bool in_place_updates = true;
  // Fuse elementwise chains and reductions into loop kernels
  // (fuse_elementwise.hpp) and plain SGD updates into their gradient's
  // product (fuse_update_into_product.hpp). Off only for comparison.
  bool fuse = true;
  // How the images of convolutions and the values between them are stored
  // (assign_layouts.hpp): nchw (as they are), nhwc, or nChw16c for blocks
  // (of 8 channels where 16 do not divide them).
  ir::ImageLayout layouts = ir::ImageLayout::nchw;
};

// With `lowered`, also returns the graph the Program runs: g after the graph
// passes, one node per kernel (a fusion is one kernel).
exec::Program lower(const ir::Graph& g, const LowerOptions& opts = {},
                    ir::Graph* lowered = nullptr);

}  // namespace ws::lower
