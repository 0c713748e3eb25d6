// Partition: from the joint graph (forward + backward + updates) to the
// graphs that run per step.
//
// single_graph keeps everything in one graph: gradients are intermediate
// values, only the loss (and user outputs) leave it, and updates write their
// inputs in place through the alias table.
//
// three_graph cuts the joint graph by stage into forward, backward and
// optimizer graphs, as AOTAutograd plus an eager optimizer does. A computed
// value crossing a cut becomes an output of its producer (role `saved` from
// forward, `grad` from backward) and an input of the same name in each
// consumer. Graph inputs (params, data, hypers) are imported by every graph
// that reads them; `full` and `constant` nodes are recomputed rather than
// saved. What the forward saves is a minimum cut (min_cut.hpp): the backward
// recomputes cheap forward values when that keeps fewer bytes alive between
// the graphs; Saving::all saves every forward value the backward reads.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace ws::partition {

struct JointGraph {
  ir::Graph graph;           // outputs: loss, user..., grad per param, update...
  int64_t forward_end = 0;   // nodes [0, forward_end): inputs and forward
  int64_t backward_end = 0;  // [forward_end, backward_end): backward; then updates
};

// Marks every node with its stage (ir::Node::stage) from the ranges, so
// that passes which reorder or replace nodes keep it.
void mark_stages(JointGraph& joint);

ir::Graph single_graph(const JointGraph& joint);

struct ThreeGraphs {
  ir::Graph forward, backward, optimizer;
};

enum class Saving { min_cut, all };

ThreeGraphs three_graphs(const JointGraph& joint, Saving saving = Saving::min_cut);

struct RematPlan;
// The three graphs with the plan's values saved and the rest recomputed.
ThreeGraphs three_graphs(const JointGraph& joint, const RematPlan& plan);

}  // namespace ws::partition
