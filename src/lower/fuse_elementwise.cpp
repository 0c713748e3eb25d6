#include "lower/fuse_elementwise.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "exec/fused_loop_rules.hpp"
#include "exec/program.hpp"
#include "exec/reference.hpp"
#include "ir/attr.hpp"
#include "ir/builder.hpp"
#include "lower/simplify.hpp"
#include "lower/unit_order.hpp"

namespace ws::lower {
namespace {

using ir::Op;
using ir::ValueId;

class Fuser {
 public:
  explicit Fuser(const ir::Graph& g) : g_(g), n_(size_t(g.size())) {}

  ir::Graph run() {
    group_.assign(n_, -1);
    for (ValueId v = 0; v < g_.size(); ++v)
      if (exec::fusible_elementwise(g_, v) || exec::fusible_reduction(g_, v)) grow(v);
    return rebuild();
  }

  // Whether run() grouped, dropped or reordered anything.
  bool changed() const { return changed_; }

 private:
  // A group: its members in id order, and what bounds it.
  struct Group {
    std::vector<ValueId> members;
    int64_t values = 0;   // ops plus gathered broadcasts: the kernel's buffers at most
    ValueId reduce = -1;  // its first reduction (a reduce fusion), or -1 (a loop)
  };

  static bool is_reduction(const ir::Node& n) {
    return n.op == Op::reduce_sum || n.op == Op::reduce_max;
  }
  const Shape& loop_shape(const Group& gr) const {
    return gr.reduce >= 0 ? g_.type(g_.node(gr.reduce).args[0]).shape
                          : g_.type(gr.members[0]).shape;
  }
  // Elements of the loop a group's members run in.
  int64_t loop_numel(const std::vector<ValueId>& members) const {
    for (ValueId m : members)
      if (is_reduction(g_.node(m))) return g_.type(g_.node(m).args[0]).numel();
    return g_.type(members[0]).numel();
  }

  // The value a fused body reads for operand a: a broadcast's source (read
  // through strides), nothing for a `full` (a constant of the body), else a.
  ValueId read_of(ValueId a) const {
    const ir::Node& n = g_.node(a);
    if (n.op == Op::full) return ir::kNoValue;
    if (n.op == Op::broadcast) return g_.node(n.args[0]).op == Op::full ? ir::kNoValue : n.args[0];
    return a;
  }
  int64_t values_of(ValueId v) const {
    int64_t count = 1;
    for (ValueId a : g_.node(v).args)
      if (g_.node(a).op == Op::broadcast && g_.type(g_.node(a).args[0]).numel() != 1) ++count;
    return count;
  }

  // A loop over arrays that come from memory runs at the speed of memory,
  // and memory serves a few streams far better than many. Measured on a
  // 2-core AMD EPYC (Zen 5, KVM) with build/benchmarks/fused_streams (6.4
  // MB arrays, 2048-element chunks, writes counted twice): one core moves
  // 51-67 GB/s one array pair at a time, and as a fused loop 36-81 GB/s with
  // up to four streams in flight but 10-30 GB/s with five to twelve. In a
  // step, a saved activation of 1 MB read by the backward pass comes from
  // memory, not from cache (gpt's GELU gradient, five 1 MB streams, ran 4x
  // slower in the step than alone). So a group over arrays above a core's
  // share of L2 keeps its full-size operands plus results within
  // kMaxStreams; a group over small arrays (a small parameter's update, a
  // bias) may have any number. A parameter or state updated in place is one
  // stream, read and written: SGD with momentum on a [512, 784] weight (the
  // gradient, the buffer and the weight, two of them updated) ran as one
  // loop in 0.060 ms against 0.069 ms split in two (medians, same run).
  static constexpr int64_t kMaxStreams = 4;
  static constexpr int64_t kCachedBytes = int64_t(1) << 18;  // 256 KiB
  bool few_streams(const std::vector<ValueId>& members, const std::vector<ValueId>& reads) const {
    const ir::Type& t = g_.type(members[0]);
    if (int64_t(t.bytes()) <= kCachedBytes) return true;
    int64_t streams = 0;
    for (ValueId r : reads) streams += g_.type(r).numel() == t.numel();
    for (ValueId m : members) {
      // An update written over an operand the group reads is one stream
      // with that read: the same lines, read then written.
      const ValueId old = update_of_[size_t(m)];
      if (old != ir::kNoValue && std::find(reads.begin(), reads.end(), old) != reads.end())
        continue;
      streams += read_outside(m);
    }
    return streams <= kMaxStreams;
  }

