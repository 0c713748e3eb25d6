#include "lower/schedule_collectives.hpp"

#include <algorithm>

#include "ir/attr.hpp"
#include "ir/builder.hpp"

namespace ws::lower {

using ir::ValueId;

ir::Graph schedule_collectives(const ir::Graph& g, bool* changed) {
  const size_t n = g.nodes.size();
  // after[v]: the starts placed right after node v, in their node order.
  std::vector<std::vector<ValueId>> after(n);
  std::vector<bool> moved(n, false);
  for (ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& node = g.node(v);
    if (!ir::kCollectiveStarts.contains(node.op)) continue;
    ValueId at = -1;
    for (ValueId a : node.args) at = std::max(at, a);
    if (at < 0 || at == v - 1) continue;
    after[size_t(at)].push_back(v);
    moved[size_t(v)] = true;
  }
  ir::Graph out;
  out.name = g.name;
  std::vector<ValueId> map(n, ir::kNoValue);
  for (ValueId v = 0; v < g.size(); ++v) {
    if (!moved[size_t(v)]) map[size_t(v)] = ir::append_renamed(out, g.node(v), map);
    for (ValueId s : after[size_t(v)]) map[size_t(s)] = ir::append_renamed(out, g.node(s), map);
  }
  ir::copy_interface(g, map, out);
  // The order they now start in is the order of every rank: their seq.
  const bool renumbered = ir::renumber_collectives(out);
  if (changed) *changed = renumbered || std::find(moved.begin(), moved.end(), true) != moved.end();
  return out;
}

}  // namespace ws::lower
