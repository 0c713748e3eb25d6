// simplify: common-subexpression elimination and dead-code elimination.
// Inputs are never removed or merged (they are the graph's signature); every
// op in the IR is pure, so equal nodes (op, operands, attributes, type) are
// one value.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph simplify(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
