// The skeleton of a pass that rewrites nodes one at a time, in order.
#pragma once

#include <utility>

#include "ir/attr.hpp"
#include "ir/graph.hpp"
#include "lower/simplify.hpp"

namespace ws::lower {

// Rebuilds g node by node: node v of g, its operands renamed into `out`,
// goes to `f(out, v, n)`, which either appends what replaces it (append()
// below) and returns the replacement's id, or returns kNoValue to keep n
// as it is (a replacement may be an existing value of `out`).
// Later nodes read the replacement. Returns g itself when f replaced
// nothing, else the rebuilt graph with dead nodes removed; `*changed`
// (unless null) says which.
template <class F>
ir::Graph rewrite_nodes(const ir::Graph& g, bool* changed, F&& f) {
  ir::Graph out;
  out.name = g.name;
  std::vector<ir::ValueId> map(g.nodes.size(), ir::kNoValue);
  bool any = false;
  for (ir::ValueId v = 0; v < g.size(); ++v) {
    ir::Node n = g.node(v);
    for (ir::ValueId& a : n.args) a = map[size_t(a)];
    const ir::ValueId r = f(out, v, n);
    if (r != ir::kNoValue) {
      map[size_t(v)] = r;
      any = true;
    } else {
      out.nodes.push_back(std::move(n));
      map[size_t(v)] = ir::ValueId(out.nodes.size() - 1);
    }
  }
  if (changed) *changed = any;
  if (!any) return g;
  ir::copy_interface(g, map, out);
  return simplify(out);
}

// True when v is zeros: a `full` of 0, or a broadcast of one.
inline bool is_zero(const ir::Graph& g, ir::ValueId v) {
  const ir::Node& n = g.node(v);
  if (n.op == ir::Op::broadcast) return is_zero(g, n.args[0]);
  return n.op == ir::Op::full && ir::attr<ir::Op::full, "value">(n) == 0.0;
}

// Appends n to g and returns its id.
inline ir::ValueId append(ir::Graph& g, ir::Node n) {
  g.nodes.push_back(std::move(n));
  return ir::ValueId(g.nodes.size() - 1);
}

}  // namespace ws::lower
