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
  // ZeRO with a step count per parameter (spec.state_slots[0] is "step",
  // PyTorch's Adam): `param` is this rank's part of the parameters of
  // `packed`, packed as local_shard packs them over `world` ranks, each
  // with its own 0-d step count in `steps`; `state` then holds the slots
  // after "step", and the new counts are returned in `steps`.
  std::vector<ir::ValueId> steps;
  std::vector<ir::Type> packed;
  int64_t world = 0;
};

struct UpdateInputs {
  std::vector<ParamValues> params;
  std::vector<ir::ValueId> globals;  // spec.global_slots order
  std::vector<ir::ValueId> hypers;   // spec.hyper_names order
};

struct UpdateOutputs {
  std::vector<ParamValues> params;  // new param and state values (grad unset)
  std::vector<ir::ValueId> globals;
};

// The update of each parameter of `in` by `spec`'s rule. Clipping
// (spec.clip) is not part of it: the step clips every group's gradients
// together first (clip_by_global_norm).
UpdateOutputs build_updates(ir::Builder& b, const UpdateSpec& spec, const UpdateInputs& in);

// torch.nn.utils.clip_grad_norm_ over `grads` together: norm = the 2-norm
// of all their elements (squares summed in f32; over every rank too when
// `sharded`: each holds its part of the gradients, ZeRO), then every
// gradient times clamp(max_norm / (norm + 1e-6), max=1). A NaN norm makes
// the coefficient NaN, as torch's clamp keeps it; an infinite one, 0.
// `max_norm` is the f64 hyperparameter input.
struct Clipped {
  std::vector<ir::ValueId> grads;
  ir::ValueId norm = ir::kNoValue;  // f32[]
};
Clipped clip_by_global_norm(ir::Builder& b, std::vector<ir::ValueId> grads, ir::ValueId max_norm,
                            bool sharded);

}  // namespace ws::optim