  // Whether member m of the group marked with epoch_ is a result: an output
  // of the graph or read by a node outside the group.
  bool read_outside(ValueId m) const {
    bool outside = is_output_[size_t(m)];
    for (ValueId u : users_[size_t(m)]) outside = outside || mark_[size_t(u)] != epoch_;
    return outside;
  }

  // Tries to make v one group with the groups `join`; false if that would
  // be too large or cyclic.
  bool try_join(ValueId v, const std::vector<int32_t>& join) {
    std::vector<ValueId> members = {v};
    int64_t values = values_of(v);
    for (int32_t gi : join) {
      members.insert(members.end(), groups_[size_t(gi)].members.begin(),
                     groups_[size_t(gi)].members.end());
      values += groups_[size_t(gi)].values;
    }
    if (values > exec::kMaxFusedBuffers) return false;
    ++epoch_;

    for (ValueId m : members) mark_[size_t(m)] = epoch_;
    // A body broadcasts only its operands (fused_loop.hpp): a member that
    // reads a broadcast of another member stays apart.
    for (ValueId m : members)
      for (ValueId a : g_.node(m).args)
        if (g_.node(a).op == Op::broadcast && mark_[size_t(g_.node(a).args[0])] == epoch_)
          return false;
    std::vector<ValueId> reads, stack;
    for (ValueId m : members)
      for (ValueId a : g_.node(m).args) {
        const ValueId r = read_of(a);
        if (r != ir::kNoValue && mark_[size_t(r)] != epoch_ &&
            std::find(reads.begin(), reads.end(), r) == reads.end())
          reads.push_back(r);
      }
    if (reads.size() > exec::kMaxOperands) return false;
    // Its results (members read outside it) are a kernel's outputs too: a
    // recurrent step's gates, each kept for the backward, made a group of
    // twenty (found by the differential tester).
    int64_t results = 0;
    for (ValueId m : members) results += read_outside(m);
    if (results > int64_t(exec::kMaxOperands)) return false;
    if (!few_streams(members, reads)) return false;
    // No value read from outside may depend on the group: walk back from
    // them, seeing other groups as single nodes.
    ++epoch_;
    const int32_t in_union = epoch_ - 1;
    stack = reads;
    while (!stack.empty()) {
      const ValueId x = stack.back();
      stack.pop_back();
      if (mark_[size_t(x)] == in_union) return false;
      if (seen_[size_t(x)] == epoch_) continue;
      seen_[size_t(x)] = epoch_;
      if (group_[size_t(x)] >= 0) {
        for (ValueId m : groups_[size_t(group_[size_t(x)])].members)
          for (ValueId a : g_.node(m).args) stack.push_back(a);
      } else {
        // Even a node before every member can depend on the group: through
        // another group, placed at its last member (a loss term's scalar
        // read a reduction of a loop that read a member: a cycle of units,
        // and the loss was left unwritten; found by the differential
        // tester).
        for (ValueId a : g_.node(x).args) stack.push_back(a);
      }
    }
    // Join: the first group takes the others and v.
    int32_t into = join.empty() ? int32_t(groups_.size()) : join[0];
    if (join.empty()) groups_.push_back({});
    Group& gr = groups_[size_t(into)];
    gr.members = members;
    std::sort(gr.members.begin(), gr.members.end());
    gr.values = values;
    gr.reduce = -1;
    for (ValueId m : gr.members)
      if (is_reduction(g_.node(m))) {
        gr.reduce = m;
        break;
      }
    for (size_t i = 1; i < join.size(); ++i) groups_[size_t(join[i])] = Group{};
    for (ValueId m : gr.members) group_[size_t(m)] = into;
    return true;
  }

