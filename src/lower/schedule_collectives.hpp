// schedule_collectives: each collective starts as soon as its operands
// exist.
//
// The kernels run in node order, so a start placed where the graph was
// built (after the whole backward) would start its reduction only when
// every gradient exists and leave nothing to overlap it with. This pass
// moves every collective start to just after the last of its operands, and
// numbers the starts (their seq) in the order they now come: every rank
// runs the same program, so that is the order every rank starts them in.
// Waits stay where they are, which the partition made as late as
// possible: before the first update that reads them, after the backward
// (partition/update_order.hpp). Every other node keeps its order.
#pragma once

#include "ir/graph.hpp"

namespace ws::lower {

ir::Graph schedule_collectives(const ir::Graph& g, bool* changed = nullptr);

}  // namespace ws::lower
