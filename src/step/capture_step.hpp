// Capture of a training step into its joint graph: trace the loss function,
// differentiate, append the optimizer update. The result names every input so
// the runner can bind it; nothing after this reads Modules or Tensors except
// through those names.
#pragma once

#include <string>
#include <vector>

#include "partition/partition.hpp"
#include "wholestep/step.hpp"

namespace ws::step {

// An i64 data argument used as indices: every value must be in [0, bound).
struct IndexCheck {
  size_t data_index = 0;
  int64_t bound = 0;
  std::string what;  // "embedding index", "label"
  SourceLoc loc;     // the user's line that indexes with it
};

struct CapturedStep {
  partition::JointGraph joint;
  // Tensors behind persistent inputs, by input name (params, buffers, state).
  std::vector<std::pair<std::string, Tensor>> persistent;
  std::vector<std::string> hyper_names;  // hyper inputs, in optimizer order
  std::vector<std::string> data_names;   // data inputs, in argument order
  std::vector<IndexCheck> index_checks;
};

// Checks data arguments against `checks` before a step runs, so an index
// out of range is reported with its argument, position and the user's line
// instead of failing inside a kernel.
void check_indices(const std::vector<IndexCheck>& checks, const std::vector<Tensor>& data,
                   const char* who);

// The forward graph alone: inputs params, buffers, optimizer state and
// hypers (when `opt` is given), data; outputs the loss (a 0-d float; or,
// with `loss_output` false, any tensor as a user output "output"), then the
// mutations of buffers and of the random stream.
CapturedStep trace_forward(nn::Module& model, const optim::Optimizer* opt, const LossFn& loss_fn,
                           const std::vector<ir::Type>& data_types, const SourceLoc& loc,
                           bool loss_output = true);

// The name of the bool output that says whether a guarded step's loss and
// gradients were all finite (capture_step with guard_nonfinite).
inline constexpr const char* kFiniteOutput = "finite";

// The joint graph: forward, backward, and `opt`'s updates. With
// `guard_nonfinite`, every update output (parameters, optimizer state,
// buffers, the random stream) becomes select(finite, new, old), where
// `finite` (also an output, kFiniteOutput) is whether the loss and every
// gradient element are finite: a step with an inf or a NaN writes back what
// it read.
CapturedStep capture_step(nn::Module& model, optim::Optimizer& opt, const LossFn& loss_fn,
                          const std::vector<ir::Type>& data_types, const SourceLoc& loc,
                          bool guard_nonfinite = false);

// Writes `g` as text to $WS_DUMP/<index>-<stage>.ir when WS_DUMP is set, and
// verifies it when verification is on.
void after_stage(const ir::Graph& g, const std::string& stage);

}  // namespace ws::step