  // A broadcast that repeats one value along rows shorter than
  // exec::kMinSegment (a per-channel statistic over a 3x3 map): a fused loop
  // would gather it per chunk, costing more than the traffic it saves. Such
  // an op stays its own kernel. Longer rows (7x7 maps, LayerNorm's rows) are
  // read one value per row piece: measured on whole cnn and gpt steps (AMD
  // EPYC Zen 5, 2 threads, alternating), fusing them ran at parity with
  // leaving rows under 256 unfused, with 13 and 38 fewer kernels.
  bool reads_short_row_broadcast(ValueId v) const {
    for (ValueId a : g_.node(v).args) {
      const ir::Node& b = g_.node(a);
      if (b.op != Op::broadcast || g_.type(b.args[0]).numel() == 1) continue;
      Shape walk = b.type.shape;
      std::vector<int64_t> st = exec::broadcast_source_strides(g_.type(b.args[0]).shape, walk,
                                                               ir::attr<Op::broadcast, "dims">(b));
      exec::merge_dims(walk, st);
      if (walk.size() > 1 && st.back() == 0 && walk.back() < exec::kMinSegment) return true;
    }
    return false;
  }

  // Whether v reads a broadcast of more than one value.
  bool reads_array_broadcast(ValueId v) const {
    for (ValueId b : g_.node(v).args)
      if (g_.node(b).op == Op::broadcast && g_.type(g_.node(b).args[0]).numel() != 1) return true;
    return false;
  }

  // A reduction straight over a constant or one value broadcast: the loop
  // has no array to sum there (and simplify folds most of them), so it
  // stays its own kernel.
  bool reduces_one_value(ValueId v) const {
    const ir::Node& a = g_.node(g_.node(v).args[0]);
    return a.op == Op::full || (a.op == Op::broadcast && g_.type(a.args[0]).numel() == 1);
  }

