// What TrainStep compiled for its last signature, as text and pictures:
// the graphs, the Programs, the partition and its report.
#include <cstring>

#include "ir/dot.hpp"
#include "ir/text.hpp"
#include "partition/explain.hpp"
#include "step/train_step_impl.hpp"

namespace ws {

std::string TrainStep::graphs_text(GraphStage stage) const {
  std::string s;
  const step::Compiled* c = impl_->cache.last();
  if (!c) return s;
  if (stage == GraphStage::joint && c->partition)
    return ir::print(c->partition->first.graph, {.locations = false});
  for (const ir::Graph& g :
       c->lowered.empty() || stage != GraphStage::lowered ? c->graphs : c->lowered)
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

std::vector<std::pair<std::string, const void*>> TrainStep::bound_storage() const {
  std::vector<std::pair<std::string, const void*>> out;
  const step::Compiled* c = impl_->cache.last();
  if (!c) return out;
  for (size_t p = 0; p < c->inputs.size(); ++p) {
    for (size_t i = 0; i < c->inputs[p].size(); ++i) {
      const step::Binding& b = c->inputs[p][i];
      if (b.kind != step::Bind::persistent) continue;
      if (c->programs.empty()) {  // interpreted: the step graph's inputs
        const ir::ValueId v = c->step_graph.inputs[i];
        out.emplace_back(c->step_graph.input_name(v), c->persistent[b.index].impl()->storage->data);
      } else {
        out.emplace_back(c->programs[p].program().inputs[i].name, b.ptr);
      }
    }
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> TrainStep::gradients() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const step::Compiled* c = impl_->cache.last();
  if (!c || impl_->opts.mode != StepMode::three_graph) return out;
  for (const exec::Executable& e : c->programs)
    for (const exec::ProgramOutput& o : e.program().outputs) {
      if (o.role != ir::OutputRole::grad) continue;
      const auto it = c->owned.by_name.find(o.name);
      WS_CHECK(it != c->owned.by_name.end()) << "gradient " << o.name << " has no buffer";
      auto impl = detail::make_concrete(o.type);
      std::memcpy(impl->storage->data, it->second.storage->data, o.type.bytes());
      out.emplace_back(o.name, Tensor(std::move(impl)));
    }
  return out;
}

std::string TrainStep::programs_text() const {
  std::string s;
  if (const step::Compiled* c = impl_->cache.last())
    for (const exec::Executable& e : c->programs) s += e.program().str();
  return s;
}

}  // namespace ws
