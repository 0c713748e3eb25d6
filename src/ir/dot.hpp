// Graphs in Graphviz DOT: the one writer behind every picture of a step
// (`wholestep dump --dot`, `wholestep graph`, TrainStep::graph_dot).
//
// A node shows its id, op and type, filled by its stage (Node::stage:
// forward light blue, backward pink, optimizer green). Inputs are drawn by
// role: what lives across steps (parameters gold, buffers, optimizer state
// and the random stream khaki) as cylinders; data and hyperparameters as
// white ellipses; a value another graph sent (saved, grad) double-bordered
// with its bytes. `full` and `constant` are small white ellipses. A copy of
// a forward value the backward recomputes (its `recompute` attribute, or
// marked) is dashed; a value marked saved is double-bordered with its
// bytes. Each graph output is a node of its own: the loss, a value sent to
// a later graph (double border, bytes, and a dashed edge to the input of
// that name in the graph that reads it), an in-place update (a cylinder
// with a bold border naming the input whose storage it writes). A fusion is
// a grey cluster holding its body's ops: its operands feed the body's
// inputs, the body's outputs feed the fusion node, which its results read.
//
// Graphviz names (an SVG's node titles): node v of the graph named G is
// "G_v", node b of the body of its fusion v "G_v_b", output i "G_out<i>",
// legend entries "legend_*".
#pragma once

#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace ws::ir {

enum class DotMark : uint8_t { none, saved, recomputed };

struct DotGraph {
  const Graph* graph = nullptr;
  bool cluster = false;        // drawn in a box labelled with the graph's name
  std::vector<DotMark> marks;  // by value id (empty: none marked)
};

struct DotOptions {
  std::string name = "step";  // the digraph's name
  bool sources = true;        // inputs, full and constant nodes (off: left out, edges too)
  bool outputs = true;        // one node per graph output
  bool legend = true;
};

std::string to_dot(const std::vector<DotGraph>& graphs, const DotOptions& opts = {});

}  // namespace ws::ir
