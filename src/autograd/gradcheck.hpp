// Graph-level gradient check: the joint graph's gradients against central
// finite differences of the forward graph, both in f64 on the interpreter.
#pragma once

#include <vector>

#include "ir/graph.hpp"
#include "wholestep/gradcheck.hpp"
#include "wholestep/tensor.hpp"

namespace ws::autograd {

// The same graph with every f32 value (types, and dtype attributes of
// convert and one_hot) made f64.
ir::Graph promote_to_f64(const ir::Graph& g);

// `forward` has a 0-d loss as its first output; `values[i]` binds
// forward.inputs[i]; `wrt` lists the inputs to check.
check::GradcheckResult gradcheck_graph(const ir::Graph& forward,
                                       const std::vector<ir::ValueId>& wrt,
                                       const std::vector<Tensor>& values,
                                       const check::GradcheckOptions& opts);

}  // namespace ws::autograd
