// simplify: common-subexpression elimination and dead-code elimination.
// Inputs are never removed or merged (they are the graph's signature); every
// op in the IR is pure, so equal nodes (op, operands, attributes, type) are
// one value.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph simplify(const ir::Graph& g, bool* changed = nullptr);

// Whether nodes a and b (neither an input nor a fusion) compute one value:
// equal but for the number a copy the backward recomputes carries
// (`recompute`, which keeps simplify from merging it with the forward's
// value).
bool same_value_but_copy(const ir::Node& a, const ir::Node& b);

}  // namespace ws::lower
