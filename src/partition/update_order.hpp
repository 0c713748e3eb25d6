// The single graph's order: each optimizer update runs as soon as it may.
//
// Traced, the joint graph computes every gradient before the first update,
// so all gradients are alive together at the end of the step. In the single
// graph nothing forces that: the nodes the optimizer appended (from
// JointGraph::backward_end on) are placed here as follows, and every other
// node keeps its traced order.
//  - An update (an output aliased to input p) runs once its operands exist
//    and every node that reads the old p has run, so writing p in place
//    stays legal and needs no copy.
//  - Any other optimizer node runs as late as its earliest consumer allows,
//    so e.g. beta1 * m is not computed at the start and held through the step.
//  - A collective the optimizer starts runs as soon as it may; its wait, and
//    all that reads it, run last (the sharded step's all-gathers of updated
//    parameters travel while the other updates run).
// A gradient then dies at its update, in the backward pass, instead of at
// the end.
#pragma once

#include "partition/partition.hpp"

namespace ws::partition {

// The joint graph's nodes in that order (same nodes, outputs and inputs).
ir::Graph updates_early(const JointGraph& joint);

}  // namespace ws::partition
