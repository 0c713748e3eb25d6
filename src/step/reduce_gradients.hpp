// Data parallelism in the step graph: each gradient, and the loss, replaced
// by its mean over the process group's ranks, reduced in buckets.
//
// The gradients are taken in the order the backward computes them and
// packed into buckets of at most `bucket_bytes` (a larger gradient is a
// bucket of its own); the loss joins the first. Each bucket is one
// all_reduce_start (mean) and its wait, and each reduced gradient is a view
// of its bucket (a contiguous slice, reshaped). The nodes are appended to
// the backward; lowering starts each bucket as soon as its last gradient
// exists (lower/schedule_collectives.hpp), and the single graph's updates
// each wait only for their own bucket (partition/update_order.hpp), so the
// reductions run during the rest of the backward and the updates of early
// buckets while later ones travel. In three graphs the backward waits for
// all of them before the optimizer graph runs.
#pragma once

#include <vector>

#include "ir/graph.hpp"

namespace ws::step {

struct ReducedGradients {
  ir::ValueId loss;                // the loss averaged over the ranks
  std::vector<ir::ValueId> grads;  // per gradient, in the order given
  int64_t buckets = 0;
};

ReducedGradients reduce_gradients(ir::Graph& g, ir::ValueId loss,
                                  const std::vector<ir::ValueId>& grads, int64_t bucket_bytes);

}  // namespace ws::step
