#include "partition/explain.hpp"

#include <fmt/format.h>

namespace ws::partition {
namespace {

using ir::ValueId;

std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", double(bytes) / (1 << 20)); }

}  // namespace

std::string explain(const JointGraph& j, const RematPlan& plan) {
  const ir::Graph& g = j.graph;
  std::vector<int> kind(g.nodes.size(), 0);  // 1 saved, 2 recomputed
  for (ValueId v : plan.saved) kind[size_t(v)] = 1;
  for (ValueId v : plan.recomputed) kind[size_t(v)] = 2;
  std::string s = fmt::format("{:<11} {:<10} {:<18} {:<20} {:>10}  {}\n", "value", "decision", "op",
                              "type", "bytes", "reason");
  for (ValueId v = 0; v < ValueId(j.forward_end); ++v) {
    if (!kind[size_t(v)]) continue;
    const ir::Node& n = g.node(v);
    const std::string reason =
        kind[size_t(v)] == 2 ? "recomputed from values that reach the backward"
        : recomputable(n)    ? "cheaper to save than what recomputing it needs"
                             : fmt::format(
                                   "never recomputed: {} is not an elementwise, reduction "
                                      "or shape op",
                                   ir::op_name(n.op));
    s += fmt::format("{:<11} {:<10} {:<18} {:<20} {:>10}  {}\n", fmt::format("%{}", v),
                     kind[size_t(v)] == 1 ? "saved" : "recompute", ir::op_name(n.op), n.type.str(),
                     n.type.bytes(), reason);
  }
  s += fmt::format(
      "saved {} ({} values), recomputed {} values; saving everything the backward "
      "reads keeps {}\n",
      mib(plan.saved_bytes), plan.saved.size(), plan.recomputed.size(), mib(plan.save_all_bytes));
  return s;
}

std::string to_dot(const JointGraph& j, const RematPlan& plan, const ir::DotOptions& opts) {
  ir::DotGraph d{&j.graph, false, std::vector<ir::DotMark>(j.graph.nodes.size())};
  for (ValueId v : plan.saved) d.marks[size_t(v)] = ir::DotMark::saved;
  for (ValueId v : plan.recomputed) d.marks[size_t(v)] = ir::DotMark::recomputed;
  return ir::to_dot({d}, opts);
}

}  // namespace ws::partition
