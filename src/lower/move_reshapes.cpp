#include "lower/move_reshapes.hpp"

#include "lower/rewrite.hpp"

namespace ws::lower {

using ir::Op;
using ir::ValueId;

namespace {

// The shape the operands of out's node `n` (already renamed into `out`)
// have before their reshapes, when every operand is a reshape from one
// shape, a full or a broadcast of a 0-d value, and at least one is a
// reshape; else null.
const Shape* common_source(const ir::Graph& out, const ir::Node& n) {
  const Shape* src = nullptr;
  for (ValueId a : n.args) {
    const ir::Node& an = out.node(a);
    if (an.op == Op::full) continue;
    if (an.op == Op::broadcast && out.type(an.args[0]).rank() == 0) continue;
    if (an.op != Op::reshape) return nullptr;
    const Shape& s = out.type(an.args[0]).shape;
    if (src && *src != s) return nullptr;
    src = &s;
  }
  return src && *src != n.type.shape ? src : nullptr;
}

}  // namespace

ir::Graph move_reshapes(const ir::Graph& g) {
  std::vector<bool> is_output(g.nodes.size(), false);
  for (const ir::Output& o : g.outputs) is_output[size_t(o.value)] = true;
  return rewrite_nodes(g, [&](ir::Graph& out, ValueId v, const ir::Node& n) {
    if (n.op == Op::reshape) {
      // A reshape of a reshape reads the first's operand; back where that
      // started, it is no reshape at all.
      ValueId src = n.args[0];
      if (out.node(src).op == Op::reshape) src = out.node(src).args[0];
      if (src == n.args[0]) return ir::kNoValue;
      if (out.type(src).shape == n.type.shape && !is_output[size_t(v)]) return src;
      ir::Node r = n;
      r.args[0] = src;
      return append(out, std::move(r));
    }
    const Shape* src =
        ir::op_info(n.op).category == ir::OpCategory::elementwise && !is_output[size_t(v)]
            ? common_source(out, n)
            : nullptr;
    if (!src) return ir::kNoValue;
    const Shape from = *src;
    ir::Node early = n;
    early.type.shape = from;
    for (ValueId& a : early.args) {
      const ir::Node& an = out.node(a);
      if (an.op == Op::reshape) {
        a = an.args[0];
        continue;
      }
      ir::Node c = an;  // a full, or a broadcast of a 0-d value: at the source shape
      c.type.shape = from;
      if (c.op == Op::broadcast) c.attrs.set("shape", from);
      a = append(out, std::move(c));
    }
    const ValueId e = append(out, std::move(early));
    return append(
        out,
        ir::Node{Op::reshape, {e}, ir::Attrs{{"shape", n.type.shape}}, n.type, n.loc, nullptr});
  });
}

}  // namespace ws::lower
