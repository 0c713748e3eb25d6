#include "exec/interpreter.hpp"

#include <cmath>

#include <fmt/format.h>

#include "exec/reference.hpp"
#include "ir/attr.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws::exec {

namespace {

// The index of the first inf or NaN in a floating-point tensor, or -1.
int64_t first_nonfinite(const Tensor& t) {
  if (!is_floating(t.dtype())) return -1;
  const int64_t n = t.numel();
  if (t.dtype() == DType::f32) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i])) return i;
  } else {
    const double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i])) return i;
  }
  return -1;
}

}  // namespace

std::vector<Tensor> interpret(const ir::Graph& g, const std::vector<Tensor>& inputs,
                              InterpretStats* stats, bool detect_anomaly) {
  if (inputs.size() != g.inputs.size())
    throw Error(
        fmt::format("graph '{}' takes {} inputs, got {}", g.name, g.inputs.size(), inputs.size()));
  std::vector<Tensor> values(g.nodes.size());
  std::vector<std::vector<Tensor>> results(g.nodes.size());  // a fusion's results
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Type& want = g.type(g.inputs[i]);
    if (!inputs[i].defined() || inputs[i].is_traced() || inputs[i].impl()->type != want)
      throw Error(fmt::format("input {} ('{}') of graph '{}' must be a concrete {}, got {}", i,
                              g.input_name(g.inputs[i]), g.name, want.str(), inputs[i].str()));
    values[size_t(g.inputs[i])] = inputs[i];
  }
  std::vector<int> uses = ir::use_counts(g);
  int64_t live = 0, peak = 0, kernels = 0;
  std::vector<ir::Type> types;
  std::vector<const void*> ptrs;
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const ir::Node& n = g.nodes[v];
    if (n.op == ir::Op::input) continue;
    if (n.op == ir::Op::fusion) {  // its body, interpreted with the same kernels
      std::vector<Tensor> args;
      for (ir::ValueId a : n.args) args.push_back(values[size_t(a)]);
      results[v] = interpret(*n.body, args);
      values[v] = results[v][0];
    } else if (n.op == ir::Op::fusion_result) {
      values[v] = results[size_t(n.args[0])][size_t(ir::attr<ir::Op::fusion_result, "index">(n))];
    } else {
      types.clear();
      ptrs.clear();
      for (ir::ValueId a : n.args) {
        types.push_back(g.type(a));
        ptrs.push_back(values[size_t(a)].impl()->storage->data);
      }
      auto impl = ws::detail::make_concrete(n.type);
      run_reference(n.op, n.attrs, types, ptrs.data(), n.type, impl->storage->data, n.loc);
      values[v] = Tensor(std::move(impl));
    }
    if (detect_anomaly && n.op != ir::Op::fusion_result)
      if (const int64_t i = first_nonfinite(values[v]); i >= 0) {
        std::string operands;
        for (ir::ValueId a : n.args) {
          const bool bad = first_nonfinite(values[size_t(a)]) >= 0;
          operands +=
              fmt::format("{}%{}{}", operands.empty() ? "" : ", ", a, bad ? " (not finite)" : "");
        }
        const double x = values[v].to_vector()[size_t(i)];
        throw Error(fmt::format(
            "anomaly: %{} = {}({}) : {} is the first value in graph '{}' that is not finite: "
            "element {} is {}{}",
            v, ir::op_name(n.op), operands, n.type.str(), g.name, i,
            std::isnan(x) ? "NaN" : (x > 0 ? "inf" : "-inf"), at(n.loc)));
      }
    ++kernels;
    live += int64_t(n.type.bytes());
    peak = std::max(peak, live);
    for (ir::ValueId a : n.args)
      if (--uses[size_t(a)] == 0 && g.node(a).op != ir::Op::input) {
        live -= int64_t(g.type(a).bytes());
        values[size_t(a)] = Tensor();
        results[size_t(a)].clear();
      }
  }
  std::vector<Tensor> out;
  for (const ir::Output& o : g.outputs) {
    const Tensor& t = values[size_t(o.value)];
    out.push_back(g.node(o.value).op == ir::Op::input ? t.clone() : t);
  }
  if (stats) *stats = InterpretStats{kernels, peak};
  return out;
}

}  // namespace ws::exec
