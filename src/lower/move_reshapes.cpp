#include "lower/move_reshapes.hpp"

#include "ir/attr.hpp"
#include "lower/rewrite.hpp"

namespace ws::lower {

using ir::Op;
using ir::ValueId;

namespace {

// A one-element operand of an elementwise op that can be made at any shape:
// a full, or a broadcast of a 0-d value.
bool any_shape(const ir::Graph& g, ValueId a) {
  const ir::Node& n = g.node(a);
  return n.op == Op::full || (n.op == Op::broadcast && g.type(n.args[0]).rank() == 0);
}

// Ops a loop fusion can hold or end in: what an elementwise op would join.
bool fusible_producer(const ir::Node& n) {
  const ir::OpCategory c = ir::op_info(n.op).category;
  return c == ir::OpCategory::elementwise || c == ir::OpCategory::reduction ||
         c == ir::OpCategory::fusion || n.op == Op::random_uniform;
}

// The shape the operands of out's node `n` (already renamed into `out`)
// have before their reshapes, when every operand is a reshape from one
// shape or any_shape, and some reshape's operand comes from a fusible op;
// else null.
const Shape* common_source(const ir::Graph& out, const ir::Node& n) {
  const Shape* src = nullptr;
  bool fusible = false;
  for (ValueId a : n.args) {
    if (any_shape(out, a)) continue;
    const ir::Node& an = out.node(a);
    if (an.op != Op::reshape) return nullptr;
    const Shape& s = out.type(an.args[0]).shape;
    if (src && *src != s) return nullptr;
    src = &s;
    fusible = fusible || fusible_producer(out.node(an.args[0]));
  }
  return src && fusible && *src != n.type.shape ? src : nullptr;
}

// a at `shape`: a reshape of it (of its source, when a is a reshape; the
// source itself when that has the shape), or an any_shape operand made again.
ValueId at_shape(ir::Graph& out, ValueId a, const Shape& shape) {
  ir::Node an = out.node(a);
  if (any_shape(out, a)) {
    an.type.shape = shape;
    if (an.op == Op::broadcast) ir::set_attr<Op::broadcast, "shape">(an.attrs, shape);
    return append(out, std::move(an));
  }
  if (an.op == Op::reshape) a = an.args[0];
  if (out.type(a).shape == shape) return a;
  const ir::Type t{out.type(a).dtype, shape};
  return append(out, ir::Node{Op::reshape,
                              {a},
                              ir::make_attrs<Op::reshape>({{"shape", shape}}),
                              t,
                              an.loc,
                              an.stage,
                              nullptr});
}

// n (of `out`) computed at `shape` from its operands at that shape.
ValueId elementwise_at(ir::Graph& out, ir::Node n, const Shape& shape) {
  for (ValueId& a : n.args) a = at_shape(out, a, shape);
  n.type.shape = shape;
  return append(out, std::move(n));
}

}  // namespace

ir::Graph move_reshapes(const ir::Graph& g, bool* changed) {
  std::vector<bool> is_output(g.nodes.size(), false);
  for (const ir::Output& o : g.outputs) is_output[size_t(o.value)] = true;
  const std::vector<int> uses = ir::use_counts(g);
  return rewrite_nodes(g, changed, [&](ir::Graph& out, ValueId v, const ir::Node& n) {
    if (n.op == Op::reshape) {
      const ValueId y = n.args[0], old_y = g.node(v).args[0];
      const ir::Node& yn = out.node(y);
      // reshape(op(x...)) where op is elementwise, read only here, and no
      // array operand comes from a fusible op: op runs at the reshape's
      // shape, on reshapes of its operands, so it can join what reads it.
      if (ir::op_info(yn.op).category == ir::OpCategory::elementwise && uses[size_t(old_y)] == 1 &&
          !is_output[size_t(old_y)] && !is_output[size_t(v)]) {
        bool movable = true;
        for (ValueId a : yn.args) {
          if (any_shape(out, a)) continue;
          const ir::Node& an = out.node(a);
          const ir::Node& from = an.op == Op::reshape ? out.node(an.args[0]) : an;
          movable = movable && !fusible_producer(from);
        }
        if (movable) return elementwise_at(out, yn, n.type.shape);
      }
      // A reshape of a reshape reads the first's operand; back where that
      // started, it is no reshape at all.
      if (yn.op != Op::reshape) return ir::kNoValue;
      if (out.type(yn.args[0]).shape == n.type.shape && !is_output[size_t(v)]) return yn.args[0];
      ir::Node r = n;
      r.args[0] = yn.args[0];
      return append(out, std::move(r));
    }
    if (ir::op_info(n.op).category != ir::OpCategory::elementwise || is_output[size_t(v)])
      return ir::kNoValue;
    const Shape* src = common_source(out, n);
    if (!src) return ir::kNoValue;
    const ValueId e = elementwise_at(out, n, Shape(*src));
    return append(out, ir::Node{Op::reshape,
                                {e},
                                ir::make_attrs<Op::reshape>({{"shape", n.type.shape}}),
                                n.type,
                                n.loc,
                                n.stage,
                                nullptr});
  });
}

}  // namespace ws::lower
