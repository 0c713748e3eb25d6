// Gradient checks: the compiled joint graph's gradients against central
// finite differences, both in f64 on the reference interpreter.
#pragma once

#include <string>
#include <vector>

#include "wholestep/gradcheck.hpp"
#include "wholestep/nn.hpp"
#include "wholestep/step.hpp"

namespace ws::check {

// Checks d loss_fn(inputs) / d p for every parameter p of `model`. The
// function is traced once, the graph retyped to f64, differentiated, and
// compared element by element with finite differences of the same graph.
// Random draws (dropout) are fixed: the random stream's seed and offset are
// inputs of the traced graph, so every evaluation draws the same mask and
// the check is of the gradient for that mask. The model, its buffers and
// the random stream are left as they were.
GradcheckResult gradcheck(nn::Module& model, const LossFn& loss_fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opts = {});

// A table, one row per parameter: name, shape, elements checked, and at the
// worst element its error, index, analytic and numeric values, then "pass"
// or "FAIL".
std::string format_gradcheck(const GradcheckResult& r);

}  // namespace ws::check
