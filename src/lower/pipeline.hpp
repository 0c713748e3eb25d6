// The graph passes of lowering, run in order by one driver.
//
// Each pass is a Graph -> Graph function in its own file: simplify.cpp
// (CSE, DCE), fuse_update_into_product.cpp (plain SGD accumulated into the
// weight by its gradient's product), fuse_bias_into_product.cpp (a bias
// added along a product's rows as the product's bias),
// fuse_activation_into_product.cpp (a relu of it as its epilogue),
// fuse_residual_into_product.cpp (a residual added to it, accumulated),
// merge_padded_sums.cpp
// (zero-padded pieces summed as one concatenation), move_reshapes.cpp
// (elementwise ops before the reshapes they read), fuse_elementwise.cpp
// (loop and reduce fusions), fuse_product_into_loop.cpp (a product over a
// short contraction into the loop that reads it), fold_constants.cpp
// (small values of constants alone computed once, as constants). Each pass
// says whether it changed the graph. The driver runs them from one list, verifies the graph after
// each that changed it (with a print/parse round trip) when verification is on, and writes it with
// WS_DUMP as "<NNN>-<graph>.<pass>.ir" (an unchanged graph as "<NNN>-<graph>.<pass>.unchanged.ir").
// What follows the passes turns the final graph into a Program (lower.cpp): operands read in place,
// kernels, in-place updates, the memory plan.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.hpp"
#include "lower/lower.hpp"

namespace ws::lower {

struct Pass {
  const char* name;
  // The rewritten graph; *changed (never null here) says whether it differs
  // from the argument.
  ir::Graph (*run)(const ir::Graph&, bool* changed);
};

// The passes `opts` asks for, in order.
std::vector<Pass> graph_passes(const LowerOptions& opts);

// Every pass, in the order compilation runs them (`wholestep opt`, the
// golden tests of tests/lower/<pass>/).
const std::vector<Pass>& all_passes();

// The pass called `name`, or null.
const Pass* find_pass(std::string_view name);

// The names of all_passes(), comma-separated.
std::string pass_names();

// Runs `passes` over g, verifying and dumping after each.
ir::Graph run_passes(const ir::Graph& g, const std::vector<Pass>& passes);

}  // namespace ws::lower
