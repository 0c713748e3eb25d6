#include "autograd/gradcheck.hpp"
#include "step/capture_step.hpp"

namespace ws::check {

GradcheckResult gradcheck(nn::Module& model, const LossFn& loss_fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opts) {
  std::vector<ir::Type> types;
  for (const Tensor& t : inputs) {
    if (!t.defined() || t.is_traced()) throw Error("gradcheck: inputs must be concrete tensors");
    types.push_back(ir::Type{t.dtype(), t.shape()});
  }
  step::CapturedStep cap = step::trace_forward(model, nullptr, loss_fn, types, {});
  const ir::Graph& g = cap.joint.graph;
  std::vector<Tensor> values;
  for (ir::ValueId v : g.inputs) {
    const std::string& name = g.input_name(v);
    if (g.input_role(v) == ir::InputRole::data) {
      values.push_back(inputs.at(std::stoul(name.substr(name.find('.') + 1))));
      continue;
    }
    for (auto& [n, t] : cap.persistent)
      if (n == name) values.push_back(t);
  }
  return autograd::gradcheck_graph(g, g.inputs_with_role(ir::InputRole::param), values, opts);
}

}  // namespace ws::check
