// Product loops: a matrix product over a short contraction computed a tile
// at a time inside the loop that reads it (fused_loop.hpp).
#include <algorithm>

#include <fmt/format.h>

#include "exec/fused_loop.hpp"
#include "exec/parallel.hpp"
#include "ir/attr.hpp"

namespace ws::exec {

void FusedLoop::plan_product(const ir::Graph& body, ir::ValueId product,
                             const std::vector<int32_t>& in_slots,
                             const std::vector<int32_t>& out_slots) {
  const ir::Node& mm = body.node(product);
  WS_CHECK(mm.op == ir::Op::matmul && body.inputs.size() >= 2 && mm.args.size() == 2 &&
           mm.args[0] == body.inputs[0] && mm.args[1] == body.inputs[1] &&
           mm.type.dtype == DType::f32)
      << "product loop: the body's product is not matmul of its first two operands in f32";
  product_ = short_product_of(body.type(mm.args[0]), body.type(mm.args[1]), mm.attrs);
  WS_CHECK(product_.k >= 1 && product_.k <= kShortK)
      << "product loop: a contraction of " << product_.k << " (at most " << kShortK << ")";
  // The loop: the body with the product its first operand, then the
  // fusion's operands after the product's two.
  ir::Graph loop;
  loop.name = body.name;
  std::vector<ir::ValueId> map(size_t(body.size()), ir::kNoValue);
  auto add = [&](ir::Node n) {
    for (ir::ValueId& a : n.args) {
      WS_CHECK(map[size_t(a)] != ir::kNoValue) << "product loop: the product's operand read again";
      a = map[size_t(a)];
    }
    loop.nodes.push_back(std::move(n));
    return ir::ValueId(loop.nodes.size() - 1);
  };
  map[size_t(product)] = add(ir::input_node(ir::InputRole::data, "product", mm.type, mm.loc));
  loop.inputs.push_back(map[size_t(product)]);
  for (size_t i = 2; i < body.inputs.size(); ++i) {
    const ir::ValueId v = body.inputs[i];
    map[size_t(v)] = add(body.node(v));
    loop.inputs.push_back(map[size_t(v)]);
  }
  for (ir::ValueId v = 0; v < body.size(); ++v)
    if (body.node(v).op != ir::Op::input && v != product) map[size_t(v)] = add(body.node(v));
  for (ir::Output o : body.outputs) {
    o.value = map[size_t(o.value)];
    loop.outputs.push_back(o);
  }
  // The tile is no operand's storage: no result overwrites it.
  std::vector<int32_t> slots = {-2};
  slots.insert(slots.end(), in_slots.begin() + 2, in_slots.end());
  plan(loop, slots, out_slots);
  WS_CHECK(streaming() && numel_ == product_.m * product_.n)
      << "product loop: the loop after the product is not a streaming loop of its shape";
  // Bytes an element of each operand and result moves by (0: one value).
  for (ir::ValueId v : loop.inputs) {
    const ir::Type& t = loop.type(v);
    operand_bytes_.push_back(t.numel() == numel_ ? int64_t(dtype_size(t.dtype)) : 0);
  }
  for (const ir::Output& o : loop.outputs)
    result_bytes_.push_back(int64_t(dtype_size(loop.type(o.value).dtype)));
  WS_CHECK(operand_bytes_.size() <= size_t(kMaxOperands) &&
           result_bytes_.size() <= size_t(kMaxOperands) + 1)
      << "product loop: too many operands";
  name_ = "fused(matmul," + name_.substr(6);
}

// Threads take ranges of rows of the product, kProductRows rows at a time
// (whole rows when as many fit a tile): the product computed for them all
// at once (each vector of B loaded once for the rows), over kProductCols
// columns, then the loop over each row's piece. vgg16's [4096, 25088]
// weight under SGD with momentum and weight decay, K 8 (AMD EPYC Zen 3, 2
// threads): 65 ms a step in tiles of 4 rows by 2048 columns, 79 by 1024,
// 101 of one row by 2048 (B read from L3 for every row), 109 of 4 rows by
// 512; the product then the loop, 101-116 ms.
void FusedLoop::run_product(const void* const* ins, void* const* outs, void* scratch) const {
  const ShortProduct& p = product_;
  const float* a = static_cast<const float*>(ins[0]);
  float* staged = static_cast<float*>(scratch);
  parallel_for(p.k, grain_for(p.n), [&](int64_t q0, int64_t q1) {
    stage_short_b(p, static_cast<const float*>(ins[1]), q0, q1, staged);
  });
  constexpr int64_t kTile = kProductRows * kProductCols;
  const int64_t cols = std::min(p.n, kProductCols);
  const int64_t rows = p.n < kProductCols
                           ? std::max(kProductRows, kTile / p.n / kProductRows * kProductRows)
                           : kProductRows;
  parallel_for(p.m, std::max<int64_t>(1, grain_ / p.n), [&](int64_t r0, int64_t r1) {
    alignas(64) float tile[kTile];
    const void* in[kMaxOperands + 1];
    void* out[kMaxOperands + 1];
    // The loop's operands and results from element e of the product on,
    // the product's own at t.
    auto point = [&](int64_t e, const float* t) {
      in[0] = t;
      for (size_t i = 1; i < operand_bytes_.size(); ++i)
        in[i] = static_cast<const std::byte*>(ins[i + 1]) + e * operand_bytes_[i];
      for (size_t j = 0; j < result_bytes_.size(); ++j)
        out[j] = outs[j] ? static_cast<std::byte*>(outs[j]) + e * result_bytes_[j] : nullptr;
    };
    for (int64_t i0 = r0; i0 < r1; i0 += rows) {
      const int64_t nr = std::min(rows, r1 - i0);
      for (int64_t j0 = 0; j0 < p.n; j0 += cols) {
        const int64_t nc = std::min(cols, p.n - j0);
        short_product_rows(p, a, staged, i0, nr, j0, nc, tile, nc);
        if (nc == p.n) {  // whole rows: one piece
          point(i0 * p.n, tile);
          run_range(in, out, 0, nr * nc);
          continue;
        }
        for (int64_t r = 0; r < nr; ++r) {
          point((i0 + r) * p.n + j0, tile + r * nc);
          run_range(in, out, 0, nc);
        }
      }
    }
  });
}

}  // namespace ws::exec
