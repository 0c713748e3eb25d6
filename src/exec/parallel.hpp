// Loop kernels run on the OpenMP pool, the same threads oneDNN uses, so a
// step has one pool and never two spinning against each other.
//
// Entering a parallel region costs a microsecond or two on two cores
// (milliseconds when other processes hold the cores: a region waits for its
// slowest thread), and most kernels of a step are far smaller than that: a
// loop goes parallel only when its estimated serial time is several times
// the cost of a region. Work is given as a count of items and the minimum
// items worth a thread. The split never changes a result (elementwise
// kernels compute each element alone, reductions fix their order
// independently of the split), so thresholds are free to change.
// Nothing here allocates: compiled steps allocate nothing.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "exec/kernels.hpp"

namespace ws::exec {

// Elements of a cheap elementwise loop (an add, a copy, a select over data
// in cache: 0.03-0.1 ns each) worth a thread of their own: below twice this,
// a loop runs serially. Measured on a 2-core AMD EPYC (Zen 5, KVM): an empty
// region costs 0.5 us on a quiet machine, 2 us when other processes load
// it; an f32 add of 16k elements takes 1.2 us on one thread and on two, of
// 32k 1.9 and 1.8 (2.7 under load), of 64k 3.8 and 2.6, of 128k 14 and 5.7.
constexpr int64_t kCheapGrain = 32768;

// Chunk boundaries are multiples of this many items (64 bytes of f32), so
// threads write disjoint cache lines and vector loops start aligned.
constexpr int64_t kChunkAlign = 16;

// Calls f(begin, end) over contiguous ranges covering [0, n): one range on
// the calling thread when n < 2 * grain (or one thread is set, or already
// inside a parallel region), else one range per thread with at least `grain`
// items each. Ranges start at multiples of `align` where every thread's range
// still holds at least four aligned blocks.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f, int64_t align = kChunkAlign) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n < 2 * grain) return f(int64_t(0), n);  // most kernels: nothing else to ask
  const int64_t chunks = std::min<int64_t>(n / grain, team());
  if (chunks < 2 || omp_in_parallel()) return f(int64_t(0), n);
  // Items too few for each thread's range to be whole aligned blocks (rows
  // or images rather than elements, passed without align 1): ranges start
  // at any item. Aligned, 8 images on 2 threads were 0 and 8.
  if (n < 4 * align * chunks) align = 1;
#pragma omp parallel num_threads(int(chunks))
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    auto edge = [&](int64_t i) { return i == nt ? n : std::min(n, n * i / nt / align * align); };
    const int64_t b = edge(t), e = edge(t + 1);
    if (b < e) f(b, e);
  }
}

// Work per element of an elementwise op, in cheap elements: a unary math
// function other than neg (exp, erf, rsqrt, ...) costs several, pow and
// atan2 (std::pow and std::atan2 in double) tens, anything else one.
constexpr int64_t elementwise_cost(ir::Op op) {
  if (op == ir::Op::pow || op == ir::Op::atan2 || op == ir::Op::fmod) return 32;
  const ir::OpInfo& info = ir::op_info(op);
  const bool math = info.category == ir::OpCategory::elementwise && info.arity == 1 &&
                    op != ir::Op::neg && op != ir::Op::convert && op != ir::Op::stop_gradient &&
                    op != ir::Op::identity;
  return math ? 4 : 1;
}

// The grain for items that each cost about `cost` cheap elements (a row of
// `cost` elements, a transcendental worth `cost` adds).
constexpr int64_t grain_for(int64_t cost) {
  return std::max<int64_t>(1, kCheapGrain / std::max<int64_t>(cost, 1));
}

}  // namespace ws::exec
