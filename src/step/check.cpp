#include <algorithm>

#include <fmt/format.h>

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
    const step::InputSource& s = cap.source(v);
    values.push_back(s.role == ir::InputRole::data ? inputs.at(s.index)
                                                   : cap.persistent[s.index].second);
  }
  return autograd::gradcheck_graph(g, g.inputs_with_role(ir::InputRole::param), values, opts);
}

std::string format_gradcheck(const GradcheckResult& r) {
  size_t name_w = 9, shape_w = 5, at_w = 2;
  for (const ParamCheck& p : r.params) {
    name_w = std::max(name_w, p.name.size());
    shape_w = std::max(shape_w, shape_str(p.shape).size());
    at_w = std::max(at_w, shape_str(p.at).size());
  }
  std::string s = fmt::format("{:<{}}  {:<{}}  {:>7}  {:>9}  {:<{}}  {:>16}  {:>16}  {}\n",
                              "parameter", name_w, "shape", shape_w, "checked", "abs error", "at",
                              at_w, "analytic", "numeric", "result");
  for (const ParamCheck& p : r.params)
    s += fmt::format("{:<{}}  {:<{}}  {:>7}  {:>9.2e}  {:<{}}  {:>16.9e}  {:>16.9e}  {}\n", p.name,
                     name_w, shape_str(p.shape), shape_w, p.checked, p.error,
                     p.checked ? shape_str(p.at) : "-", at_w, p.analytic, p.numeric,
                     p.ok ? "pass" : "FAIL");
  return s;
}

}  // namespace ws::check
