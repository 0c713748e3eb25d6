// The process's Philox stream, which traced random ops draw from.
#pragma once

#include "wholestep/tensor.hpp"

namespace ws::detail {

// The counter-based random stream: a 0-d i64 seed and offset (numbers
// consumed so far). One per process, like PyTorch's default generator; their
// storage never moves, so compiled steps bind it as persistent state.
struct RngState {
  Tensor seed, offset;
};
RngState& rng_state();

}  // namespace ws::detail
