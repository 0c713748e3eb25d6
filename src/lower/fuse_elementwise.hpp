// fuse_elementwise: chains of elementwise ops become loop fusions.
//
// Every elementwise op the fused loop kernel computes (exec/fused_loop.hpp)
// joins the group of an operand of its own shape when the group stays
// acyclic: no value the grown group reads may depend on the group, looking
// through other groups as single nodes (they will run as one kernel). A
// broadcast operand joins as a broadcast of its source, read through
// strides; a `full` operand as a constant of the body; neither is ever
// materialized for the group. A value computed in a group is computed there
// only: nothing is duplicated, so no exp, tanh or random draw runs twice.
// Values a group computes and something else reads are its results.
//
// The groups are bounded so their kernel's buffers fit (kMaxFusedBuffers)
// and their operands fit a kernel (kMaxOperands).
//
// The new graph keeps the old order where it can: units (a group or a node)
// are placed as in a topological sort that takes the ready unit whose last
// node came first, and places every other reader of an old parameter before
// its update, as the old order did, so updates stay in place.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph fuse_elementwise(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
