// Why the partitioner kept or recomputed each value, as text and as a
// Graphviz picture.
#pragma once

#include <string>

#include "ir/dot.hpp"
#include "partition/min_cut.hpp"

namespace ws::partition {

// One line per forward value the backward needs: saved or recomputed, its
// op, type and bytes, and the reason (never recomputed: not an elementwise,
// reduction or shape op, such as a product, a convolution or a random draw;
// cheaper to save than what recomputing it needs; recomputed from values
// that reach the backward), then the totals.
std::string explain(const JointGraph& joint, const RematPlan& plan);

// The joint graph in Graphviz DOT (ir/dot.hpp): forward nodes blue,
// backward red, optimizer green, the values the plan recomputes dashed,
// those it saves double-bordered with their bytes. By default inputs and
// constants are left out (they reach every graph), and so are the outputs
// and the legend.
std::string to_dot(const JointGraph& joint, const RematPlan& plan,
                   const ir::DotOptions& opts = {
                       .sources = false, .outputs = false, .legend = false});

}  // namespace ws::partition
