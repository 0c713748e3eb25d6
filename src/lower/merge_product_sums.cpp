#include "lower/merge_product_sums.hpp"

#include <map>
#include <tuple>

#include "ir/attr.hpp"
#include "lower/rewrite.hpp"

namespace ws::lower {

using ir::Op;
using ir::ValueId;

namespace {

// A 2-d product that may join a merged sum: its layouts, and whether its
// operands are cheaper to copy than its result.
bool mergeable(const ir::Graph& g, ValueId v) {
  const ir::Node& n = g.node(v);
  if (n.op != Op::matmul || n.type.rank() != 2 || n.type.dtype != DType::f32) return false;
  const bool ta = ir::attr<ir::kMatmulOps, "transpose_a">(n);
  const int64_t k = g.type(n.args[0]).shape[ta ? 0 : 1];
  const int64_t m = n.type.shape[0], cols = n.type.shape[1];
  return k * (m + cols) <= m * cols;
}

struct ProductKey {
  bool ta, tb;
  Shape shape;
  auto operator<=>(const ProductKey&) const = default;
};

ProductKey key_of(const ir::Graph& g, ValueId v) {
  const ir::Node& n = g.node(v);
  return {bool(ir::attr<ir::kMatmulOps, "transpose_a">(n)),
          bool(ir::attr<ir::kMatmulOps, "transpose_b">(n)), n.type.shape};
}

// The terms of the add tree rooted at v: adds read once are expanded.
void terms(const ir::Graph& g, const std::vector<int>& uses, ValueId v, bool root,
           std::vector<ValueId>& out) {
  const ir::Node& n = g.node(v);
  if (n.op == Op::add && (root || uses[size_t(v)] == 1) && g.type(n.args[0]) == n.type &&
      g.type(n.args[1]) == n.type) {
    terms(g, uses, n.args[0], false, out);
    terms(g, uses, n.args[1], false, out);
    return;
  }
  out.push_back(v);
}

}  // namespace

ir::Graph merge_product_sums(const ir::Graph& g, bool* changed) {
  const std::vector<int> uses = ir::use_counts(g);
  // The roots: adds not themselves a term's inner add, with at least two
  // mergeable products of one kind among their terms.
  std::vector<bool> inner(size_t(g.size()), false);
  std::map<ValueId, std::vector<ValueId>> groups;  // root -> its terms
  for (ValueId v = g.size() - 1; v >= 0; --v) {
    if (g.node(v).op != Op::add || inner[size_t(v)]) continue;
    std::vector<ValueId> t;
    terms(g, uses, v, true, t);
    std::map<ProductKey, int> kinds;
    for (ValueId x : t)
      if (uses[size_t(x)] == 1 && mergeable(g, x)) ++kinds[key_of(g, x)];
    bool any = false;
    for (const auto& [k, count] : kinds) any = any || count >= 2;
    if (!any) continue;
    // mark the inner adds so that they are not roots of their own
    std::vector<ValueId> stack{v};
    while (!stack.empty()) {
      const ValueId a = stack.back();
      stack.pop_back();
      const ir::Node& n = g.node(a);
      if (n.op != Op::add || (a != v && (uses[size_t(a)] != 1 || inner[size_t(a)]))) continue;
      if (a != v) inner[size_t(a)] = true;
      for (ValueId b : n.args) stack.push_back(b);
    }
    groups[v] = std::move(t);
  }
  if (groups.empty()) {
    if (changed) *changed = false;
    return g;
  }
  // Each kept node's id in the rebuilt graph, to read a product's operands
  // there.
  std::vector<ValueId> now(size_t(g.size()), ir::kNoValue);
  std::vector<std::vector<ValueId>> args_now(size_t(g.size()));
  return rewrite_nodes(g, changed, [&](ir::Graph& out, ValueId v, const ir::Node& n) {
    auto it = groups.find(v);
    if (it == groups.end()) {
      now[size_t(v)] = ValueId(out.nodes.size());  // kept: appended next
      args_now[size_t(v)] = n.args;
      return ir::kNoValue;
    }
    std::map<ProductKey, std::vector<ValueId>> kinds;
    std::vector<ValueId> rest;
    for (ValueId x : it->second)
      if (uses[size_t(x)] == 1 && mergeable(g, x))
        kinds[key_of(g, x)].push_back(x);
      else
        rest.push_back(now[size_t(x)]);
    std::vector<ValueId> sum;
    for (auto& [k, products] : kinds) {
      if (products.size() < 2) {
        rest.push_back(now[size_t(products[0])]);
        continue;
      }
      ir::Node cat_a{
          Op::concat, {},    ir::make_attrs<Op::concat>({{"axis", int64_t(k.ta ? 0 : 1)}}),
          {},         n.loc, n.stage,
          nullptr};
      ir::Node cat_b{
          Op::concat, {},    ir::make_attrs<Op::concat>({{"axis", int64_t(k.tb ? 1 : 0)}}),
          {},         n.loc, n.stage,
          nullptr};
      for (ValueId p : products) {
        cat_a.args.push_back(args_now[size_t(p)][0]);
        cat_b.args.push_back(args_now[size_t(p)][1]);
      }
      for (ir::Node* cat : {&cat_a, &cat_b}) {
        const int64_t axis = ir::attr<Op::concat, "axis">(*cat);
        cat->type = out.type(cat->args[0]);
        cat->type.shape[size_t(axis)] = 0;
        for (ValueId a : cat->args)
          cat->type.shape[size_t(axis)] += out.type(a).shape[size_t(axis)];
      }
      const ir::Node& first = g.node(products[0]);
      const ValueId a = append(out, std::move(cat_a)), b = append(out, std::move(cat_b));
      sum.push_back(append(
          out,
          ir::Node{Op::matmul, {a, b}, first.attrs, first.type, first.loc, first.stage, nullptr}));
    }
    sum.insert(sum.end(), rest.begin(), rest.end());
    ValueId total = sum[0];
    for (size_t i = 1; i < sum.size(); ++i)
      total = append(out, ir::Node{Op::add, {total, sum[i]}, {}, n.type, n.loc, n.stage, nullptr});
    now[size_t(v)] = total;  // a term of a later sum reads it there
    return total;
  });
}

}  // namespace ws::lower
