#include "lower/fuse_residual_into_product.hpp"

#include "ir/attr.hpp"
#include "lower/rewrite.hpp"

namespace ws::lower {

using ir::Op;
using ir::ValueId;

ir::Graph fuse_residual_into_product(const ir::Graph& g, bool* changed) {
  const std::vector<int> uses = ir::use_counts(g);
  std::vector<bool> is_output(g.nodes.size(), false);
  for (const ir::Output& o : g.outputs) is_output[size_t(o.value)] = true;
  auto product = [&](ValueId y) {
    const ir::Node& n = g.node(y);
    return n.op == Op::matmul_bias && n.type.dtype == DType::f32 &&
           !ir::attr<Op::matmul_bias, "activation">(n) && uses[size_t(y)] == 1 &&
           !is_output[size_t(y)];
  };
  std::vector<ValueId> product_of(g.nodes.size(), ir::kNoValue);  // add -> its product
  for (ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& n = g.node(v);
    if (n.op != Op::add) continue;
    for (int side = 0; side < 2; ++side) {
      const ValueId y = n.args[size_t(side)], x = n.args[size_t(1 - side)];
      if (!product(y) || x == y || g.type(x) != n.type) continue;
      product_of[size_t(v)] = y;
      break;
    }
  }
  // A product stays where it is, dead once its add reads its operands.
  return rewrite_nodes(g, changed, [&](ir::Graph& out, ValueId v, const ir::Node& n) {
    const ValueId y = product_of[size_t(v)];
    if (y == ir::kNoValue) return ir::kNoValue;
    // y is already in `out` (it precedes its add): read its renamed operands
    // there, and the residual as the add reads it.
    const int side = g.node(v).args[0] == y ? 0 : 1;
    const ValueId x = n.args[size_t(1 - side)];
    const ir::Node& yo = out.node(n.args[size_t(side)]);
    ir::Node r{Op::matmul_bias_add,
               {yo.args[0], yo.args[1], yo.args[2], x},
               yo.attrs,
               n.type,
               yo.loc,
               yo.stage,
               nullptr};
    return append(out, std::move(r));
  });
}

}  // namespace ws::lower
