#include "lower/schedule_collectives.hpp"

#include <algorithm>

namespace ws::lower {

using ir::ValueId;

ir::Graph schedule_collectives(const ir::Graph& g, bool* changed) {
  const size_t n = g.nodes.size();
  // after[v]: the starts placed right after node v, in seq (node) order.
  std::vector<std::vector<ValueId>> after(n);
  std::vector<bool> moved(n, false);
  ValueId previous = -1;
  bool any = false;
  for (ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& node = g.node(v);
    if (node.op != ir::Op::all_reduce_start) continue;
    ValueId at = previous;
    for (ValueId a : node.args) at = std::max(at, a);
    if (at < 0 || at == v - 1) {
      previous = v;
      continue;
    }
    after[size_t(at)].push_back(v);
    moved[size_t(v)] = true;
    previous = at;
    any = true;
  }
  if (changed) *changed = any;
  if (!any) return g;
  ir::Graph out;
  out.name = g.name;
  std::vector<ValueId> map(n, ir::kNoValue);
  for (ValueId v = 0; v < g.size(); ++v) {
    if (moved[size_t(v)]) continue;
    map[size_t(v)] = ir::append_renamed(out, g.node(v), map);
    for (ValueId s : after[size_t(v)]) map[size_t(s)] = ir::append_renamed(out, g.node(s), map);
  }
  ir::copy_interface(g, map, out);
  return out;
}

}  // namespace ws::lower
