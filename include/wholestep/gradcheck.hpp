// What a gradient check is asked and what it finds: the options and the
// result, apart from the functions that run checks (check.hpp), so the
// autograd layer that computes them needs nothing above it.
#pragma once

#include <string>
#include <vector>

#include "wholestep/dtype.hpp"

namespace ws::check {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  // Elements checked per input tensor (all when the tensor is smaller).
  // Larger tensors are sampled with a fixed seed, each element once: half
  // where the analytic gradient is not zero (an embedding's rows its batch
  // reads), the rest among the others.
  int64_t max_elements = 64;
};

// One checked tensor (a parameter): its elements compared, and the element
// furthest outside the tolerance, |analytic - numeric| / (atol + rtol
// |numeric|) largest (the largest error when all pass).
struct ParamCheck {
  std::string name;  // "fc1.weight"
  Shape shape;
  int64_t checked = 0;       // elements compared
  bool ok = true;            // every compared element within the tolerance
  Shape at;                  // the worst element's index, one entry per dimension
  double analytic = 0;       // the joint graph's gradient there
  double numeric = 0;        // the finite difference there
  double error = 0;          // |analytic - numeric| there
  double max_abs_error = 0;  // the largest over the compared elements
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  int64_t checked = 0;             // elements compared
  std::string report;              // one line per mismatch (at most 20), empty when ok
  std::vector<ParamCheck> params;  // one per checked tensor, in the model's parameter order
};

}  // namespace ws::check
