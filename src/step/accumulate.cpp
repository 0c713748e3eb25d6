// Gradient accumulation's sums (accumulate.hpp): their inputs, and saving
// and loading them mid-cycle.
#include "step/accumulate.hpp"

#include <set>

#include <fmt/format.h>

#include "ir/builder.hpp"
#include "step/capture_step.hpp"
#include "step/train_step_impl.hpp"

namespace ws::step {

std::vector<ir::ValueId> accumulator_inputs(CapturedStep& cap, Accumulation& acc) {
  ir::Graph& g = cap.joint.graph;
  ir::Builder b(g);
  std::vector<ir::ValueId> out;
  for (ir::ValueId p : g.inputs_with_role(ir::InputRole::param)) {
    const std::string& name = g.input_name(p);
    const ir::Type type = g.type(p);
    Tensor& sum = acc.grads[name];
    if (!sum.defined()) sum = Tensor::zeros(type.shape, type.dtype);
    if (sum.dtype() != type.dtype || sum.shape() != type.shape)
      throw Error(fmt::format(
          "gradient accumulation: parameter '{}' is {}, but the gradients summed for it in "
          "this cycle are {} (loaded by load_accumulated, or the parameter was replaced "
          "mid-cycle); load sums of the parameters' types",
          name, type.str(), sum.str()));
    acc.bound.insert(name);
    out.push_back(b.input(ir::InputRole::buffer, kAccumulatedPrefix + name, type));
    cap.rank_local.push_back(cap.persistent.size());
    cap.sources.push_back({ir::InputRole::buffer, cap.persistent.size()});
    cap.persistent.emplace_back(g.input_name(out.back()), sum);
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> saved_sums(const Accumulation& acc) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, t] : acc.grads) out.emplace_back(name, t.clone());
  return out;
}

void load_sums(Accumulation& acc, int64_t k, int64_t calls,
               const std::vector<std::pair<std::string, Tensor>>& grads, const char* who) {
  if (calls < 0 || calls >= k)
    throw Error(fmt::format(
        "{}: {} calls summed, but a cycle of accumulate={} holds 0 to {} before it updates", who,
        calls, k, k - 1));
  std::set<std::string> seen;
  for (const auto& [name, t] : grads) {
    if (!seen.insert(name).second)
      throw Error(fmt::format("{}: the gradient sum of '{}' is given twice", who, name));
    if (!t.defined() || t.is_traced())
      throw Error(fmt::format("{}: the gradient sum of '{}' is not a concrete tensor", who, name));
    const auto it = acc.grads.find(name);
    if (acc.bound.contains(name) &&
        (it->second.dtype() != t.dtype() || it->second.shape() != t.shape()))
      throw Error(fmt::format("{}: the gradient sum of '{}' is {}, but the step sums {} for it",
                              who, name, t.str(), it->second.str()));
  }
  // Checked: now written. A sum compiled graphs are bound to keeps its
  // storage (copied into); another is made anew.
  std::erase_if(acc.grads, [&](const auto& entry) {
    return !seen.contains(entry.first) && !acc.bound.contains(entry.first);
  });
  for (auto& [name, sum] : acc.grads)
    if (!seen.contains(name)) sum.copy_(Tensor::zeros(sum.shape(), sum.dtype()));
  for (const auto& [name, t] : grads) {
    Tensor& sum = acc.grads[name];
    if (!acc.bound.contains(name)) sum = Tensor::zeros(t.shape(), t.dtype());
    sum.copy_(t);
  }
  acc.calls = calls;
}

}  // namespace ws::step

namespace ws {

int64_t TrainStep::accumulated() const { return impl_->source->accumulation().calls; }

std::vector<std::pair<std::string, Tensor>> TrainStep::accumulated_gradients() const {
  return step::saved_sums(impl_->source->accumulation());
}

void TrainStep::load_accumulated(int64_t calls,
                                 const std::vector<std::pair<std::string, Tensor>>& grads) {
  step::load_sums(impl_->source->accumulation(), impl_->opts.accumulate, calls, grads,
                  "load_accumulated");
}

}  // namespace ws
