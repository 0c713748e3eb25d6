#include "partition/update_order.hpp"

#include <algorithm>

#include "ir/attr.hpp"
#include "ir/builder.hpp"

namespace ws::partition {

using ir::ValueId;

ir::Graph updates_early(const JointGraph& joint) {
  const ir::Graph& g = joint.graph;
  const ValueId n = ValueId(g.size()), first_opt = ValueId(joint.backward_end);
  const size_t count = g.nodes.size();
  ValueId last_input = 0;
  for (ValueId v : g.inputs) last_input = std::max(last_input, v);
  // A graph without optimizer nodes (or without marked stages, as a compiled
  // forward's) keeps its order.
  if (first_opt <= last_input || first_opt >= n) return g;
  auto is_opt = [&](ValueId v) { return v >= first_opt; };
  std::vector<ValueId> writes(count, ir::kNoValue);  // update value -> the input it writes
  for (const ir::Output& o : g.outputs)
    if (o.role == ir::OutputRole::update && o.value != o.aliased_input && is_opt(o.value))
      writes[size_t(o.value)] = o.aliased_input;
  std::vector<std::vector<ValueId>> readers(count);
  for (ValueId v = 0; v < n; ++v)
    for (ValueId a : g.node(v).args) readers[size_t(a)].push_back(v);
  // A reader of the old value that also depends on the new one must follow
  // the update: it is left out of the rule (the alias pass then copies).
  auto depends_on = [&](ValueId v, ValueId u) {
    std::vector<ValueId> stack = {v};
    std::vector<bool> seen(count, false);
    while (!stack.empty()) {
      const ValueId x = stack.back();
      stack.pop_back();
      if (x == u) return true;
      if (x < u || seen[size_t(x)]) continue;
      seen[size_t(x)] = true;
      for (ValueId a : g.node(x).args) stack.push_back(a);
    }
    return false;
  };
  // For each update, the other readers of the old value that must run first.
  std::vector<std::vector<ValueId>> before(count);
  for (ValueId u = first_opt; u < n; ++u)
    if (writes[size_t(u)] != ir::kNoValue)
      for (ValueId r : readers[size_t(writes[size_t(u)])])
        if (r != u && !depends_on(r, u)) before[size_t(u)].push_back(r);

  // A collective the optimizer starts (the sharded step's all-gather of the
  // updated parameters) is waited for last, with all that reads it: its
  // wait would otherwise stop each update until its gather arrived, where
  // the next updates can run instead. Its start runs as soon as it may.
  std::vector<bool> late(count, false);
  for (ValueId v = first_opt; v < n; ++v) {
    const ir::Node& node = g.node(v);
    late[size_t(v)] = node.op == ir::Op::wait && is_opt(node.args[0]);
    for (ValueId a : node.args) late[size_t(v)] = late[size_t(v)] || late[size_t(a)];
  }

  std::vector<std::vector<ValueId>> precedes(count);  // reader -> updates it precedes
  for (ValueId u = first_opt; u < n; ++u)
    for (ValueId r : before[size_t(u)]) precedes[size_t(r)].push_back(u);

  // asap[v]: the traced node after which optimizer node v can run at the
  // earliest. at[v]: after which it runs. Iterated, since a reader of an old
  // value may come after its update in traced order.
  std::vector<ValueId> asap(count, last_input), at(count, n);
  for (bool changed = true; changed;) {
    changed = false;
    for (ValueId v = first_opt; v < n; ++v) {
      ValueId t = last_input;
      for (ValueId a : g.node(v).args) t = std::max(t, is_opt(a) ? asap[size_t(a)] : a);
      for (ValueId r : before[size_t(v)]) t = std::max(t, is_opt(r) ? asap[size_t(r)] : r);
      if (t != asap[size_t(v)]) asap[size_t(v)] = t, changed = true;
    }
    for (ValueId v = n - 1; v >= first_opt; --v) {
      ValueId t = n;
      for (ValueId c : readers[size_t(v)])
        if (is_opt(c)) t = std::min(t, at[size_t(c)]);
      if (late[size_t(v)])
        t = n - 1;
      else if (writes[size_t(v)] != ir::kNoValue || t == n ||
               ir::kCollectiveStarts.contains(g.node(v).op))
        t = asap[size_t(v)];
      for (ValueId u : precedes[size_t(v)]) t = std::min(t, at[size_t(u)]);
      t = std::max(t, asap[size_t(v)]);
      if (t != at[size_t(v)]) at[size_t(v)] = t, changed = true;
    }
  }
  // Traced nodes in order, each followed by the optimizer nodes due after it.
  std::vector<std::vector<ValueId>> due(count);
  for (ValueId v = first_opt; v < n; ++v)
    due[size_t(std::min(at[size_t(v)], first_opt - 1))].push_back(v);
  // Within one slot: data edges and "reads the old value before the
  // update" edges, lowest traced id first among the ready.
  std::vector<ValueId> order;
  std::vector<int> waiting(count, 0);
  std::vector<bool> in_slot(count, false);
  auto emit_slot = [&](const std::vector<ValueId>& slot) {
    for (ValueId v : slot) in_slot[size_t(v)] = true;
    for (ValueId v : slot) {
      for (ValueId a : g.node(v).args) waiting[size_t(v)] += in_slot[size_t(a)];
      for (ValueId r : before[size_t(v)]) waiting[size_t(v)] += in_slot[size_t(r)];
    }
    std::vector<ValueId> ready;
    for (ValueId v : slot)
      if (waiting[size_t(v)] == 0) ready.push_back(v);
    while (!ready.empty()) {
      auto it = std::min_element(ready.begin(), ready.end());
      const ValueId v = *it;
      ready.erase(it);
      order.push_back(v);
      in_slot[size_t(v)] = false;
      auto release = [&](ValueId w) {
        if (in_slot[size_t(w)] && --waiting[size_t(w)] == 0) ready.push_back(w);
      };
      for (ValueId c : readers[size_t(v)]) release(c);
      for (ValueId u : precedes[size_t(v)]) release(u);
    }
    WS_CHECK(std::none_of(slot.begin(), slot.end(), [&](ValueId v) { return in_slot[size_t(v)]; }))
        << "the update order has a cycle";
  };
  for (ValueId v = 0; v < first_opt; ++v) {
    order.push_back(v);
    emit_slot(due[size_t(v)]);
  }
  ir::Graph out;
  out.name = g.name;
  std::vector<ValueId> map(count, ir::kNoValue);
  for (ValueId v : order) map[size_t(v)] = ir::append_renamed(out, g.node(v), map);
  ir::copy_interface(g, map, out);
  ir::renumber_collectives(out);  // the optimizer's starts moved into the backward
  return out;
}

}  // namespace ws::partition
