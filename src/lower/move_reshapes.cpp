#include "lower/move_reshapes.hpp"

#include "lower/simplify.hpp"

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
  ir::Graph out;
  out.name = g.name;
  std::vector<ValueId> map(g.nodes.size(), ir::kNoValue);
  auto append = [&](ir::Node n) {
    out.nodes.push_back(std::move(n));
    return ValueId(out.nodes.size() - 1);
  };
  bool moved = false;
  for (ValueId v = 0; v < g.size(); ++v) {
    ir::Node n = g.node(v);
    for (ValueId& a : n.args) a = map[size_t(a)];
    if (n.op == Op::reshape) {  // a reshape of a reshape reads the first's operand
      if (out.node(n.args[0]).op == Op::reshape) n.args[0] = out.node(n.args[0]).args[0];
      if (out.type(n.args[0]).shape == n.type.shape && !is_output[size_t(v)]) {
        map[size_t(v)] = n.args[0];  // back to where it started: no reshape at all
        moved = true;
        continue;
      }
    }
    const Shape* src =
        ir::op_info(n.op).category == ir::OpCategory::elementwise && !is_output[size_t(v)]
            ? common_source(out, n)
            : nullptr;
    if (!src) {
      map[size_t(v)] = append(std::move(n));
      continue;
    }
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
      a = append(std::move(c));
    }
    const ValueId e = append(std::move(early));
    map[size_t(v)] = append(
        ir::Node{Op::reshape, {e}, ir::Attrs{{"shape", n.type.shape}}, n.type, n.loc, nullptr});
    moved = true;
  }
  if (!moved) return g;
  ir::copy_interface(g, map, out);
  return simplify(out);
}

}  // namespace ws::lower
