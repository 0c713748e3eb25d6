#include "lower/fuse_product_into_loop.hpp"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "exec/program.hpp"
#include "exec/short_products.hpp"
#include "ir/attr.hpp"
#include "lower/rewrite.hpp"

namespace ws::lower {
namespace {

using ir::Op;
using ir::ValueId;

// Whether the loop fusion f can take operand i, a product, into its body.
bool loop_takes(const ir::Graph& g, const std::vector<int>& uses, const ir::Node& f, size_t i) {
  const ValueId p = f.args[i];
  if (!product_fits_a_loop(g, p) || uses[size_t(p)] != 1 || g.type(p).shape != f.type.shape ||
      f.args.size() + 1 > exec::kMaxOperands)
    return false;
  const ir::Graph& body = *f.body;
  for (const ir::Node& n : body.nodes) {
    if (n.op == Op::random_uniform) return false;
    if (n.op == Op::broadcast && body.type(n.args[0]).numel() != 1) return false;
  }
  for (size_t j = 0; j < body.inputs.size(); ++j) {
    const ir::Type& t = body.type(body.inputs[j]);
    if (j != i && t.numel() != 1 && t.shape != f.type.shape) return false;
  }
  return true;
}

// The body of the product fusion: the product's operands (inputs a0, a1),
// the product, then the loop's body with the product where its operand i
// was (its other inputs renamed a2, a3, ...).
std::shared_ptr<const ir::Graph> product_body(const ir::Graph& g, const ir::Node& f, size_t i) {
  const ir::Node& p = g.node(f.args[i]);
  const ir::Graph& body = *f.body;
  auto out = std::make_shared<ir::Graph>();
  out->name = body.name;
  int named = 0;
  auto input = [&](const ir::Type& t, ir::Stage stage) {
    out->nodes.push_back(
        ir::input_node(ir::InputRole::data, fmt::format("a{}", named++), t, {}, stage));
    out->inputs.push_back(ValueId(out->nodes.size() - 1));
    return out->inputs.back();
  };
  const ValueId a = input(g.type(p.args[0]), p.stage), b = input(g.type(p.args[1]), p.stage);
  out->nodes.push_back(ir::Node{Op::matmul, {a, b}, p.attrs, p.type, p.loc, p.stage, nullptr});
  std::vector<ValueId> map(size_t(body.size()), ir::kNoValue);
  map[size_t(body.inputs[i])] = ValueId(out->nodes.size() - 1);
  for (size_t j = 0; j < body.inputs.size(); ++j)
    if (j != i) {
      const ValueId v = body.inputs[j];
      map[size_t(v)] = input(body.type(v), body.node(v).stage);
    }
  for (ValueId v = 0; v < body.size(); ++v)
    if (body.node(v).op != Op::input) map[size_t(v)] = ir::append_renamed(*out, body.node(v), map);
  for (ir::Output o : body.outputs) {
    o.value = map[size_t(o.value)];
    out->outputs.push_back(std::move(o));
  }
  return out;
}

}  // namespace

bool product_fits_a_loop(const ir::Graph& g, ValueId product) {
  const ir::Node& n = g.node(product);
  if (n.op != Op::matmul || n.type.dtype != DType::f32 || n.type.rank() != 2) return false;
  const exec::MatmulDims d =
      exec::matmul_dims(g.type(n.args[0]).shape, g.type(n.args[1]).shape, n.attrs);
  return exec::short_contraction(d);
}

ir::Graph fuse_product_into_loop(const ir::Graph& g, bool* changed) {
  const std::vector<int> uses = ir::use_counts(g);
  return rewrite_nodes(g, changed, [&](ir::Graph& out, ValueId v, const ir::Node& n) {
    const ir::Node& f = g.node(v);
    if (f.op != Op::fusion || ir::attr<Op::fusion, "kind">(f) != "loop") return ir::kNoValue;
    for (size_t i = 0; i < f.args.size(); ++i) {
      if (!loop_takes(g, uses, f, i)) continue;
      ir::Node fused = n;  // operands already renamed into out
      const ValueId product = fused.args[i];
      fused.args.erase(fused.args.begin() + ptrdiff_t(i));
      const ir::Node& renamed = out.node(product);
      fused.args.insert(fused.args.begin(), {renamed.args[0], renamed.args[1]});
      fused.attrs = ir::make_attrs<Op::fusion>({{"kind", std::string("product")}});
      fused.body = product_body(g, f, i);
      return append(out, std::move(fused));
    }
    return ir::kNoValue;
  });
}

}  // namespace ws::lower
