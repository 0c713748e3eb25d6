// Gradient checks: the compiled joint graph's gradients against central
// finite differences, both in f64 on the reference interpreter.
#pragma once

#include <string>
#include <vector>

#include "wholestep/nn.hpp"
#include "wholestep/step.hpp"

namespace ws::check {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  // Elements checked per input tensor (all when the tensor is smaller);
  // larger tensors are sampled with a fixed seed.
  int64_t max_elements = 64;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  int64_t checked = 0;  // elements compared
  std::string report;   // one line per mismatch (at most 20), empty when ok
};

// Checks d loss_fn(inputs) / d p for every parameter p of `model`. The
// function is traced once, the graph retyped to f64, differentiated, and
// compared element by element with finite differences of the same graph.
GradcheckResult gradcheck(nn::Module& model, const LossFn& loss_fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opts = {});

}  // namespace ws::check
