#include "lower/simplify.hpp"

#include "ir/attr.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <tuple>

namespace ws::lower {
namespace {

using ir::ValueId;

// Nodes that some output depends on, plus every input.
std::vector<bool> live_nodes(const ir::Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (const ir::Output& o : g.outputs) {
    live[size_t(o.value)] = true;
    if (o.aliased_input != ir::kNoValue) live[size_t(o.aliased_input)] = true;
  }
  for (ValueId v : g.inputs) live[size_t(v)] = true;
  for (ValueId v = ValueId(g.nodes.size()) - 1; v >= 0; --v)
    if (live[size_t(v)])
      for (ValueId a : g.node(v).args) live[size_t(a)] = true;
  return live;
}

// A printable key for CSE: attributes are compared through their values.
// Attribute values ordered by their bits: floats compared with < would make
// a NaN equivalent to every number, and -0.0 to 0.0, merging `full nan` (or
// `full -0.0`) with `full 0.0` in the map below.
uint64_t bits(double d) { return std::bit_cast<uint64_t>(d); }

bool attr_less(const ir::AttrValue& a, const ir::AttrValue& b) {
  if (a.index() != b.index()) return a.index() < b.index();
  if (const auto* x = std::get_if<double>(&a)) return bits(*x) < bits(std::get<double>(b));
  if (const auto* x = std::get_if<std::vector<double>>(&a)) {
    const auto& y = std::get<std::vector<double>>(b);
    return std::lexicographical_compare(x->begin(), x->end(), y.begin(), y.end(),
                                        [](double u, double v) { return bits(u) < bits(v); });
  }
  return a < b;
}

struct CseKey {
  ir::Op op;
  std::vector<ValueId> args;
  ir::Attrs attrs;
  ir::Type type;
  bool operator<(const CseKey& o) const {
    if (op != o.op) return op < o.op;
    if (args != o.args) return args < o.args;
    if (type.dtype != o.type.dtype) return type.dtype < o.type.dtype;
    if (type.shape != o.type.shape) return type.shape < o.type.shape;
    return std::lexicographical_compare(attrs.items().begin(), attrs.items().end(),
                                        o.attrs.items().begin(), o.attrs.items().end(),
                                        [](const auto& u, const auto& v) {
                                          if (u.first != v.first) return u.first < v.first;
                                          return attr_less(u.second, v.second);
                                        });
  }
};

// A reshape, or a broadcast whose operand dims land in order.
bool identity_dims(const ir::Node& n) {
  if (n.op != ir::Op::broadcast) return true;
  const std::vector<int64_t>& dims = ir::attr<ir::Op::broadcast, "dims">(n);
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != int64_t(i)) return false;
  return true;
}

// Whether transpose n of a value of shape `in` keeps the order of the dims
// above 1.
bool keeps_order(const Shape& in, const ir::Node& n) {
  int64_t last = -1;
  for (int64_t d : ir::attr<ir::Op::transpose, "perm">(n)) {
    if (in[size_t(d)] == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

// The operand of concatenation `cat` that slice `sl` takes whole, or
// kNoValue.
ValueId concat_operand(const ir::Graph& g, const ir::Node& cat, const ir::Node& sl) {
  const int64_t axis = ir::attr<ir::Op::slice, "axis">(sl);
  if (ir::attr<ir::Op::concat, "axis">(cat) != axis) return ir::kNoValue;
  const int64_t start = ir::attr<ir::Op::slice, "start">(sl);
  const int64_t end = ir::attr<ir::Op::slice, "end">(sl);
  int64_t at = 0;
  for (ValueId a : cat.args) {
    const int64_t len = g.type(a).shape[size_t(axis)];
    if (at == start && at + len == end) return a;
    at += len;
  }
  return ir::kNoValue;
}

}  // namespace

// g without the nodes no output reads.
ir::Graph without_dead(const ir::Graph& g, const std::vector<bool>& live) {
  ir::Graph out;
  out.name = g.name;
  std::vector<ValueId> map(g.nodes.size(), ir::kNoValue);
  for (ValueId v = 0; v < ValueId(g.nodes.size()); ++v) {
    if (!live[size_t(v)]) continue;
    ir::Node n = g.node(v);
    for (ValueId& a : n.args) a = map[size_t(a)];
    out.nodes.push_back(std::move(n));
    map[size_t(v)] = ValueId(out.nodes.size() - 1);
  }
  ir::copy_interface(g, map, out);
  return out;
}

bool same_value_but_copy(const ir::Node& a, const ir::Node& b) {
  if (a.op == ir::Op::input || a.body || b.op == ir::Op::input || b.body) return false;
  auto key = [](const ir::Node& n) {
    std::vector<std::pair<std::string, ir::AttrValue>> kept;
    for (const auto& kv : n.attrs.items())
      if (kv.first != "recompute") kept.push_back(kv);
    return CseKey{n.op, n.args, ir::Attrs::from_sorted(std::move(kept)), n.type};
  };
  const CseKey ka = key(a), kb = key(b);
  return !(ka < kb) && !(kb < ka);
}

ir::Graph simplify(const ir::Graph& g, bool* changed) {
  std::vector<bool> live = live_nodes(g);
  ir::Graph out;
  out.name = g.name;
  std::vector<ValueId> map(g.nodes.size(), ir::kNoValue);
  std::map<CseKey, ValueId> seen;
  bool rewrote = false;
  // Appends n, or finds the value an equal node already computes. Inputs
  // are never merged, nor nodes with a body (fusions): their values are
  // their bodies', which the key does not hold (two constant fusions with
  // no operands were one value).
  auto add = [&](ir::Node n) {
    if (n.op != ir::Op::input && !n.body) {
      CseKey key{n.op, n.args, n.attrs, n.type};
      if (auto it = seen.find(key); it != seen.end()) return it->second;
      out.nodes.push_back(std::move(n));
      return seen[key] = ValueId(out.nodes.size() - 1);
    }
    out.nodes.push_back(std::move(n));
    return ValueId(out.nodes.size() - 1);
  };
  for (ValueId v = 0; v < ValueId(g.nodes.size()); ++v) {
    if (!live[size_t(v)]) continue;
    ir::Node n = g.node(v);
    for (ValueId& a : n.args) a = map[size_t(a)];
    // A transpose that keeps the order of the dims above 1 moves no element:
    // a reshape (a view, never read through strides of size-1 dims).
    if (n.op == ir::Op::transpose && keeps_order(out.type(n.args[0]).shape, n)) {
      rewrote = true;
      n.op = ir::Op::reshape;
      n.attrs = ir::make_attrs<ir::Op::reshape>({{"shape", n.type.shape}});
    }
    // Autograd is over: a stop-gradient, an identity or a straight-through
    // is its (first) operand.
    if (n.op == ir::Op::stop_gradient || n.op == ir::Op::identity ||
        n.op == ir::Op::straight_through) {
      rewrote = true;
      map[size_t(v)] = n.args[0];
      continue;
    }
    // A broadcast or reshape to its operand's own shape is its operand.
    if ((n.op == ir::Op::broadcast || n.op == ir::Op::reshape) &&
        out.type(n.args[0]).shape == n.type.shape && identity_dims(n)) {
      map[size_t(v)] = n.args[0];
      continue;
    }
    // A slice along a concatenation's axis that takes exactly one of its
    // operands is that operand (the backward of a split made by slices
    // concatenates the pieces' gradients, which a later slice takes apart).
    if (n.op == ir::Op::slice && out.node(n.args[0]).op == ir::Op::concat) {
      if (ValueId part = concat_operand(out, out.node(n.args[0]), n); part != ir::kNoValue) {
        map[size_t(v)] = part;
        continue;
      }
    }
    // A conversion of a broadcast converts the broadcast's operand, then
    // broadcasts it: the same values, each converted once instead of once a
    // copy (a BatchNorm's backward adds a per-channel f64 value converted
    // to f32 to every element of the image; a loop's step per element).
    if (n.op == ir::Op::convert && out.node(n.args[0]).op == ir::Op::broadcast &&
        out.type(out.node(n.args[0]).args[0]).numel() < n.type.numel()) {
      rewrote = true;
      ir::Node bcast = out.node(n.args[0]);
      ir::Node conv = std::move(n);
      conv.args = {bcast.args[0]};
      conv.type = {conv.type.dtype, out.type(bcast.args[0]).shape};
      bcast.args = {add(std::move(conv))};
      bcast.type.dtype = out.type(bcast.args[0]).dtype;
      n = std::move(bcast);
    }
    map[size_t(v)] = add(std::move(n));
  }
  ir::copy_interface(g, map, out);
  // A node read only by one that became another value (a concatenation
  // whose slices each became one of its operands, a value merged into an
  // equal one) was live in g and is dead now: the fuse pass counts on
  // finding nothing dead.
  if (std::vector<bool> still = live_nodes(out); std::count(still.begin(), still.end(), false))
    out = without_dead(out, still);
  // Nodes are only removed, in order, or a transpose made a reshape: the
  // same count and no rewrite is the same graph.
  if (changed) *changed = rewrote || out.nodes.size() != g.nodes.size();
  return out;
}

}  // namespace ws::lower
