#include "partition/min_cut.hpp"

// GCC 12 at -O2 sees Boost's edge iterators as maybe uninitialized once
// inlined here (a known false positive of boost::optional); silenced for
// these headers alone.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/boykov_kolmogorov_max_flow.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <limits>

#include "ir/attr.hpp"

namespace ws::partition {
namespace {

using ir::Op;
using ir::ValueId;

using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS,
    boost::property<
        boost::vertex_color_t, boost::default_color_type,
        boost::property<boost::vertex_distance_t, int64_t,
                        boost::property<boost::vertex_predecessor_t, Traits::edge_descriptor>>>,
    boost::property<
        boost::edge_capacity_t, int64_t,
        boost::property<boost::edge_residual_capacity_t, int64_t,
                        boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;

constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max() / 4;

// A value computed by the forward stage (not an input, nor a `full` or a
// `constant`, which every graph makes for itself).
bool computed_forward(const JointGraph& j, ValueId v) {
  const Op op = j.graph.node(v).op;
  return v < j.forward_end && op != Op::input && op != Op::full && op != Op::constant;
}

class Network {
 public:
  explicit Network(int64_t vertices) : g_(size_t(vertices)) {}
  void edge(int64_t from, int64_t to, int64_t capacity) {
    auto cap = boost::get(boost::edge_capacity, g_);
    auto rev = boost::get(boost::edge_reverse, g_);
    const auto e = boost::add_edge(size_t(from), size_t(to), g_).first;
    const auto r = boost::add_edge(size_t(to), size_t(from), g_).first;
    cap[e] = capacity;
    cap[r] = 0;
    rev[e] = r;
    rev[r] = e;
  }
  // Solves, and returns which vertices lie on the source side of the cut.
  std::vector<bool> source_side(int64_t s, int64_t t) {
    boost::boykov_kolmogorov_max_flow(g_, size_t(s), size_t(t));
    auto color = boost::get(boost::vertex_color, g_);
    std::vector<bool> side(boost::num_vertices(g_));
    for (size_t v = 0; v < side.size(); ++v)
      side[v] = color[v] == boost::black_color;  // reached from the source
    return side;
  }

