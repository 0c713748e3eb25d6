// The interpreter: runs a Graph node by node on the reference kernels. It is
// the `interpret` mode, the oracle for compiled Programs, and the engine of
// gradient checks (in f64).
#pragma once

#include <vector>

#include "ir/graph.hpp"
#include "wholestep/tensor.hpp"

namespace ws::exec {

struct InterpretStats {
  int64_t kernels = 0;     // nodes evaluated
  int64_t peak_bytes = 0;  // largest total of live intermediate values
};

// `inputs[i]` binds g.inputs[i] (same type, checked). Returns the values of
// g.outputs, in order, as fresh tensors (never the input tensors themselves).
// Intermediate values are freed after their last use.
// With `detect_anomaly`, the first node whose floating-point result holds
// an inf or a NaN is a ws::Error naming it, its op, the element, whether its
// operands were finite, and the user's source line.
std::vector<Tensor> interpret(const ir::Graph& g, const std::vector<Tensor>& inputs,
                              InterpretStats* stats = nullptr, bool detect_anomaly = false);

}  // namespace ws::exec
