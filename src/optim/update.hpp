// Optimizer updates as graph nodes. Given each parameter's value, gradient
// and state values, the global state and the 0-d hyperparameter inputs,
// appends the update and returns the new values. The same builder serves
// every mode.
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

struct UpdateInputs {
  std::vector<ParamValues> params;
  std::vector<ir::ValueId> globals;  // spec.global_slots order
  std::vector<ir::ValueId> hypers;   // spec.hyper_names order
  // Each rank updates its part of the parameters (ZeRO): a global norm's
  // squares are summed over the ranks.
  bool sharded = false;
};

struct UpdateOutputs {
  std::vector<ParamValues> params;  // new param and state values (grad unset)
  std::vector<ir::ValueId> globals;
};

UpdateOutputs build_updates(ir::Builder& b, const UpdateSpec& spec, const UpdateInputs& in);

}  // namespace ws::optim
