// Reverse-mode differentiation over a forward graph, emitting the backward
// nodes into the same graph: the joint graph.
#pragma once

#include <vector>

#include "ir/graph.hpp"

namespace ws::autograd {

// Appends to `g` the gradient of the 0-d value `loss` with respect to each
// value in `wrt` (usually parameter inputs) and returns their ids, in order.
// Fan-out gradients are summed in the order they arrive (an `identity`
// node sums its readers' into one value first); a value the loss does not
// depend on gets a zero gradient. Only floating-point values carry
// gradients. Backward nodes carry the location of the forward node they
// differentiate.
std::vector<ir::ValueId> append_backward(ir::Graph& g, ir::ValueId loss,
                                         const std::vector<ir::ValueId>& wrt);

}  // namespace ws::autograd
