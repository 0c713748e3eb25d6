// What a data-parallel step (StepOptions::data_parallel) does across the
// ranks when it compiles, before any of them runs it: every rank must run
// the same step graph (its collectives pair up with the other ranks' only
// then) from the same state.
#pragma once

#include "dist/collectives.hpp"
#include "step/capture_step.hpp"

namespace ws::step {

// Compares a hash of the joint graph over the ranks (throws dist::GroupError
// naming the first line where a rank's graph differs from rank 0's), then
// broadcasts every persistent tensor (parameters, buffers, optimizer state,
// the random stream) but the rank-local ones (ZeRO's shards) from rank 0, and gives each rank its
// own dropout stream: rank r's seed is rank 0's plus r times an odd constant, so streams differ by
// construction and rank 0's is the one a single process would draw.
void synchronize_ranks(const CapturedStep& cap);

}  // namespace ws::step
