// What TrainStep compiled for its last signature, as text and pictures:
// the graphs, the Programs, the partition and its report.
#include "ir/dot.hpp"
#include "ir/text.hpp"
#include "partition/explain.hpp"
#include "step/train_step_impl.hpp"

namespace ws {

std::string TrainStep::graphs_text() const {
  std::string s;
  if (const step::Compiled* c = impl_->cache.last())
    for (const ir::Graph& g : c->lowered.empty() ? c->graphs : c->lowered)
      s += ir::print(g, {.locations = false});
  return s;
}

std::string TrainStep::partition_report() const {
  const step::Compiled* c = impl_->cache.last();
  if (!c || !c->partition) return {};
  const auto& [joint, plan] = *c->partition;
  return partition::explain(joint, plan);
}

std::string TrainStep::partition_dot() const {
  const step::Compiled* c = impl_->cache.last();
  if (!c || !c->partition) return {};
  const auto& [joint, plan] = *c->partition;
  return partition::to_dot(joint, plan);
}

std::string TrainStep::graph_dot(GraphStage stage) const {
  const step::Compiled* c = impl_->cache.last();
  if (!c || !c->partition) return {};
  // The whole picture (inputs, outputs, legend), where partition_dot keeps
  // to the computed values; the joint graph with what the plan saves and
  // recomputes marked, the others in clusters when there are three.
  if (stage == GraphStage::joint)
    return partition::to_dot(c->partition->first, c->partition->second, ir::DotOptions{});
  std::vector<ir::DotGraph> graphs;
  for (const ir::Graph& g : stage == GraphStage::lowered ? c->lowered : c->graphs)
    graphs.push_back({&g, c->graphs.size() > 1, {}});
  return ir::to_dot(graphs);
}

std::string TrainStep::programs_text() const {
  std::string s;
  if (const step::Compiled* c = impl_->cache.last())
    for (const exec::Executable& e : c->programs) s += e.program().str();
  return s;
}

}  // namespace ws
