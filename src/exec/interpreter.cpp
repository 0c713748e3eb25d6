#include "exec/interpreter.hpp"

#include <fmt/format.h>

#include "capture/tensor_impl.hpp"
#include "exec/reference.hpp"

namespace ws::exec {

std::vector<Tensor> interpret(const ir::Graph& g, const std::vector<Tensor>& inputs,
                              InterpretStats* stats) {
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
      values[v] = results[size_t(n.args[0])][size_t(n.attrs.i("index"))];
    } else {
      types.clear();
      ptrs.clear();
      for (ir::ValueId a : n.args) {
        types.push_back(g.type(a));
        ptrs.push_back(values[size_t(a)].impl()->storage->data);
      }
      auto impl = detail::make_concrete(n.type);
      run_reference(n.op, n.attrs, types, ptrs.data(), n.type, impl->storage->data, n.loc);
      values[v] = Tensor(std::move(impl));
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