  void grow(ValueId v) {
    if (!is_reduction(g_.node(v)) && reads_short_row_broadcast(v)) return;
    if (is_reduction(g_.node(v)) && reduces_one_value(v)) return;
    if (mark_.empty()) {
      mark_.assign(n_, 0), seen_.assign(n_, 0);
      users_.assign(n_, {});
      is_output_.assign(n_, false);
      for (ValueId u = 0; u < g_.size(); ++u)
        for (ValueId a : g_.node(u).args) users_[size_t(a)].push_back(u);
      update_of_.assign(n_, ir::kNoValue);
      for (const ir::Output& o : g_.outputs) {
        is_output_[size_t(o.value)] = true;
        if (o.role == ir::OutputRole::update) update_of_[size_t(o.value)] = o.aliased_input;
      }
    }
    // Candidates: groups of v's operands that v can continue. A loop
    // continues with elementwise ops of its shape, or ends in a reduction of
    // its values; a reduce fusion continues only with elementwise ops on its
    // reduced values (the epilogue), whose other operands are single values
    // or of the reduced shape.
    const ir::Node& n = g_.node(v);
    std::vector<int32_t> cands;
    bool with_reduce = false;
    for (ValueId a : n.args) {
      const int32_t gi = group_[size_t(a)];
      if (gi < 0 || std::find(cands.begin(), cands.end(), gi) != cands.end()) continue;
      const Group& gr = groups_[size_t(gi)];
      bool fits = false;
      if (is_reduction(n))
        fits = gr.reduce < 0 && g_.type(a).shape == g_.type(gr.members[0]).shape;
      else if (gr.reduce >= 0)  // a is the reduced value or an epilogue value
        fits = g_.type(a).shape == n.type.shape && n.type.shape != loop_shape(gr);
      else
        fits = g_.type(a).shape == n.type.shape;
      if (fits && gr.reduce >= 0 && reads_array_broadcast(v)) fits = false;
      if (!fits) continue;
      cands.push_back(gi);
      with_reduce = with_reduce || gr.reduce >= 0;
    }
    if (with_reduce) {  // an epilogue joins its one reduce fusion
      // Loops of the reduced shape that v reads (an Adam moment's decay, a
      // running statistic's momentum: ops on inputs alone) join with it.
      std::vector<int32_t> producers;
      for (ValueId a : n.args) {
        const int32_t gj = group_[size_t(a)];
        if (gj < 0 || groups_[size_t(gj)].reduce >= 0 ||
            std::find(producers.begin(), producers.end(), gj) != producers.end())
          continue;
        // Not a loop that draws random numbers (an epilogue runs once per
        // reduced row, and a draw needs the loop's element index), nor one
        // that reads a broadcast of more than one value (the epilogue reads
        // its operands as arrays of the reduced shape, or single values).
        const std::vector<ValueId>& ms = groups_[size_t(gj)].members;
        if (std::all_of(ms.begin(), ms.end(), [&](ValueId m) {
              return g_.type(m).shape == n.type.shape && g_.node(m).op != Op::random_uniform &&
                     !reads_array_broadcast(m);
            }))
          producers.push_back(gj);
      }
      for (int32_t gi : cands) {
        if (groups_[size_t(gi)].reduce < 0) continue;
        std::vector<int32_t> join = {gi};
        join.insert(join.end(), producers.begin(), producers.end());
        if ((producers.empty() || !try_join(v, join)) && !try_join(v, {gi})) continue;
        return;
      }
      try_join(v, {});
      return;
    }
    if (cands.size() > 1 && try_join(v, cands)) return;
    for (int32_t gi : cands)
      if (try_join(v, {gi})) return;
    try_join(v, {});
  }

  // The unit each node is placed with: its group if that has two or more
  // members, else itself.
  int64_t unit_of(ValueId v) const {
    const int32_t gi = group_[size_t(v)];
    return gi >= 0 && groups_[size_t(gi)].members.size() > 1 ? int64_t(n_) + gi : int64_t(v);
  }

