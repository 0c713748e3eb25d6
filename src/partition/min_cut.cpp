#include "partition/min_cut.hpp"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/boykov_kolmogorov_max_flow.hpp>

#include <limits>

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
      net.edge(s, 2 * v, std::max<int64_t>(bytes, 1) * recompute_weight);
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

// Recomputing a byte is priced at an eighth of keeping one alive. Measured
// on the reference models (three_graph, `wholestep compare --save-all-rows`,
// same run), against pricing recomputation at nothing: mlp no longer
// recomputes its relus to save 0.13 MiB (+10% step time, +4% peak), cnn's
// peak falls from 64.6 to 61.8 MiB and gpt's from 33.9 to 25.8 MiB for
// 0.2 MiB more between the graphs, and both steps run faster than saving
// everything (cnn 14.76 against 15.46 ms, gpt 6.96 against 7.42).
RematPlan min_cut(const JointGraph& j) { return weighted_cut(j, 8, 1); }

RematPlan budgeted_cut(const JointGraph& j, int64_t budget) {
  // Recomputing costs nothing at weight 0 (the fewest bytes saved) and more
  // than saving at 64: the largest weight whose cut fits the budget
  // recomputes least. Saved bytes grow with the weight.
  constexpr int64_t kSave = 64, kMaxWeight = 64 * 64;
  RematPlan best = weighted_cut(j, kSave, 0);
  if (best.saved_bytes > budget) return best;  // below the minimum: the minimum
  int64_t lo = 0, hi = kMaxWeight;
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
  std::vector<ValueId> map(g.nodes.size(), ir::kNoValue), clone(g.nodes.size(), ir::kNoValue);
  for (ValueId v = 0; v < ValueId(j.forward_end); ++v)
    map[size_t(v)] = ir::append_renamed(out.graph, g.node(v), map);
  out.forward_end = out.graph.size();
  // The clones read saved values, inputs, and each other.
  std::vector<ValueId> read = map;
  for (ValueId v : plan.recomputed) {
    // Marked, so that common-subexpression elimination does not merge the
    // clone back into the forward value it recomputes (in one graph).
    ir::Node n = g.node(v);
    n.attrs.set("recompute", int64_t(1));
    clone[size_t(v)] = ir::append_renamed(out.graph, std::move(n), read);
    read[size_t(v)] = clone[size_t(v)];
  }
  // Later stages read the clones where there are clones.
  for (ValueId v = ValueId(j.forward_end); v < g.size(); ++v)
    map[size_t(v)] = read[size_t(v)] = ir::append_renamed(out.graph, g.node(v), read);
  out.backward_end = j.backward_end + int64_t(plan.recomputed.size());
  ir::copy_interface(g, map, out.graph);
  return out;
}

}  // namespace ws::partition
