#include "lower/fuse_update_into_product.hpp"

#include <map>

namespace ws::lower {
namespace {

using ir::Op;
using ir::ValueId;

struct Match {
  ValueId product = ir::kNoValue, scaled = ir::kNoValue, lr = ir::kNoValue;
};

// The 0-d value a broadcast to a full shape repeats, or kNoValue.
ValueId scalar_source(const ir::Graph& g, ValueId v) {
  const ir::Node& n = g.node(v);
  if (n.op != Op::broadcast || g.type(n.args[0]).rank() != 0) return ir::kNoValue;
  return n.args[0];
}

}  // namespace

ir::Graph fuse_update_into_product(const ir::Graph& g) {
  const std::vector<int> uses = ir::use_counts(g);
  std::map<ValueId, Match> at_update;  // update value -> what it absorbs
  std::vector<bool> absorbed(g.nodes.size(), false);
  for (const ir::Output& o : g.outputs) {
    if (o.role != ir::OutputRole::update || o.value == o.aliased_input) continue;
    const ir::Node& u = g.node(o.value);
    if (u.op != Op::sub || u.args[0] != o.aliased_input || u.type.dtype != DType::f32) continue;
    const ValueId s = u.args[1];
    const ir::Node& sn = g.node(s);
    if (sn.op != Op::mul || uses[size_t(s)] != 1) continue;
    for (int side = 0; side < 2; ++side) {
      const ValueId p = sn.args[size_t(side)], lr = scalar_source(g, sn.args[size_t(1 - side)]);
      if (lr == ir::kNoValue || g.node(p).op != Op::matmul || uses[size_t(p)] != 1) continue;
      at_update[o.value] = {p, s, lr};
      absorbed[size_t(p)] = absorbed[size_t(s)] = true;
      break;
    }
  }
  if (at_update.empty()) return g;
  ir::Graph out;
  out.name = g.name;
  std::vector<ValueId> map(g.nodes.size(), ir::kNoValue);
  std::map<ValueId, ValueId> negated;  // lr -> -lr
  for (ValueId v = 0; v < g.size(); ++v) {
    if (absorbed[size_t(v)]) continue;
    const ir::Node& n = g.node(v);
    auto it = at_update.find(v);
    if (it == at_update.end()) {
      map[size_t(v)] = ir::append_renamed(out, n, map);
      continue;
    }
    const Match& m = it->second;
    auto [neg, fresh] = negated.emplace(m.lr, ir::kNoValue);
    if (fresh) {
      out.nodes.push_back(ir::Node{Op::neg, {map[size_t(m.lr)]}, {}, g.type(m.lr), n.loc, nullptr});
      neg->second = ValueId(out.nodes.size() - 1);
    }
    const ir::Node& p = g.node(m.product);
    out.nodes.push_back(ir::Node{
        Op::matmul_add,
        {map[size_t(p.args[0])], map[size_t(p.args[1])], map[size_t(n.args[0])], neg->second},
        p.attrs,
        n.type,
        p.loc,
        nullptr});
    map[size_t(v)] = ValueId(out.nodes.size() - 1);
  }
  ir::copy_interface(g, map, out);
  return out;
}

}  // namespace ws::lower