  ir::Graph rebuild() {
    // What must exist: outputs, inputs, every group (simplify left nothing
    // dead) and what they read. A broadcast or full read only by groups is
    // cloned into their bodies and dies.
    std::vector<bool> needed(n_, false);
    for (const ir::Output& o : g_.outputs) {
      needed[size_t(o.value)] = true;
      if (o.aliased_input != ir::kNoValue) needed[size_t(o.aliased_input)] = true;
    }
    for (ValueId v : g_.inputs) needed[size_t(v)] = true;
    for (ValueId v = 0; v < g_.size(); ++v)
      if (unit_of(v) != v) needed[size_t(v)] = true;
    std::vector<int> outside_uses(n_, 0);  // readers in another unit, and outputs
    for (const ir::Output& o : g_.outputs) ++outside_uses[size_t(o.value)];
    for (ValueId v = g_.size() - 1; v >= 0; --v) {
      if (!needed[size_t(v)]) continue;
      const bool fused = unit_of(v) != v;
      for (ValueId a : g_.node(v).args) {
        const ValueId r = fused ? read_of(a) : a;
        if (r == ir::kNoValue) continue;
        needed[size_t(r)] = true;
        if (unit_of(r) != unit_of(v)) ++outside_uses[size_t(r)];
      }
    }
    // Units and the edges between them; soft edges keep every other reader
    // of an old parameter before its update.
    UnitGraph units(n_ + groups_.size());
    for (ValueId v = 0; v < g_.size(); ++v) {
      if (!needed[size_t(v)]) continue;
      const int64_t u = unit_of(v);
      units.present[size_t(u)] = true;
      units.key[size_t(u)] = std::max(units.key[size_t(u)], v);
      const bool fused = u != v;
      for (ValueId a : g_.node(v).args) {
        const ValueId r = fused ? read_of(a) : a;
        if (r != ir::kNoValue) units.hard_edge(unit_of(r), u);
      }
    }
    for (const ir::Output& o : g_.outputs) {
      if (o.role != ir::OutputRole::update || o.value == o.aliased_input) continue;
      const int64_t up = unit_of(o.value);
      // The old value and its reshapes (views of the same storage).
      std::vector<bool> old(n_, false);
      old[size_t(o.aliased_input)] = true;
      for (ValueId r = 0; r < g_.size(); ++r) {
        const ir::Node& rn = g_.node(r);
        if (rn.op == Op::reshape && old[size_t(rn.args[0])]) old[size_t(r)] = true;
      }
      for (ValueId r = 0; r < g_.size(); ++r) {
        if (!needed[size_t(r)] || r >= o.value || unit_of(r) == up) continue;
        // r reads the old value itself, or (fused) through a broadcast.
        const bool fused = unit_of(r) != r;
        const std::vector<ValueId>& args = g_.node(r).args;
        if (std::none_of(args.begin(), args.end(), [&](ValueId a) {
              const ValueId x = fused ? read_of(a) : a;
              return x != ir::kNoValue && old[size_t(x)];
            }))
          continue;
        units.soft_edge(unit_of(r), up);
      }
    }
    const std::vector<int64_t> order = order_units(units);
    // Every unit placed, or the graph would lose values: never silently.
    const auto present = std::count(units.present.begin(), units.present.end(), true);
    WS_CHECK(size_t(present) == order.size())
        << "fuser: " << present - int64_t(order.size()) << " fused units in a cycle";
    // Emit.
    ir::Graph out;
    out.name = g_.name;
    std::vector<ValueId> map(n_, ir::kNoValue);
    for (int64_t u : order) {
      if (u < int64_t(n_)) {
        map[size_t(u)] = ir::append_renamed(out, g_.node(ValueId(u)), map);
      } else {
        emit_group(groups_[size_t(u - int64_t(n_))], outside_uses, map, out);
      }
    }
    ir::copy_interface(g_, map, out);
    // A group placed at its last member takes the collectives that read it
    // along: their seq follows their new order.
    ir::renumber_collectives(out);
    // Every node of g in its own unit, in g's order: g as it was.
    changed_ = order.size() != n_;
    for (size_t i = 0; i < order.size() && !changed_; ++i) changed_ = order[i] != int64_t(i);
    return out;
  }

