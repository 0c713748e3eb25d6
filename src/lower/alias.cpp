#include "lower/alias.hpp"

#include <algorithm>

#include "ir/attr.hpp"

namespace ws::lower {

namespace {

// Whether broadcast b of an operand of shape `from`, into the loop of
// reduction `red`, reads at each loop element the operand's element of the
// result that loop element is reduced into: the operand's dims of size
// above 1 land, in order, on the kept dims of size above 1.
bool reads_its_result(const ir::Graph& body, const ir::Node& b, const Shape& from,
                      const ir::Node& red) {
  const Shape& to = b.type.shape;
  if (to != body.type(red.args[0]).shape) return false;
  const std::vector<int64_t>& dims = ir::attr<ir::Op::broadcast, "dims">(b);
  const std::vector<int64_t>& axes = ir::attr<ir::kReduceOps, "axes">(red);
  std::vector<int64_t> read, kept;
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1) read.push_back(dims[i]);
  for (int64_t d = 0; d < int64_t(to.size()); ++d)
    if (to[size_t(d)] != 1 && std::find(axes.begin(), axes.end(), d) == axes.end())
      kept.push_back(d);
  return read == kept;
}

}  // namespace

bool can_update_in_place(const UpdateCandidate& c) {
  if (c.producer_pos < 0) return false;
  if (c.producer_reads_old && !c.producer_elementwise) return false;
  return std::all_of(c.old_reader_pos.begin(), c.old_reader_pos.end(),
                     [&](int64_t p) { return p < c.producer_pos; });
}

bool fused_result_may_overwrite(const ir::Graph& body, size_t in, size_t out) {
  const ir::ValueId x = body.inputs[in];
  const ir::Type &xt = body.type(x), &yt = body.type(body.outputs[out].value);
  if (xt.numel() != yt.numel() || dtype_size(xt.dtype) != dtype_size(yt.dtype)) return false;
  const ir::Node* red = nullptr;
  for (const ir::Node& n : body.nodes)
    if (!red && ir::kReduceOps.contains(n.op)) red = &n;
  const bool per_result = red && yt.shape != body.type(red->args[0]).shape;
  for (const ir::Node& n : body.nodes) {
    if (std::find(n.args.begin(), n.args.end(), x) == n.args.end()) continue;
    if (ir::kMatmulOps.contains(n.op)) return false;  // a product loop's operand: read whole
    if (n.op == ir::Op::broadcast ? !per_result || !reads_its_result(body, n, xt.shape, *red)
                                  : xt.shape != yt.shape)
      return false;
  }
  return true;
}

}  // namespace ws::lower
