#include "lower/fuse_update_into_product.hpp"

#include <map>

#include "ir/attr.hpp"
#include "lower/fuse_product_into_loop.hpp"
#include "lower/simplify.hpp"

namespace ws::lower {
namespace {

using ir::Op;
using ir::ValueId;

// An update that becomes one matmul_add: the product it absorbs, its alpha
// (negated when `negate`: SGD's -lr) and its beta (kNoValue: 1).
struct Match {
  ValueId product = ir::kNoValue, alpha = ir::kNoValue, beta = ir::kNoValue;
  bool negate = false;
  ValueId into = ir::kNoValue;   // the input the update overwrites: the accumulator
  ValueId decay = ir::kNoValue;  // SGD's weight decay: beta = 1 - lr * decay
};

// The 0-d value a broadcast to a full shape repeats, or kNoValue.
ValueId scalar_source(const ir::Graph& g, ValueId v) {
  const ir::Node& n = g.node(v);
  if (n.op != Op::broadcast || g.type(n.args[0]).rank() != 0) return ir::kNoValue;
  return n.args[0];
}

// For x = mul(p, broadcast s) (either order) read only once: p and s.
bool scaled(const ir::Graph& g, const std::vector<int>& uses, ValueId x, ValueId& p, ValueId& s) {
  const ir::Node& n = g.node(x);
  if (n.op != Op::mul || uses[size_t(x)] != 1) return false;
  for (int side = 0; side < 2; ++side) {
    s = scalar_source(g, n.args[size_t(1 - side)]);
    p = n.args[size_t(side)];
    if (s != ir::kNoValue) return true;
  }
  return false;
}

}  // namespace

ir::Graph fuse_update_into_product(const ir::Graph& g, bool* changed) {
  const std::vector<int> uses = ir::use_counts(g);
  std::map<ValueId, Match> at_update;  // update value -> what it absorbs
  std::vector<bool> absorbed(g.nodes.size(), false);
  // A product over a short contraction goes into its update's loop
  // instead (fuse_product_into_loop): one pass over the weight, not two.
  auto product = [&](ValueId p) {
    return g.node(p).op == Op::matmul && uses[size_t(p)] == 1 && !product_fits_a_loop(g, p);
  };
  for (const ir::Output& o : g.outputs) {
    if (o.role != ir::OutputRole::update || o.value == o.aliased_input) continue;
    const ir::Node& u = g.node(o.value);
    if (u.type.dtype != DType::f32) continue;
    ValueId p, s;
    // Plain SGD: W' = W - g * lr, or with weight decay W' = W - (g + W *
    // wd) * lr = (1 - lr * wd) * W - lr * g.
    if (u.op == Op::sub && u.args[0] == o.aliased_input && scaled(g, uses, u.args[1], p, s)) {
      if (product(p)) {
        at_update[o.value] = {p, s, ir::kNoValue, true, o.aliased_input};
        absorbed[size_t(p)] = absorbed[size_t(u.args[1])] = true;
        continue;
      }
      const ir::Node& pn = g.node(p);
      if (pn.op != Op::add || uses[size_t(p)] != 1) continue;
      for (int side = 0; side < 2; ++side) {
        ValueId w, wd;
        const ValueId q = pn.args[size_t(side)], decayed = pn.args[size_t(1 - side)];
        if (!product(q) || !scaled(g, uses, decayed, w, wd) || w != o.aliased_input) continue;
        at_update[o.value] = {q, s, ir::kNoValue, true, o.aliased_input, wd};
        absorbed[size_t(q)] = absorbed[size_t(p)] = absorbed[size_t(decayed)] =
            absorbed[size_t(u.args[1])] = true;
        break;
      }
      continue;
    }
    // A momentum buffer: buf' = buf * momentum + g * (1 - dampening).
    if (u.op != Op::add) continue;
    for (int side = 0; side < 2; ++side) {
      ValueId b, m;
      const ValueId decayed = u.args[size_t(side)], fresh = u.args[size_t(1 - side)];
      if (!scaled(g, uses, decayed, b, m) || b != o.aliased_input ||
          !scaled(g, uses, fresh, p, s) || !product(p))
        continue;
      at_update[o.value] = {p, s, m, false, o.aliased_input};
      absorbed[size_t(p)] = absorbed[size_t(decayed)] = absorbed[size_t(fresh)] = true;
      break;
    }
  }
  if (changed) *changed = !at_update.empty();
  if (at_update.empty()) return g;
  ir::Graph out;
  out.name = g.name;
  std::vector<ValueId> map(g.nodes.size(), ir::kNoValue);
  std::map<ValueId, ValueId> negated;  // lr -> -lr
  ValueId one = ir::kNoValue;
  for (ValueId v = 0; v < g.size(); ++v) {
    if (absorbed[size_t(v)]) continue;
    const ir::Node& n = g.node(v);
    auto it = at_update.find(v);
    if (it == at_update.end()) {
      map[size_t(v)] = ir::append_renamed(out, n, map);
      continue;
    }
    const Match& m = it->second;
    ValueId alpha = map[size_t(m.alpha)], beta;
    if (m.negate) {
      auto [neg, fresh] = negated.emplace(m.alpha, ir::kNoValue);
      if (fresh) {
        out.nodes.push_back(
            ir::Node{Op::neg, {alpha}, {}, g.type(m.alpha), n.loc, n.stage, nullptr});
        neg->second = ValueId(out.nodes.size() - 1);
      }
      alpha = neg->second;
    }
    if (m.beta != ir::kNoValue) {
      beta = map[size_t(m.beta)];
    } else if (m.decay != ir::kNoValue) {  // 1 - lr * wd
      const ir::Type t = g.type(m.alpha);
      out.nodes.push_back(ir::Node{
          Op::mul, {map[size_t(m.alpha)], map[size_t(m.decay)]}, {}, t, n.loc, n.stage, nullptr});
      out.nodes.push_back(ir::Node{
          Op::full, {}, ir::make_attrs<Op::full>({{"value", 1.0}}), t, n.loc, n.stage, nullptr});
      out.nodes.push_back(ir::Node{Op::sub,
                                   {ValueId(out.nodes.size() - 1), ValueId(out.nodes.size() - 2)},
                                   {},
                                   t,
                                   n.loc,
                                   n.stage,
                                   nullptr});
      beta = ValueId(out.nodes.size() - 1);
    } else {
      if (one == ir::kNoValue) {
        out.nodes.push_back(ir::Node{Op::full,
                                     {},
                                     ir::make_attrs<Op::full>({{"value", 1.0}}),
                                     ir::Type{DType::f32, {}},
                                     n.loc,
                                     n.stage,
                                     nullptr});
        one = ValueId(out.nodes.size() - 1);
      }
      beta = one;
    }
    const ir::Node& p = g.node(m.product);
    out.nodes.push_back(
        ir::Node{Op::matmul_add,
                 {map[size_t(p.args[0])], map[size_t(p.args[1])], map[size_t(m.into)], alpha, beta},
                 p.attrs,
                 n.type,
                 p.loc,
                 n.stage,  // the update's: the product writes the parameter
                 nullptr});
    map[size_t(v)] = ValueId(out.nodes.size() - 1);
  }
  ir::copy_interface(g, map, out);
  return simplify(out);  // the absorbed scalings' broadcasts are dead
}

}  // namespace ws::lower
