// Optimizer updates as graph nodes. Given each parameter's value, gradient
// and state values plus the 0-d hyperparameter inputs, appends the update and
// returns the new values. The same builder serves every mode.
#pragma once

#include <vector>

#include "ir/builder.hpp"
#include "wholestep/optim.hpp"

namespace ws::optim {

struct ParamValues {
  ir::ValueId param = ir::kNoValue;
  ir::ValueId grad = ir::kNoValue;
  std::vector<ir::ValueId> state;  // in spec.state_slots order
};

// `hypers` are the 0-d inputs in spec.hyper_names order. Returns, per
// parameter, the new param and state values (grad unset).
std::vector<ParamValues> build_updates(ir::Builder& b, const UpdateSpec& spec,
                                       const std::vector<ParamValues>& in,
                                       const std::vector<ir::ValueId>& hypers);

}  // namespace ws::optim