 private:
  FlowGraph g_;
};

// Forward values read by later stages: they must reach the backward.
std::vector<bool> needed_later(const JointGraph& j) {
  std::vector<bool> needed(j.graph.nodes.size(), false);
  for (ValueId v = ValueId(j.forward_end); v < j.graph.size(); ++v)
    for (ValueId a : j.graph.node(v).args)
      if (computed_forward(j, a)) needed[size_t(a)] = true;
  return needed;
}

// What recomputing v moves: its bytes, and for a reduction the bytes of
// its operand, which it reads whole to make a few values (a softmax's row
// maxima cost a pass over the scores, not 1 KiB).
int64_t recompute_bytes(const ir::Graph& g, ValueId v) {
  const ir::Node& n = g.node(v);
  int64_t bytes = int64_t(n.type.bytes());
  if (ir::op_info(n.op).category == ir::OpCategory::reduction)
    for (ValueId a : n.args) bytes = std::max(bytes, int64_t(g.type(a).bytes()));
  return bytes;
}

// The cut where saving a value costs save_weight per byte and recomputing a
// cheap one recompute_weight per byte.
RematPlan weighted_cut(const JointGraph& j, int64_t save_weight, int64_t recompute_weight) {
  const ir::Graph& g = j.graph;
  const int64_t n = g.size();
  const std::vector<bool> needed = needed_later(j);
  // Vertices: in(v) = 2v, out(v) = 2v + 1, then the source and the sink.
  const int64_t s = 2 * n, t = 2 * n + 1;
  Network net(2 * n + 2);
  RematPlan plan;
  for (ValueId v = 0; v < ValueId(j.forward_end); ++v) {
    if (!computed_forward(j, v)) continue;
    const ir::Node& node = g.node(v);
    const int64_t bytes = int64_t(node.type.bytes());
    net.edge(2 * v, 2 * v + 1, std::max<int64_t>(bytes, 1) * save_weight);
    if (!recomputable(node))
      net.edge(s, 2 * v, kInfinite);
    else if (recompute_weight > 0)
      net.edge(s, 2 * v, std::max<int64_t>(recompute_bytes(g, v), 1) * recompute_weight);
    for (ValueId a : node.args)
      if (computed_forward(j, a)) net.edge(2 * a + 1, 2 * v, kInfinite);
    if (needed[size_t(v)]) {
      net.edge(2 * v + 1, t, kInfinite);
      plan.save_all_bytes += bytes;
    }
  }
  const std::vector<bool> side = net.source_side(s, t);
  // Saved: the cut in -> out edges. Recomputed: what the backward needs
  // behind them, walked back from its reads.
  std::vector<bool> saved(size_t(n), false), recomputed(size_t(n), false);
  std::vector<ValueId> stack;
  for (ValueId v = 0; v < ValueId(j.forward_end); ++v) {
    if (!computed_forward(j, v)) continue;
    saved[size_t(v)] = side[size_t(2 * v)] && !side[size_t(2 * v + 1)];
    if (needed[size_t(v)]) stack.push_back(v);
  }
  while (!stack.empty()) {
    const ValueId v = stack.back();
    stack.pop_back();
    if (saved[size_t(v)] || recomputed[size_t(v)]) continue;
    WS_CHECK(recomputable(g.node(v))) << "min cut: %" << v << " (" << ir::op_name(g.node(v).op)
                                      << ") is neither saved nor recomputable";
    recomputed[size_t(v)] = true;
    for (ValueId a : g.node(v).args)
      if (computed_forward(j, a)) stack.push_back(a);
  }
  for (ValueId v = 0; v < ValueId(j.forward_end); ++v) {
    if (saved[size_t(v)]) {
      plan.saved.push_back(v);
      plan.saved_bytes += int64_t(g.type(v).bytes());
    }
    if (recomputed[size_t(v)]) plan.recomputed.push_back(v);
  }
  return plan;
}

}  // namespace

bool recomputable(const ir::Node& n) {
  const ir::OpCategory c = ir::op_info(n.op).category;
  return c == ir::OpCategory::elementwise || c == ir::OpCategory::reduction ||
         c == ir::OpCategory::shape || n.op == Op::iota;
}

RematPlan save_all(const JointGraph& j) {
  const std::vector<bool> needed = needed_later(j);
  RematPlan plan;
  for (ValueId v = 0; v < ValueId(j.forward_end); ++v)
    if (needed[size_t(v)]) {
      plan.saved.push_back(v);
      plan.saved_bytes += int64_t(j.graph.type(v).bytes());
    }
  plan.save_all_bytes = plan.saved_bytes;
  return plan;
}

// Recomputing a byte is priced at 3/8 of keeping one alive, for a
// reduction counting the operand it reads. Measured on the reference models
// (`wholestep compare --save-all-rows`, weights tried 1 to 6, same run
// against saving everything): at 1/8 the single graph recomputes every
// LayerNorm output and attention probability a product reads, one kernel
// each (gpt: 152 kernels against 147, planned peak 14.2 MiB); at 3/8 it
// recomputes what fuses into its readers, with no more kernels than saving
// everything (gpt 143, cnn 60, mlp 30, tiny_mlp 58) and planned peaks of
// 21.5 against 25.7 MiB (gpt) and 26.9 against 35.4 (cnn); at 6/8 gpt
// keeps almost everything (23.5 MiB). Step times are within the machine's
// noise of saving everything in both modes. Lower budgets recompute more
// (budgeted_cut).
RematPlan min_cut(const JointGraph& j) { return weighted_cut(j, 8, 3); }

RematPlan budgeted_cut(const JointGraph& j, int64_t budget) {
  // Recomputing a byte costs a 64th of saving one at weight 1 (the fewest
  // bytes saved) and more than saving at 64: the largest weight whose cut
  // fits the budget recomputes least. Saved bytes grow with the weight.
  // Weight 0 is not tried: with recomputation free, a cut may recompute a
  // whole layer's statistics (two reductions over its activations) to keep
  // 128 bytes fewer, and then the planned peak rises (cnn: 50.9 against
  // 48.0 MiB in three_graph).
  constexpr int64_t kSave = 64, kMaxWeight = 64 * 64;
  RematPlan best = weighted_cut(j, kSave, 1);
  if (best.saved_bytes > budget) return best;  // below the minimum: the minimum
  int64_t lo = 1, hi = kMaxWeight;
  const RematPlan most = weighted_cut(j, kSave, hi);
  if (most.saved_bytes <= budget) return most;
  while (hi - lo > 1) {  // saved(lo) <= budget < saved(hi)
    const int64_t mid = (lo + hi) / 2;
    RematPlan p = weighted_cut(j, kSave, mid);
    if (p.saved_bytes <= budget) {
      lo = mid;
      best = std::move(p);
    } else {
      hi = mid;
    }
  }
  return best;
}

JointGraph recompute_in_backward(const JointGraph& j, const RematPlan& plan) {
  const ir::Graph& g = j.graph;
  JointGraph out;
  out.graph.name = g.name;
  std::vector<ValueId> map(g.nodes.size(), ir::kNoValue);
  for (ValueId v = 0; v < ValueId(j.forward_end); ++v)
    map[size_t(v)] = ir::append_renamed(out.graph, g.node(v), map);
  out.forward_end = out.graph.size();
  // Recomputed values are placed where they are read, so they live briefly.
  // A reduction (or an iota) is computed once, just before its first
  // reader. An elementwise or shape op is computed again for every backward
  // node that reads it, just before that node: it then fuses into its
  // reader's loop, or lives only until its reader ran, and never keeps a
  // layer's activations alive from one use to the next (the normalized
  // values BatchNorm's backward reads, recomputed for the relu that follows
  // them, would otherwise stay alive across the convolution's backward).
  // Each copy is marked with its number (`recompute`), so that common
  // subexpression elimination merges it neither with the forward value nor
  // with another copy.
  std::vector<bool> recomputed(g.nodes.size(), false);
  for (ValueId v : plan.recomputed) recomputed[size_t(v)] = true;
  std::vector<ValueId> copy(g.nodes.size(), ir::kNoValue);
  std::vector<int64_t> copy_reader(g.nodes.size(), -1);  // the reader a copy serves; -1: all
  int64_t reader = 0, copies = 0;
  auto get = [&](auto& self, ValueId v) -> ValueId {
    if (!recomputed[size_t(v)]) return map[size_t(v)];
    if (copy[size_t(v)] != ir::kNoValue &&
        (copy_reader[size_t(v)] < 0 || copy_reader[size_t(v)] == reader))
      return copy[size_t(v)];
    ir::Node n = g.node(v);
    for (ValueId& a : n.args) a = self(self, a);
    ir::set_attr<ir::kAllOps, "recompute">(n.attrs, ++copies);
    out.graph.nodes.push_back(std::move(n));
    copy[size_t(v)] = out.graph.size() - 1;
    const ir::OpCategory c = ir::op_info(g.node(v).op).category;
    const bool per_reader = c == ir::OpCategory::elementwise || c == ir::OpCategory::shape;
    copy_reader[size_t(v)] = per_reader ? reader : -1;
    return copy[size_t(v)];
  };
  for (ValueId v = ValueId(j.forward_end); v < g.size(); ++v) {
    if (v == ValueId(j.backward_end)) {
      // What updates read is recomputed in the backward, once.
      reader = -1;
      for (ValueId u = v; u < g.size(); ++u)
        for (ValueId a : g.node(u).args) get(get, a);
      out.backward_end = out.graph.size();
    }
    if (v < ValueId(j.backward_end)) reader = v;
    ir::Node n = g.node(v);
    for (ValueId& a : n.args) a = get(get, a);
    out.graph.nodes.push_back(std::move(n));
    map[size_t(v)] = out.graph.size() - 1;
  }
  if (j.backward_end >= g.size()) out.backward_end = out.graph.size();
  ir::copy_interface(g, map, out.graph);
  return out;
}

}  // namespace ws::partition
