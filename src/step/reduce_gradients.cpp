#include "step/reduce_gradients.hpp"

#include <algorithm>
#include <numeric>

#include "ir/attr.hpp"
#include "ir/builder.hpp"

namespace ws::step {

ReducedGradients reduce_gradients(ir::Graph& g, ir::ValueId loss,
                                  const std::vector<ir::ValueId>& grads, int64_t bucket_bytes) {
  // Values to reduce: the loss, then the gradients in the order they are
  // computed (a gradient's value id is its place in the backward).
  std::vector<size_t> order(grads.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return grads[a] < grads[b]; });
  std::vector<std::vector<ir::ValueId>> buckets = {{loss}};
  int64_t bytes = int64_t(g.type(loss).bytes());
  for (size_t i : order) {
    const int64_t b = int64_t(g.type(grads[i]).bytes());
    if (bytes > 0 && bytes + b > bucket_bytes && buckets.back().size() > 1) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(grads[i]);
    bytes += b;
  }

  ir::Builder b(g);
  b.internal = "the gradient reduction";
  const int64_t first_seq = ir::next_collective_seq(g);
  std::vector<ir::ValueId> starts;
  for (size_t k = 0; k < buckets.size(); ++k) {
    b.loc = g.node(buckets[k].back()).loc;
    starts.push_back(
        b.add(ir::Op::all_reduce_start, buckets[k],
              ir::make_attrs<ir::Op::all_reduce_start>(
                  {{"reduce", std::string("mean")}, {"seq", first_seq + int64_t(k)}})));
  }
  // Each value's mean: its part of its bucket, in its shape.
  std::vector<ir::ValueId> reduced(g.nodes.size(), ir::kNoValue);
  for (size_t k = 0; k < buckets.size(); ++k) {
    std::vector<ir::Type> types;
    for (ir::ValueId v : buckets[k]) types.push_back(g.type(v));
    const std::vector<ir::ValueId> parts = b.unpack(b.add(ir::Op::wait, {starts[k]}), types);
    for (size_t i = 0; i < parts.size(); ++i) reduced[size_t(buckets[k][i])] = parts[i];
  }
  ReducedGradients r;
  r.loss = reduced[size_t(loss)];
  for (ir::ValueId gr : grads) r.grads.push_back(reduced[size_t(gr)]);
  r.buckets = int64_t(buckets.size());
  return r;
}

}  // namespace ws::step
