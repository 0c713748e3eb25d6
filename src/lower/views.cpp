#include "lower/views.hpp"

#include <algorithm>
#include <optional>

#include "exec/reference.hpp"
#include "ir/attr.hpp"

namespace ws::lower {

using ir::Op;
using ir::ValueId;

std::vector<ValueId> scalar_sources(const ir::Graph& g) {
  std::vector<ValueId> src(g.nodes.size(), ir::kNoValue);
  for (ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& n = g.node(v);
    if (n.op == Op::full) src[size_t(v)] = v;
    if (n.op == Op::broadcast && g.type(n.args[0]).numel() == 1) {
      ValueId a = n.args[0];
      src[size_t(v)] = src[size_t(a)] != ir::kNoValue ? src[size_t(a)] : a;
    }
  }
  return src;
}

namespace {

// Where slice n starts in its operand's storage, in bytes, when it is a run
// of contiguous rows; nullopt otherwise.
std::optional<int64_t> contiguous_slice_offset(const ir::Graph& g, const ir::Node& n) {
  if (n.op != Op::slice) return std::nullopt;
  const Shape& x = g.type(n.args[0]).shape;
  int64_t axis = ir::attr<Op::slice, "axis">(n);
  if (axis < 0) axis += int64_t(x.size());
  if (!std::all_of(x.begin(), x.begin() + axis, [](int64_t d) { return d == 1; }))
    return std::nullopt;
  const int64_t row =
      int64_t(dtype_size(n.type.dtype)) * exec::dims_product(x.begin() + axis + 1, x.end());
  return ir::attr<Op::slice, "start">(n) * row;
}

}  // namespace

std::vector<View> view_roots(const ir::Graph& g) {
  std::vector<bool> is_output(g.nodes.size(), false);
  for (const ir::Output& o : g.outputs) is_output[size_t(o.value)] = true;
  std::vector<View> root(g.nodes.size());
  for (ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& n = g.node(v);
    root[size_t(v)] = {v, 0};
    if (is_output[size_t(v)]) continue;
    if (n.op == Op::reshape) root[size_t(v)] = root[size_t(n.args[0])];
    if (const std::optional<int64_t> at = contiguous_slice_offset(g, n)) {
      const View& a = root[size_t(n.args[0])];
      root[size_t(v)] = {a.root, a.offset + *at};
    }
  }
  return root;
}

}  // namespace ws::lower