  void emit_group(const Group& gr, const std::vector<int>& outside_uses, std::vector<ValueId>& map,
                  ir::Graph& out) const {
    auto body = std::make_shared<ir::Graph>();
    body->name = ir::kBodyName;
    std::vector<ValueId> reads;
    for (ValueId m : gr.members)
      for (ValueId a : g_.node(m).args) {
        const ValueId r = read_of(a);
        if (r != ir::kNoValue && group_[size_t(r)] != group_[size_t(m)] &&
            std::find(reads.begin(), reads.end(), r) == reads.end())
          reads.push_back(r);
      }
    std::vector<ValueId> local(n_, ir::kNoValue);  // outer value -> body value
    // A node equal to one the body has is that node: constants cloned for
    // each operand that reads them, and a copy the backward recomputes that
    // lands in the group of the value it copies (it reads the same
    // operands). The body computes it once, and its readers read the one
    // result. gelu's output in bert's forward was written twice, one copy
    // kept for the weight gradient: the copy's purpose, reading its
    // operands in the backward, is lost once it runs in the forward. A
    // graph output is never merged into another.
    auto add = [&](ir::Node node, bool merge = true) {
      for (ValueId b = 0; merge && b < body->size(); ++b)
        if (same_value_but_copy(body->node(b), node)) return b;
      body->nodes.push_back(std::move(node));
      return ValueId(body->nodes.size() - 1);
    };
    for (size_t i = 0; i < reads.size(); ++i) {
      const ValueId r = reads[i];
      local[size_t(r)] = add(ir::input_node(ir::InputRole::data, fmt::format("a{}", i), g_.type(r),
                                            {}, g_.node(r).stage));
      body->inputs.push_back(local[size_t(r)]);
    }
    std::vector<ValueId> local_op(n_, ir::kNoValue);  // a broadcast or full operand, cloned
    for (ValueId m : gr.members) {
      ir::Node node = g_.node(m);
      for (ValueId& a : node.args) {
        if (local[size_t(a)] != ir::kNoValue && group_[size_t(a)] == group_[size_t(m)]) {
          a = local[size_t(a)];
          continue;
        }
        const ir::Node& an = g_.node(a);
        if (local_op[size_t(a)] == ir::kNoValue) {
          if (an.op == Op::full) {
            local_op[size_t(a)] = add(an);
          } else if (an.op == Op::broadcast && g_.node(an.args[0]).op == Op::full) {
            ir::Node f = g_.node(an.args[0]);
            f.type = an.type;
            local_op[size_t(a)] = add(f);
          } else if (an.op == Op::broadcast) {
            ir::Node b = an;
            b.args = {local[size_t(an.args[0])]};
            local_op[size_t(a)] = add(b);
          } else {
            local_op[size_t(a)] = local[size_t(a)];
          }
        }
        a = local_op[size_t(a)];
      }
      local[size_t(m)] = add(std::move(node), !is_output_[size_t(m)]);
    }
    std::vector<ValueId> results;
    std::vector<std::pair<ValueId, ValueId>> same;  // (member, the result that gives its value)
    for (ValueId m : gr.members)
      if (outside_uses[size_t(m)] > 0) {
        const auto it = std::find_if(results.begin(), results.end(), [&](ValueId r) {
          return local[size_t(r)] == local[size_t(m)];
        });
        if (it != results.end()) {
          same.emplace_back(m, *it);
          continue;
        }
        body->outputs.push_back({ir::OutputRole::user, local[size_t(m)], ir::kNoValue,
                                 fmt::format("r{}", results.size())});
        results.push_back(m);
      }
    WS_CHECK(!results.empty()) << "a fused group nobody reads";
    ir::Node f{
        Op::fusion,
        {},
        ir::make_attrs<Op::fusion>({{"kind", std::string(gr.reduce >= 0 ? "reduce" : "loop")}}),
        g_.type(results[0]),
        g_.node(results[0]).loc,
        g_.node(results[0]).stage,
        body};
    for (ValueId r : reads) f.args.push_back(map[size_t(r)]);
    out.nodes.push_back(std::move(f));
    const ValueId fid = ValueId(out.nodes.size() - 1);
    map[size_t(results[0])] = fid;
    for (size_t j = 1; j < results.size(); ++j) {
      out.nodes.push_back(ir::Node{Op::fusion_result,
                                   {fid},
                                   ir::make_attrs<Op::fusion_result>({{"index", int64_t(j)}}),
                                   g_.type(results[j]),
                                   g_.node(results[j]).loc,
                                   g_.node(results[j]).stage,
                                   nullptr});
      map[size_t(results[j])] = ValueId(out.nodes.size() - 1);
    }
    for (auto [m, r] : same) map[size_t(m)] = map[size_t(r)];
  }

  const ir::Graph& g_;
  const size_t n_;
  std::vector<int32_t> group_;  // node -> group, -1 for none
  std::vector<Group> groups_;
  std::vector<int32_t> mark_, seen_;
  std::vector<std::vector<ValueId>> users_;
  std::vector<bool> is_output_;
  std::vector<ValueId> update_of_;  // an update output's input, else kNoValue
  int32_t epoch_ = 0;
  bool changed_ = false;
};

}  // namespace

ir::Graph fuse_elementwise(const ir::Graph& g, bool* changed) {
  Fuser f(g);
  ir::Graph out = f.run();
  if (changed) *changed = f.changed();
  return out;
}

}  // namespace ws::lower
