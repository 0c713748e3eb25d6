#include "lower/fuse_bias_into_product.hpp"

#include "ir/attr.hpp"

namespace ws::lower {

using ir::Op;
using ir::ValueId;

ir::Graph fuse_bias_into_product(const ir::Graph& g, bool* changed) {
  const std::vector<int> uses = ir::use_counts(g);
  // add -> (product, bias); the product is then absorbed.
  std::vector<ValueId> product_of(g.nodes.size(), ir::kNoValue), bias_of(g.nodes.size());
  std::vector<bool> absorbed(g.nodes.size(), false);
  bool any = false;
  for (ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& n = g.node(v);
    if (n.op != Op::add || n.type.dtype != DType::f32 || n.type.rank() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const ValueId p = n.args[size_t(side)], b = n.args[size_t(1 - side)];
      const ir::Node& pn = g.node(p);
      const ir::Node& bn = g.node(b);
      if (pn.op != Op::matmul || uses[size_t(p)] != 1 || g.type(pn.args[0]).numel() == 0 ||
          g.type(pn.args[1]).numel() == 0 || bn.op != Op::broadcast ||
          g.type(bn.args[0]).rank() != 1 ||
          ir::attr<Op::broadcast, "dims">(bn) != std::vector<int64_t>{1} ||
          // A value per column, not one value broadcast along the row: the
          // product's bias is read as n values.
          g.type(bn.args[0]).shape[0] != n.type.shape[1])
        continue;
      product_of[size_t(v)] = p;
      bias_of[size_t(v)] = bn.args[0];
      absorbed[size_t(p)] = any = true;
      break;
    }
  }
  if (changed) *changed = any;
  if (!any) return g;
  ir::Graph out;
  out.name = g.name;
  std::vector<ValueId> map(g.nodes.size(), ir::kNoValue);
  for (ValueId v = 0; v < g.size(); ++v) {
    if (absorbed[size_t(v)]) continue;
    ir::Node n = g.node(v);
    if (const ValueId p = product_of[size_t(v)]; p != ir::kNoValue) {
      const ir::Node& pn = g.node(p);
      n = ir::Node{Op::matmul_bias, {pn.args[0], pn.args[1], bias_of[size_t(v)]},
                   pn.attrs,        n.type,
                   pn.loc,          pn.stage,
                   nullptr};
    }
    map[size_t(v)] = ir::append_renamed(out, std::move(n), map);
  }
  ir::copy_interface(g, map, out);
  return out;
}

}  // namespace ws::lower
