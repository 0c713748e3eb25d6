// What the forward saves for the backward, chosen by a minimum cut.
//
// Every forward value the backward reads must reach it: saved by the forward
// (an interface output, its bytes kept alive between the graphs) or
// recomputed by the backward from values that reach it. Saving is a cut:
// each computed forward node v is split into in(v) -> out(v) with capacity
// bytes(v); a data edge a -> v is out(a) -> in(v) with infinite capacity;
// out(v) -> sink is infinite for every value a backward (or optimizer) node
// reads; source -> in(v) is infinite for the ops never recomputed (matrix
// products, convolutions, random draws, and anything that is not an
// elementwise, reduction or shape op or an iota). Graph inputs and constants reach
// every graph for free and are not in the network. A minimum source/sink
// cut (Boost's Boykov-Kolmogorov max-flow) is the cheapest set of values to
// save: each cut in -> out edge is a saved value, and the forward nodes on
// the sink side that the backward needs are recomputed there, cloned into
// the backward stage of the joint graph. Recomputation is priced too:
// source -> in(v) carries a fraction of v's bytes for a cheap op (3/8 by
// default, measured: min_cut.cpp; for a reduction, of the operand it reads),
// so a cut never recomputes a long chain to keep a few bytes fewer. This is
// AOTAutograd's partitioner with bytes as the only cost. Both modes use it:
// in single_graph the "saved" values are those kept alive from the forward
// into the backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "partition/partition.hpp"

namespace ws::partition {

struct RematPlan {
  std::vector<ir::ValueId> saved;       // forward values the forward outputs for the backward
  std::vector<ir::ValueId> recomputed;  // forward values the backward computes again
  int64_t saved_bytes = 0;
  int64_t save_all_bytes = 0;  // what saving every forward value the backward reads costs
};

// Ops the backward may compute again: elementwise, reduction and shape ops
// and iotas (cheap per byte, deterministic).
bool recomputable(const ir::Node& n);

// The cheapest cut (a saved byte costs 8, a recomputed byte 3), and what
// the backward then recomputes.
RematPlan min_cut(const JointGraph& joint);

// Every forward value the backward reads saved, nothing recomputed.
RematPlan save_all(const JointGraph& joint);

// The cut that recomputes least while saving at most `budget` bytes:
// recomputing a value is priced per byte too, and the price is the highest
// that keeps the cut within the budget (a binary search over parametric
// cuts). Below the fewest bytes any cut saves (budgeted_cut(joint, 0)),
// that cut. The bytes kept between forward and backward fall with the
// budget, and on cnn and gpt so does the planned peak, in both modes
// (tests/partition/min_cut_test.cpp sweeps it). That is a property of how
// the backward recomputes (recompute_in_backward), not a bound: on mlp, a
// budget recomputes the relus to keep 0.13 MiB fewer, and the planned peak
// rises by 0.25 MiB, because the forward then writes the pre-activation
// and the relu separately instead of the relu as the product's post-op.
RematPlan budgeted_cut(const JointGraph& joint, int64_t budget);

// `joint` with the plan's recomputed values cloned into the backward stage
// where they are read, and every backward (and optimizer) read of them
// redirected to the clones: a reduction once, before its first reader; an
// elementwise or shape op again for each backward reader, just before it
// (min_cut.cpp says why).
JointGraph recompute_in_backward(const JointGraph& joint, const RematPlan& plan);

}  // namespace ws::partition
