#include "autograd/reverse.hpp"

#include <fmt/format.h>

#include "autograd/vjp.hpp"
#include "ir/builder.hpp"

namespace ws::autograd {

using ir::ValueId;

std::vector<ValueId> append_backward(ir::Graph& g, ValueId loss, const std::vector<ValueId>& wrt) {
  const ir::Type& lt = g.type(loss);
  if (lt.rank() != 0 || !is_floating(lt.dtype))
    throw Error(fmt::format("the loss must be a 0-d floating-point tensor, got {}{}", lt.str(),
                            at(g.node(loss).loc)));
  const size_t n_fwd = size_t(loss) + 1;

  // needs[v]: v depends on some `wrt` value through differentiable ops.
  std::vector<bool> needs(n_fwd, false);
  for (ValueId w : wrt)
    if (size_t(w) < n_fwd && is_floating(g.type(w).dtype)) needs[size_t(w)] = true;
  for (size_t v = 0; v < n_fwd; ++v) {
    const ir::Node& n = g.nodes[v];
    if (needs[v] || !op_info(n.op).differentiable || !is_floating(n.type.dtype)) continue;
    for (ValueId a : n.args) needs[v] = needs[v] || needs[size_t(a)];
  }

  ir::Builder b(g);
  b.internal = "autograd";
  std::vector<ValueId> grad(n_fwd, ir::kNoValue);
  auto accumulate = [&](ValueId v, ValueId d) {
    ValueId& slot = grad[size_t(v)];
    slot = slot == ir::kNoValue ? d : b.binary(ir::Op::add, slot, d);
  };
  b.loc = g.node(loss).loc;
  if (needs[size_t(loss)]) grad[size_t(loss)] = b.full(1.0, lt);

  for (ValueId v = loss; v >= 0; --v) {
    if (!needs[size_t(v)] || grad[size_t(v)] == ir::kNoValue) continue;
    const ir::Node node = g.node(v);  // a copy: appending may move the node vector
    if (node.op == ir::Op::input) continue;
    VjpRule rule = vjp_rule(node.op);
    WS_CHECK(rule) << "op " << ir::op_name(node.op) << " is marked differentiable but has no rule";
    std::vector<bool> want;
    for (ValueId a : node.args) want.push_back(needs[size_t(a)]);
    std::vector<ValueId> dargs(node.args.size(), ir::kNoValue);
    b.loc = node.loc;
    rule(VjpContext{b, node, v, grad[size_t(v)], want}, dargs);
    for (size_t i = 0; i < node.args.size(); ++i) {
      if (!want[i]) continue;
      WS_CHECK(dargs[i] != ir::kNoValue)
          << "rule for " << ir::op_name(node.op) << " gave no gradient for operand " << i;
      WS_CHECK(g.type(dargs[i]) == g.type(node.args[i]))
          << ir::op_name(node.op) << " rule: gradient " << g.type(dargs[i]).str() << " for operand "
          << g.type(node.args[i]).str();
      accumulate(node.args[i], dargs[i]);
    }
  }

  std::vector<ValueId> out;
  b.loc = {};
  for (ValueId w : wrt) {
    ValueId d = size_t(w) < n_fwd ? grad[size_t(w)] : ir::kNoValue;
    out.push_back(d != ir::kNoValue ? d : b.full(0.0, g.type(w)));
  }
  return out;
}

}  // namespace ws::autograd
