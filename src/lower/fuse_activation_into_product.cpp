#include "lower/fuse_activation_into_product.hpp"

#include "ir/attr.hpp"
#include "lower/rewrite.hpp"

namespace ws::lower {

using ir::Op;
using ir::ValueId;

ir::Graph fuse_activation_into_product(const ir::Graph& g, bool* changed) {
  // product -> its relu's select, for the products whose only readers are
  // le(y, 0) and select(le, 0, y).
  std::vector<ValueId> relu_of(g.nodes.size(), ir::kNoValue);
  std::vector<std::vector<ValueId>> users(g.nodes.size());
  for (ValueId v = 0; v < g.size(); ++v)
    for (ValueId a : g.node(v).args) users[size_t(a)].push_back(v);
  std::vector<bool> is_output(g.nodes.size(), false);
  for (const ir::Output& o : g.outputs) is_output[size_t(o.value)] = true;
  for (ValueId s = 0; s < g.size(); ++s) {
    const ir::Node& sn = g.node(s);
    if (sn.op != Op::select || !is_zero(g, sn.args[1])) continue;
    const ValueId m = sn.args[0], y = sn.args[2];
    const ir::Node& mn = g.node(m);
    const ir::Node& yn = g.node(y);
    if (mn.op != Op::le || mn.args[0] != y || !is_zero(g, mn.args[1])) continue;
    if (yn.op != Op::matmul_bias || yn.type.dtype != DType::f32 ||
        ir::attr<Op::matmul_bias, "activation">(yn) || is_output[size_t(y)] ||
        users[size_t(y)].size() != 2)
      continue;
    relu_of[size_t(y)] = s;
  }
  std::vector<bool> rectified(g.nodes.size(), false);  // selects that are their product
  for (ValueId y = 0; y < g.size(); ++y)
    if (relu_of[size_t(y)] != ir::kNoValue) rectified[size_t(relu_of[size_t(y)])] = true;
  return rewrite_nodes(g, changed, [&](ir::Graph& out, ValueId v, const ir::Node& n) {
    if (relu_of[size_t(v)] != ir::kNoValue) {
      ir::Node p = n;
      ir::set_attr<Op::matmul_bias, "activation">(p.attrs, "relu");
      return append(out, std::move(p));
    }
    if (rectified[size_t(v)]) return n.args[2];  // the select is the rectified product
    return ir::kNoValue;
  });
}

}  // namespace ws::lower
