#include "partition/partition.hpp"

#include "partition/min_cut.hpp"
#include "partition/update_order.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace ws::partition {
namespace {

using ir::Graph;
using ir::Op;
using ir::ValueId;

constexpr int kGlobal = -1;  // graph inputs: imported where read
constexpr int kSource = -2;  // full / constant: recomputed where read
enum Stage { kForward = 0, kBackward = 1, kOptimizer = 2 };

int stage_of(const JointGraph& j, ValueId v) {
  Op op = j.graph.node(v).op;
  if (op == Op::input) return kGlobal;
  if (op == Op::full || op == Op::constant) return kSource;
  if (v < j.forward_end) return kForward;
  return v < j.backward_end ? kBackward : kOptimizer;
}

// Per value, the last stage that reads it (kGlobal when none does).
std::vector<int> last_reads(const JointGraph& j) {
  std::vector<int> last(size_t(j.graph.size()), kGlobal);
  for (ValueId v = 0; v < j.graph.size(); ++v)
    for (ValueId a : j.graph.node(v).args)
      last[size_t(a)] = std::max(last[size_t(a)], stage_of(j, v));
  return last;
}

// Where an output is produced: optimizer updates in the optimizer graph;
// the loss, user outputs and forward mutations (buffers, the random offset)
// in the forward graph, as a module's forward does them; but never before
// the stage that computes its value (a guarded step's buffer update and its
// `finite` flag wait for the gradients: an earlier graph would read the
// previous step's value), nor before a stage that reads the old value of
// the input it updates (a gradient sum the backward reads, set to zero:
// accumulate.hpp). `last_read`: last_reads(j).
int home_of(const JointGraph& j, const ir::Output& o, const std::vector<int>& last_read) {
  const Graph& g = j.graph;
  int home = kForward;
  if (o.role == ir::OutputRole::update) {
    const ir::InputRole r = g.input_role(o.aliased_input);
    home = r == ir::InputRole::buffer || r == ir::InputRole::rng ? kForward : kOptimizer;
    home = std::max(home, last_read[size_t(o.aliased_input)]);
  }
  return std::max(home, stage_of(j, o.value));
}

std::string interface_name(const Graph& g, ValueId v, int producer) {
  if (producer == kBackward) {
    for (const ir::Output& o : g.outputs)
      if (o.role == ir::OutputRole::grad && o.value == v) return o.name;  // "grad.fc1.weight"
  }
  return fmt::format("saved.%{}", v);
}

// The subgraph of stage `s`: its nodes, the inputs and sources they read,
// interface inputs for values from other stages, and as outputs the joint
// outputs it produces plus values other stages read from it.
Graph extract(const JointGraph& j, int s, const std::string& name) {
  const Graph& g = j.graph;
  const int64_t n = g.size();
  std::vector<int> stage(static_cast<size_t>(n));
  for (ValueId v = 0; v < n; ++v) stage[size_t(v)] = stage_of(j, v);
  const std::vector<int> last_read = last_reads(j);

  // Which values of other stages does each stage read, and which sources?
  std::vector<bool> imported(static_cast<size_t>(n), false),
      exported(static_cast<size_t>(n), false);
  std::vector<bool> source_needed(static_cast<size_t>(n), false);
  for (ValueId v = 0; v < n; ++v) {
    const int sv = stage[size_t(v)];
    if (sv < 0) continue;
    for (ValueId a : g.node(v).args) {
      const int sa = stage[size_t(a)];
      if (sa == sv) continue;
      if (sa == kSource) {
        if (sv == s) source_needed[size_t(a)] = true;
      } else if (sv == s) {
        imported[size_t(a)] = true;
      } else if (sa == s) {
        exported[size_t(a)] = true;
      }
    }
  }
  // Outputs land in their home graph even when their value comes from
  // elsewhere (an unchanged parameter, say).
  for (const ir::Output& o : g.outputs) {
    if (o.role == ir::OutputRole::grad) continue;
    int home = home_of(j, o, last_read);
    int sv = stage[size_t(o.value)];
    if (home != s) {
      if (sv == s) exported[size_t(o.value)] = true;
      continue;
    }
    if (sv == kSource)
      source_needed[size_t(o.value)] = true;
    else if (sv != s)
      imported[size_t(o.value)] = true;
    if (o.aliased_input != ir::kNoValue) imported[size_t(o.aliased_input)] = true;
  }

  Graph out;
  out.name = name;
  std::vector<ValueId> map(static_cast<size_t>(n), ir::kNoValue);
  auto push = [&](ir::Node node) { return ir::append_renamed(out, std::move(node), map); };
  // Graph inputs keep their joint order (parameters first); interface inputs
  // follow in producer order.
  for (ValueId v : g.inputs)
    if (imported[size_t(v)]) {
      map[size_t(v)] = push(g.node(v));
      out.inputs.push_back(map[size_t(v)]);
    }
  for (ValueId v = 0; v < n; ++v) {
    if (!imported[size_t(v)] || stage[size_t(v)] < 0) continue;
    const int producer = stage[size_t(v)];
    ir::InputRole role = producer == kBackward ? ir::InputRole::grad : ir::InputRole::saved;
    map[size_t(v)] = push(ir::input_node(role, interface_name(g, v, producer), g.type(v),
                                         g.node(v).loc, g.node(v).stage));
    out.inputs.push_back(map[size_t(v)]);
  }
  for (ValueId v = 0; v < n; ++v)
    if (stage[size_t(v)] == s || (stage[size_t(v)] == kSource && source_needed[size_t(v)]))
      map[size_t(v)] = push(g.node(v));

  for (const ir::Output& o : g.outputs) {
    if (o.role == ir::OutputRole::grad) continue;
    if (home_of(j, o, last_read) != s) continue;
    ir::Output r = o;
    r.value = map[size_t(o.value)];
    if (o.aliased_input != ir::kNoValue) r.aliased_input = map[size_t(o.aliased_input)];
    out.outputs.push_back(r);
  }
  for (ValueId v = 0; v < n; ++v)
    if (exported[size_t(v)]) {
      ir::OutputRole role = s == kBackward ? ir::OutputRole::grad : ir::OutputRole::saved;
      out.outputs.push_back(
          ir::Output{role, map[size_t(v)], ir::kNoValue, interface_name(g, v, s)});
    }
  return out;
}

}  // namespace

void mark_stages(JointGraph& joint) {
  for (ValueId v = 0; v < joint.graph.size(); ++v)
    joint.graph.nodes[size_t(v)].stage = v < joint.forward_end    ? ir::Stage::forward
                                         : v < joint.backward_end ? ir::Stage::backward
                                                                  : ir::Stage::optimizer;
}

Graph single_graph(const JointGraph& joint) {
  Graph g = updates_early(joint);
  g.name = "step";
  std::erase_if(g.outputs, [](const ir::Output& o) { return o.role == ir::OutputRole::grad; });
  return g;
}

ThreeGraphs three_graphs(const JointGraph& joint, Saving saving) {
  return three_graphs(joint, saving == Saving::min_cut ? min_cut(joint) : save_all(joint));
}

ThreeGraphs three_graphs(const JointGraph& joint, const RematPlan& plan) {
  const JointGraph j = recompute_in_backward(joint, plan);
  return ThreeGraphs{extract(j, kForward, "forward"), extract(j, kBackward, "backward"),
                     extract(j, kOptimizer, "optimizer")};
}

}  // namespace ws::partition
