// Block programs of streaming loops (fused_loop.hpp: FusedLoop::block_steps_):
// an optimizer's update as one pass over its arrays, every step's loop
// inlined over a block of kFusedBlock elements.
#include "exec/simd.hpp"  // first: contraction off for this file

#include <cmath>
#include <cstring>

#include "exec/elementwise.hpp"
#include "exec/fused_loop.hpp"
#include "exec/parallel.hpp"

namespace ws::exec {
namespace {

enum BlockOp : uint8_t { kAdd, kSub, kMul, kDiv, kSqrt };

bool block_op(ir::Op op, uint8_t& code) {
  switch (op) {
    case ir::Op::add: code = kAdd; return true;
    case ir::Op::sub: code = kSub; return true;
    case ir::Op::mul: code = kMul; return true;
    case ir::Op::div: code = kDiv; return true;
    case ir::Op::sqrt: code = kSqrt; return true;
    default: return false;
  }
}

// y[j] = f(a[j], b[j]) for j < n, a one value where `sa` (b where `sb`): the
// vector lanes and the tail (the op's scalar function, elementwise.hpp)
// compute the same IEEE operation.
template <class VF, class SF>
inline void block_binary(const float* a, const float* b, float* y, int64_t n, bool sa, bool sb,
                         VF vf, SF sf) {
  int64_t j = 0;
  if (sa && sb) {
    std::fill_n(y, n, sf(*a, *b));
    return;
  }
  if (sa) {
    const simd::F av = simd::set(*a);
    for (; j + simd::W <= n; j += simd::W) simd::storeu(y + j, vf(av, simd::loadu(b + j)));
    for (; j < n; ++j) y[j] = sf(*a, b[j]);
  } else if (sb) {
    const simd::F bv = simd::set(*b);
    for (; j + simd::W <= n; j += simd::W) simd::storeu(y + j, vf(simd::loadu(a + j), bv));
    for (; j < n; ++j) y[j] = sf(a[j], *b);
  } else {
    for (; j + simd::W <= n; j += simd::W)
      simd::storeu(y + j, vf(simd::loadu(a + j), simd::loadu(b + j)));
    for (; j < n; ++j) y[j] = sf(a[j], b[j]);
  }
}

}  // namespace

// A block program when every loop step is one of the block ops on f32 and
// reads only full-size operands, one-element operands and computed values.
void FusedLoop::plan_blocks(const std::vector<ir::Op>& step_ops,
                            const std::vector<DType>& step_types) {
  std::vector<BlockStep> prog;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& st = steps_[i];
    BlockStep b{};
    if (st.draw || step_types[i] != DType::f32 || !block_op(step_ops[i], b.op)) return;
    const int arity = b.op == kSqrt ? 1 : 2;
    for (int k = 0; k < 3; ++k) {
      if (st.args[k] < 0) continue;
      if (k >= arity) return;
      const Value& val = values_[size_t(st.args[k])];
      if (val.esize != 4) return;
      switch (val.kind) {
        case Kind::scalar:
        case Kind::constant: b.scalars |= uint8_t(1 << k); break;
        case Kind::input:
        case Kind::buffer:
        case Kind::output: break;
        default: return;
      }
    }
    b.a = int16_t(st.args[0]);
    b.b = int16_t(arity == 2 ? st.args[1] : -1);
    b.y = int16_t(st.out);
    prog.push_back(b);
  }
  if (!prog.empty()) block_steps_ = std::move(prog);
}

// Threads take ranges of blocks; within a range, block by block, every step
// in order (the chunked loop's order within each element), values computed
// into blocks on the stack, results written straight into their storage or
// (copy_outs_) copied there once the block is done.
void FusedLoop::run_blocks(const void* const* ins, void* const* outs) const {
  parallel_for(numel_, grain_,
               [&](int64_t begin, int64_t end) { blocks_range(ins, outs, begin, end); });
}

void FusedLoop::blocks_range(const void* const* ins, void* const* outs, int64_t begin,
                             int64_t end) const {
  alignas(64) float tmp[kMaxFusedBuffers][kFusedBlock];
  const float* at[kMaxFusedValues];
  for (size_t v = 0; v < values_.size(); ++v) {
    const Value& val = values_[v];
    if (val.kind == Kind::scalar)
      at[v] = static_cast<const float*>(ins[val.index]);
    else if (val.kind == Kind::constant)
      at[v] = reinterpret_cast<const float*>(&constants_[size_t(val.index)]);
    else if (val.kind == Kind::buffer)
      at[v] = tmp[val.buf];
  }
  for (int64_t s = begin; s < end; s += kFusedBlock) {
    const int64_t n = std::min(kFusedBlock, end - s);
    for (int32_t v : moving_) {
      const Value& val = values_[size_t(v)];
      at[v] = val.kind == Kind::input ? static_cast<const float*>(ins[val.index]) + s
                                      : static_cast<const float*>(outs[val.index]) + s;
    }
    for (const BlockStep& st : block_steps_) {
      const float* a = at[st.a];
      const float* b = st.b >= 0 ? at[st.b] : nullptr;
      float* y = const_cast<float*>(at[st.y]);
      const bool sa = st.scalars & 1, sb = st.scalars & 2;
      switch (st.op) {
        case kAdd:
          block_binary(
              a, b, y, n, sa, sb, [](simd::F u, simd::F w) { return simd::add(u, w); },
              binary_value<ir::Op::add, float>);
          break;
        case kSub:
          block_binary(
              a, b, y, n, sa, sb, [](simd::F u, simd::F w) { return simd::sub(u, w); },
              binary_value<ir::Op::sub, float>);
          break;
        case kMul:
          block_binary(
              a, b, y, n, sa, sb, [](simd::F u, simd::F w) { return simd::mul(u, w); },
              binary_value<ir::Op::mul, float>);
          break;
        case kDiv:
          block_binary(
              a, b, y, n, sa, sb, [](simd::F u, simd::F w) { return simd::div(u, w); },
              binary_value<ir::Op::div, float>);
          break;
        default:  // kSqrt
          block_binary(
              a, a, y, n, sa, sa, [](simd::F u, simd::F) { return simd::sqrt(u); },
              [](float u, float) { return std::sqrt(u); });
      }
    }
    for (auto [v, j] : copy_outs_)
      std::memcpy(static_cast<float*>(outs[j]) + s, at[v], size_t(n) * sizeof(float));
  }
}

}  // namespace ws::exec
